import http from 'node:http';
import https from 'node:https';
import net, { type AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { DerpServer } from './server.js';

export interface RelayListenerOptions {
  derp: DerpServer;
  /** cert and key are the PEM identity presented to TLS clients. */
  cert: string;
  key: string;
  host: string;
  port: number;
  /**
   * handshakeTimeoutMs closes a connection that has not sent a complete HTTP request head within
   * this long of being accepted, the TLS handshake included, or of its last response on a kept-alive
   * connection (default 10 s, like the main port's noise.handshake_timeout; 0 disables).
   */
  handshakeTimeoutMs?: number;
  /** server is a TCP listener already bound (created with pauseOnConnect) to serve instead of binding host:port. */
  server?: net.Server;
}

/** TLS_HANDSHAKE_RECORD is the first byte of every TLS connection (a handshake record). */
const TLS_HANDSHAKE_RECORD = 0x16;

/** Stage is how far a connection under the handshake deadline got, for the line that reports it. */
type Stage = 'silent' | 'tls' | 'http';

/** Deadline is a connection that has not sent a complete request head yet. */
interface Deadline {
  /** socket is what expiry destroys: the TCP socket, or after a first request the socket requests came on. */
  socket: Duplex;
  stage: Stage;
  timer: NodeJS.Timeout;
  onClose: () => void;
}

/**
 * RelayListener gives the relay a port of its own: TLS with the relay's
 * certificate, for Tailscale clients that (unless run with
 * TS_DEBUG_USE_DERP_HTTP=1) only dial DERP over TLS; and, on the same port,
 * plain HTTP for clients that do run with that knob, so one DERP map entry
 * serves both. The first byte tells them apart (0x16 opens a TLS handshake).
 * Node's `http` and `https` servers do the rest; a library such as httpolyglot
 * would add a dependency for these few lines and hide the failure events the
 * relay logs. Every failed handshake is reported through the relay's
 * rate-limited handshake log with the client address and the reason.
 */
export class RelayListener {
  private readonly front: net.Server;
  private readonly plain: http.Server;
  private readonly secure: https.Server;
  private readonly sockets = new Set<net.Socket>();
  private readonly handshakeTimeoutMs: number;
  /**
   * deadlines holds the connections still inside the handshake deadline, keyed by peer address and
   * port: requests arrive on the TLS socket, while the deadline was set on the TCP socket under it.
   */
  private readonly deadlines = new Map<string, Deadline>();
  /** open counts each kept-alive connection's requests not yet answered (pipelining), so its deadline restarts only when idle. */
  private readonly open = new WeakMap<Duplex, number>();
  /** connections counts accepted connections by protocol, for tests and metrics. */
  readonly connections = { tls: 0, plain: 0 };

  private constructor(private readonly o: RelayListenerOptions) {
    this.handshakeTimeoutMs = o.handshakeTimeoutMs ?? 10_000;
    const onRequest = (req: http.IncomingMessage, res: http.ServerResponse) => {
      if (o.derp.handleRequest(req, res)) return;
      res.writeHead(404, { 'Content-Type': 'text/plain; charset=utf-8' });
      res.end('not found: this port serves only the DERP relay (/derp)\n');
    };
    const onUpgrade = (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      if (o.derp.handleUpgrade(req, socket, head)) return;
      socket.end('HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    };
    this.plain = http.createServer(onRequest);
    this.secure = https.createServer({ cert: o.cert, key: o.key }, onRequest);
    for (const server of [this.plain, this.secure]) {
      // A complete request head ends the deadline, before the request is handled; an answered
      // request starts it again, so a kept-alive connection cannot stall in its next request head.
      server.prependListener('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
        const socket = req.socket;
        this.settle(peerKey(socket));
        this.open.set(socket, (this.open.get(socket) ?? 0) + 1);
        res.once('finish', () => {
          const left = (this.open.get(socket) ?? 1) - 1;
          this.open.set(socket, left);
          if (left === 0 && !socket.destroyed) this.arm(socket, 'http');
        });
      });
      server.prependListener('upgrade', (req: http.IncomingMessage) => this.settle(peerKey(req.socket)));
      server.on('upgrade', onUpgrade);
      server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
        // TLS failures arrive here too; tlsClientError below has already reported them, and nothing can be answered.
        if (err.code?.startsWith('ERR_SSL')) {
          socket.destroy();
          return;
        }
        if (err.code !== 'ECONNRESET') {
          o.derp.reportHandshakeFailure({ remote: remoteOf(socket), reason: `not an HTTP request on the relay port (${err.code ?? err.message})`, level: 'warn' });
        }
        if (!socket.destroyed && (socket as net.Socket).writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
        else socket.destroy();
      });
    }
    this.secure.on('secureConnection', (socket: Duplex) => {
      const d = this.deadlines.get(peerKey(socket));
      if (d) d.stage = 'http';
    });
    this.secure.on('tlsClientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
      o.derp.reportHandshakeFailure({ remote: remoteOf(socket), reason: describeTlsFailure(err), level: 'warn' });
    });
    this.front = o.server ?? net.createServer({ pauseOnConnect: true });
    this.front.on('connection', (socket: net.Socket) => this.route(socket));
  }

  /** listen binds host:port (port 0 picks a free one) and resolves once it accepts connections. */
  static async listen(o: RelayListenerOptions): Promise<RelayListener> {
    const l = new RelayListener(o);
    if (l.front.listening) return l;
    await new Promise<void>((resolve, reject) => {
      l.front.once('error', reject);
      l.front.listen(o.port, o.host, () => {
        l.front.off('error', reject);
        resolve();
      });
    });
    return l;
  }

  address(): AddressInfo {
    return this.front.address() as AddressInfo;
  }

  /** setCertificate swaps the identity for new connections (a renewed certificate); open ones keep theirs. */
  setCertificate(cert: string, key: string): void {
    this.secure.setSecureContext({ cert, key });
  }

  /** close stops accepting and ends every connection still open (close the DerpServer first so clients hear Restarting). */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.front.close(() => resolve()));
    for (const s of this.sockets) s.destroy();
    await closed;
  }

  /**
   * route reads the first byte and hands the connection, byte put back, to the TLS or the plain
   * server. From accept until a complete request head (over TLS, after the handshake) the connection
   * is under the handshake deadline (and again after each response while kept alive): a first byte
   * alone, half a handshake or half a request head would otherwise hold it open for good.
   */
  private route(socket: net.Socket): void {
    this.sockets.add(socket);
    socket.once('close', () => this.sockets.delete(socket));
    const onError = () => socket.destroy();
    socket.on('error', onError);
    // Reset before we got to it: nothing to serve, and no address to key its deadline by.
    if (!socket.remoteAddress) {
      socket.destroy();
      return;
    }
    const key = peerKey(socket);
    this.arm(socket, 'silent');
    const peek = (): void => {
      const first = socket.read(1) as Buffer | null;
      if (first === null) {
        socket.once('readable', peek);
        return;
      }
      const d = this.deadlines.get(key);
      if (d) d.stage = first[0] === TLS_HANDSHAKE_RECORD ? 'tls' : 'http';
      socket.off('error', onError);
      socket.unshift(first);
      if (first[0] === TLS_HANDSHAKE_RECORD) {
        this.connections.tls++;
        this.secure.emit('connection', socket);
      } else {
        this.connections.plain++;
        this.plain.emit('connection', socket);
      }
      socket.resume();
    };
    socket.once('readable', peek);
  }

  /** arm starts the handshake deadline of a connection (at accept, or once a kept-alive one is answered). */
  private arm(socket: Duplex, stage: Stage): void {
    if (this.handshakeTimeoutMs <= 0) return;
    const key = peerKey(socket);
    this.settle(key);
    const onClose = (): void => this.settle(key, socket);
    const timer = setTimeout(() => this.expire(key), this.handshakeTimeoutMs);
    timer.unref();
    this.deadlines.set(key, { socket, stage, timer, onClose });
    socket.once('close', onClose);
  }

  /** settle ends a connection's handshake deadline (it sent a request head, or it closed). */
  private settle(key: string, socket?: Duplex): void {
    const d = this.deadlines.get(key);
    if (!d || (socket && d.socket !== socket)) return;
    clearTimeout(d.timer);
    d.socket.off('close', d.onClose);
    this.deadlines.delete(key);
  }

  /** expire closes a connection that reached the handshake deadline, saying how far it got. */
  private expire(key: string): void {
    const d = this.deadlines.get(key);
    if (!d) return;
    this.settle(key);
    const ms = this.handshakeTimeoutMs;
    const reason = d.stage === 'silent' ? `sent nothing within ${ms} ms`
      : d.stage === 'tls' ? `did not finish the TLS handshake within ${ms} ms`
      : `sent no complete HTTP request within ${ms} ms`;
    this.o.derp.reportHandshakeFailure({ remote: remoteOf(d.socket), reason });
    d.socket.destroy();
  }
}

/** peerKey names a connection by its peer's address and port, the same for a TLS socket and the TCP socket under it. */
function peerKey(socket: Duplex): string {
  const s = socket as net.Socket;
  return `${s.remoteAddress}|${s.remotePort}`;
}

function remoteOf(socket: Duplex): string | undefined {
  const s = socket as net.Socket;
  if (!s.remoteAddress) return undefined;
  return s.remoteFamily === 'IPv6' ? `[${s.remoteAddress}]:${s.remotePort}` : `${s.remoteAddress}:${s.remotePort}`;
}

/** describeTlsFailure turns OpenSSL's wording into what the operator should check. */
export function describeTlsFailure(err: NodeJS.ErrnoException): string {
  const code = err.code ?? '';
  const text = err.message.replace(/^\S+:error:[0-9A-F]+:/, '');
  if (/ALERT_BAD_CERTIFICATE|ALERT_CERTIFICATE_UNKNOWN|ALERT_UNKNOWN_CA|ALERT_DECRYPT_ERROR/.test(code)) {
    return `TLS: the client rejected the relay certificate (${code}): its DERP map may pin an older certificate, or it does not support pinning (Tailscale before 1.82)`;
  }
  if (/WRONG_VERSION_NUMBER|HTTP_REQUEST|UNSUPPORTED_PROTOCOL/.test(code)) return `TLS: not a TLS client hello (${code})`;
  if (code === 'ECONNRESET' || /socket disconnected|socket hang up/i.test(err.message)) return 'TLS: the client closed the connection during the handshake';
  if (code === 'ERR_SSL_NO_SHARED_CIPHER') return `TLS: no cipher in common with the client (${code})`;
  return `TLS handshake failed: ${code || text}`;
}

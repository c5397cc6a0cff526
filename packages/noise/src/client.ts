import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { NoiseConn } from './conn.js';
import { isZeroKey, parseMachineKey } from './keys.js';
import { responseLengthFromHeader, startClientHandshake } from './messages.js';
import { HANDSHAKE_HEADER, UPGRADE_PROTOCOL } from './server.js';
import { newWebSocketKey, webSocketAccept, WebSocketStream } from './websocket.js';

/** DialTs2021Options describe one native (HTTP upgrade) ts2021 dial. */
export interface DialTs2021Options {
  /** url is the control server base, e.g. `http://127.0.0.1:8080`; `/ts2021` is always dialed at the root. */
  url: string;
  machinePrivateKey: Buffer;
  controlPublicKey: Buffer;
  capabilityVersion: number;
  /** timeoutMs bounds the HTTP upgrade, the handshake and the early-payload peek (default 10 s). */
  timeoutMs?: number;
  /** peekEarlyPayload (default true) waits for the first 9 plaintext bytes to detect an early payload. */
  peekEarlyPayload?: boolean;
  /** websocket dials the browser variant (`GET /ts2021` over RFC 6455) instead of the native upgrade. */
  websocket?: boolean;
}

/** DialTs2021Result is an established Noise connection plus the server's early payload, if it sent one. */
export interface DialTs2021Result {
  conn: NoiseConn;
  earlyPayload?: object;
}

function readBody(res: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8').trim()));
    res.on('error', () => resolve(Buffer.concat(chunks).toString('utf8').trim()));
  });
}

/** readServerHello collects the server's first message (response or error frame) and any bytes after it. */
function readServerHello(socket: Duplex, head: Buffer): Promise<{ message: Buffer; rest: Buffer }> {
  return new Promise((resolve, reject) => {
    let buf = head;
    const cleanup = (): void => {
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('error', onError);
    };
    const check = (): boolean => {
      if (buf.length < 3) return false;
      const total = responseLengthFromHeader(buf);
      if (buf.length < total) return false;
      cleanup();
      socket.pause();
      resolve({ message: buf.subarray(0, total), rest: buf.subarray(total) });
      return true;
    };
    const onData = (chunk: Buffer): void => {
      buf = Buffer.concat([buf, chunk]);
      check();
    };
    const onEnd = (): void => {
      cleanup();
      reject(new Error(`connection closed during the noise handshake after ${buf.length} bytes (server refused the initiation; wrong control key?)`));
    };
    const onError = (err: Error): void => {
      cleanup();
      reject(err);
    };
    if (check()) return;
    socket.on('data', onData);
    socket.on('end', onEnd);
    socket.on('error', onError);
    socket.resume();
  });
}

/**
 * dialTs2021 performs the `POST /ts2021` upgrade and the Noise IK handshake as tailscaled does, then
 * (by default) strips the optional early payload so the returned connection starts at the server's HTTP/2 bytes.
 */
export async function dialTs2021(opts: DialTs2021Options): Promise<DialTs2021Result> {
  const base = new URL(opts.url);
  if (base.protocol !== 'http:' && base.protocol !== 'https:') {
    throw new Error(`ts2021 url must be http: or https:, got ${JSON.stringify(base.protocol)}`);
  }
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const handshake = startClientHandshake({
    machinePrivateKey: opts.machinePrivateKey,
    controlPublicKey: opts.controlPublicKey,
    capabilityVersion: opts.capabilityVersion,
  });
  const request = base.protocol === 'https:' ? httpsRequest : httpRequest;
  const websocketKey = newWebSocketKey();
  const initiationText = handshake.initiation.toString('base64');
  const req = request({
    protocol: base.protocol,
    hostname: base.hostname.replace(/^\[|\]$/g, ''),
    port: base.port || (base.protocol === 'https:' ? 443 : 80),
    agent: false,
    ...(opts.websocket
      ? {
          method: 'GET',
          path: `/ts2021?${new URLSearchParams({ [HANDSHAKE_HEADER]: initiationText }).toString()}`,
          headers: {
            Upgrade: 'websocket',
            Connection: 'Upgrade',
            'Sec-WebSocket-Key': websocketKey,
            'Sec-WebSocket-Version': '13',
            'Sec-WebSocket-Protocol': UPGRADE_PROTOCOL,
          },
        }
      : {
          method: 'POST',
          path: '/ts2021',
          headers: { Upgrade: UPGRADE_PROTOCOL, Connection: 'upgrade', [HANDSHAKE_HEADER]: initiationText },
        }),
  });

  let timer: NodeJS.Timeout | undefined;
  let upgradedSocket: Socket | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      req.destroy();
      upgradedSocket?.destroy();
      reject(new Error(`ts2021 dial to ${base.origin} timed out after ${timeoutMs} ms`));
    }, timeoutMs);
  });

  const established = (async (): Promise<DialTs2021Result> => {
    const { res, socket, head } = await new Promise<{ res: IncomingMessage; socket: Socket; head: Buffer }>(
      (resolve, reject) => {
        req.on('upgrade', (res: IncomingMessage, socket: Socket, head: Buffer) => resolve({ res, socket, head }));
        req.on('response', (res: IncomingMessage) => {
          void readBody(res).then((body) =>
            reject(new Error(`ts2021 upgrade refused: HTTP ${res.statusCode}${body ? `: ${body}` : ''}`)),
          );
        });
        req.on('error', (err) => reject(new Error(`ts2021 dial to ${base.origin} failed: ${err.message}`)));
        req.end();
      },
    );
    upgradedSocket = socket;
    let stream: Duplex = socket;
    let streamHead = head;
    if (opts.websocket) {
      if (res.headers['sec-websocket-accept'] !== webSocketAccept(websocketKey) || res.headers['sec-websocket-protocol'] !== UPGRADE_PROTOCOL) {
        socket.destroy();
        throw new Error('ts2021 websocket upgrade answered with a wrong Sec-WebSocket-Accept or subprotocol');
      }
      stream = new WebSocketStream(socket, { role: 'client', head });
      streamHead = Buffer.alloc(0);
    } else if (res.headers.upgrade !== UPGRADE_PROTOCOL) {
      socket.destroy();
      throw new Error(`ts2021 server switched to ${JSON.stringify(res.headers.upgrade)}, expected ${UPGRADE_PROTOCOL}`);
    }
    let hello;
    try {
      hello = await readServerHello(stream, streamHead);
    } catch (err) {
      stream.destroy();
      throw err;
    }
    let keys;
    try {
      keys = handshake.finish(hello.message);
    } catch (err) {
      stream.destroy();
      throw err;
    }
    const peek = opts.peekEarlyPayload ?? true;
    const conn = new NoiseConn({
      socket: stream,
      keys,
      initialBytes: hello.rest,
      peekEarlyPayload: peek,
      peerPublicKey: opts.controlPublicKey,
      capabilityVersion: opts.capabilityVersion,
    });
    const earlyPayload = await conn.earlyPayload;
    return earlyPayload === undefined ? { conn } : { conn, earlyPayload };
  })();

  try {
    return await Promise.race([established, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** fetchControlKey reads `GET /key?v=N` and returns the server's raw control public key (Noise static key). */
export async function fetchControlKey(url: string, capabilityVersion: number): Promise<Buffer> {
  const keyUrl = new URL('/key', url);
  keyUrl.searchParams.set('v', String(capabilityVersion));
  const res = await fetch(keyUrl);
  const text = await res.text();
  if (!res.ok) throw new Error(`GET ${keyUrl.pathname}${keyUrl.search}: HTTP ${res.status}: ${text.trim()}`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new Error(`GET /key returned non-JSON body: ${JSON.stringify(text.slice(0, 200))}`);
  }
  const publicKey = (body as { publicKey?: unknown } | null)?.publicKey;
  if (typeof publicKey !== 'string') throw new Error('GET /key response lacks a "publicKey" string');
  const raw = parseMachineKey(publicKey);
  if (isZeroKey(raw)) throw new Error('control server is too old; no noise key');
  return raw;
}

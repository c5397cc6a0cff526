import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { NoiseConn, encodeEarlyPayload, sealRecords } from './conn.js';
import { formatKey } from './keys.js';
import { sourceOf, type Ts2021Limits } from './limits.js';
import { acceptInitiation, errorFrame, HandshakeRefusal, INITIATION_LENGTH, type AcceptedHandshake } from './messages.js';
import { webSocketAccept, WebSocketStream } from './websocket.js';

/** UPGRADE_PROTOCOL is the Upgrade token of the native ts2021 transport; the client compares it byte for byte. */
export const UPGRADE_PROTOCOL = 'tailscale-control-protocol';
/** HANDSHAKE_HEADER carries the base64 initiation on the upgrade request. */
export const HANDSHAKE_HEADER = 'X-Tailscale-Handshake';

/** Ts2021ConnectionInfo is what the handshake proved about the client. */
export interface Ts2021ConnectionInfo {
  /** machineKey is the client's authenticated machine public key as `mkey:<hex>`. */
  machineKey: string;
  capabilityVersion: number;
  /** source is what per-address limits charge the connection to (IPv4 address or IPv6 /64). */
  source: string;
  /** address is the client's address (behind a trusted proxy, the one its headers name), for logs. */
  address?: string;
}

/** Ts2021ServerOptions configure handleTs2021Upgrade. */
export interface Ts2021ServerOptions {
  /** privateKey is the server's raw 32-byte control private key (the Noise responder static key). */
  privateKey: Buffer;
  /** minCapabilityVersion refuses older clients with an error frame (default 113). */
  minCapabilityVersion?: number;
  /** earlyPayload returns the JSON sent before HTTP/2 starts (e.g. `{nodeKeyChallenge}`), or undefined to send none. */
  earlyPayload?: (info: Ts2021ConnectionInfo) => object | undefined;
  onConnection: (conn: NoiseConn, info: Ts2021ConnectionInfo) => void;
  /** onRefused observes handshakes that failed after the request was well formed (logging, metrics). */
  onRefused?: (reason: string, kind: RefusalKind) => void;
  /** limits rate-limits initiations per source, refuses replays and caps unauthenticated sessions. */
  limits?: Ts2021Limits;
  /** clientAddress names the client of an upgrade request (the server's trusted_proxies); default: the TCP peer. */
  clientAddress?: (req: IncomingMessage) => string | undefined;
}

/** RefusalKind classifies why a well-formed upgrade was refused. */
export type RefusalKind = 'rate-limited' | 'replayed' | 'too-many-sessions' | 'handshake';

/** OFFSET_EPHEMERAL is where the initiator's plaintext ephemeral key starts in the 101-byte initiation. */
const OFFSET_EPHEMERAL = 5;

function rejectHttp(socket: Duplex, status: number, reason: string, message: string): void {
  const body = Buffer.from(message + '\n', 'utf8');
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body.toString('utf8')}`,
  );
}

const STD_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** decodeHandshakeBase64 strictly decodes standard padded base64 (Buffer.from would silently skip junk). */
export function decodeHandshakeBase64(text: string): Buffer | undefined {
  if (!STD_BASE64.test(text)) return undefined;
  return Buffer.from(text, 'base64');
}

/**
 * admitInitiation applies the checks that cost nothing before the X25519 work: the source's token bucket
 * (refused with 429) and the replay filter (refused with 403). Returns false when it answered the request.
 */
function admitInitiation(socket: Duplex, initiation: Buffer, source: string, opts: Ts2021ServerOptions): boolean {
  const limits = opts.limits;
  if (!limits) return true;
  if (!limits.handshakes.take(source)) {
    limits.refused['rate-limited']++;
    opts.onRefused?.(`too many handshakes from ${source}`, 'rate-limited');
    socket.end(
      `HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 33\r\n\r\ntoo many handshakes; retry later\n`,
    );
    return false;
  }
  if (limits.replays.seenBefore(initiation.subarray(OFFSET_EPHEMERAL, OFFSET_EPHEMERAL + 32))) {
    limits.refused.replayed++;
    opts.onRefused?.(`replayed handshake initiation from ${source}`, 'replayed');
    rejectHttp(socket, 403, 'Forbidden', 'replayed handshake initiation');
    return false;
  }
  return true;
}

/**
 * admitSession records the accepted initiation for the replay filter and charges the session to its
 * source; returns the refusal message when a cap is reached, else arranges the release on close.
 */
function admitSession(accepted: AcceptedHandshake, info: Ts2021ConnectionInfo, initiation: Buffer, opts: Ts2021ServerOptions): string | ((conn: NoiseConn) => void) {
  const limits = opts.limits;
  if (!limits) return () => undefined;
  limits.replays.remember(initiation.subarray(OFFSET_EPHEMERAL, OFFSET_EPHEMERAL + 32));
  const admitted = limits.sessions.admit(info.source, info.machineKey);
  if ('refused' in admitted) {
    limits.refused['too-many-sessions']++;
    opts.onRefused?.(admitted.refused, 'too-many-sessions');
    return admitted.refused;
  }
  return (conn) => {
    if (conn.destroyed) admitted.release();
    else conn.once('close', admitted.release);
  };
}

function decodeInitiation(socket: Duplex, text: string, where: 'header' | 'query parameter'): Buffer | undefined {
  const initiation = decodeHandshakeBase64(text);
  if (!initiation) {
    rejectHttp(socket, 400, 'Bad Request', `invalid ${HANDSHAKE_HEADER} ${where}: not standard padded base64`);
    return undefined;
  }
  if (initiation.length !== INITIATION_LENGTH) {
    rejectHttp(
      socket,
      400,
      'Bad Request',
      `invalid ${HANDSHAKE_HEADER} ${where}: initiation is ${initiation.length} bytes, expected ${INITIATION_LENGTH}`,
    );
    return undefined;
  }
  return initiation;
}

/**
 * handleWebSocketUpgrade serves the browser variant: `GET /ts2021?X-Tailscale-Handshake=<base64>` with
 * subprotocol tailscale-control-protocol; binary messages then carry the same byte stream. There is no
 * early payload on this path (Tailscale's server sends none either).
 */
function handleWebSocketUpgrade(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  opts: Ts2021ServerOptions,
): NoiseConn | undefined {
  if (req.method !== 'GET') {
    rejectHttp(socket, 400, 'Bad Request', 'websocket upgrade must use GET');
    return undefined;
  }
  const key = req.headers['sec-websocket-key'];
  if (typeof key !== 'string' || Buffer.from(key, 'base64').length !== 16) {
    rejectHttp(socket, 400, 'Bad Request', 'missing or invalid Sec-WebSocket-Key header');
    return undefined;
  }
  if (req.headers['sec-websocket-version'] !== '13') {
    rejectHttp(socket, 400, 'Bad Request', 'unsupported Sec-WebSocket-Version; expected 13');
    return undefined;
  }
  const offered = String(req.headers['sec-websocket-protocol'] ?? '')
    .split(',')
    .map((p) => p.trim());
  if (!offered.includes(UPGRADE_PROTOCOL)) {
    rejectHttp(socket, 400, 'Bad Request', `websocket subprotocol must be ${UPGRADE_PROTOCOL}`);
    return undefined;
  }
  const query = new URL(req.url ?? '/', 'http://localhost').searchParams.get(HANDSHAKE_HEADER);
  if (!query) {
    rejectHttp(socket, 400, 'Bad Request', `missing ${HANDSHAKE_HEADER} query parameter`);
    return undefined;
  }
  const initiation = decodeInitiation(socket, query, 'query parameter');
  if (!initiation) return undefined;
  const address = clientOf(req, socket, opts);
  const source = sourceOf(address);
  if (!admitInitiation(socket, initiation, source, opts)) return undefined;
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      `Sec-WebSocket-Accept: ${webSocketAccept(key)}\r\nSec-WebSocket-Protocol: ${UPGRADE_PROTOCOL}\r\n\r\n`,
  );
  const ws = new WebSocketStream(socket, { role: 'server', head });
  ws.on('error', () => undefined);
  let accepted;
  try {
    accepted = acceptInitiation({ controlPrivateKey: opts.privateKey, initiation, minCapabilityVersion: opts.minCapabilityVersion });
  } catch (err) {
    const reason = (err as Error).message;
    opts.onRefused?.(reason, 'handshake');
    if (err instanceof HandshakeRefusal && err.sendToClient) ws.end(errorFrame(reason));
    else ws.end();
    return undefined;
  }
  const info: Ts2021ConnectionInfo = { machineKey: formatKey('mkey', accepted.machinePublicKey), capabilityVersion: accepted.capabilityVersion, source, address };
  const admitted = admitSession(accepted, info, initiation, opts);
  if (typeof admitted === 'string') {
    ws.end(errorFrame(admitted));
    return undefined;
  }
  ws.write(accepted.response);
  const conn = new NoiseConn({
    socket: ws,
    keys: accepted.keys,
    peerPublicKey: accepted.machinePublicKey,
    capabilityVersion: accepted.capabilityVersion,
  });
  admitted(conn);
  opts.onConnection(conn, info);
  return conn;
}

/**
 * handleTs2021Upgrade answers an http.Server 'upgrade' event for `/ts2021`. Malformed requests get a 400
 * before any upgrade (`Upgrade: websocket` is served as the browser variant); after the 101 the Noise response and optional early payload go out in one write,
 * and protocol refusals (too old, bad framing) are sent as a type-3 error frame. Returns the connection,
 * or undefined when the request was refused.
 */
export function handleTs2021Upgrade(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  opts: Ts2021ServerOptions,
): NoiseConn | undefined {
  socket.on('error', () => undefined); // a client vanishing mid-handshake is not the server's error
  if (req.method !== 'POST' && req.method !== 'GET') {
    rejectHttp(socket, 405, 'Method Not Allowed', `method ${req.method} not allowed on /ts2021; use POST`);
    return undefined;
  }
  const next = (req.headers.upgrade ?? '').toLowerCase();
  if (next === '') {
    rejectHttp(socket, 400, 'Bad Request', 'missing next protocol: Upgrade header is required');
    return undefined;
  }
  if (next === 'websocket') return handleWebSocketUpgrade(req, socket, head, opts);
  if (next !== UPGRADE_PROTOCOL) {
    rejectHttp(socket, 400, 'Bad Request', `unknown next protocol ${JSON.stringify(next)}; expected ${UPGRADE_PROTOCOL}`);
    return undefined;
  }
  const headerValue = req.headers[HANDSHAKE_HEADER.toLowerCase()];
  if (typeof headerValue !== 'string' || headerValue === '') {
    rejectHttp(socket, 400, 'Bad Request', `missing Tailscale handshake header ${HANDSHAKE_HEADER}`);
    return undefined;
  }
  const initiation = decodeInitiation(socket, headerValue.trim(), 'header');
  if (!initiation) return undefined;
  const address = clientOf(req, socket, opts);
  const source = sourceOf(address);
  if (!admitInitiation(socket, initiation, source, opts)) return undefined;

  const switching = `HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${UPGRADE_PROTOCOL}\r\nConnection: upgrade\r\n\r\n`;
  let accepted;
  try {
    accepted = acceptInitiation({
      controlPrivateKey: opts.privateKey,
      initiation,
      minCapabilityVersion: opts.minCapabilityVersion,
    });
  } catch (err) {
    const reason = (err as Error).message;
    opts.onRefused?.(reason, 'handshake');
    if (err instanceof HandshakeRefusal && err.sendToClient) {
      socket.end(Buffer.concat([Buffer.from(switching, 'latin1'), errorFrame(reason)]));
    } else {
      // Like Go's server: the 101 already belongs to the upgrade, then the connection just closes.
      socket.end(switching);
    }
    return undefined;
  }

  const info: Ts2021ConnectionInfo = {
    machineKey: formatKey('mkey', accepted.machinePublicKey),
    capabilityVersion: accepted.capabilityVersion,
    source,
    address,
  };
  const admitted = admitSession(accepted, info, initiation, opts);
  if (typeof admitted === 'string') {
    socket.end(Buffer.concat([Buffer.from(switching, 'latin1'), errorFrame(admitted)]));
    return undefined;
  }
  const parts: Buffer[] = [Buffer.from(switching, 'latin1'), accepted.response];
  const early = opts.earlyPayload?.(info);
  // Sealing here advances the send nonce before NoiseConn takes over, keeping both sides in step.
  if (early !== undefined) parts.push(sealRecords(accepted.keys.send, encodeEarlyPayload(early)));
  socket.write(Buffer.concat(parts));

  const conn = new NoiseConn({
    socket,
    keys: accepted.keys,
    initialBytes: head,
    peerPublicKey: accepted.machinePublicKey,
    capabilityVersion: accepted.capabilityVersion,
  });
  admitted(conn);
  opts.onConnection(conn, info);
  return conn;
}

/** clientOf names the upgrade's client: opts.clientAddress, or the peer address of a net or TLS socket (other Duplexes have none). */
function clientOf(req: IncomingMessage, socket: Duplex, opts: Ts2021ServerOptions): string | undefined {
  return opts.clientAddress ? opts.clientAddress(req) : (socket as { remoteAddress?: string }).remoteAddress;
}

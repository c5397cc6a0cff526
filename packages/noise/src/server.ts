import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { NoiseConn, encodeEarlyPayload, sealRecords } from './conn.js';
import { formatKey } from './keys.js';
import { acceptInitiation, errorFrame, HandshakeRefusal, INITIATION_LENGTH } from './messages.js';
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
  onRefused?: (reason: string) => void;
}

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
    opts.onRefused?.(reason);
    if (err instanceof HandshakeRefusal && err.sendToClient) ws.end(errorFrame(reason));
    else ws.end();
    return undefined;
  }
  ws.write(accepted.response);
  const conn = new NoiseConn({
    socket: ws,
    keys: accepted.keys,
    peerPublicKey: accepted.machinePublicKey,
    capabilityVersion: accepted.capabilityVersion,
  });
  opts.onConnection(conn, { machineKey: formatKey('mkey', accepted.machinePublicKey), capabilityVersion: accepted.capabilityVersion });
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
    opts.onRefused?.(reason);
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
  };
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
  opts.onConnection(conn, info);
  return conn;
}

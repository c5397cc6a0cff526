import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { webSocketAccept } from '@headway/noise';
import { FRAME_HEADER_LENGTH, MAX_CLIENT_INFO_LENGTH, PROTOCOL_VERSION } from './frames.js';

/**
 * WS_MESSAGE_LIMIT caps one WebSocket frame of a logged-in client (its frames are ≤ 64 KiB + 37 bytes);
 * before login a frame may hold no more than one ClientInfo frame, since frames are buffered whole.
 */
export const WS_MESSAGE_LIMIT = 256 << 10;
export const WS_LOGIN_MESSAGE_LIMIT = FRAME_HEADER_LENGTH + MAX_CLIENT_INFO_LENGTH;
const NO_CONTENT_CHALLENGE_HEADER = 'x-tailscale-challenge';
const NO_CONTENT_RESPONSE_HEADER = 'X-Tailscale-Response';

export function pathOf(req: IncomingMessage): string {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

/**
 * answerRelayRequest answers the relay's plain HTTP routes (the probes clients measure latency
 * with, and captive-portal detection) and returns false for paths it does not own.
 */
export function answerRelayRequest(req: IncomingMessage, res: ServerResponse): boolean {
  switch (pathOf(req)) {
    case '/derp':
      res.writeHead(426, { 'Content-Type': 'text/plain; charset=utf-8', Connection: 'close' });
      res.end('DERP requires connection upgrade\n');
      return true;
    case '/derp/probe':
    case '/derp/latency-check':
      if (req.method === 'GET' || req.method === 'HEAD') {
        res.writeHead(200, { 'Access-Control-Allow-Origin': '*' });
        res.end();
      } else {
        res.writeHead(405, { 'Content-Type': 'text/plain; charset=utf-8' });
        res.end('bogus probe method\n');
      }
      return true;
    case '/generate_204': {
      const headers: Record<string, string> = {
        'Cache-Control': 'no-cache, no-store, must-revalidate, no-transform, max-age=0',
      };
      const challenge = req.headers[NO_CONTENT_CHALLENGE_HEADER];
      if (typeof challenge === 'string' && challenge.length > 0 && challenge.length <= 64 && /^[A-Za-z0-9._:-]+$/.test(challenge)) {
        headers[NO_CONTENT_RESPONSE_HEADER] = `response ${challenge}`;
      }
      res.writeHead(204, headers);
      res.end();
      return true;
    }
    default:
      return false;
  }
}

/** switchToWebSocket completes a WebSocket upgrade with the `derp` subprotocol. */
export function switchToWebSocket(socket: Duplex, key: string): void {
  socket.write(
    'HTTP/1.1 101 Switching Protocols\r\n' +
      'Upgrade: websocket\r\n' +
      'Connection: Upgrade\r\n' +
      `Sec-WebSocket-Accept: ${webSocketAccept(key)}\r\n` +
      'Sec-WebSocket-Protocol: derp\r\n\r\n',
  );
}

/** switchToDerp completes a raw DERP upgrade, naming the relay's key (`nodekey:<hex>`). */
export function switchToDerp(socket: Duplex, publicKey: string): void {
  socket.write(
    'HTTP/1.1 101 Switching Protocols\r\n' +
      'Upgrade: DERP\r\n' +
      'Connection: Upgrade\r\n' +
      `Derp-Version: ${PROTOCOL_VERSION}\r\n` +
      `Derp-Public-Key: ${publicKey}\r\n\r\n`,
  );
}

/** writeHttpError refuses an upgrade with a plain-text HTTP error and closes the socket. */
export function writeHttpError(socket: Duplex, status: number, message: string): void {
  const reason = status === 400 ? 'Bad Request' : status === 426 ? 'Upgrade Required' : status === 429 ? 'Too Many Requests' : 'Service Unavailable';
  const body = message + '\n';
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/plain; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

// A TCP socket as the transport H2Session runs over, for the tests that drive the control server's own
// HTTP/2 (h2.ts) with real clients: nghttp2 (h2.test.ts) and h2spec (h2spec.test.ts).
import type { Socket } from 'node:net';
import type { H2Transport } from '../src/h2.js';

/** transportOf adapts a TCP socket to what H2Session needs (the server runs it over a Noise connection). */
export function transportOf(socket: Socket): H2Transport {
  return {
    writeRecords: (parts) => { socket.write(Buffer.concat(parts)); },
    on: (event: 'data' | 'close' | 'end', fn: (chunk: Buffer) => void) => socket.on(event, fn),
    end: () => socket.end(),
    destroy: () => socket.destroy(),
    get destroyed() { return socket.destroyed; },
    sendBacklog: () => socket.writableLength,
  } as H2Transport;
}

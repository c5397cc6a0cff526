import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { DerpServer, type DerpServerOptions } from '../src/server.js';
import { generateDerpKeyPair } from '../src/keys.js';

export interface Relay {
  derp: DerpServer;
  http: Server;
  port: number;
  url: string;
  wsUrl: string;
  close(): Promise<void>;
}

/** startRelay serves a DerpServer on 127.0.0.1:0 the way the control server will mount it. */
export async function startRelay(options: Partial<DerpServerOptions> = {}): Promise<Relay> {
  const derp = new DerpServer({ privateKey: generateDerpKeyPair().privateKey, ...options });
  const http = createServer((req, res) => {
    if (!derp.handleRequest(req, res)) {
      res.writeHead(404);
      res.end('not found');
    }
  });
  http.on('upgrade', (req, socket, head) => {
    if (!derp.handleUpgrade(req, socket, head)) socket.end('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n');
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const port = (http.address() as AddressInfo).port;
  return {
    derp,
    http,
    port,
    url: `http://127.0.0.1:${port}/derp`,
    wsUrl: `ws://127.0.0.1:${port}/derp`,
    async close() {
      await derp.close();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

/** RawConn is a bare TCP connection with a byte accumulator, for driving the wire by hand. */
export class RawConn {
  data = Buffer.alloc(0);
  closed = false;
  private waiters: (() => void)[] = [];

  constructor(readonly socket: Socket) {
    socket.on('data', (c: Buffer) => {
      this.data = Buffer.concat([this.data, c]);
      this.wake();
    });
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    socket.on('error', () => {});
  }

  static async open(port: number): Promise<RawConn> {
    const socket = connect({ host: '127.0.0.1', port });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    return new RawConn(socket);
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  /** until waits for predicate over received bytes (or close), failing after timeoutMs. */
  async until(predicate: () => boolean, timeoutMs = 3000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate()) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error('RawConn: timed out waiting');
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
  }

  async waitClosed(timeoutMs = 3000): Promise<void> {
    await this.until(() => this.closed, timeoutMs);
  }
}

/** upgradeRequest is a raw DERP upgrade request for /derp. */
export function upgradeRequest(extraHeaders: string[] = []): string {
  return ['GET /derp HTTP/1.1', 'Host: 127.0.0.1', 'Upgrade: DERP', 'Connection: Upgrade', ...extraHeaders, '', ''].join('\r\n');
}

/** waitFor polls a condition; the relay's effects are asynchronous socket events. */
export async function waitFor(cond: () => boolean, timeoutMs = 3000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** discoPacket builds bytes that look like a disco message (magic + key + nonce + body). */
export function discoPacket(): Buffer {
  return Buffer.concat([Buffer.from('5453f09f92ac', 'hex'), Buffer.alloc(32, 7), Buffer.alloc(24, 9), Buffer.from('body')]);
}

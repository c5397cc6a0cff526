// ports: free loopback ports for servers whose address must be known before they start (every test server listens on 127.0.0.1).
import { createSocket } from 'node:dgram';
import { createServer } from 'node:net';

/** freePort asks the system for a free loopback port (TCP or UDP) and releases it for the caller. */
export function freePort(kind: 'tcp' | 'udp' = 'tcp'): Promise<number> {
  if (kind === 'udp') {
    return new Promise((resolve, reject) => {
      const s = createSocket('udp4');
      s.once('error', reject);
      s.bind(0, '127.0.0.1', () => {
        const { port } = s.address();
        s.close(() => resolve(port));
      });
    });
  }
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

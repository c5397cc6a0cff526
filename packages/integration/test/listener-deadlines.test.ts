/**
 * A connection that never completes a request is closed by noise.handshake_timeout on every TCP listener,
 * the metrics port included: Node's own headersTimeout check would hold half-sent requests for up to 90 s.
 * Closure is asserted, never how long it took.
 */
import t from 'tap';
import { connect, type Socket } from 'node:net';
import { startTestServer } from '../src/server.js';

/** FAILED_TO_CLOSE bounds the wait only so that a connection left open fails the test instead of hanging it. */
const FAILED_TO_CLOSE = 20_000;

interface Peer { socket: Socket; received: () => string; closed: Promise<boolean> }

function open(url: string): Promise<Peer> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let text = '';
    socket.on('data', (c: Buffer) => { text += c.toString('latin1'); });
    socket.on('error', () => undefined);
    const closed = new Promise<boolean>((done) => {
      const timer = setTimeout(() => done(false), FAILED_TO_CLOSE);
      socket.once('close', () => { clearTimeout(timer); done(true); });
    });
    socket.once('connect', () => resolve({ socket, received: () => text, closed }));
    socket.once('error', reject);
  });
}

/** response waits until a whole response with a Content-Length body has arrived. */
async function response(p: Peer): Promise<string> {
  for (;;) {
    const text = p.received();
    const end = text.indexOf('\r\n\r\n');
    const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? NaN);
    if (end >= 0 && text.length - end - 4 >= length) return text;
    if (p.socket.destroyed) throw new Error(`closed before a whole response: ${JSON.stringify(text.slice(0, 200))}`);
    await new Promise((r) => p.socket.once('data', r).once('close', r));
  }
}

const HALF_SENT = 'GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n';

t.test('a half-sent request on the metrics port is closed by noise.handshake_timeout, as on the main port', async (t) => {
  const s = await startTestServer({ noise: { handshake_timeout: '300ms' } });
  t.teardown(() => s.stop());
  const metrics = s.urls.metrics!;
  t.ok(metrics, 'the metrics listener is on');

  const peers = await Promise.all(Array.from({ length: 20 }, () => open(metrics)));
  for (const p of peers) p.socket.write(HALF_SENT);
  const closed = await Promise.all(peers.map((p) => p.closed));
  t.equal(closed.filter(Boolean).length, 20, 'all 20 half-sent requests are closed');

  const silent = await open(metrics);
  t.ok(await silent.closed, 'a connection that sends nothing is closed');

  const main = await open(s.urls.http);
  main.socket.write(HALF_SENT.replace('/metrics', '/health'));
  t.ok(await main.closed, 'the main port closes the same request (the deadline both share)');
});

// Node's keepAliveTimeout is an idle timer: a next request sent a byte at a time never lets it fire, and the
// head would be held until headersTimeout (60 s, checked every 30 s) on both ports.
t.test('a kept-alive connection whose next request trickles in and never completes is closed, after a request answered in full', async (t) => {
  const s = await startTestServer({ noise: { handshake_timeout: '300ms' } });
  t.teardown(() => s.stop());
  for (const [label, url, path] of [['metrics port', s.urls.metrics!, '/metrics'], ['main port', s.urls.http, '/health']] as const) {
    const p = await open(url);
    p.socket.write(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
    t.match(await response(p), /^HTTP\/1\.1 200 /, `${label}: a whole request is answered`);
    p.socket.write(`${HALF_SENT.replace('/metrics', path)}X-Trickle: `);
    const trickle = setInterval(() => { if (!p.socket.destroyed) p.socket.write('a'); }, 100);
    const closed = await p.closed;
    clearInterval(trickle);
    t.ok(closed, `${label}: the trickling second request is closed`);
  }
});

/**
 * /admin/events on a real koa listener: 401 without a session; with one, `ready`, then the bus's changes as small
 * events (online state in place, list changes by id, nothing for endpoint moves) and heartbeat comments; the stream
 * ends when the session ends, even though its heartbeats never move the session's idle deadline; a session's
 * streams are capped (429) and a closed stream frees its place.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import Koa from 'koa';
import Router from '@koa/router';
import { ChangeBus, ConsoleSessions, createLogger, type Node } from '@headway/core';
import { consoleEvent, mountConsoleEvents, STREAMS_PER_SESSION } from '../src/events.js';
import { cookieName } from '../src/auth.js';

interface Stream { status: number; text: () => string; ended: Promise<void>; next: (pattern: RegExp) => Promise<string>; close: () => void }

/** open makes a GET /admin/events and reads it as it arrives. */
function open(url: string, cookie?: string): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${url}/admin/events`, { headers: cookie ? { cookie: `${cookieName(false)}=${cookie}` } : {} }, (res) => {
      let text = '';
      let seen = 0;
      const waiters: Array<() => void> = [];
      res.setEncoding('utf8');
      res.on('data', (c: string) => { text += c; for (const w of waiters.splice(0)) w(); });
      const ended = new Promise<void>((r) => { res.on('end', r); res.on('close', r); });
      const next = async (pattern: RegExp) => {
        for (;;) {
          const m = pattern.exec(text.slice(seen));
          if (m) { seen += m.index + m[0].length; return m[0]; }
          await Promise.race([new Promise<void>((r) => waiters.push(r)), ended.then(() => { throw new Error(`stream ended before ${pattern}; had ${JSON.stringify(text)}`); })]);
        }
      };
      resolve({ status: res.statusCode ?? 0, text: () => text, ended, next, close: () => req.destroy() });
    });
    req.on('error', reject);
  });
}

async function setup(t: Test, heartbeatMs = 40) {
  let clock = Date.parse('2030-01-01T00:00:00Z');
  const sessions = new ConsoleSessions(undefined, { linkLifetimeMs: 60_000, idleMs: 100_000, maxAgeMs: 3_600_000 }, () => new Date(clock));
  const bus = new ChangeBus();
  const router = new Router();
  mountConsoleEvents(router, { bus, sessions, secure: false, logger: createLogger({ level: 'error', write: () => undefined }), heartbeatMs });
  const app = new Koa();
  // A client closing its stream ends koa's pipe early: expected here, as in the server (whose app is silent too).
  app.silent = true;
  app.use(router.routes());
  const server = http.createServer(app.callback());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => { server.closeAllConnections(); server.close(); });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const { cookie } = await sessions.open('alice', 'link');
  return { sessions, bus, url, cookie, advance: (ms: number) => { clock += ms; } };
}

const node = { id: 7 } as Node;

t.test('consoleEvent says only what the pages need', async (t) => {
  const at = new Date('2030-01-02T03:04:05Z');
  t.same(consoleEvent({ type: 'node-patch', nodeId: 7, patch: { online: false, lastSeen: at } }), { event: 'node', data: { id: '7', online: false, lastSeen: at.toISOString() } });
  t.same(consoleEvent({ type: 'node-patch', nodeId: 7, patch: { online: true } }), { event: 'node', data: { id: '7', online: true } });
  t.equal(consoleEvent({ type: 'node-patch', nodeId: 7, patch: { endpoints: ['192.0.2.1:41641'], derpRegion: 2 } }), undefined, 'endpoint moves are not news');
  t.same(consoleEvent({ type: 'node-patch', nodeId: 7, patch: { keyExpiry: at } }), { event: 'nodes', data: { id: '7', change: 'changed' } }, 'a new expiry re-reads the list');
  t.same(consoleEvent({ type: 'node-added', node }), { event: 'nodes', data: { id: '7', change: 'added' } });
  t.same(consoleEvent({ type: 'node-changed', node }), { event: 'nodes', data: { id: '7', change: 'changed' } });
  t.same(consoleEvent({ type: 'node-removed', nodeId: 7, node }), { event: 'nodes', data: { id: '7', change: 'removed' } });
  t.same(consoleEvent({ type: 'user-removed', userId: 1 }), { event: 'users', data: {} });
  t.equal(consoleEvent({ type: 'policy-changed' }), undefined);
});

t.test('without a session: 401 (403 from another site), and nothing subscribes', async (t) => {
  const { url, bus, cookie } = await setup(t);
  const before = bus.listenerCount;
  const s = await open(url);
  t.equal(s.status, 401);
  await s.ended;
  t.match(s.text(), /not signed in/);
  const crossSite = await new Promise<number>((resolve, reject) => {
    http.get(`${url}/admin/events`, { headers: { cookie: `${cookieName(false)}=${cookie}`, 'sec-fetch-site': 'cross-site' } }, (res) => { res.resume(); resolve(res.statusCode ?? 0); }).on('error', reject);
  });
  t.equal(crossSite, 403, 'a session from another site is refused');
  const forged = await open(url, 'not-a-session');
  t.equal(forged.status, 401, 'an unknown cookie is no session');
  t.equal(bus.listenerCount, before);
});

t.test('a session streams changes and heartbeats', async (t) => {
  const { url, bus, cookie } = await setup(t);
  const s = await open(url, cookie);
  t.teardown(s.close);
  t.equal(s.status, 200);
  await s.next(/event: ready\ndata: \{\}\n\n/);
  t.match(s.text(), /^retry: \d+\n/, 'the browser is told when to reconnect');
  bus.publish({ type: 'node-patch', nodeId: 7, patch: { endpoints: ['192.0.2.1:41641'] } });
  bus.publish({ type: 'node-patch', nodeId: 7, patch: { online: true } });
  t.equal(await s.next(/event: [a-z]+\ndata: .*\n\n/), 'event: node\ndata: {"id":"7","online":true}\n\n', 'the endpoint move sent nothing; the online change is next');
  bus.publish({ type: 'node-removed', nodeId: 7, node });
  t.equal(await s.next(/event: [a-z]+\ndata: .*\n\n/), 'event: nodes\ndata: {"id":"7","change":"removed"}\n\n');
  await s.next(/: heartbeat\n\n/);
  t.pass('a heartbeat comment arrives');
});

t.test('the stream ends when the session is signed out', async (t) => {
  const { url, bus, cookie, sessions } = await setup(t);
  const before = bus.listenerCount;
  const s = await open(url, cookie);
  await s.next(/event: ready/);
  t.equal(bus.listenerCount, before + 1, 'the stream listens to the bus');
  await sessions.close(cookie);
  await s.ended;
  t.pass('the stream ended');
  t.equal(bus.listenerCount, before, 'and stopped listening');
  t.equal((await open(url, cookie)).status, 401, 'a reconnect is refused');
});

t.test("heartbeats do not keep an idle session alive", async (t) => {
  const { url, cookie, advance } = await setup(t);
  const s = await open(url, cookie);
  await s.next(/event: ready/);
  advance(70_000);
  await s.next(/: heartbeat\n\n/);
  await s.next(/: heartbeat\n\n/);
  advance(40_000);
  await s.ended;
  t.pass('the stream ended at the idle deadline the page set, not one its heartbeats moved');
});

t.test('a session may hold a few streams; a closed one frees its place', async (t) => {
  const { url, cookie } = await setup(t, 60_000);
  const streams: Stream[] = [];
  t.teardown(() => { for (const s of streams) s.close(); });
  for (let i = 0; i < STREAMS_PER_SESSION; i++) {
    const s = await open(url, cookie);
    streams.push(s);
    t.equal(s.status, 200, `stream ${i + 1}`);
  }
  const refused = await open(url, cookie);
  t.equal(refused.status, 429, 'one more is refused');
  await refused.ended;
  t.match(refused.text(), /limit is/);
  streams[0]!.close();
  await streams[0]!.ended;
  let again: Stream | undefined;
  for (let i = 0; i < 50 && again?.status !== 200; i++) {
    again?.close();
    again = await open(url, cookie);
  }
  t.equal(again?.status, 200, 'a place is free again');
  if (again) streams.push(again);
});

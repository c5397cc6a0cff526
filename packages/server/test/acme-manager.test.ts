/**
 * The certificate manager's timing and failure handling, with an injected clock: a CA that refuses (a wrong
 * directory, an account refused with a problem document) is logged with its reason and retried with a doubling
 * back-off; a certificate is renewed at two thirds of its lifetime; the real ACME client speaks to a local fake CA.
 */
import t, { type Test } from 'tap';
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generate } from 'selfsigned';
import { Registry } from 'prom-client';
import { createLogger } from '@headway/core';
import { CertificateManager, RETRY_MAX_MS, RETRY_MIN_MS, type Clock } from '../src/acme/manager.js';
import { DirectoryStore } from '../src/acme/store.js';
import type { Orderer } from '../src/acme/order.js';

/** FakeClock: time moves only when the test says; timers fire in order of their due time. */
class FakeClock implements Clock {
  t = Date.now();
  timers: Array<{ at: number; fn: () => void }> = [];
  now(): number { return this.t; }
  setTimeout(fn: () => void, ms: number): unknown { const h = { at: this.t + ms, fn }; this.timers.push(h); return h; }
  clearTimeout(h: unknown): void { this.timers = this.timers.filter((x) => x !== h); }
  /** next is the delay to the earliest timer. */
  next(): number { return Math.min(...this.timers.map((x) => x.at)) - this.t; }
  /** fire moves time to the earliest timer and runs it. */
  fire(): void {
    const h = this.timers.reduce((a, b) => (a.at <= b.at ? a : b));
    this.clearTimeout(h);
    this.t = Math.max(this.t, h.at);
    h.fn();
  }
}

function rig(t: Test, o: { directoryUrl?: string; order?: Orderer } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'hw-acme-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const logs: string[] = [];
  const clock = new FakeClock();
  const m = new CertificateManager({
    hostname: 'hw.example.com', directoryUrl: o.directoryUrl ?? 'http://127.0.0.1:1/dir', email: 'admin@example.com', challenge: 'http-01',
    store: new DirectoryStore(dir, 'hw.example.com'), logger: createLogger({ level: 'debug', write: (l) => logs.push(l) }), clock, order: o.order,
  });
  t.teardown(() => m.close());
  return { m, clock, logs, dir };
}

/** fakeCa answers like an ACME CA up to account creation, which it refuses with a problem document. */
async function fakeCa(t: Test): Promise<string> {
  const s = http.createServer((req, res) => {
    const base = `http://127.0.0.1:${(s.address() as { port: number }).port}`;
    res.setHeader('replay-nonce', `n${Date.now()}`);
    if (req.url === '/dir') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ newNonce: `${base}/nonce`, newAccount: `${base}/account`, newOrder: `${base}/order` }));
    } else if (req.url === '/nonce') res.end();
    else if (req.url === '/account') {
      req.resume();
      res.statusCode = 400;
      res.setHeader('content-type', 'application/problem+json');
      res.end(JSON.stringify({ type: 'urn:ietf:params:acme:error:invalidContact', detail: 'contact e-mail domain example.com is forbidden', status: 400 }));
    } else { res.statusCode = 404; res.end(); }
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => s.close(() => r())));
  return `http://127.0.0.1:${(s.address() as { port: number }).port}`;
}

t.test('a wrong directory is logged with the CA\'s answer and retried after 1 min, 2 min, 4 min ... up to 1 h', async (t) => {
  const ca = await fakeCa(t);
  const { m, clock, logs } = rig(t, { directoryUrl: `${ca}/wrong` });
  await m.start();
  t.equal(m.current, undefined);
  t.match(m.lastError, /directory returned error 404/);
  t.ok(logs.some((l) => /ERR the ACME CA did not issue a TLS certificate; retrying/.test(l) && /error 404/.test(l) && /retry_in_s=60/.test(l)), 'logged with the reason and the delay');
  const delays: number[] = [];
  for (let i = 0; i < 8; i++) {
    delays.push(clock.next());
    clock.fire();
    await m.renew();
  }
  t.same(delays, [1, 2, 4, 8, 16, 32, 60, 60].map((x) => x * 60_000), 'doubling from RETRY_MIN_MS, capped at RETRY_MAX_MS');
  t.equal(RETRY_MIN_MS, 60_000);
  t.equal(RETRY_MAX_MS, 3_600_000);
  t.equal(m.failures, 9);
  t.equal(m.ordered.failed, 9);
  t.same(m.health(), { status: 'fail', lastError: m.lastError });
});

t.test('an account the CA refuses: its problem detail is the logged reason', async (t) => {
  const ca = await fakeCa(t);
  const { m, logs, dir } = rig(t, { directoryUrl: `${ca}/dir` });
  await m.start();
  t.match(m.lastError, /contact e-mail domain example\.com is forbidden/);
  t.ok(logs.some((l) => /reason=.*contact e-mail domain example\.com is forbidden/.test(l)));
  t.notOk(logs.some((l) => /PRIVATE KEY/.test(l)), 'the account key made for the order is never logged');
  t.ok(await new DirectoryStore(dir, 'hw.example.com').loadAccountKey(), 'the account key is kept for the next attempt');
});

t.test('renewal at two thirds of the lifetime; a failed renewal keeps the certificate served and backs off', async (t) => {
  let clockRef: FakeClock | undefined;
  let fail = false;
  let orders = 0;
  const issue: Orderer = async (req) => {
    orders++;
    if (fail) throw new Error('urn:ietf:params:acme:error:rateLimited: too many certificates already issued');
    const now = clockRef!.now();
    const pems = await generate([{ name: 'commonName', value: req.hostname }], {
      keyType: 'ec', curve: 'P-256', algorithm: 'sha256', notBeforeDate: new Date(now - 1000), notAfterDate: new Date(now - 1000 + 90 * 86_400_000),
      extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: req.hostname }] }],
    });
    return { certPem: pems.cert, keyPem: pems.private };
  };
  const { m, clock } = rig(t, { order: issue });
  clockRef = clock;
  const seen: string[] = [];
  m.on('certificate', (c) => seen.push(c.serial));
  await m.start();
  t.equal(orders, 1);
  const first = m.current!;
  t.equal(first.notAfter - first.notBefore, 90 * 86_400_000);
  const registry = new Registry();
  m.registerMetrics(registry);
  t.match(await registry.metrics(), new RegExp(`headway_tls_certificate_not_after_seconds ${Math.floor(first.notAfter / 1000)}`));
  // 60 days in: the wait is taken in steps of a day (Node's timers hold at most 24.8 days).
  // A step that is not the last re-arms the timer; the last starts the renewal (joined by renew()).
  let steps = 0;
  while (clock.timers.length) { clock.fire(); steps++; }
  await m.renew();
  t.equal(orders, 2);
  t.equal(clock.now() - first.notBefore, 60 * 86_400_000, 'renewed 60 days into a 90-day certificate');
  t.equal(steps, 60);
  t.equal(seen.length, 2, 'the new certificate is announced for the listeners');
  t.not(m.current!.serial, first.serial);

  fail = true;
  const second = m.current!;
  while (clock.timers.length) clock.fire();
  await m.renew();
  t.equal(orders, 3);
  t.equal(m.current, second, 'the certificate is still served after a failed renewal');
  t.equal(clock.next(), RETRY_MIN_MS);
  t.match(m.health(), { status: 'warn', serial: second.serial, lastError: /too many certificates/ });
  fail = false;
  clock.fire();
  await m.renew();
  t.equal(m.failures, 0);
  t.equal(m.health().status, 'pass');
  t.equal(seen.length, 3);
});

t.test('a cached certificate for another host or with a key that is not its own is not used', async (t) => {
  const { m, logs, dir } = rig(t, { order: async () => { throw new Error('CA down'); } });
  const other = await generate([{ name: 'commonName', value: 'other.example.com' }], { keyType: 'ec', curve: 'P-256', extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: 'other.example.com' }] }] });
  await new DirectoryStore(dir, 'hw.example.com').save({ certPem: other.cert, keyPem: other.private });
  await m.start();
  t.equal(m.current, undefined);
  t.ok(logs.some((l) => /the cached TLS certificate is not used.*does not name hw\.example\.com/.test(l)));
});

t.test('the cache directory headscale used (Go autocert\'s one file per host: key, then chain) is read', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-acme-hs-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const pems = await generate([{ name: 'commonName', value: 'hw.example.com' }], { keyType: 'ec', curve: 'P-256', extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: 'hw.example.com' }] }] });
  const { writeFileSync } = await import('node:fs');
  writeFileSync(join(dir, 'hw.example.com'), `${pems.private.trim()}\n${pems.cert.trim()}\n`);
  const logs: string[] = [];
  const m = new CertificateManager({
    hostname: 'hw.example.com', directoryUrl: 'http://127.0.0.1:1/dir', email: '', challenge: 'http-01',
    store: new DirectoryStore(dir, 'hw.example.com'), logger: createLogger({ level: 'debug', write: (l) => logs.push(l) }), clock: new FakeClock(),
    order: async () => { throw new Error('no order expected'); },
  });
  t.teardown(() => m.close());
  await m.start();
  t.ok(m.current, 'headscale\'s certificate is served');
  t.equal(m.ordered.ok + m.ordered.failed, 0, 'without an order');
});

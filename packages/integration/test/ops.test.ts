import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { createLogger, resolveConfig } from '@headway/core';
import { startServer } from '@headway/server';
import { startTestServer } from '../src/server.js';

const mode = (p: string) => (statSync(p).mode & 0o777).toString(8);

/** rawRequest sends any method (fetch refuses TRACE) and returns status, headers and body. */
function rawRequest(base: string, method: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method, path, headers }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

function scratch(t: { teardown(fn: () => void): void }): string {
  const dir = mkdtempSync(join(tmpdir(), 'headway-ops-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test('database files are 0600 and the data directory 0700 even when it existed as 0755', async (t) => {
  const dir = join(scratch(t), 'data');
  mkdirSync(dir, { recursive: true });
  chmodSync(dir, 0o755);
  writeFileSync(join(dir, 'noise_private.key'), `privkey:${'11'.repeat(32)}\n`, { mode: 0o644 });
  chmodSync(join(dir, 'noise_private.key'), 0o644);
  const s = await startTestServer({}, { dataDir: dir });
  t.teardown(() => s.stop());
  await s.state.users.create({ name: 'perm' });
  t.equal(mode(dir), '700', 'directory');
  for (const f of ['db.sqlite', 'db.sqlite-wal', 'db.sqlite-shm', 'noise_private.key', 'derp_server_private.key', 'headway.lock', 'database.json']) {
    t.equal(mode(join(dir, f)), '600', f);
  }
  t.notOk(s.logs.some((l) => /readable by other users/.test(l)), 'nothing left to warn about');
});

t.test('a second server on the same data directory stops naming the pid of the first', async (t) => {
  const dir = scratch(t);
  const s = await startTestServer({}, { dataDir: dir });
  t.equal(readFileSync(join(dir, 'headway.lock'), 'utf8').trim(), String(process.pid));
  await t.rejects(startTestServer({}, { dataDir: dir }), { message: new RegExp(`^another Headway \\(pid ${process.pid}\\) uses the data directory ${dir}`) });
  await s.stop();
  const again = await startTestServer({}, { dataDir: dir });
  t.pass('the lock is released on stop');
  await again.stop();
});

t.test('metrics_listen_addr in use is named in the error', async (t) => {
  const blocker = net.createServer();
  await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
  t.teardown(() => blocker.close());
  const port = (blocker.address() as net.AddressInfo).port;
  await t.rejects(startTestServer({ metrics_listen_addr: `127.0.0.1:${port}` }), { message: new RegExp(`^metrics_listen_addr 127\\.0\\.0\\.1:${port}: the address is already in use; choose another port$`), code: 'EADDRINUSE' });
});

t.test('switching to an empty database warns once that the old one still holds data', async (t) => {
  const dir = scratch(t);
  const first = await startTestServer({}, { dataDir: dir });
  await first.state.users.create({ name: 'kept' });
  await first.stop();
  const record = JSON.parse(readFileSync(join(dir, 'database.json'), 'utf8'));
  t.match(record, { type: 'sqlite', users: 1, nodes: 0 });
  const moved = await startTestServer({ database: { sqlite: { path: 'other.sqlite' } } }, { dataDir: dir });
  const warns = moved.logs.filter((l) => / WRN .*still holds 1 users and 0 nodes/.test(l));
  t.equal(warns.length, 1, 'one warning');
  t.match(warns[0], new RegExp(`last used sqlite ${join(dir, 'db.sqlite')}`));
  await moved.stop();
  const again = await startTestServer({ database: { sqlite: { path: 'other.sqlite' } } }, { dataDir: dir });
  t.notOk(again.logs.some((l) => /still holds/.test(l)), 'not repeated on the next start');
  await again.stop();
});

t.test('/v1/metrics on listen_addr: behind an API key by default, open or off on request', async (t) => {
  const open = await startTestServer({ metrics: { require_api_key: false } });
  t.teardown(() => open.stop());
  t.equal((await fetch(open.urls.http + '/v1/metrics')).status, 200, 'metrics.require_api_key: false opens it');

  const off = await startTestServer({ metrics: { public_endpoint: false } });
  t.teardown(() => off.stop());
  t.equal((await fetch(off.urls.http + '/v1/metrics')).status, 404);
  t.match(await (await fetch(off.urls.metrics + '/metrics')).text(), /headway_users 0/, 'metrics_listen_addr stays open');

  const keyed = await startTestServer();
  t.teardown(() => keyed.stop());
  const res = await fetch(keyed.urls.http + '/v1/metrics');
  t.equal(res.status, 401);
  t.notMatch(await res.text(), /headway_users/, 'no counts leak');
  const { secret } = await keyed.state.keys.createApiKey(null);
  const ok = await fetch(keyed.urls.http + '/v1/metrics', { headers: { authorization: `Bearer ${secret}` } });
  t.equal(ok.status, 200);
  t.match(await ok.text(), /headway_api_keys 1/);
  t.equal((await fetch(keyed.urls.metrics + '/metrics')).status, 200, 'metrics_listen_addr needs no key');
});

t.test('/verify exists only with derp.server.verify_clients', async (t) => {
  const body = JSON.stringify({ NodePublic: `nodekey:${'ab'.repeat(32)}`, DiscoPublic: `discokey:${'cd'.repeat(32)}` });
  const on = await startTestServer();
  t.teardown(() => on.stop());
  const answered = await fetch(on.urls.http + '/verify', { method: 'POST', body, headers: { 'content-type': 'application/json' } });
  t.not(answered.status, 404, 'served when clients are verified');
  const off = await startTestServer({ derp: { server: { verify_clients: false } } });
  t.teardown(() => off.stop());
  const missing = await fetch(off.urls.http + '/verify', { method: 'POST', body, headers: { 'content-type': 'application/json' } });
  t.equal(missing.status, 404);
});

// GET / is where someone who found the server's address lands: it points onwards rather than a bare 404.
t.test('GET / says what the server is, how a device joins, and where the docs and the health check are', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const r = await fetch(`${s.urls.http}/`);
  t.equal(r.status, 200);
  t.match(r.headers.get('content-type'), /text\/html/);
  t.match(r.headers.get('content-security-policy'), /default-src 'none'/, 'the pages\' strict policy');
  const html = await r.text();
  t.match(html, `tailscale up --login-server ${s.config.server_url}`, 'the join command with this server_url');
  t.match(html, 'href="/api/v1/docs"');
  t.match(html, 'href="/health"');
});

t.test('TRACE and PROPFIND: status and body agree (405 with Allow on known paths, 404 elsewhere)', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  for (const method of ['TRACE', 'PROPFIND', 'DELETE']) {
    const r = await rawRequest(s.urls.http, method, '/health');
    t.equal(r.status, 405, `${method} /health`);
    t.match(r.headers.allow, /GET/);
    t.match(r.headers['content-type'], /application\/problem\+json/);
    t.match(JSON.parse(r.body), { status: 405, code: 'method_not_allowed' });
  }
  const unknown = await rawRequest(s.urls.http, 'PROPFIND', '/no/such/path');
  t.equal(unknown.status, 404);
  t.equal(unknown.body, 'not found (this is a Headway server: / says how devices join; the API is documented at /api/v1/docs)\n');
  const { secret } = await s.state.keys.createApiKey(null);
  const api = await rawRequest(s.urls.http, 'TRACE', '/api/v1/user', { authorization: `Bearer ${secret}` });
  t.equal(api.status, 405);
  t.match(api.headers.allow, /GET/);
  t.match(api.headers.allow, /POST/);
  t.equal(JSON.parse(api.body).status, 405);
  const anon = await rawRequest(s.urls.http, 'PROPFIND', '/api/v1/user');
  t.equal(anon.status, 401, 'the API still answers 401 before anything else to the unauthenticated');
  const options = await rawRequest(s.urls.http, 'OPTIONS', '/health');
  t.equal(options.status, 204);
  t.match(options.headers.allow, /GET/);
});

t.test('log.level trace logs SQL statements (values never) and protocol steps', async (t) => {
  const dir = scratch(t);
  const { config, problems } = resolveConfig({
    data_dir: dir, listen_addr: '127.0.0.1:0', metrics_listen_addr: '', grpc_listen_addr: '', log: { level: 'trace' },
    derp: { server: { stun_listen_addr: '127.0.0.1:0' } },
  }, { env: {}, baseDir: dir });
  t.same(problems.filter((p) => p.level !== 'warn'), []);
  const lines: string[] = [];
  const s = await startServer({ config, logger: createLogger({ level: config.log.level, write: (l) => lines.push(l) }) });
  t.teardown(() => s.close());
  await s.state.users.create({ name: 'sql-canary-user' });
  const { secret } = await s.state.keys.createApiKey(null);
  await fetch(s.urls.http + '/api/v1/user', { headers: { authorization: `Bearer ${secret}` } });
  const sql = lines.filter((l) => / TRC sql /.test(l));
  t.ok(sql.some((l) => /insert into/i.test(l) && /params=\d+/.test(l)), 'insert statements logged with a parameter count');
  t.notOk(lines.some((l) => l.includes('sql-canary-user')), 'bound values are not logged');
  t.notOk(lines.some((l) => l.includes(secret.slice(-43))), 'the API key is not logged');
  t.ok(lines.some((l) => / TRC http request .*route=\/api\/v1\/user status=200/.test(l)), 'HTTP requests at trace');
});

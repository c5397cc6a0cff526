/**
 * The admin console's security, against the real server: every /api/v1 and /api/v2 route and every /admin route
 * refuses a request without a session and shows no data; with a session but without its CSRF header every change is
 * refused (403 csrf_failed) and nothing changes; a page on another origin that auto-submits forms at the console while
 * the administrator is signed in (in Chromium) changes nothing and signs no one in; an expired link is refused;
 * sign-out ends the session on the server; a session outlives a restart (it is in the database); under https the
 * cookie is __Host- prefixed, Secure, HttpOnly and SameSite=Strict; no link token or cookie value is ever logged.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { ROUTES, V2_ROUTES } from '@headway/api';
import { hashSecret } from '@headway/core';
import { startTestServer, type TestServer } from '../src/server.js';
import { launchChromium, signIn, signInLink, socketCall } from '../src/console.js';
import { consoleRoutes, linkSession, rawRequest, type LinkSession } from '../src/console-http.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(240_000);

/** SECRET_NAME is data only an authenticated caller may see. */
const SECRET_NAME = 'sally-secret';

/** API_ROUTES: every authenticated route of both APIs, path parameters filled with values that exist where they can. */
const API_ROUTES = [...ROUTES, ...V2_ROUTES].filter((r) => r.scope !== 'public').map((r) => ({
  method: r.method, template: r.path, path: r.path.replace(/:tailnet\b/, '-').replace(/:newName\b/, 'renamed').replace(/:(\w+)/g, '1'),
}));
const CHANGES = API_ROUTES.filter((r) => r.method !== 'GET');

async function server(t: Test, raw: Record<string, unknown> = {}, opts: { dataDir?: string } = {}): Promise<TestServer> {
  const s = await startTestServer(raw, { logLevel: 'trace', ...opts });
  t.teardown(() => s.stop({ remove: !opts.dataDir }));
  await socketCall(s, 'POST', '/api/v1/user', { name: SECRET_NAME });
  return s;
}

/** snapshot is everything an administrator could change, and the audit log of changes. */
async function snapshot(s: TestServer): Promise<string> {
  const dump = await s.storage.dump!();
  const audit = await s.storage.audit!.list({ limit: 100 });
  return JSON.stringify({ ...dump, audit });
}

/** noSecretsLogged: neither a link's token nor a cookie's value is in the server's log, at trace level. */
function noSecretsLogged(t: Test, s: TestServer, sessions: LinkSession[]): void {
  const log = s.logs.join('\n');
  t.match(log, /TRC /, 'the log ran at trace level');
  for (const x of sessions) {
    t.notOk(log.includes(x.token), 'the link token is not logged');
    t.notOk(log.includes(x.value), 'the cookie value is not logged');
    t.notOk(log.includes(x.csrf), 'the CSRF token is not logged');
    t.notOk(log.includes(hashSecret(x.value)), 'nor the session id');
  }
}

t.test('without a session: every API route and every /admin route refuses and shows no data', async (t) => {
  const s = await server(t);
  const base = s.urls.http;
  const forged = `headway-admin=${'A'.repeat(43)}`;
  t.ok(API_ROUTES.length > 90, `${API_ROUTES.length} API routes walked`);
  for (const r of API_ROUTES) {
    for (const cookie of [undefined, forged]) {
      const a = await rawRequest(base + r.path, {
        method: r.method, headers: { 'content-type': 'application/json', ...(cookie ? { cookie } : {}) }, body: r.method === 'GET' ? undefined : JSON.stringify({ name: 'mallory' }),
      });
      if (a.status !== 401 || a.text.includes(SECRET_NAME)) t.fail(`${r.method} ${r.template}${cookie ? ' (forged cookie)' : ''}: ${a.status} ${a.text.slice(0, 200)}`);
    }
  }
  t.pass('every API route answered 401 without data, with no cookie and with a forged one');

  const admin = consoleRoutes();
  t.ok(admin.some((r) => r.method === 'GET' && r.path === '/admin/session'), `${admin.length} /admin routes found in the console package`);
  const open = new Set(['GET /admin/signin', 'GET /admin/assets/:file', 'GET /admin/oidc/start']);
  for (const r of admin) {
    const a = await rawRequest(base + r.path.replace(/:(\w+)/g, 'x'), {
      method: r.method, headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: forged }, body: r.method === 'GET' ? undefined : 'token=nope&csrf=nope',
    });
    const name = `${r.method} ${r.path}`;
    t.notOk(a.text.includes(SECRET_NAME), `${name}: no data`);
    t.notOk([a.headers['set-cookie'] ?? []].flat().some((c) => /headway-admin=[^;]/.test(c)), `${name}: no session cookie`);
    if (open.has(name)) continue;
    const toSignin = a.status === 303 && a.headers.location === '/admin/signin';
    t.ok(a.status === 401 || a.status === 403 || toSignin, `${name}: refused (${a.status}${a.headers.location ? ` to ${a.headers.location}` : ''})`);
  }
  t.same(s.state.users.list().map((u) => u.name), [SECRET_NAME], 'nothing was created');
});

t.test('with a session but without its CSRF header every change is refused and changes nothing', async (t) => {
  const s = await server(t);
  const base = s.urls.http;
  const alice = await linkSession(s, 'alice');
  const other = await linkSession(s, 'bob');
  const before = await snapshot(s);
  for (const r of CHANGES) {
    for (const csrf of [undefined, other.csrf]) {
      const a = await rawRequest(base + r.path, {
        method: r.method, body: JSON.stringify({ name: 'mallory' }),
        headers: { 'content-type': 'application/json', cookie: alice.cookie, ...(csrf ? { 'x-csrf-token': csrf } : {}) },
      });
      if (a.status !== 403 || !a.text.includes('csrf_failed')) t.fail(`${r.method} ${r.template}${csrf ? ' (another session\'s token)' : ''}: ${a.status} ${a.text.slice(0, 200)}`);
    }
  }
  t.pass(`${CHANGES.length} changes answered 403 csrf_failed, without the header and with another session's token`);
  const crossSite = await rawRequest(`${base}/api/v1/user`, { headers: { cookie: alice.cookie, 'sec-fetch-site': 'cross-site' } });
  t.equal(crossSite.status, 403, 'a read the browser marks cross-site is refused too');
  t.notOk(crossSite.text.includes(SECRET_NAME));
  const signout = await rawRequest(`${base}/admin/signout`, { method: 'POST', headers: { cookie: alice.cookie, 'sec-fetch-site': 'same-origin' } });
  t.equal(signout.status, 403, 'sign-out without the token is refused');
  t.equal(await snapshot(s), before, 'nothing changed: records and audit log as before');

  const read = await rawRequest(`${base}/api/v1/user`, { headers: { cookie: alice.cookie } });
  t.equal(read.status, 200, 'the session reads');
  t.ok(read.text.includes(SECRET_NAME));
  const made = await rawRequest(`${base}/api/v1/user`, { method: 'POST', body: JSON.stringify({ name: 'made-by-alice' }), headers: { 'content-type': 'application/json', cookie: alice.cookie, 'x-csrf-token': alice.csrf } });
  t.equal(made.status, 200, 'with its own token the same change goes through');
  t.same((await s.storage.audit!.list({ limit: 10 })).map((e) => [e.actor, e.action]), [['console:alice', 'createUser'], ['socket', 'createUser']],
    'and is the one change in the audit log after the setup\'s');
  noSecretsLogged(t, s, [alice, other]);
});

/** attacker serves pages on their own 127.0.0.1 port (another origin) that post to the console as soon as they load. */
async function attacker(t: Test, target: string, token: string): Promise<string> {
  const pages: Record<string, string> = {
    '/signin': `<form method="post" action="${target}/admin/signin"><input name="token" value="${token}"></form>`,
    '/user-form': `<form method="post" action="${target}/api/v1/user"><input name="name" value="evil-form"></form>`,
    '/user-json': `<form method="post" action="${target}/api/v1/user" enctype="text/plain"><input name='{"name":"evil-json","x":"' value='"}'></form>`,
  };
  const srv = http.createServer((req, res) => {
    const form = pages[req.url ?? ''];
    if (req.url === '/fetch') {
      res.setHeader('content-type', 'text/html');
      res.end(`<script>fetch(${JSON.stringify(`${target}/api/v1/user`)}, { method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'content-type': 'text/plain' }, body: '{"name":"evil-fetch"}' }).finally(() => { document.title = 'sent'; });</script>`);
      return;
    }
    if (!form) { res.statusCode = 404; res.end(); return; }
    res.setHeader('content-type', 'text/html');
    res.end(`<!doctype html><title>win a prize</title>${form}<script>document.forms[0].submit()</script>`);
  });
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => srv.close(() => resolve())));
  return `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
}

t.test('a page on another origin posting to the console while the administrator is signed in changes nothing', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const s = await server(t);
  const victim = await signIn(browser, s, 'victim');
  const attackerToken = new URL(await signInLink(s, 'attacker')).searchParams.get('token')!;
  const evil = await attacker(t, s.urls.http, attackerToken);
  const before = await snapshot(s);

  const answers = new Map<string, number>();
  victim.on('response', (r) => { if (r.url().startsWith(s.urls.http) && r.request().method() === 'POST') answers.set(new URL(r.url()).pathname, r.status()); });
  for (const path of ['/signin', '/user-form', '/user-json']) {
    answers.clear();
    await Promise.all([victim.waitForNavigation({ waitUntil: 'load' }).catch(() => undefined), victim.goto(evil + path)]);
    await victim.waitForFunction((origin) => (globalThis as unknown as { location: { href: string } }).location.href.startsWith(origin), {}, s.urls.http);
    const status = [...answers.values()][0];
    t.ok(status === 401 || status === 403, `${path}: the console refused the cross-origin post (${status})`);
  }
  await victim.goto(evil + '/fetch');
  await victim.waitForFunction(() => (globalThis as unknown as { document: { title: string } }).document.title === 'sent');
  t.same(s.state.users.list().map((u) => u.name), [SECRET_NAME], 'no user was created by any of the pages');
  t.equal(await snapshot(s), before, 'nothing changed');
  await victim.goto(`${s.urls.http}/admin/session`);
  t.match(await victim.evaluate(() => (globalThis as unknown as { document: { body: { textContent: string } } }).document.body.textContent), /"admin":"victim"/,
    'the victim is still signed in as themself: the attacker\'s link did not sign them in');
  const own = await rawRequest(`${s.urls.http}/admin/signin`, {
    method: 'POST', body: `token=${attackerToken}`, headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin' },
  });
  t.equal(own.status, 303, 'the refused link was never spent');
});

t.test('an expired link is refused; sign-out ends the session on the server; a session outlives a restart', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'headway-console-security-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  let s = await server(t, {}, { dataDir });
  const token = 'expired-link-token-0123456789abcdefghijklmnop';
  await s.storage.consoleSessions!.createLink(hashSecret(token), 'late', new Date(Date.now() - 1000));
  const late = await rawRequest(`${s.urls.http}/admin/signin`, {
    method: 'POST', body: `token=${token}`, headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin' },
  });
  t.equal(late.status, 401, 'an expired link is refused');
  t.match(late.text, /not valid/);
  t.notOk(late.headers['set-cookie'], 'and opens no session');

  const kept = await linkSession(s, 'kept');
  const ended = await linkSession(s, 'ended');
  await s.stop({ remove: false });
  s = await startTestServer({}, { dataDir, logLevel: 'trace' });
  t.teardown(() => s.stop({ remove: false }));
  const after = await rawRequest(`${s.urls.http}/admin/session`, { headers: { cookie: kept.cookie } });
  t.equal(after.status, 200, 'a session is still live after a restart');
  t.match(after.text, /"admin":"kept"/);

  const out = await rawRequest(`${s.urls.http}/admin/signout`, { method: 'POST', headers: { cookie: ended.cookie, 'x-csrf-token': ended.csrf, 'sec-fetch-site': 'same-origin' } });
  t.equal(out.status, 303, 'sign-out');
  t.match([out.headers['set-cookie'] ?? []].flat().join('\n'), /headway-admin=;.*Max-Age=0/, 'the browser is told to drop the cookie');
  for (const path of ['/admin/session', '/api/v1/user', '/api/v2/tailnet/-/users']) {
    const replay = await rawRequest(s.urls.http + path, { headers: { cookie: ended.cookie } });
    t.equal(replay.status, 401, `the old cookie replayed on ${path}: 401`);
  }
  t.equal(await s.storage.consoleSessions!.get(hashSecret(ended.value)), undefined, 'the session row is gone');
  t.equal((await rawRequest(`${s.urls.http}/admin/session`, { headers: { cookie: kept.cookie } })).status, 200, 'the other session is untouched');
  noSecretsLogged(t, s, [kept, ended]);
});

t.test('under https the cookie is __Host- prefixed, Secure, HttpOnly, SameSite=Strict', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'headway-console-tls-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const cert = join(dir, 'cert.pem'), key = join(dir, 'key.pem');
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1', '-keyout', key, '-out', cert], { stdio: 'ignore' });
  } catch {
    return unmet(t, 'openssl is not installed (it makes the test certificate)');
  }
  const s = await server(t, { tls_cert_path: cert, tls_key_path: key });
  t.match(s.urls.http, /^https:/);
  const x = await linkSession(s, 'secure');
  const attrs = x.setCookie.split(';').map((p) => p.trim());
  t.match(attrs[0], /^__Host-headway-admin=[A-Za-z0-9_-]{43}$/, 'the __Host- prefix');
  for (const a of ['Secure', 'HttpOnly', 'SameSite=Strict', 'Path=/']) t.ok(attrs.includes(a), a);
  t.notOk(attrs.some((a) => /^domain=/i.test(a)), 'no Domain');
  t.equal((await rawRequest(`${s.urls.http}/admin/session`, { headers: { cookie: x.cookie } })).status, 200, 'the prefixed cookie signs in');
  t.equal((await rawRequest(`${s.urls.http}/admin/session`, { headers: { cookie: `headway-admin=${x.value}` } })).status, 401,
    'the same value under the unprefixed name does not (a sibling host could have planted it)');
  noSecretsLogged(t, s, [x]);
});

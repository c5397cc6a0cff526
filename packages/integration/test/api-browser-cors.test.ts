/**
 * A web UI served from another origin, as headscale-ui is, driving /api/v1 from a real browser (Debian's
 * Chromium through puppeteer-core): its fetch calls send string bodies with no content type (the browser labels
 * them text/plain) and a bearer key (so every call is preflighted). From the origin listed in
 * api.cors.allowed_origins it creates users and a pre-auth key and shows the `message` of a refused rename; from
 * an unlisted origin the browser refuses the calls and nothing changes on the server.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import puppeteer, { type Browser } from 'puppeteer-core';
import { startTestServer } from '../src/index.js';
import { CHROMIUM_ARGS, chromiumPath } from '../src/chromium.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(120_000);

/** UI_PAGE is the smallest web UI: api() shows an error answer's `message`, as headscale-ui does. */
const UI_PAGE = `<!doctype html><html><head><meta charset="utf-8"><title>ui</title></head><body>
<p id="error"></p>
<script>
async function api(base, key, method, path, body) {
  const res = await fetch(base + path, { method, headers: { Authorization: 'Bearer ' + key }, body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await res.json();
  if (!res.ok) { document.getElementById('error').textContent = data.message; return { status: res.status, error: data.message }; }
  return { status: res.status, data };
}
</script></body></html>`;

/** servePage serves UI_PAGE on its own loopback port: its own origin. */
async function servePage(): Promise<{ server: Server; origin: string }> {
  const server = createServer((_req, res) => { res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }); res.end(UI_PAGE); });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return { server, origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

t.test('a web UI on a listed origin works through CORS in Chromium; an unlisted one is refused by the browser', async (t) => {
  const executablePath = chromiumPath();
  if (!executablePath) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  const listed = await servePage();
  const unlisted = await servePage();
  t.teardown(() => { listed.server.close(); unlisted.server.close(); });
  const s = await startTestServer({ api: { cors: { allowed_origins: [listed.origin] } } });
  t.teardown(() => s.stop());
  const key = (await s.state.keys.createApiKey(null)).secret;
  const browser: Browser = await puppeteer.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
  t.teardown(() => browser.close());

  const page = await browser.newPage();
  await page.goto(listed.origin);
  type Call = { status: number; data?: any; error?: string };
  const call = (method: string, path: string, body?: unknown) =>
    page.evaluate((base, k, m, p, b) => (globalThis as unknown as { api: (...a: unknown[]) => Promise<unknown> }).api(base, k, m, p, b), s.urls.http, key, method, path, body) as Promise<Call>;
  const alice = await call('POST', '/api/v1/user', { name: 'alice' });
  t.equal(alice.status, 200, 'a user created from the page');
  const bob = await call('POST', '/api/v1/user', { name: 'bob' });
  t.equal(bob.status, 200);
  const pak = await call('POST', '/api/v1/preauthkey', { user: alice.data.user.id, reusable: true });
  t.equal(pak.status, 200, 'a pre-auth key created from the page');
  t.match(pak.data.preAuthKey.key, /^hwkey-auth-/);
  const rename = await call('POST', `/api/v1/user/${bob.data.user.id}/rename/alice`);
  t.equal(rename.status, 409);
  const shown = await page.$eval('#error', (e) => e.textContent);
  t.match(shown, /alice/, `the page shows the server's message: ${shown}`);
  t.equal(shown, rename.error);
  t.same(s.state.users.list().map((u) => u.name).sort(), ['alice', 'bob']);

  const other = await browser.newPage();
  await other.goto(unlisted.origin);
  const refused = await other.evaluate(async (base, k) => {
    try {
      await fetch(base + '/api/v1/user', { method: 'POST', headers: { Authorization: 'Bearer ' + k }, body: JSON.stringify({ name: 'mallory' }) });
      return 'answered';
    } catch (err) {
      return `refused: ${(err as Error).message}`;
    }
  }, s.urls.http, key);
  t.match(refused, /^refused: Failed to fetch/, 'the browser refuses the unlisted origin');
  t.same(s.state.users.list().map((u) => u.name).sort(), ['alice', 'bob'], 'the preflight stopped the call: nothing was created');
});

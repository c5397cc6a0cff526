/**
 * The console's Keys page in Chromium: a pre-auth key made on the page (its secret read from the page, shown once)
 * joins a real tailscaled, which then shows in GET /api/v1/node with the key's user or tags; the secret is gone after
 * a reload; an API key made on the page works as a Bearer key and gets 401 once expired on the page; a refused
 * create shows the server's message; axe-core finds nothing at phone and desktop widths.
 */
import t, { type Test } from 'tap';
import { serverDatabases } from '../src/server.js';
import type { Page } from 'puppeteer-core';
import { axeViolations, launchChromium, SCREEN_WIDTHS, signIn } from '../src/console.js';
import { adminNodes, deviceServer, openForAxe, textOf } from '../src/console-devices.js';
import { findTailscaleBinaries } from '../src/tailscale.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(240_000);

const POLICY = '{ "tagOwners": { "tag:ci": ["alice@"] }, "acls": [{ "action": "accept", "src": ["*"], "dst": ["*:*"] }] }';

/** createPreAuthKey fills the page's pre-auth key form and answers the secret the page shows. */
async function createPreAuthKey(page: Page, opts: { user: string; tags?: string }): Promise<string> {
  await page.select('#pak-user', opts.user);
  const tags = await page.$('#pak-tags');
  await tags!.click({ count: 3 });
  await page.keyboard.press('Backspace');
  if (opts.tags) await page.type('#pak-tags', opts.tags);
  await page.click('form[aria-label="New pre-auth key"] button[type=submit]');
  await page.waitForSelector('.secret-once [data-secret]');
  const secret = await textOf(page, '.secret-once [data-secret]');
  await page.click('.secret-once .secret-actions button:last-child');
  await page.waitForSelector('.secret-once', { hidden: true });
  return secret;
}

/** confirmDialog clicks the open confirmation dialog's confirming button. */
async function confirmDialog(page: Page): Promise<void> {
  await page.waitForSelector('dialog[open]');
  await page.click('dialog[open] button.danger');
  await page.waitForSelector('dialog[open]', { hidden: true });
}

const TITLE = 'a pre-auth key made in the console joins a real tailscaled; an API key made there works until expired there';
t.test(TITLE, (t) => keysScenario(t, undefined));
for (const db of serverDatabases(t, 'the console keys page with a real device', ['postgres'])) t.test(`${TITLE} (${db.name})`, (t) => db.run((database) => keysScenario(t, database)));

async function keysScenario(t: Test, database: Record<string, unknown> | undefined): Promise<void> {
  if (findTailscaleBinaries().length === 0) return unmet(t, 'no Tailscale client installed (run .ci/install-tailscale.sh)');
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const { s, join } = await deviceServer(t, database);
  await s.policy.set(POLICY);
  await s.state.users.create({ name: 'alice' });

  const page = await signIn(browser, s, 'keeper');
  await openForAxe(page, 'keys');
  await page.waitForFunction(() => [...(globalThis as unknown as { document: { querySelectorAll(s: string): Iterable<{ value: string }> } }).document.querySelectorAll('#pak-user option')].some((o) => o.value === 'alice'));

  const userKey = await createPreAuthKey(page, { user: 'alice' });
  t.match(userKey, /^hwkey-auth-/, 'the page shows the whole key once');
  t.match(await textOf(page, 'section[aria-labelledby="preauth-title"] tbody'), /alice/, 'the list shows the new key under alice');
  const tagKey = await createPreAuthKey(page, { user: '', tags: 'tag:ci' });

  const [laptop, runner] = await Promise.all([join('console-laptop', userKey), join('console-runner', tagKey)]);
  t.ok(laptop && runner, 'both devices are Running with the keys from the page');
  const nodes = await adminNodes(s);
  const byName = (n: string) => nodes.find((x) => x.givenName === n);
  t.equal(byName('console-laptop')?.user?.name, 'alice', 'the user key registered a node of alice');
  t.same(byName('console-laptop')?.tags, [], 'with no tags');
  t.same(byName('console-runner')?.tags, ['tag:ci'], 'the tags-only key registered a node owned by tag:ci');

  await page.reload();
  await page.waitForSelector('section[aria-labelledby="preauth-title"] tbody tr');
  t.match(await textOf(page, 'section[aria-labelledby="preauth-title"] tbody'), /Used/, 'the list marks the single-use keys used');
  const html = await page.content();
  t.notOk(html.includes(userKey) || html.includes(tagKey), 'after a reload no secret is anywhere on the page');
  t.notOk(html.includes(userKey.slice(0, userKey.lastIndexOf('-'))) && html.includes(userKey.slice(-8)), 'nor the tail of one');

  // A refused create shows the server's message: a key with no user needs tags.
  await page.select('#pak-user', '');
  await page.click('form[aria-label="New pre-auth key"] button[type=submit]');
  await page.waitForSelector('section[aria-labelledby="preauth-title"] [role=alert]');
  t.match(await textOf(page, 'section[aria-labelledby="preauth-title"] [role=alert]'), /tag/i, "the server's reason is shown");
  t.equal((await s.state.keys.listPreAuthKeys({})).length, 2, 'nothing was made');

  // Expire the user key, with confirmation: cancelling changes nothing.
  const userKeyRow = `tr[data-key-id="${(await s.state.keys.listPreAuthKeys({})).find((k) => k.tags.length === 0)!.id}"]`;
  await page.click(`${userKeyRow} button.danger`);
  await page.waitForSelector('dialog[open]');
  await page.click('dialog[open] .dialog-actions button:first-child');
  t.equal(await textOf(page, `${userKeyRow} td[data-label=Status]`), 'Used', 'cancelled: not expired');
  await page.click(`${userKeyRow} button.danger`);
  await confirmDialog(page);
  await page.waitForFunction((sel) => (globalThis as unknown as { document: { querySelector(s: string): { textContent: string } | null } }).document.querySelector(sel)?.textContent === 'Expired', {}, `${userKeyRow} td[data-label=Status]`);
  t.pass('the key shows Expired after confirming');

  // API key: shown once, works as a Bearer key, 401 once expired on the page.
  await page.select('#api-expiry', '7d');
  await page.click('form[aria-label="New API key"] button[type=submit]');
  await page.waitForSelector('.secret-once [data-secret]');
  const apiKey = await textOf(page, '.secret-once [data-secret]');
  t.match(await textOf(page, '.secret-once'), /will not be shown again/, 'the page says the secret is shown once');
  const asKey = () => fetch(`${s.urls.http}/api/v1/node`, { headers: { authorization: `Bearer ${apiKey}` } });
  const ok = await asKey();
  t.equal(ok.status, 200, 'the API key from the page authenticates');
  t.equal(((await ok.json()) as { nodes: unknown[] }).nodes.length, 2);

  for (const width of SCREEN_WIDTHS) {
    await page.setViewport({ width, height: 800 });
    t.same(await axeViolations(page), [], `no axe-core violations at ${width} px (with a secret shown)`);
  }
  await page.click('.secret-once .secret-actions button:last-child');

  const prefix = (await s.state.keys.listApiKeys())[0]!.prefix;
  await page.reload();
  await page.waitForSelector(`tr[data-prefix="${prefix}"] button.danger`);
  await page.click(`tr[data-prefix="${prefix}"] button.danger`);
  await confirmDialog(page);
  await page.waitForSelector(`tr[data-prefix="${prefix}"] button.danger`, { hidden: true });
  t.equal((await asKey()).status, 401, 'expired on the page: the key gets 401');
  for (const width of SCREEN_WIDTHS) {
    await page.setViewport({ width, height: 800 });
    t.same(await axeViolations(page), [], `no axe-core violations at ${width} px (lists)`);
  }
}

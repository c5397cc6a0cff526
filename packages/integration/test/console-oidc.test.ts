/**
 * Signing in to the admin console through the identity provider, in Chromium against the real test provider (its own
 * process): an administrator named by admin.allowed_users, and one admitted by admin.allowed_groups, land on the
 * console under their e-mail address; a person on no list, and one whose e-mail the provider has not verified, see the
 * sign-in page with the refusal (403) and get no session; a device login through the same provider and the same
 * /oidc/callback still registers its node; the sign-in page has no axe-core violation; no secret reaches the log.
 */
import t from 'tap';
import { randomBytes } from 'node:crypto';
import type { Browser, Page } from 'puppeteer-core';
import { confirm, signIn as deviceSignIn } from '@headway/oidc-test-provider';
import { axeViolations, launchChromium, prepareAxe } from '../src/console.js';
import { CLIENT_SECRET, startOidcSetup, type OidcSetup } from '../src/oidc.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(180_000);

/** providerSignIn opens the console's sign-in page in a fresh browser context and signs in at the provider as `login`. */
async function providerSignIn(browser: Browser, s: OidcSetup, login: string): Promise<{ page: Page; status: number | undefined }> {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.goto(`${s.serverUrl}/admin/signin`);
  await Promise.all([page.waitForNavigation(), page.click('a[href="/admin/oidc/start"]')]);
  await page.type('input[name=login]', login);
  await page.type('input[name=password]', `${login}-pw`);
  const statuses: number[] = [];
  page.on('response', (r) => { if (new URL(r.url()).pathname === '/oidc/callback') statuses.push(r.status()); });
  // 'load', not network idle: the console's page keeps its live-update stream open.
  await Promise.all([page.waitForNavigation(), page.click('button[type=submit]')]);
  return { page, status: statuses[0] };
}

async function sessionStatus(page: Page, s: OidcSetup): Promise<number> {
  return page.evaluate(async (url) => (await fetch(url)).status, `${s.serverUrl}/admin/session`);
}

t.test('administrators sign in through the provider; others are refused; device logins still work', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const s = await startOidcSetup({}, {}, { admin: { allowed_users: ['dave@example.com'], allowed_groups: ['admins'], allowed_domains: ['example.com'] } });
  t.teardown(async () => { await s.server.stop(); await s.provider.stop(); });

  const first = await (await browser.createBrowserContext()).newPage();
  await prepareAxe(first);
  await first.goto(`${s.serverUrl}/admin/signin`);
  const host = new URL(s.provider.issuer).host;
  t.equal(await first.$eval('a[href="/admin/oidc/start"]', (a) => a.textContent), `Sign in with ${host}`, 'the sign-in page offers the provider');
  t.same(await axeViolations(first), [], 'the sign-in page with the provider has no axe-core violation');

  for (const [login, email, why] of [['dave', 'dave@example.com', 'admin.allowed_users'], ['alice', 'alice@example.com', 'admin.allowed_groups']]) {
    const { page, status } = await providerSignIn(browser, s, login!);
    t.equal(status, 200, `${login}: the callback answers the hand-over page`);
    await page.waitForSelector('.who');
    t.match(page.url(), /\/admin\/$/, `${login} (${why}) lands on the console`);
    t.equal(await page.$eval('.who', (e) => e.textContent), email, 'the console names the administrator by e-mail address');
    t.equal(await sessionStatus(page, s), 200, 'a live session');
  }

  const bob = await providerSignIn(browser, s, 'bob');
  t.equal(bob.status, 403, 'a person on no list is refused with 403');
  t.match(bob.page.url(), /\/oidc\/callback\?/, 'on the page the provider returned to');
  t.match(await bob.page.$eval('[role=alert]', (e) => e.textContent), /bob@other\.org may not administer this server/, 'the refusal says who and why');
  t.ok(await bob.page.$('a[href="/admin/oidc/start"]'), 'and offers to sign in again');
  t.equal(await sessionStatus(bob.page, s), 401, 'no session');

  const carol = await providerSignIn(browser, s, 'carol');
  t.equal(carol.status, 403, 'an unverified e-mail address in an allowed domain is refused');
  t.match(await carol.page.$eval('[role=alert]', (e) => e.textContent), /not verified/);
  t.equal(await sessionStatus(carol.page, s), 401, 'no session');
  t.match(s.server.logs.join('\n'), /WRN console sign-in refused .*who=bob@other\.org/, 'the refusal is logged');

  // A device's login through the same provider and callback is untouched by the console's.
  const hex = () => randomBytes(32).toString('hex');
  const machineKey = `mkey:${hex()}`;
  const reg = await s.server.state.pending.create({ machineKey, nodeKey: `nodekey:${hex()}`, hostinfo: { Hostname: 'bob-laptop' }, source: '127.0.0.1' });
  const done = await confirm(await deviceSignIn(`${s.serverUrl}/register/${reg.key}`, 'bob', 'bob-pw'));
  t.equal(done.status, 200, 'the device login completes');
  t.equal(s.server.state.users.get(s.server.state.nodes.byMachineKey(machineKey)!.userId!)?.email, 'bob@other.org', 'the node belongs to bob');

  const log = s.server.logs.join('\n');
  t.notOk(log.includes(CLIENT_SECRET), 'the client secret is not logged');
  t.notMatch(log, /eyJ[A-Za-z0-9_-]{8,}\.eyJ/, 'no JWT in the log');
  t.notMatch(log, /console:[A-Za-z0-9_-]{20}/, 'the console login keys are not logged');
});

t.test('without an admin list the provider is not offered', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const s = await startOidcSetup();
  t.teardown(async () => { await s.server.stop(); await s.provider.stop(); });
  const page = await browser.newPage();
  await page.goto(`${s.serverUrl}/admin/signin`);
  t.equal(await page.$('a[href="/admin/oidc/start"]'), null, 'no provider link');
  const start = await fetch(`${s.serverUrl}/admin/oidc/start`, { redirect: 'manual' });
  t.equal(start.status, 404, 'and no start route');
});

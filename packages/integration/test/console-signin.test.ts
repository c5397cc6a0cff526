/**
 * The admin console in Chromium, on SQLite and on PostgreSQL: a one-time link made over the admin socket signs an
 * administrator in; the pages load under the console's CSP with no violation reported; on the Users page a user is
 * created and renamed through /api/v1 (one made elsewhere shows up live) and recorded in the audit log as console:<name>, and deleting a user who owns a
 * machine is refused with the server's message naming it; the link does not work twice; sign-out ends the session.
 */
import t, { type Test } from 'tap';
import type { AuditLog } from '@headway/core';
import { serverDatabases, startTestServer } from '../src/index.js';
import { launchChromium, openPage, signIn, signInLink } from '../src/console.js';
import { streamingDevice } from '../src/console-seed.js';
import { waitText } from '../src/console-machines.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(240_000);

const browser = await launchChromium();
if (!browser) unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
else {
  t.teardown(() => browser.close());
  t.test('sqlite', (t) => scenarios(t, browser, undefined));
  for (const db of serverDatabases(t, 'the console sign-in and users page', ['postgres'])) {
    t.test(db.name, (t) => db.run((database) => scenarios(t, browser, database)));
  }
}

type Browser = NonNullable<Awaited<ReturnType<typeof launchChromium>>>;

async function scenarios(t: Test, browser: Browser, database: Record<string, unknown> | undefined): Promise<void> {
  const s = await startTestServer(database ? { database } : {});
  t.teardown(() => s.stop());
  await t.test('sign in by link, create and rename a user, a refused delete, sign out', (t) => usersFlow(t, browser, s));
  await t.test('a sign-in link works once', (t) => singleUse(t, browser, s));
}

type Server = Awaited<ReturnType<typeof startTestServer>>;

async function usersFlow(t: Test, browser: Browser, s: Server): Promise<void> {
  const context = await browser.createBrowserContext();
  t.teardown(() => context.close());
  const page = await signIn(context, s, 'alice');
  const cspErrors: string[] = [];
  page.on('console', (m) => { if (/Content Security Policy/i.test(m.text())) cspErrors.push(m.text()); });
  t.match(page.url(), /\/admin\/$/, 'the link lands on the console');
  t.equal(await page.$eval('.who', (e) => e.textContent), 'alice', 'the console names who signed in');

  await openPage(page, 'users');
  await page.type('#new-user', 'carol');
  await page.click('form.inline-form button[type=submit]');
  t.match(await waitText(page, '[role=status]', /carol/), /created/, 'the page says the user was made');
  t.same(s.state.users.list().map((u) => u.name), ['carol'], 'the user exists on the server');

  await page.click('button[aria-label="Rename user carol"]');
  await page.waitForSelector('form.rename input');
  t.match(await page.evaluate(() => (globalThis as unknown as { document: { activeElement: { id: string } | null } }).document.activeElement?.id ?? ''), /^rename-/, 'the name field takes the focus');
  await page.keyboard.down('Control');
  await page.keyboard.press('a');
  await page.keyboard.up('Control');
  await page.keyboard.type('caroline');
  await page.keyboard.press('Enter');
  await waitText(page, '[role=status]', /renamed to caroline/);
  t.same(s.state.users.list().map((u) => u.name), ['caroline'], 'renamed on the server');

  await streamingDevice(t, s, 'dave', 'daves-laptop');
  await page.waitForSelector('button[aria-label="Delete user dave"]');
  t.pass('a user made elsewhere shows without a reload');
  await page.click('button[aria-label="Delete user dave"]');
  await page.waitForSelector('dialog[open] button.danger');
  await page.click('dialog[open] button.danger');
  t.match(await waitText(page, '[role=alert]', /daves-laptop/), /still owns 1 node/, "a refused delete shows the server's message naming the machine");
  t.ok(s.state.users.byName('dave'), 'dave is still there');

  const audit = await s.container.resolve<AuditLog>('auditLog').list({ limit: 10, actor: 'console:alice' });
  t.same(audit.map((e) => e.action).reverse(), ['createUser', 'renameUser'], 'the audit log names the console administrator for each change');

  await page.type('#new-user', 'caroline');
  await page.click('form.inline-form button[type=submit]');
  t.match(await waitText(page, '[role=alert]', /caroline/), /caroline/, "a refused create shows the server's message");
  t.same(cspErrors, [], 'no CSP violation');

  await Promise.all([page.waitForNavigation(), page.click('.signout button')]);
  t.match(page.url(), /\/admin\/signin$/, 'sign-out lands on the sign-in page');
  const after = await page.goto(new URL('/admin/session', s.urls.http).toString());
  t.equal(after?.status(), 401, 'the session is over');
}

async function singleUse(t: Test, browser: Browser, s: Server): Promise<void> {
  const link = await signInLink(s, 'bob');
  const firstContext = await browser.createBrowserContext();
  const secondContext = await browser.createBrowserContext();
  t.teardown(async () => { await firstContext.close(); await secondContext.close(); });
  const first = await firstContext.newPage();
  await first.goto(link);
  await Promise.all([first.waitForNavigation(), first.click('form[action="/admin/signin"] button')]);
  await first.waitForSelector('#page-title');
  const second = await secondContext.newPage();
  await second.goto(link);
  const [answer] = await Promise.all([second.waitForNavigation(), second.click('form[action="/admin/signin"] button')]);
  t.equal(answer?.status(), 401, 'the second use is refused');
  t.match(await second.$eval('[role=alert]', (e) => e.textContent), /used already/);
}

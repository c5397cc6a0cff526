/**
 * The admin console in Chromium: a one-time link made over the admin socket signs an administrator in; the pages
 * load under the console's CSP with no violation reported; a user created on the Users page is made through
 * /api/v1 and recorded in the audit log as console:<name>; the link does not work twice; sign-out ends the session.
 */
import t from 'tap';
import type { AuditLog } from '@headway/core';
import { startTestServer } from '../src/index.js';
import { launchChromium, openPage, signIn, signInLink } from '../src/console.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(120_000);

t.test('sign in by link, create a user, sign out', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const s = await startTestServer();
  t.teardown(() => s.stop());

  const page = await signIn(browser, s, 'alice');
  const cspErrors: string[] = [];
  page.on('console', (m) => { if (/Content Security Policy/i.test(m.text())) cspErrors.push(m.text()); });
  t.match(page.url(), /\/admin\/$/, 'the link lands on the console');
  t.equal(await page.$eval('.who', (e) => e.textContent), 'alice', 'the console names who signed in');

  await openPage(page, 'users');
  await page.type('#new-user', 'carol');
  await page.click('form.inline-form button[type=submit]');
  await page.waitForSelector('[role=status]');
  t.match(await page.$eval('[role=status]', (e) => e.textContent), /carol/, 'the page says the user was made');
  t.same(s.state.users.list().map((u) => u.name), ['carol'], 'the user exists on the server');
  const audit = await s.container.resolve<AuditLog>('auditLog').list({ limit: 10 });
  t.same(audit.map((e) => [e.actor, e.action]), [['console:alice', 'createUser']], 'the audit log names the console administrator');

  await page.type('#new-user', 'carol');
  await page.click('form.inline-form button[type=submit]');
  await page.waitForSelector('[role=alert]');
  t.match(await page.$eval('[role=alert]', (e) => e.textContent), /carol/, "a refused change shows the server's message");
  t.same(cspErrors, [], 'no CSP violation');

  await Promise.all([page.waitForNavigation(), page.click('.signout button')]);
  t.match(page.url(), /\/admin\/signin$/, 'sign-out lands on the sign-in page');
  const after = await page.goto(new URL('/admin/session', s.urls.http).toString());
  t.equal(after?.status(), 401, 'the session is over');
});

t.test('a sign-in link works once', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const link = await signInLink(s, 'bob');
  const first = await browser.newPage();
  await first.goto(link);
  await Promise.all([first.waitForNavigation(), first.click('form[action="/admin/signin"] button')]);
  await first.waitForSelector('#page-title');
  const second = await (await browser.createBrowserContext()).newPage();
  await second.goto(link);
  const [answer] = await Promise.all([second.waitForNavigation(), second.click('form[action="/admin/signin"] button')]);
  t.equal(answer?.status(), 401, 'the second use is refused');
  t.match(await second.$eval('[role=alert]', (e) => e.textContent), /used already/);
});

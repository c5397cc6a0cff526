/**
 * The console's Audit log and About pages in Chromium. Audit: a change made in the console is listed first with
 * console:<admin>; entries come newest first a page at a time (older and newer pages by `before`); the actor and
 * action filters narrow them; a database without an audit log is named as keeping the entries in memory only.
 * About: the version, database, server_url, counts, single instance and plain HTTP of a running server, the expiry
 * of a tls_cert_path certificate on a server serving HTTPS, and the instances of a cluster on PostgreSQL (mandatory
 * under CI=true, skipped with the reason elsewhere).
 */
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Page } from 'puppeteer-core';
import t from 'tap';
import { serverDatabases, startTestServer } from '../src/index.js';
import { until } from '../src/until.js';
import { CHROMIUM_ARGS, chromiumPath } from '../src/chromium.js';
import { axeViolations, launchChromium, openPage, signIn, socketCall } from '../src/console.js';
import { streamingDevice } from '../src/console-seed.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(180_000);

const NO_CHROMIUM = 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)';
const serverVersion = (JSON.parse(readFileSync(createRequire(import.meta.url).resolve('@headway/server/package.json'), 'utf8')) as { version: string }).version;

/** rows reads the audit table as [actor, action, target] rows. */
const rows = (page: Page) => page.$$eval('table.audit tbody tr', (trs) => trs.map((tr) => [...tr.querySelectorAll('td')].slice(1, 4).map((td) => td.textContent ?? '')));

/** settle waits for the audit page to show a fresh answer (its summary line is not "Loading…"). */
const settle = (page: Page) => page.waitForFunction(() => {
  const hint = (globalThis as unknown as { document: { querySelector(s: string): { textContent: string } | null } }).document.querySelector('.hint[aria-live]');
  return hint !== null && hint.textContent !== 'Loading…';
});

/** createUser makes a user on the console's Users page, as an administrator would. */
async function createUser(page: Page, name: string): Promise<void> {
  await openPage(page, 'users');
  await page.type('#new-user', name);
  await page.click('form.inline-form button[type=submit]');
  await page.waitForSelector('[role=status]');
}

t.test('audit log: console changes by name, newest first, paged and filtered', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, NO_CHROMIUM);
  t.teardown(() => browser.close());
  const s = await startTestServer();
  t.teardown(() => s.stop());
  for (let i = 1; i <= 30; i++) await socketCall(s, 'POST', '/api/v1/user', { name: `u${String(i).padStart(2, '0')}` });

  const page = await signIn(browser, s, 'alice');
  await createUser(page, 'carol');
  await openPage(page, 'audit');
  await page.waitForSelector('table.audit');
  await settle(page);
  let shown = await rows(page);
  t.equal(shown.length, 25, 'a page of 25 entries');
  t.same(shown[0]!.slice(0, 2), ['console:alice', 'createUser'], 'the console change comes first, by the console administrator');
  t.match(shown[0]![2], /carol/, 'naming what it made');
  t.match(shown[1]![2], /u30/, 'then the older changes, newest first');
  t.equal(await page.$('.alert.notice'), null, 'SQLite keeps the log: no in-memory notice');
  t.same(await axeViolations(page), [], 'no accessibility violations');

  await page.click('.pager button:nth-child(2)');
  await page.waitForFunction(() => (globalThis as unknown as { document: { querySelectorAll(s: string): { length: number } } }).document.querySelectorAll('table.audit tbody tr').length === 6);
  shown = await rows(page);
  t.match(shown[0]![2], /u06/, 'the older page continues where the first ended (carol and u30-u07 were the first)');
  t.match(shown[5]![2], /u01/, 'down to the first change');
  t.ok(await page.$eval('.pager button:nth-child(2)', (b) => (b as unknown as { disabled: boolean }).disabled), 'no older page after the last');
  await page.click('.pager button:nth-child(1)');
  await page.waitForFunction(() => (globalThis as unknown as { document: { querySelectorAll(s: string): { length: number } } }).document.querySelectorAll('table.audit tbody tr').length === 25);
  t.match((await rows(page))[0]![2], /carol/, 'newer entries lead back to the newest');

  await page.type('#audit-actor', 'console:alice');
  await page.click('.audit-filters button[type=submit]');
  await page.waitForFunction(() => (globalThis as unknown as { document: { querySelectorAll(s: string): { length: number } } }).document.querySelectorAll('table.audit tbody tr').length === 1);
  t.same((await rows(page)).map((r) => r[0]), ['console:alice'], 'the actor filter keeps the console change only');

  await page.click('.audit-filters button[type=button]');
  await page.type('#audit-action', 'deleteUser');
  await page.click('.audit-filters button[type=submit]');
  await page.waitForSelector('table.audit', { hidden: true });
  await settle(page);
  t.match(await page.$eval('.hint[aria-live]', (e) => e.textContent), /No entries match/, 'an action nobody did matches nothing, and says so');
});

t.test('audit log: a database that keeps no log is named, and its entries still shown', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, NO_CHROMIUM);
  t.teardown(() => browser.close());
  // The example storage adapter keeps everything in memory and has no audit table.
  const s = await startTestServer({ database: { type: '@headway-examples/storage-memory' } });
  t.teardown(() => s.stop());
  const page = await signIn(browser, s, 'alice');
  await createUser(page, 'carol');
  await openPage(page, 'audit');
  await page.waitForSelector('table.audit');
  t.match(await page.$eval('.alert.notice', (e) => e.textContent), /in the server's memory.*lost when it restarts/, 'the page says the log lives in memory');
  t.same((await rows(page)).map((r) => r.slice(0, 2)), [['console:alice', 'createUser']], 'the change is listed all the same');
});

t.test('about: version, database, server_url, counts, plain HTTP', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, NO_CHROMIUM);
  t.teardown(() => browser.close());
  const s = await startTestServer();
  t.teardown(() => s.stop());
  await streamingDevice(t, s, 'alice', 'laptop');
  await s.state.users.create({ name: 'bob' });
  const page = await signIn(browser, s, 'alice');
  await openPage(page, 'about');
  await page.waitForSelector('dl.facts');
  const facts = Object.fromEntries(await page.$$eval('dl.facts dt', (dts) => dts.map((dt) => [dt.textContent, dt.nextElementSibling?.textContent])));
  t.equal(facts.Version, serverVersion);
  t.equal(facts['Server URL'], s.config.server_url);
  t.equal(facts.Database, s.storage.describe(), 'the database as the server logs it (its type first)');
  t.match(facts.Database, /^sqlite /);
  t.equal(facts.Users, '2');
  t.equal(facts.Machines, '1 (1 online)');
  t.match(facts['TLS certificate'], /plain HTTP/);
  t.equal(facts.Cluster, 'Single instance');
  t.same(await axeViolations(page), [], 'no accessibility violations');
});

t.test('about: the expiry of a tls_cert_path certificate', async (t) => {
  const executablePath = chromiumPath();
  if (!executablePath) return unmet(t, NO_CHROMIUM);
  const dir = mkdtempSync(join(tmpdir(), 'headway-about-tls-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const cert = join(dir, 'cert.pem'), key = join(dir, 'key.pem');
  try {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '10', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', key, '-out', cert], { stdio: 'ignore' });
  } catch {
    return unmet(t, 'openssl is not installed (apt-get install openssl)');
  }
  const s = await startTestServer({ tls_cert_path: cert, tls_key_path: key });
  t.teardown(() => s.stop());
  // The certificate is the test's own, made just now: this browser trusts it.
  const browser = await puppeteer.launch({ executablePath, headless: true, args: CHROMIUM_ARGS, acceptInsecureCerts: true });
  t.teardown(() => browser.close());
  const page = await signIn(browser, s, 'alice');
  await openPage(page, 'about');
  await page.waitForSelector('dl.facts');
  const tls = await page.$eval('dl.facts dd:nth-of-type(6)', (e) => e.textContent ?? '');
  const notAfter = new Date(new X509Certificate(readFileSync(cert)).validTo);
  const days = Math.floor((notAfter.getTime() - Date.now()) / 86_400_000);
  t.match(tls, /^tls_cert_path: expires /, 'names where the certificate comes from');
  t.match(tls, new RegExp(`\\(${days} days left\\)`), 'and the days left');
});

// Two instances on one PostgreSQL database (cluster.enabled): About lists both, the answering one marked.
for (const db of serverDatabases(t, "the console About page's cluster instances", ['postgres'])) {
  t.test(`${db.name}: about lists the cluster's instances`, (t) => db.run(async (database) => {
    const browser = await launchChromium();
    if (!browser) return unmet(t, NO_CHROMIUM);
    t.teardown(() => browser.close());
    const shared = mkdtempSync(join(tmpdir(), 'headway-about-cluster-'));
    t.teardown(() => rmSync(shared, { recursive: true, force: true }));
    const cluster = { enabled: true, heartbeat_interval: '200ms', instance_timeout: '3s', poll_interval: '50ms' };
    const config = { database, cluster, noise: { private_key_path: join(shared, 'noise.key') } };
    const a = await startTestServer(config);
    const b = await startTestServer(config);
    t.teardown(async () => { await b.stop(); await a.stop(); });
    await until('both instances are recorded', async () => (await socketCall(a, 'GET', '/api/v1/cluster')).json.instances.length === 2);
    t.match((await socketCall(a, 'GET', '/api/v1/server')).json, { clustered: true, database: { type: 'postgres' } });

    const page = await signIn(browser, a, 'alice');
    await openPage(page, 'about');
    await page.waitForSelector('table.stack tbody tr');
    const facts = Object.fromEntries(await page.$$eval('dl.facts dt', (dts) => dts.map((dt) => [dt.textContent, dt.nextElementSibling?.textContent])));
    t.equal(facts.Cluster, '2 instances share the database');
    const instances = await page.$$eval('table.stack tbody tr', (trs) => trs.map((tr) => tr.querySelector('td')?.textContent ?? ''));
    t.equal(instances.length, 2, 'both instances are listed');
    t.equal(instances.filter((x) => x.endsWith('this one')).length, 1, 'the answering instance is marked');
    t.ok(instances.some((x) => x.startsWith(a.urls.http) && x.endsWith('this one')), 'and it is the one the browser asked');
    t.same(await axeViolations(page), [], 'no accessibility violations');
  }));
}

/**
 * A machine's page in Chromium against a real server (startFleet's virtual devices): rename, tags, route and exit
 * node approval, key expiry (expire now, disable, enable) and delete each change the server's state and are in the
 * audit log as console:<admin>; a refused change (a tag outside tagOwners, a taken name) shows the server's message
 * and changes nothing; expire and delete ask first, naming the machine, and Cancel changes nothing.
 */
import t from 'tap';
import type { Page } from 'puppeteer-core';
import type { AuditLog } from '@headway/core';
import { openPage } from '../src/console.js';
import { fleetConsole, shownMachines, waitText } from '../src/console-machines.js';
import { until } from '../src/until.js';

t.setTimeout(240_000);

/** fill replaces an input's text. */
async function fill(page: Page, selector: string, text: string): Promise<void> {
  await page.click(selector, { count: 3 });
  await page.keyboard.press('Backspace');
  await page.type(selector, text);
}

/** dialogButton clicks the open confirmation dialog's Cancel or confirming button; answers the dialog's text. */
async function dialog(page: Page, choice: 'cancel' | 'confirm'): Promise<string> {
  await page.waitForSelector('dialog[open]');
  const text = await page.$eval('dialog[open]', (e) => e.textContent ?? '');
  await page.click(`dialog[open] .dialog-actions button${choice === 'cancel' ? ':not(.danger)' : '.danger'}`);
  await page.waitForFunction(() => !(globalThis as unknown as { document: { querySelector(s: string): unknown } }).document.querySelector('dialog[open]'));
  return text;
}

const ready = await fleetConsole(t);
if (ready) {
  const { fleet, page } = ready;
  const { server: s, ids } = fleet;
  const node = (name: string) => s.state.nodes.get(ids[name]!);
  const open = async (name: string) => {
    await openPage(page, `machines/${ids[name]}`);
    await page.waitForSelector('#machine-name');
  };
  const notice = (pattern: RegExp) => waitText(page, '[role=status].alert', pattern);
  const alert = (pattern: RegExp) => waitText(page, '[role=alert]', pattern);

  await t.test('the list links to a machine', async (t) => {
    await openPage(page, 'machines');
    await shownMachines(page);
    await page.click(`tr[data-id="${ids.laptop}"] a.machine-name`);
    await page.waitForSelector('#machine-name');
    t.equal(await page.$eval('#page-title', (e) => e.textContent), 'laptop');
    t.match(await page.$eval('dl.facts', (e) => e.textContent ?? ''), /OSmacOSClient version1\.90\.1/);
  });

  await t.test('rename: done, and a taken name refused with the server\'s message', async (t) => {
    await open('laptop');
    await fill(page, '#machine-name', 'notebook');
    await page.click('#machine-name ~ button[type=submit]');
    await notice(/Renamed to notebook/);
    t.equal(node('laptop')?.givenName, 'notebook', 'the server has the new name');
    await waitText(page, '#page-title', /^notebook$/);
    await fill(page, '#machine-name', 'router');
    await page.click('#machine-name ~ button[type=submit]');
    const said = await alert(/router/);
    t.match(said, /taken|in use|already/i, `refused: ${said}`);
    t.equal(node('laptop')?.givenName, 'notebook', 'nothing changed');
  });

  await t.test('tags: set, and a tag outside tagOwners refused with the server\'s message', async (t) => {
    await open('router');
    await fill(page, '#machine-tags', 'tag:nope');
    await page.click('#machine-tags ~ button[type=submit]');
    const said = await alert(/tag:nope/);
    t.pass(`refused: ${said}`);
    t.same(node('router')?.tags, [], 'nothing changed');
    await fill(page, '#machine-tags', 'tag:db, tag:web');
    await page.click('#machine-tags ~ button[type=submit]');
    await notice(/Tags set to tag:db, tag:web/);
    t.same(node('router')?.tags, ['tag:db', 'tag:web'], 'the server has the tags');
  });

  await t.test('routes and exit node: approve and unapprove', async (t) => {
    await open('router');
    await page.click('button[aria-label="Approve route 10.1.0.0/24"]');
    await notice(/Route 10\.1\.0\.0\/24 approved/);
    t.same(node('router')?.approvedRoutes, ['10.1.0.0/24']);
    await page.waitForSelector('button[aria-label="Unapprove route 10.1.0.0/24"]');
    await page.click('button[aria-label="Unapprove route 10.1.0.0/24"]');
    await notice(/no longer approved/);
    t.same(node('router')?.approvedRoutes, []);
    await open('exit');
    await waitText(page, 'p.exit', /Offered, awaiting approval/);
    await page.click('#exit-h ~ button');
    await notice(/Exit node approved/);
    t.same([...node('exit')!.approvedRoutes].sort(), ['0.0.0.0/0', '::/0'], 'both exit routes approved');
    await waitText(page, 'p.exit', /^Exit node$/);
    await page.click('#exit-h ~ button');
    await notice(/Exit node no longer approved/);
    t.same(node('exit')?.approvedRoutes, []);
  });

  await t.test('key expiry: expire asks first; disable and enable', async (t) => {
    await open('laptop');
    const before = node('laptop')!.expiry;
    await page.click('#key-h ~ .button-row button.danger');
    t.match(await dialog(page, 'cancel'), /Expire the key of notebook now\?/, 'the dialog names the machine');
    t.same(node('laptop')!.expiry, before, 'Cancel changed nothing');
    await page.click('#key-h ~ .button-row button.danger');
    await dialog(page, 'confirm');
    await notice(/The key of notebook expired/);
    t.ok(node('laptop')!.expiry! <= new Date(), 'the key has expired on the server');
    await waitText(page, '.facts .expiry', /Expired/);
    await page.click('#key-h ~ .button-row button:not(.danger)');
    await notice(/Key expiry disabled/);
    t.equal(node('laptop')!.expiry, null, 'the key never expires');
    await waitText(page, '.facts .expiry', /Never expires/);
    await page.click('#key-h ~ .button-row button:not(.danger)');
    const said = await alert(/node\.expiry/);
    t.pass(`without node.expiry the server refuses to turn expiry back on: ${said}`);
    t.equal(node('laptop')!.expiry, null, 'nothing changed');
  });

  await t.test('delete asks first naming the machine; Cancel keeps it', async (t) => {
    await open('desk');
    await page.click('#delete-h ~ button.danger');
    t.match(await dialog(page, 'cancel'), /Delete desk\?/, 'the dialog names the machine');
    t.ok(node('desk'), 'Cancel kept it');
    await page.click('#delete-h ~ button.danger');
    await dialog(page, 'confirm');
    await until('desk deleted', () => !node('desk'));
    await page.waitForFunction(() => (globalThis as unknown as { location: { hash: string } }).location.hash === '#/machines');
    t.notOk((await shownMachines(page)).includes('desk'), 'the list no longer shows it');
  });

  await t.test("a machine that is not there: the server's message", async (t) => {
    await openPage(page, 'machines/999999');
    t.match(await alert(/999999/), /not found/i);
    t.ok(await page.$('a[href="#/machines"]'), 'with the way back to the list');
  });

  await t.test('every change is in the audit log as console:alice', async (t) => {
    const audit = await s.container.resolve<AuditLog>('auditLog').list({ limit: 100 });
    const mine = audit.filter((e) => e.actor === 'console:alice').map((e) => e.action);
    for (const action of ['renameNode', 'setNodeTags', 'approveNodeRoutes', 'expireNode', 'deleteNode']) t.ok(mine.includes(action), action);
  });
}

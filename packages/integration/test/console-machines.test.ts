/**
 * The Machines page in Chromium against a real server and a fleet of virtual devices (startFleet): every filter shows
 * exactly the machines it should, a filter chosen on the page lands in the hash and survives a reload; the list shows
 * what the server knows (owner, OS and version, routes, exit node, expiry); online state and new machines appear
 * without a reload, and a burst of changes is read once; axe-core finds nothing on the list and a machine's page at
 * phone and desktop widths (kept as screenshots, console-machines-<width>.png and console-machine-<width>.png).
 */
import t from 'tap';
import type { Page } from 'puppeteer-core';
import { TestDevice } from '@headway/testkit';
import { axeViolations, openPage, SCREEN_WIDTHS, screenshots } from '../src/console.js';
import { fleetConsole, rowStatus, shownMachines, waitText } from '../src/console-machines.js';
import { until } from '../src/until.js';

t.setTimeout(240_000);

const ready = await fleetConsole(t);
if (ready) {
  const { fleet, page } = ready;
  const { server: s, ids } = fleet;

  /** show opens the list with `query` in the hash and answers the machines shown. */
  const show = async (query: string) => {
    await openPage(page, `machines${query ? `?${query}` : ''}`);
    return shownMachines(page);
  };

  await t.test('each filter shows exactly its machines', async (t) => {
    const laptopV4 = s.state.nodes.get(ids.laptop!)!.ipv4!;
    const cases: Array<[string, string[]]> = [
      ['', ['desk', 'exit', 'laptop', 'router', 'web']],
      ['user=alice', ['laptop', 'router']],
      ['user=bob', ['desk', 'exit']],
      ['user=tagged-devices', ['web']],
      ['tag=tag%3Aweb', ['web']],
      ['status=online', ['exit', 'laptop', 'router', 'web']],
      ['status=offline', ['desk']],
      ['routes=any', ['router', 'web']],
      ['routes=pending', ['exit', 'router']],
      ['exit=yes', ['exit']],
      ['expiry=expired', ['desk']],
      ['expiry=soon', ['router']],
      ['expiry=never', ['exit', 'web']],
      [`q=${encodeURIComponent(laptopV4)}`, ['laptop']],
      ['q=ROUT', ['router']],
      ['q=macos', ['laptop']],
      ['user=alice&routes=pending', ['router']],
      ['user=bob&status=online', ['exit']],
    ];
    for (const [query, want] of cases) t.same(await show(query), want, query || 'no filter');
  });

  await t.test('a filter chosen on the page goes into the hash and survives a reload', async (t) => {
    await show('');
    await page.select('#filter-user', 'bob');
    t.same(await shownMachines(page), ['desk', 'exit'], 'the list narrows at once');
    await page.select('#filter-status', 'offline');
    t.same(await shownMachines(page), ['desk']);
    t.equal(await page.evaluate(() => (globalThis as unknown as { location: { hash: string } }).location.hash), '#/machines?user=bob&status=offline', 'the hash holds the filters');
    await page.reload();
    await page.waitForSelector('#page-title');
    t.same(await shownMachines(page), ['desk'], 'a reload keeps them');
    t.equal(await page.$eval('#filter-user', (e) => (e as unknown as { value: string }).value), 'bob', 'and the form shows them');
    await page.click('button.clear');
    t.same(await shownMachines(page), ['desk', 'exit', 'laptop', 'router', 'web'], 'Clear filters shows every machine');
    t.equal(await page.evaluate(() => (globalThis as unknown as { location: { hash: string } }).location.hash), '#/machines');
  });

  await t.test('the list shows what the server knows', async (t) => {
    await show('');
    const row = (name: string, cell: string) => page.$eval(`table.machines tr[data-id="${ids[name]}"] td[data-label="${cell}"]`, (e) => e.textContent ?? '');
    t.equal(await row('laptop', 'Owner'), 'alice');
    t.equal(await row('web', 'Owner'), 'Tagged devices');
    t.equal(await row('laptop', 'OS'), 'macOS1.90.1', 'OS and client version, as the device reported them');
    t.match(await row('router', 'Subnet routes'), /10\.1\.0\.0\/24\s*awaiting approval/);
    t.match(await row('web', 'Subnet routes'), /10\.2\.0\.0\/24\s*primary/, 'the approved route is primary');
    t.equal(await row('exit', 'Exit node'), 'Offered, awaiting approval');
    t.match(await row('desk', 'Key expiry'), /^Expired /);
    t.equal(await row('exit', 'Key expiry'), 'Never expires');
    t.equal(await row('web', 'Tags'), 'tag:web');
    for (const a of s.state.nodes.get(ids.laptop!)!.ipv4 ? [s.state.nodes.get(ids.laptop!)!.ipv4!] : []) t.match(await row('laptop', 'Addresses'), a);
  });

  await t.test('online state and new machines appear without a reload', async (t) => {
    await show('');
    await page.evaluate(() => { (globalThis as unknown as { stayed: boolean }).stayed = true; });
    t.equal(await rowStatus(page, ids.laptop!), 'Online');
    fleet.devices.laptop!.stopMap();
    await page.waitForFunction((id: number) => /^Offline, last seen /.test((globalThis as unknown as { document: { querySelector(s: string): { textContent: string } | null } }).document.querySelector(`tr[data-id="${id}"] td.status`)?.textContent ?? ''), { timeout: 30_000 }, ids.laptop!);
    t.pass('laptop shows offline with when it was last seen');
    await fleet.devices.laptop!.startMap({ endpoints: ['192.0.2.10:41641'] });
    await page.waitForFunction((id: number) => (globalThis as unknown as { document: { querySelector(s: string): { textContent: string } | null } }).document.querySelector(`tr[data-id="${id}"] td.status`)?.textContent === 'Online', { timeout: 30_000 }, ids.laptop!);
    t.pass('and online again');

    const key = (await s.state.keys.createPreAuthKey({ userId: s.state.users.list()[0]!.id })).secret;
    const phone = new TestDevice({ serverUrl: s.urls.http, hostname: 'phone' });
    t.teardown(() => phone.close());
    await phone.connect();
    await phone.register({ authKey: key });
    await phone.startMap({ endpoints: ['192.0.2.11:41641'] });
    await waitText(page, '.count', /^6 of 6 machines$/);
    t.ok((await shownMachines(page)).includes('phone'), 'a machine that joined is listed');
    t.equal(await page.evaluate(() => (globalThis as unknown as { stayed?: boolean }).stayed), true, 'the page was not reloaded');
    t.match(await page.$eval('.live', (e) => e.textContent ?? ''), /^Live$/, 'the page says it is live');
  });

  await t.test('a burst of changes is read once', async (t) => {
    await show('');
    const reads: string[] = [];
    const onRequest = (r: { url(): string }) => { if (new URL(r.url()).pathname === '/api/v1/node') reads.push(r.url()); };
    page.on('request', onRequest);
    // Every machine changed at once, as a policy change announces them: one write of five events on the stream.
    for (const n of s.state.nodes.list()) s.state.bus.publish({ type: 'node-changed', node: n });
    await until('the list re-read', () => reads.length > 0);
    s.state.bus.publish({ type: 'user-changed', user: s.state.users.list()[0]! });
    await until('the list re-read after the next change', () => reads.length > 1);
    page.off('request', onRequest);
    t.equal(reads.length, 2, 'one read for the burst of five, one for the change after it');
  });

  await t.test('axe-core finds no violation on the list and a machine, at phone and desktop widths', async (t) => {
    const check = async (route: string, what: string, ready: (p: Page) => Promise<unknown>) => {
      for (const width of SCREEN_WIDTHS) {
        await page.setViewport({ width, height: width < 600 ? 844 : 800 });
        await openPage(page, route);
        await ready(page);
        t.same(await axeViolations(page), [], `${what} at ${width} px`);
      }
    };
    await check('machines', 'the list', shownMachines);
    await screenshots(page, 'console-machines');
    await check('machines?user=bob&exit=yes', 'the filtered list', shownMachines);
    await check(`machines/${ids.router}`, "router's page", (p) => p.waitForSelector('#machine-name'));
    await screenshots(page, 'console-machine');
    await check(`machines/${ids.web}`, "web's page", (p) => p.waitForSelector('#machine-name'));
    const wide = await page.evaluate(() => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth);
    t.ok(wide <= 1280, 'nothing wider than the desktop');
    await page.setViewport({ width: 390, height: 844 });
    await openPage(page, 'machines');
    await shownMachines(page);
    const narrow = await page.evaluate(() => (globalThis as unknown as { document: { documentElement: { scrollWidth: number } } }).document.documentElement.scrollWidth);
    t.ok(narrow <= 390, `the list fits a 390 px phone (${narrow} px)`);
    await page.setViewport({ width: 1280, height: 800 });
  });
}

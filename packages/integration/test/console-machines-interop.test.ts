/**
 * The Machines page with two real tailscaled: alpha advertises a subnet route, the console shows it awaiting
 * approval, the administrator approves it on alpha's page, and bravo's client then routes it through alpha
 * (PrimaryRoutes and AllowedIPs); the audit log records console:<admin> approveNodeRoutes. With the list open, alpha's
 * tailscaled stopping turns its row offline, and its return online, without a reload. On SQLite and PostgreSQL;
 * mandatory under CI=true.
 */
import t, { type Test } from 'tap';
import { rmSync } from 'node:fs';
import type { AuditLog } from '@headway/core';
import { serverDatabases, startTestServer } from '../src/server.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type TailscaleBinaries, type TailscaleStatus } from '../src/tailscale.js';
import { launchChromium, openPage, signIn } from '../src/console.js';
import { rowStatus, shownMachines, waitText } from '../src/console-machines.js';
import { unmet } from '../src/unmet.js';

const ROUTE = '10.77.0.0/24';
const JOIN_TIMEOUT_MS = 60_000;
const SYNC_TIMEOUT_MS = 60_000;

t.setTimeout(300_000);

const peerNamed = (s: TailscaleStatus, host: string) => Object.values(s.Peer ?? {}).find((p) => p.HostName === host);

const installed = requireTailscale(t);
if (installed.length > 0) {
  const browser = await launchChromium();
  if (!browser) unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  else {
    t.teardown(() => browser.close());
    const what = `approve a real device's route in the console (tailscale ${installed[0]!.version})`;
    t.test(what, (t) => scenario(t, browser, installed[0]!, undefined));
    for (const db of serverDatabases(t, 'the console with real devices', ['postgres'])) {
      t.test(`${what} (${db.name})`, (t) => db.run((database) => scenario(t, browser, installed[0]!, database)));
    }
  }
}

async function scenario(t: Test, browser: NonNullable<Awaited<ReturnType<typeof launchChromium>>>, binaries: TailscaleBinaries, database: Record<string, unknown> | undefined): Promise<void> {
  const cleanups = cleanupStack(t);
  const s = await startTestServer(database ? { database } : {});
  cleanups.push(() => s.stop());
  const alice = await s.state.users.create({ name: 'alice' });
  const { secret: authKey } = await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
  const start = async (name: string, stateDir?: string) => {
    const d = await TailscaleDevice.start({ name, version: binaries.version, ...(stateDir ? { extraDaemonArgs: [`--statedir=${stateDir}`] } : {}) });
    cleanups.push(() => d.stop());
    return d;
  };
  let alpha = await start('calpha');
  const bravo = await start('cbravo');
  await alpha.up({ loginServer: s.urls.http, authKey, hostname: 'alpha', advertiseRoutes: [ROUTE], timeoutMs: JOIN_TIMEOUT_MS });
  await bravo.up({ loginServer: s.urls.http, authKey, hostname: 'bravo', timeoutMs: JOIN_TIMEOUT_MS });
  await bravo.waitFor((st) => peerNamed(st, 'alpha')?.Online === true, SYNC_TIMEOUT_MS);
  const id = s.state.nodes.list().find((n) => n.hostname === 'alpha')!.id;

  const page = await signIn(browser, s, 'admin');
  await openPage(page, 'machines');
  t.same(await shownMachines(page), ['alpha', 'bravo'], 'both devices are listed');
  t.match(await page.$eval(`tr[data-id="${id}"] td[data-label="Subnet routes"]`, (e) => e.textContent ?? ''), new RegExp(`${ROUTE.replace(/\./g, '\\.')}\\s*awaiting approval`), 'the advertised route awaits approval');
  t.match(await page.$eval(`tr[data-id="${id}"] td[data-label="OS"]`, (e) => e.textContent ?? ''), new RegExp(`^linux${binaries.version.replace(/^v/, '').replace(/\./g, '\\.')}`), 'OS and client version as the client reports them');
  t.notOk(peerNamed(await bravo.status(), 'alpha')?.PrimaryRoutes?.includes(ROUTE), 'bravo has no route through alpha yet');

  await page.click(`tr[data-id="${id}"] a.machine-name`);
  await page.waitForSelector(`button[aria-label="Approve route ${ROUTE}"]`);
  await page.click(`button[aria-label="Approve route ${ROUTE}"]`);
  await waitText(page, '[role=status].alert', /approved/);
  const st = await bravo.waitFor((st) => (peerNamed(st, 'alpha')?.PrimaryRoutes ?? []).includes(ROUTE), SYNC_TIMEOUT_MS, 200);
  t.ok(peerNamed(st, 'alpha')?.AllowedIPs?.includes(ROUTE), "the route is in bravo's AllowedIPs for alpha");
  await waitText(page, 'table.routes', /primary/);
  t.pass('the console shows the route primary');
  const audit = await s.container.resolve<AuditLog>('auditLog').list({ limit: 20 });
  t.ok(audit.some((e) => e.actor === 'console:admin' && e.action === 'approveNodeRoutes'), 'the audit log records console:admin approveNodeRoutes');

  await openPage(page, 'machines');
  await shownMachines(page);
  await page.evaluate(() => { (globalThis as unknown as { stayed: boolean }).stayed = true; });
  t.equal(await rowStatus(page, id), 'Online');
  const stateDir = alpha.stateDir;
  const oldDir = alpha.dir;
  await alpha.stop({ keepDir: true });
  cleanups.push(() => rmSync(oldDir, { recursive: true, force: true }));
  await waitText(page, `tr[data-id="${id}"] td.status`, /^Offline, last seen /, SYNC_TIMEOUT_MS);
  t.pass("alpha's row turned offline when its tailscaled stopped");
  alpha = await start('calpha2', stateDir);
  await waitText(page, `tr[data-id="${id}"] td.status`, /^Online$/, JOIN_TIMEOUT_MS);
  t.pass('and online when it came back');
  t.equal(await page.evaluate(() => (globalThis as unknown as { stayed?: boolean }).stayed), true, 'without a reload');
}

/*
 * console-machines.ts: what the Machines page tests share: a console session's cookie got over HTTP as a browser gets
 * it, a fleet of virtual devices, reading the machine list as shown, and waiting for the page to show something.
 */
import type { Page } from 'puppeteer-core';
import { TestDevice } from '@headway/testkit';
import { launchChromium, prepareAxe, signIn, signInLink, socketCall, type ConsoleServer } from './console.js';
import { unmet, type SkippableTest } from './unmet.js';
import { startTestServer, type TestServer } from './server.js';

/** Browser: the little of a page's globals these helpers read (this package is not compiled against the DOM's types). */
interface Browser { document: { querySelector(selector: string): { textContent: string | null } | null } }

/** consoleCookie signs `admin` in with a one-time link, as the sign-in page's form does; answers the Cookie header. */
export async function consoleCookie(server: ConsoleServer, admin = 'tester'): Promise<string> {
  const link = new URL(await signInLink(server, admin));
  const res = await fetch(new URL('/admin/signin', server.urls.http), {
    method: 'POST', redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: new URL(server.urls.http).origin },
    body: new URLSearchParams({ token: link.searchParams.get('token') ?? '' }).toString(),
  });
  const cookie = res.headers.get('set-cookie')?.split(';')[0];
  if (res.status !== 303 || !cookie) throw new Error(`console sign-in: ${res.status} ${await res.text()}`);
  return cookie;
}

/**
 * shownMachines answers the machine names the list shows, in order, once it has loaded and shows the filters the
 * hash names (the table's data-filters is the hash its filters make; give hashes in the page's own order).
 */
export async function shownMachines(page: Page): Promise<string[]> {
  await page.waitForFunction(() => {
    const w = globalThis as unknown as Browser & { location: { hash: string } };
    const table = w.document.querySelector('table.machines') as unknown as { getAttribute(n: string): string | null } | null;
    return table?.getAttribute('data-filters') === w.location.hash && /\d+ of \d+ machines/.test(w.document.querySelector('.count')?.textContent ?? '');
  });
  return page.$$eval('table.machines tbody tr a.machine-name', (as) => as.map((a) => a.textContent ?? ''));
}

/** waitText waits until `selector`'s text matches `pattern`; answers that text. */
export async function waitText(page: Page, selector: string, pattern: RegExp, timeout = 30_000): Promise<string> {
  await page.waitForFunction((sel: string, src: string, flags: string) => new RegExp(src, flags).test((globalThis as unknown as Browser).document.querySelector(sel)?.textContent ?? ''),
    { timeout }, selector, pattern.source, pattern.flags);
  return page.$eval(selector, (e) => e.textContent ?? '');
}

/** rowStatus answers the Status cell of a machine's row in the list. */
export function rowStatus(page: Page, id: number | string): Promise<string> {
  return page.$eval(`table.machines tr[data-id="${id}"] td.status`, (e) => e.textContent ?? '');
}

/** FLEET_POLICY owns the fleet's tags (alice may tag) and lets every machine reach every other. */
export const FLEET_POLICY = JSON.stringify({
  tagOwners: { 'tag:web': ['alice@'], 'tag:db': ['alice@'] },
  acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }],
});

/** Fleet: a test server with virtual devices of two users and a tag, their routes and expiries set. */
export interface Fleet {
  server: TestServer;
  /** ids by machine name: desk exit laptop router web. */
  ids: Record<string, number>;
  devices: Record<string, TestDevice>;
  close(): Promise<void>;
}

const DAY = 86_400_000;

/**
 * startFleet starts a server (policy in the database) and joins five virtual devices: laptop (alice, macOS 1.90.1),
 * router (alice, advertises 10.1.0.0/24, not approved, key expires in 2 days), exit (bob, offers itself as exit node,
 * key never expires), web (tag:web, 10.2.0.0/24 approved, key never expires) and desk (bob, key expired, offline).
 * laptop's key expires in 90 days.
 */
export async function startFleet(): Promise<Fleet> {
  const server = await startTestServer({ policy: { mode: 'database' } });
  const devices: Record<string, TestDevice> = {};
  const close = async () => {
    for (const d of Object.values(devices)) await d.close().catch(() => undefined);
    await server.stop();
  };
  try {
    const policy = await socketCall(server, 'PUT', '/api/v1/policy', { policy: FLEET_POLICY });
    if (policy.status !== 200) throw new Error(`policy: ${policy.status} ${JSON.stringify(policy.json)}`);
    const alice = await server.state.users.create({ name: 'alice' });
    const bob = await server.state.users.create({ name: 'bob' });
    const keyOf = async (userId: number, tags: string[] = []) => (await server.state.keys.createPreAuthKey({ userId, reusable: true, expiration: null, tags })).secret;
    const keys = { alice: await keyOf(alice.id), bob: await keyOf(bob.id), web: await keyOf(alice.id, ['tag:web']) };
    const join = async (hostname: string, authKey: string, opts: { routes?: string[]; os?: string; version?: string } = {}) => {
      const d = new TestDevice({ serverUrl: server.urls.http, hostname, os: opts.os });
      devices[hostname] = d;
      const hostinfo = opts.version ? { IPNVersion: opts.version } : {};
      await d.connect();
      await d.register({ authKey, routes: opts.routes, hostinfo });
      await d.startMap({ endpoints: ['192.0.2.10:41641'], hostinfo });
    };
    await join('laptop', keys.alice, { os: 'macOS', version: '1.90.1' });
    await join('router', keys.alice, { routes: ['10.1.0.0/24'] });
    await join('exit', keys.bob, { routes: ['0.0.0.0/0', '::/0'] });
    await join('web', keys.web, { routes: ['10.2.0.0/24'] });
    await join('desk', keys.bob);
    const ids = Object.fromEntries(server.state.nodes.list().map((n) => [n.givenName, n.id]));
    const approved = await socketCall(server, 'POST', `/api/v1/node/${ids.web}/approve_routes`, { routes: ['10.2.0.0/24'] });
    if (approved.status !== 200) throw new Error(`approve: ${approved.status} ${JSON.stringify(approved.json)}`);
    await devices.desk!.close();
    delete devices.desk;
    const now = Date.now();
    await server.state.nodes.expire(ids.laptop!, new Date(now + 90 * DAY));
    await server.state.nodes.expire(ids.router!, new Date(now + 2 * DAY));
    await server.state.nodes.expire(ids.exit!, null);
    await server.state.nodes.expire(ids.web!, null);
    await server.state.nodes.expire(ids.desk!, new Date(now - 3_600_000));
    return { server, ids, devices, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/**
 * fleetConsole starts Chromium and a fleet and signs alice in, ready for axe-core (prepareAxe before the console
 * loads); every part closes at the test's end. Undefined when Chromium is missing (reported with unmet).
 */
export async function fleetConsole(t: SkippableTest & { teardown(fn: () => unknown): void }): Promise<{ fleet: Fleet; page: Page } | undefined> {
  const browser = await launchChromium();
  if (!browser) { unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)'); return undefined; }
  t.teardown(() => browser.close());
  const fleet = await startFleet();
  t.teardown(() => fleet.close());
  const page = await signIn(browser, fleet.server, 'alice');
  await prepareAxe(page);
  await page.reload();
  await page.waitForSelector('#page-title');
  return { fleet, page };
}

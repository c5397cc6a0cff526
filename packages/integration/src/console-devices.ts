/*
 * console-devices.ts: what the console's browser tests share beyond console.ts: a server that real tailscaled
 * clients can join (policy in the database, the embedded relay so a client reports Running with no peers), joining
 * devices with a key, and the administrator's side of the API over the admin socket.
 */
import type { Page } from 'puppeteer-core';
import { startTestServer, type TestServer } from './server.js';
import { TailscaleDevice } from './tailscale.js';
import { socketCall } from './console.js';

/** deviceServer starts a server with policy.mode: database and the embedded DERP relay; `devices` are stopped with it. */
export async function deviceServer(t: { teardown(fn: () => Promise<void> | void): void }): Promise<{ s: TestServer; join: (name: string, authKey: string) => Promise<TailscaleDevice> }> {
  const s = await startTestServer({ policy: { mode: 'database' }, derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } } });
  const devices: TailscaleDevice[] = [];
  t.teardown(async () => {
    for (const d of devices) await d.stop().catch(() => undefined);
    await s.stop();
  });
  const join = async (name: string, authKey: string): Promise<TailscaleDevice> => {
    const d = await TailscaleDevice.start({ name });
    devices.push(d);
    await d.up({ loginServer: s.urls.http, authKey, hostname: name, timeoutMs: 60_000 });
    return d;
  };
  return { s, join };
}

/** adminNodes lists the server's nodes as GET /api/v1/node answers them (over the admin socket). */
export async function adminNodes(s: TestServer): Promise<Array<{ id: string; givenName: string; user?: { name: string } | null; tags: string[] }>> {
  const r = await socketCall(s, 'GET', '/api/v1/node');
  if (r.status !== 200) throw new Error(`GET /api/v1/node: ${r.status}`);
  return r.json.nodes;
}

/** textOf is an element's text content; empty when there is no such element. */
export async function textOf(page: Page, selector: string): Promise<string> {
  return page.$eval(selector, (e) => e.textContent ?? '').catch(() => '');
}

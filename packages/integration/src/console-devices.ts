/*
 * console-devices.ts: what the console's browser tests share beyond console.ts: a server that real tailscaled
 * clients can join (policy in the database, the embedded relay so a client reports Running with no peers), joining
 * devices with a key, and the administrator's side of the API over the admin socket.
 */
import type { Page } from 'puppeteer-core';
import { startTestServer, type TestServer } from './server.js';
import { TailscaleDevice } from './tailscale.js';
import { openPage, prepareAxe, socketCall } from './console.js';

/** deviceServer starts a server with policy.mode: database and the embedded DERP relay; `devices` are stopped with it. */
export async function deviceServer(t: { teardown(fn: () => Promise<void> | void): void }, database?: Record<string, unknown>): Promise<{ s: TestServer; join: (name: string, authKey: string) => Promise<TailscaleDevice> }> {
  const s = await startTestServer({ policy: { mode: 'database' }, derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } }, ...(database ? { database } : {}) });
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

type Doc = { document: { querySelector(s: string): unknown; activeElement: unknown } };

/** setEditor replaces the policy page's editor text as typing would (an input event the page hears). */
export async function setEditor(page: Page, text: string): Promise<void> {
  await page.$eval('#policy-text', (el, value) => {
    const area = el as unknown as { value: string; dispatchEvent(e: unknown): void };
    area.value = value;
    area.dispatchEvent(new (globalThis as unknown as { Event: new (t: string, o: object) => unknown }).Event('input', { bubbles: true }));
  }, text);
}

/** editorState is the policy editor's text, caret, whether it has focus, and the line its gutter marks. */
export async function editorState(page: Page): Promise<{ text: string; caret: number; focused: boolean; marked: number | null }> {
  return page.evaluate(() => {
    const d = (globalThis as unknown as Doc).document;
    const area = d.querySelector('#policy-text') as { value: string; selectionStart: number };
    const mark = d.querySelector('.policy-gutter .marked') as { textContent: string } | null;
    return { text: area.value, caret: area.selectionStart, focused: d.activeElement === area, marked: mark ? Number(mark.textContent) : null };
  });
}

/** waitText waits until the element `selector` exists and its text matches `pattern`; answers that text. */
export async function waitText(page: Page, selector: string, pattern: RegExp): Promise<string> {
  await page.waitForFunction((sel, src, flags) => {
    const el = (globalThis as unknown as Doc).document.querySelector(sel) as { textContent: string } | null;
    return !!el && new RegExp(src, flags).test(el.textContent);
  }, {}, selector, pattern.source, pattern.flags);
  return textOf(page, selector);
}

/**
 * openForAxe opens a console page as a fresh document load with axe-core allowed in: prepareAxe's CSP bypass takes
 * effect on a load, and a hash route alone does not reload the document.
 */
export async function openForAxe(page: Page, route: string): Promise<void> {
  await prepareAxe(page);
  await openPage(page, route);
  await page.reload();
  await page.waitForSelector('#page-title');
}

/** savePolicy puts `text` in the policy editor, presses Save and answers what the page then says: saved, stale (changed by someone else) or refused (errors listed). */
export async function savePolicy(page: Page, text: string): Promise<'saved' | 'stale' | 'refused'> {
  await setEditor(page, text);
  // The page clears the last answer as the save starts (before the click returns), so the one waited for is this save's.
  await page.click('.policy-actions button[type=submit]');
  const which = await page.waitForFunction(() => {
    const d = (globalThis as unknown as Doc).document;
    if (d.querySelector('.policy-stale')) return 'stale';
    if (d.querySelector('.policy-problems')) return 'refused';
    const notice = d.querySelector('.policy-main p.alert.notice') as { textContent: string } | null;
    return notice && /Saved/.test(notice.textContent) ? 'saved' : false;
  });
  return await which.jsonValue() as 'saved' | 'stale' | 'refused';
}

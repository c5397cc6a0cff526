/*
 * console.ts: driving the admin console in a real browser (Debian's Chromium through puppeteer-core): sign in with a
 * link made over the admin socket as `headway console link` makes it, check a page with axe-core, and keep
 * screenshots where CI keeps its logs.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser, type BrowserContext, type Page } from 'puppeteer-core';
import { CHROMIUM_ARGS, chromiumPath } from './chromium.js';
import { localApi } from './headscale-cli.js';

/** ConsoleServer is what the rig needs of a running server: its main URL and its admin socket. */
export interface ConsoleServer { urls: { http: string; socket?: string } }

/** launchChromium starts headless Chromium; undefined when none is installed (the caller skips with unmet). */
export async function launchChromium(): Promise<Browser | undefined> {
  const executablePath = chromiumPath();
  if (!executablePath) return undefined;
  return puppeteer.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
}

/** socketCall sends one JSON request over a server's admin socket (trusted: no key); a server without one is an error. */
export function socketCall(server: ConsoleServer, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  if (!server.urls.socket) return Promise.reject(new Error('the server has no admin socket'));
  return localApi(server, method, path, body);
}

/** signInLink makes a one-time sign-in link for `admin` over the admin socket. */
export async function signInLink(server: ConsoleServer, admin = 'tester'): Promise<string> {
  const res = await socketCall(server, 'POST', '/api/v1/console/link', { admin });
  if (res.status !== 200) throw new Error(`console link: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json.url as string;
}

/** signIn opens a page signed in to the console as `admin` (link, then the sign-in button), on the machines page; a separate browser context is a separate administrator. */
export async function signIn(browser: Pick<Browser, 'newPage'> | BrowserContext, server: ConsoleServer, admin = 'tester'): Promise<Page> {
  const page = await browser.newPage();
  await page.goto(await signInLink(server, admin));
  await Promise.all([page.waitForNavigation(), page.click('form[action="/admin/signin"] button')]);
  await page.waitForSelector('#page-title');
  return page;
}

/** openPage goes to a console page by its hash route (machines, users, keys, policy, dns, audit, about). */
export async function openPage(page: Page, route: string): Promise<void> {
  const url = new URL(page.url());
  url.hash = `#/${route}`;
  await page.goto(url.toString());
  await page.waitForFunction((r) => {
    const w = globalThis as unknown as { location: { hash: string }; document: { getElementById(id: string): unknown } };
    return w.location.hash === `#/${r}` && w.document.getElementById('page-title') !== null;
  }, {}, route);
}

/** AxeViolation is one rule axe-core found broken, with the elements that break it. */
export interface AxeViolation { id: string; impact: string | null; help: string; nodes: string[] }

const require = createRequire(import.meta.url);

/**
 * axeViolations runs axe-core (its WCAG 2 A/AA rules and best practices) on the page as it is now. The console's CSP
 * allows no injected script, so the page's CSP is bypassed for the injection only; `setBypassCSP` must be on before
 * the page loads, so call `prepareAxe` on a page before navigating it.
 */
export async function axeViolations(page: Page): Promise<AxeViolation[]> {
  const present = await page.evaluate(() => typeof (globalThis as { axe?: unknown }).axe !== 'undefined');
  if (!present) await page.addScriptTag({ path: require.resolve('axe-core/axe.min.js') }).catch(() => undefined);
  // A page loaded before prepareAxe refuses the script tag (its CSP); evaluated through the DevTools protocol instead.
  if (!await page.evaluate(() => typeof (globalThis as { axe?: unknown }).axe !== 'undefined')) await page.evaluate(readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8'));
  return page.evaluate(async () => {
    const axe = (globalThis as unknown as { axe: { run(ctx: unknown, o: unknown): Promise<{ violations: Array<{ id: string; impact: string | null; help: string; nodes: Array<{ target: unknown[] }> }> }> } }).axe;
    const r = await axe.run((globalThis as unknown as { document: unknown }).document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] } });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => n.target.join(' ')) }));
  });
}

/** prepareAxe lets axe-core be injected into the console despite its CSP (the tests' own script, never the product's). */
export async function prepareAxe(page: Page): Promise<void> {
  await page.setBypassCSP(true);
}

/** SCREEN_WIDTHS: a phone and a desktop. */
export const SCREEN_WIDTHS = [390, 1280] as const;

/** screenshotDir: $HEADWAY_SCREENSHOTS (CI sets it beside its logs), else a folder under the system's temp dir. */
export function screenshotDir(): string {
  const dir = process.env.HEADWAY_SCREENSHOTS ?? join(tmpdir(), 'headway-screenshots');
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** screenshots saves the page at each of SCREEN_WIDTHS as <name>-<width>.png; answers the files written. */
export async function screenshots(page: Page, name: string): Promise<string[]> {
  const files: string[] = [];
  for (const width of SCREEN_WIDTHS) {
    await page.setViewport({ width, height: width < 600 ? 844 : 800 });
    const file = join(screenshotDir(), `${name}-${width}.png`);
    await page.screenshot({ path: file as `${string}.png`, fullPage: true });
    files.push(file);
  }
  await page.setViewport({ width: 1280, height: 800 });
  return files;
}

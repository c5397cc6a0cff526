/**
 * Every console page in Chromium on a seeded tailnet: each page the navigation links to (read from the page, so
 * every page there is covered) and the sign-in page have no axe-core violations at a phone's and a desktop's width,
 * and none is wider than a phone's screen; the keyboard reaches the skip link first and then every navigation link,
 * the skip link moves focus to the content without leaving the page, and after navigating focus is on the new page's
 * heading. Screenshots of each page at both widths are written where screenshots() keeps them.
 */
import { dirname } from 'node:path';
import type { Page } from 'puppeteer-core';
import t, { type Test } from 'tap';
import { startTestServer } from '../src/index.js';
import { axeViolations, launchChromium, openPage, prepareAxe, SCREEN_WIDTHS, screenshots, signInLink } from '../src/console.js';
import { SEED_CONFIG, seedTailnet } from '../src/console-seed.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(300_000);

/** doc is the page's document as the functions evaluated in it see it. */
type Doc = { activeElement: { id: string; className: string; tagName: string; getAttribute(n: string): string | null; textContent: string } | null; documentElement: { scrollWidth: number; clientWidth: number } };
const doc = () => (globalThis as unknown as { document: Doc }).document;

/** focused describes the focused element: its tag, id, class and href. */
const focused = (page: Page) => page.evaluate(() => {
  const e = (globalThis as unknown as { document: Doc }).document.activeElement;
  return e ? { tag: e.tagName.toLowerCase(), id: e.id, className: e.className, href: e.getAttribute('href'), text: e.textContent } : null;
});

/** checkWidths runs axe-core at each screen width and checks nothing is wider than the screen. */
async function checkWidths(t: Test, page: Page, what: string): Promise<void> {
  for (const width of SCREEN_WIDTHS) {
    await page.setViewport({ width, height: width < 600 ? 844 : 800 });
    t.same(await axeViolations(page), [], `${what} at ${width} px: no axe-core violations`);
    const { scrollWidth, clientWidth } = await page.evaluate(() => {
      const d = (globalThis as unknown as { document: Doc }).document.documentElement;
      return { scrollWidth: d.scrollWidth, clientWidth: d.clientWidth };
    });
    t.ok(scrollWidth <= clientWidth, `${what} at ${width} px: fits the screen (${scrollWidth} <= ${clientWidth})`);
  }
}

/** settled waits until the page shows no loading line and the network is quiet. */
async function settled(page: Page): Promise<void> {
  await page.waitForNetworkIdle({ idleTime: 250 });
  await page.waitForFunction(() => !(globalThis as unknown as { document: { querySelector(s: string): unknown } }).document.querySelector('.loading'));
}

t.test('every console page: axe-core, phone width, keyboard, screenshots', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const s = await startTestServer(SEED_CONFIG);
  t.teardown(() => s.stop());
  await seedTailnet(t, s);

  // The sign-in page as a signed-out visitor finds it, then as a link opens it.
  const page = await browser.newPage();
  await prepareAxe(page);
  await page.goto(new URL('/admin/signin', s.urls.http).toString());
  await checkWidths(t, page, 'sign-in page');
  await screenshots(page, 'signin');
  await page.goto(await signInLink(s, 'alice'));
  await checkWidths(t, page, 'sign-in link page');
  await screenshots(page, 'signin-link');
  await Promise.all([page.waitForNavigation(), page.click('form[action="/admin/signin"] button')]);
  await page.waitForSelector('#page-title');
  await settled(page);

  const nav = await page.$$eval('nav[aria-label="Pages"] a', (as) => as.map((a) => ({ href: a.getAttribute('href') ?? '', label: a.textContent ?? '' })));
  t.ok(nav.length >= 7, `the navigation lists the pages (${nav.map((n) => n.label).join(', ')})`);
  const written: string[] = [];
  for (const { href, label } of nav) {
    const route = href.replace(/^#\//, '');
    await openPage(page, route);
    await settled(page);
    t.equal(await page.$eval('nav[aria-label="Pages"] a[aria-current="page"]', (a) => a.textContent), label, `${label}: the navigation marks the current page`);
    await checkWidths(t, page, label);
    written.push(...await screenshots(page, route));
  }
  t.equal(written.length, nav.length * SCREEN_WIDTHS.length, 'a screenshot of each page at each width');

  // Keyboard: from the top of a freshly loaded page.
  await openPage(page, 'users');
  await page.reload();
  await page.waitForSelector('#page-title');
  await page.keyboard.press('Tab');
  t.match(await focused(page), { tag: 'a', className: 'skip' }, 'Tab from the top reaches the skip link first');
  const reached: string[] = [];
  for (let i = 0; i < nav.length + 2; i++) {
    await page.keyboard.press('Tab');
    const f = await focused(page);
    if (f?.href) reached.push(f.href);
  }
  for (const { href } of nav) t.ok(reached.includes(href), `Tab reaches the ${href} link`);

  await page.reload();
  await page.waitForSelector('#page-title');
  await page.keyboard.press('Tab');
  await page.keyboard.press('Enter');
  t.match(await focused(page), { tag: 'main', id: 'main' }, 'the skip link moves focus to the content');
  t.match(page.url(), /#\/users$/, 'and stays on the page');

  const target = nav.find((n) => n.href !== '#/users')!;
  await page.focus(`nav[aria-label="Pages"] a[href="${target.href}"]`);
  await page.keyboard.press('Enter');
  await page.waitForFunction((h) => (globalThis as unknown as { location: { hash: string } }).location.hash === h, {}, target.href);
  await page.waitForFunction(() => (globalThis as unknown as { document: Doc }).document.activeElement?.id === 'page-title');
  t.match(await focused(page), { tag: 'h1', id: 'page-title' }, `after navigating to ${target.label}, focus is on its heading`);

  t.comment(`screenshots in ${dirname(written[0]!)}`);
});

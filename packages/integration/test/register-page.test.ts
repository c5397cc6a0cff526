// The register page a device's `tailscale up` opens, rendered by a real browser: Debian's
// Chromium driven headless through puppeteer-core (no browser download). At a 360x740
// phone and a 1280x800 desktop, light and dark: no horizontal scrolling, the approve
// command fully on screen, the inline CSS and script allowed by the CSP (a wrong hash
// would leave the page unstyled and log a violation), nothing fetched from elsewhere.
// Screenshots go to .ci-work/screenshots for a person to look at.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import puppeteer, { type Browser } from 'puppeteer-core';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { confirmLoginPage, FORM_PAGE_HEADERS, loginDonePage, loginRefusedPage, PAGE_HEADERS } from '@headway/control';
import { TestDevice } from '@headway/testkit';
import { repoRoot, startTestServer } from '../src/index.js';
import { CHROMIUM_ARGS, chromiumPath } from '../src/chromium.js';

t.setTimeout(180_000);
const inCI = process.env.CI === 'true';


t.test('the register page over HTTP: template, headers, command', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'pixel-<7>' });
  t.teardown(() => d.close());
  await d.connect();
  const reg = await d.register({});
  t.ok(reg.AuthURL, 'the device got a register URL');
  const res = await fetch(reg.AuthURL!);
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /^text\/html; charset=utf-8/);
  const csp = res.headers.get('content-security-policy') ?? '';
  t.match(csp, /default-src 'none'/, 'CSP denies by default');
  t.match(csp, /style-src 'sha256-[A-Za-z0-9+/]+=*'/, 'the inline style is allowed by hash only');
  t.notMatch(csp, /unsafe-inline|unsafe-eval|\*/, 'no unsafe source or wildcard');
  t.equal(res.headers.get('referrer-policy'), 'no-referrer', 'the registration id is not leaked in a Referer');
  t.equal(res.headers.get('x-content-type-options'), 'nosniff');
  const html = await res.text();
  t.match(html, /<meta name="viewport" content="width=device-width, initial-scale=1">/);
  t.match(html, 'Register pixel-&lt;7&gt;', 'the hostname is escaped');
  const key = new URL(reg.AuthURL!).pathname.split('/').pop()!;
  t.match(html, `headway auth register --auth-id ${key} --user USERNAME`, 'the approve command is on the page');
  t.notMatch(html, /\b(?:src|href)=|url\(|@import/i, 'no external asset of any kind');

  const gone = await fetch(`${s.urls.http}/register/unknown-key`);
  t.equal(gone.status, 404);
  t.match(await gone.text(), /<meta name="viewport"[^>]*>[\s\S]*Registration expired/, 'the expired page uses the same template');
  t.ok(gone.headers.get('content-security-policy'), 'and the same headers');
});

// Reloading the register page after a decision shows the decision, not "Registration expired … unknown or has expired".
t.test('the register page after approval says the device was approved, after rejection that it was rejected', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const alice = await s.state.users.create({ name: 'alice' });
  const login = async (hostname: string) => {
    const d = new TestDevice({ serverUrl: s.urls.http, hostname });
    t.teardown(() => d.close());
    await d.connect();
    const reg = await d.register({});
    return { url: reg.AuthURL!, key: new URL(reg.AuthURL!).pathname.split('/').pop()! };
  };
  const ok = await login('laptop');
  await s.registrar.approve(ok.key, alice.id);
  const approved = await fetch(ok.url);
  t.equal(approved.status, 200);
  const html = await approved.text();
  t.match(html, 'Device approved');
  t.match(html, /<strong>laptop<\/strong> was approved and is registered as <code>laptop<\/code>, owned by <strong>alice<\/strong>/);
  t.notMatch(html, /expired/i, 'not called expired');

  const no = await login('tablet');
  await s.registrar.reject(no.key);
  const rejected = await fetch(no.url);
  t.equal(rejected.status, 410);
  t.match(await rejected.text(), /Login rejected[\s\S]*An administrator rejected this login/);
});

t.test('the register page in headless Chromium at phone and desktop widths', async (t) => {
  const executablePath = chromiumPath();
  if (!executablePath) {
    if (inCI) t.fail('chromium is not installed, and CI must check the register page in it (apt-get install chromium; .ci/run does)');
    else t.skip('chromium not installed (apt-get install chromium, or set CHROMIUM_PATH)', () => undefined);
    return;
  }
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'a-rather-long-device-hostname-from-a-phone' });
  t.teardown(() => d.close());
  await d.connect();
  const reg = await d.register({});
  const url = reg.AuthURL!;
  const key = new URL(url).pathname.split('/').pop()!;

  const shots = join(repoRoot(), '.ci-work', 'screenshots');
  mkdirSync(shots, { recursive: true });
  const browser: Browser = await puppeteer.launch({
    executablePath,
    headless: true,
    // Root in a container has no user namespaces for the sandbox; the page is our own.
    args: CHROMIUM_ARGS,
  });
  t.teardown(() => browser.close());

  for (const [label, width, height] of [['phone', 360, 740], ['desktop', 1280, 800]] as const) {
    for (const scheme of ['light', 'dark'] as const) {
      await t.test(`${label} ${width}x${height}, ${scheme}`, async (t) => {
        const page = await browser.newPage();
        t.teardown(() => page.close());
        const problems: string[] = [];
        const requests: string[] = [];
        page.on('console', (m) => { if (m.type() === 'error' || /Content Security Policy/i.test(m.text())) problems.push(m.text()); });
        page.on('pageerror', (e) => problems.push(String(e)));
        page.on('request', (r) => requests.push(r.url()));
        await page.setViewport({ width, height, deviceScaleFactor: 1, isMobile: label === 'phone', hasTouch: label === 'phone' });
        await page.emulateMediaFeatures([{ name: 'prefers-color-scheme', value: scheme }]);
        await page.goto(url, { waitUntil: 'load' });
        // A string, not a function: this package compiles without the DOM types.
        const m = await page.evaluate(`(() => {
          const pre = document.querySelector('pre').getBoundingClientRect();
          const button = document.querySelector('button[data-copy]');
          const css = (el, p) => getComputedStyle(el).getPropertyValue(p);
          return {
            docWidth: document.documentElement.scrollWidth,
            viewport: window.innerWidth,
            pre: { left: pre.left, right: pre.right, top: pre.top, bottom: pre.bottom, height: pre.height },
            command: document.querySelector('pre').textContent,
            buttonShown: !button.hidden && button.getBoundingClientRect().height > 0,
            bodyFont: parseFloat(css(document.body, 'font-size')),
            bodyBg: css(document.body, 'background-color'),
            preBg: css(document.querySelector('pre'), 'background-color'),
          };
        })()`) as {
          docWidth: number; viewport: number; pre: { left: number; right: number; top: number; bottom: number; height: number };
          command: string; buttonShown: boolean; bodyFont: number; bodyBg: string; preBg: string;
        };
        await page.screenshot({ path: join(shots, `register-${label}-${scheme}.png`) as `${string}.png`, fullPage: true });
        console.log(`# ${label} ${scheme}: document ${m.docWidth}px in a ${m.viewport}px viewport, command block ${Math.round(m.pre.left)}-${Math.round(m.pre.right)} x ${Math.round(m.pre.top)}-${Math.round(m.pre.bottom)}`);

        t.equal(m.viewport, width, 'the viewport meta tag makes the layout viewport the device width');
        t.equal(m.docWidth, width, 'the page is exactly as wide as the screen: no horizontal scrolling');
        t.equal(m.command, `headway auth register --auth-id ${key} --user USERNAME`, 'the command block holds the whole command');
        t.ok(m.pre.left >= 0 && m.pre.right <= width, 'the command block fits the width (it wraps rather than overflows)');
        t.ok(m.pre.height > 0 && m.pre.bottom <= height, 'the command block is visible without scrolling');
        t.ok(m.buttonShown, 'the copy button is shown: the inline script ran under the CSP');
        t.ok(m.bodyFont >= 16, `body text is at least 16px (${m.bodyFont})`);
        t.not(m.preBg, 'rgba(0, 0, 0, 0)', 'the inline CSS applied under the CSP (the command block has its background)');
        const [r, g, b] = m.bodyBg.match(/\d+/g)!.map(Number);
        const light = (r! + g! + b!) / 3 > 128;
        t.equal(light, scheme === 'light', `the background follows the ${scheme} preference (${m.bodyBg})`);
        t.same(problems, [], 'no console error or CSP violation');
        t.same(requests.filter((u) => u !== url), [], 'the page loads nothing besides itself');
      });
    }
  }
});

// The identity-provider login pages share the template: rendered in Chromium at phone width,
// the confirmation's form button is on screen, nothing overflows, and the CSP (form-action
// 'self' on the confirmation only) lets the inline CSS apply without a violation.
t.test('the login pages in headless Chromium at phone width', async (t) => {
  const executablePath = chromiumPath();
  if (!executablePath) {
    if (inCI) t.fail('chromium is not installed, and CI must check the login pages in it');
    else t.skip('chromium not installed (apt-get install chromium, or set CHROMIUM_PATH)', () => undefined);
    return;
  }
  const pages: Record<string, { html: string; headers: Readonly<Record<string, string>> }> = {
    '/confirm': {
      html: confirmLoginPage({ hostname: 'a-rather-long-device-hostname-from-a-phone', user: 'alice', email: 'alice@example.com', token: 't0k', action: '/login/confirm', expiresAt: new Date(Date.now() + 300_000) }),
      headers: FORM_PAGE_HEADERS,
    },
    '/done': { html: loginDonePage({ hostname: 'pixel', user: 'alice', node: 'pixel' }), headers: PAGE_HEADERS },
    '/refused': { html: loginRefusedPage('alice@elsewhere.example is not in oidc.allowed_domains'), headers: PAGE_HEADERS },
  };
  const srv = createServer((req, res) => {
    const p = pages[req.url ?? ''];
    if (!p) { res.writeHead(404).end(); return; }
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', ...p.headers }).end(p.html);
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  t.teardown(() => srv.close());
  const base = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  t.match(FORM_PAGE_HEADERS['Content-Security-Policy'], /form-action 'self'/, 'the confirmation may post back to this server');
  t.match(PAGE_HEADERS['Content-Security-Policy'], /form-action 'none'/, 'other pages may post nowhere');
  const shots = join(repoRoot(), '.ci-work', 'screenshots');
  mkdirSync(shots, { recursive: true });
  const browser: Browser = await puppeteer.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
  t.teardown(() => browser.close());
  for (const path of Object.keys(pages)) {
    const page = await browser.newPage();
    const problems: string[] = [];
    page.on('console', (m) => { if (m.type() === 'error' || /Content Security Policy/i.test(m.text())) problems.push(m.text()); });
    await page.setViewport({ width: 360, height: 740, deviceScaleFactor: 1, isMobile: true, hasTouch: true });
    await page.goto(base + path, { waitUntil: 'load' });
    const m = await page.evaluate(`(() => {
      const b = document.querySelector('button.primary');
      const r = b ? b.getBoundingClientRect() : null;
      return {
        docWidth: document.documentElement.scrollWidth,
        button: r ? { left: r.left, right: r.right, bottom: r.bottom, bg: getComputedStyle(b).getPropertyValue('background-color') } : null,
        cardBorder: getComputedStyle(document.querySelector('.card')).getPropertyValue('border-top-style'),
      };
    })()`) as { docWidth: number; button: { left: number; right: number; bottom: number; bg: string } | null; cardBorder: string };
    await page.screenshot({ path: join(shots, `login${path.replace('/', '-')}-phone.png`) as `${string}.png`, fullPage: true });
    t.equal(m.docWidth, 360, `${path}: no horizontal scrolling at 360px`);
    t.equal(m.cardBorder, 'solid', `${path}: the template's CSS applied under the CSP`);
    if (path === '/confirm') {
      t.ok(m.button && m.button.left >= 0 && m.button.right <= 360 && m.button.bottom <= 740, `${path}: the confirm button is on screen`);
      t.not(m.button?.bg, 'rgba(0, 0, 0, 0)', `${path}: the confirm button is styled`);
    }
    t.same(problems, [], `${path}: no console error or CSP violation`);
    await page.close();
  }
});

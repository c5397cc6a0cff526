import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestServer } from '../src/server.js';
import puppeteer from 'puppeteer-core';
import { HeadscaleServer, requireHeadscale } from '../src/headscale-server.js';
import { CHROMIUM_ARGS, chromiumPath } from '../src/chromium.js';
import { unmet } from '../src/unmet.js';

// The side pages and files headscale serves (/version, /bootstrap-dns, /apple, /apple/{platform}, /windows,
// /robots.txt, /favicon.ico), on a real Headway, then the same requests to the real headscale v0.29.2.

t.setTimeout(120_000);

interface Answer { status: number; type: string; headers: Headers; body: Buffer }

async function get(base: string, path: string): Promise<Answer> {
  const r = await fetch(base + path);
  return { status: r.status, type: (r.headers.get('content-type') ?? '').split(';')[0]!.trim(), headers: r.headers, body: Buffer.from(await r.arrayBuffer()) };
}

/** shape is a JSON value's structure: its keys and the types of its leaves. */
function shape(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(shape);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).sort(([a], [b]) => a.localeCompare(b)).map(([k, x]) => [k, shape(x)]));
  return typeof v;
}

const PATHS = ['/version', '/bootstrap-dns', '/bootstrap-dns?q=example.com', '/apple', '/apple/ios', '/apple/macos-app-store', '/apple/macos-standalone', '/apple/android', '/windows', '/robots.txt', '/favicon.ico'];

t.test('Headway serves the pages and files', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const url = s.config.server_url;

  const version = await get(url, '/version');
  t.equal(version.type, 'application/json');
  const v = JSON.parse(version.body.toString()) as Record<string, unknown>;
  t.match(v, { version: /^\d+\.\d+\.\d+/, commit: String, buildTime: String, go: { version: /^node\d+/, os: process.platform, arch: String }, dirty: Boolean });

  const dns = await get(url, '/bootstrap-dns');
  t.equal(dns.type, 'application/json');
  t.same(JSON.parse(dns.body.toString()), { '127.0.0.1': ['127.0.0.1'] }, 'the relay host name of the DERP map devices get, resolved');

  for (const path of ['/apple', '/windows']) {
    const page = await get(url, path);
    t.equal(page.status, 200, path);
    t.equal(page.type, 'text/html', path);
    t.match(page.body.toString(), `tailscale login --login-server ${url}`, `${path} names this server`);
    t.notMatch(page.body.toString(), /<script/i, `${path} has no script`);
    t.match(page.headers.get('content-security-policy'), /script-src 'none'/, `${path}: a CSP that runs no script`);
    t.equal(page.headers.get('x-frame-options'), 'DENY');
  }
  for (const platform of ['ios', 'macos-app-store', 'macos-standalone']) {
    const profile = await get(url, `/apple/${platform}`);
    t.equal(profile.status, 200, platform);
    t.equal(profile.type, 'application/x-apple-aspen-config', platform);
    t.match(profile.body.toString(), `<key>ControlURL</key><string>${url}</string>`, `${platform}: this server`);
  }
  const bad = await get(url, '/apple/android');
  t.equal(bad.status, 400, 'an unknown platform is a 400');
  t.match(bad.body.toString(), /unknown platform "android": platform must be ios, macos-app-store, macos-standalone/);

  const robots = await get(url, '/robots.txt');
  t.equal(robots.type, 'text/plain');
  t.match(robots.body.toString(), /^User-agent: \*\nDisallow: \/\n?$/);
  const icon = await get(url, '/favicon.ico');
  t.equal(icon.type, 'image/png');
  t.same([...icon.body.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'a PNG');
});

t.test('the onboarding pages in headless Chromium at phone width: styled under their CSP, no script, nothing overflows', async (t) => {
  const executablePath = chromiumPath();
  if (!executablePath) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const browser = await puppeteer.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
  t.teardown(() => browser.close());
  for (const path of ['/apple', '/windows']) {
    const page = await browser.newPage();
    const problems: string[] = [];
    page.on('console', (m) => { if (m.type() === 'error' || /Content Security Policy/i.test(m.text())) problems.push(m.text()); });
    await page.setViewport({ width: 360, height: 740, deviceScaleFactor: 1, isMobile: true, hasTouch: true });
    await page.goto(s.config.server_url + path, { waitUntil: 'load' });
    const m = await page.evaluate(`(() => ({
      docWidth: document.documentElement.scrollWidth,
      cardBorder: getComputedStyle(document.querySelector('.card')).getPropertyValue('border-top-style'),
      lang: document.documentElement.lang,
      h1: document.querySelectorAll('h1').length,
      blocksInside: [...document.querySelectorAll('pre')].every((p) => { const r = p.getBoundingClientRect(); return r.left >= 0 && r.right <= 360; }),
      unnamedLinks: [...document.querySelectorAll('a')].filter((a) => !a.textContent.trim()).length,
      visibleButtons: [...document.querySelectorAll('button')].filter((b) => !b.hidden).length,
    }))()`) as { docWidth: number; cardBorder: string; lang: string; h1: number; blocksInside: boolean; unnamedLinks: number; visibleButtons: number };
    t.equal(m.docWidth, 360, `${path}: no horizontal scrolling at 360px`);
    t.equal(m.cardBorder, 'solid', `${path}: the template's CSS applied under the CSP`);
    t.equal(m.lang, 'en', `${path}: the language is declared`);
    t.equal(m.h1, 1, `${path}: one top heading`);
    t.ok(m.blocksInside, `${path}: every command block fits the width`);
    t.equal(m.unnamedLinks, 0, `${path}: every link has text`);
    t.equal(m.visibleButtons, 0, `${path}: no control that needs a script is shown`);
    t.same(problems, [], `${path}: no console error or CSP violation`);
    await page.close();
  }
});

t.test('without the relay /bootstrap-dns is a 404, as in headscale', async (t) => {
  const s = await startTestServer({ derp: { server: { enabled: false }, urls: [], paths: [] } });
  t.teardown(() => s.stop());
  t.equal((await get(s.config.server_url, '/bootstrap-dns')).status, 404);
});

const headscaleBin = requireHeadscale(t);
if (headscaleBin) {
  t.test('the same requests to headscale v0.29.2 and to Headway', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'hw-site-headscale-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const hs = await HeadscaleServer.start(headscaleBin, dir);
    t.teardown(() => hs.stop());
    const s = await startTestServer();
    t.teardown(() => s.stop());
    const hw = s.config.server_url;

    for (const path of PATHS) {
      const [a, b] = [await get(hs.url, path), await get(hw, path)];
      t.equal(b.status, a.status, `${path}: status ${a.status} on both`);
      t.equal(b.type, a.type, `${path}: ${a.type} on both`);
    }
    const [hv, wv] = [await get(hs.url, '/version'), await get(hw, '/version')];
    t.same(shape(JSON.parse(wv.body.toString())), shape(JSON.parse(hv.body.toString())), '/version: the same fields of the same types');
    for (const path of ['/bootstrap-dns', '/bootstrap-dns?q=example.com']) {
      const [a, b] = [await get(hs.url, path), await get(hw, path)];
      t.same(JSON.parse(b.body.toString()), JSON.parse(a.body.toString()), `${path}: the same answer (both relays are at 127.0.0.1)`);
    }
    for (const path of ['/apple', '/windows']) {
      t.match((await get(hs.url, path)).body.toString(), hs.url, `headscale's ${path} names its URL`);
      t.match((await get(hw, path)).body.toString(), hw, `Headway's ${path} names its URL`);
    }
    for (const platform of ['ios', 'macos-app-store', 'macos-standalone']) {
      const [a, b] = [await get(hs.url, `/apple/${platform}`), await get(hw, `/apple/${platform}`)];
      const domain = (xml: string) => /<dict>\s*<key>PayloadType<\/key>\s*<string>(io\.tailscale\.[a-z.]+)<\/string>/.exec(xml)?.[1];
      t.equal(domain(b.body.toString()), domain(a.body.toString()), `${platform}: the same preference domain`);
      t.match(b.body.toString(), new RegExp(`<key>ControlURL</key>\\s*<string>${hw}</string>`), `${platform}: Headway's profile sets its URL`);
    }
    const [ar, br] = [await get(hs.url, '/robots.txt'), await get(hw, '/robots.txt')];
    t.equal(br.body.toString().trim(), ar.body.toString().trim(), '/robots.txt: the same rules');
  });
}

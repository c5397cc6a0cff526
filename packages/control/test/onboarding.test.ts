import t from 'tap';
import { appleProfile, applePage, isApplePlatform, STATIC_PAGE_HEADERS, windowsPage } from '../src/index.js';

const url = 'https://hw.example.com';

t.test('the Apple and Windows pages name the server and run no script', async (t) => {
  for (const [name, html] of [['apple', applePage(url)], ['windows', windowsPage(url)]] as const) {
    t.match(html, /^<!doctype html>/, `${name}: a complete page`);
    t.match(html, `tailscale login --login-server ${url}`, `${name}: the login command with the server URL`);
    t.notMatch(html, /<script/i, `${name}: no script`);
    t.match(html, /<html lang="en">/);
  }
  t.match(applePage(url), 'href="/apple/macos-app-store"');
  t.match(applePage(url), 'href="/apple/macos-standalone"');
  t.match(applePage(url), 'href="/apple/ios"');
  t.match(applePage(url), `defaults write io.tailscale.ipn.macsys ControlURL ${url}`);
  t.match(windowsPage(url), `/v LoginURL /t REG_SZ /d &quot;${url}&quot;`);
  t.match(STATIC_PAGE_HEADERS['Content-Security-Policy'], /script-src 'none'/);
  t.match(STATIC_PAGE_HEADERS['Content-Security-Policy'], /default-src 'none'/);
});

t.test('a server URL is escaped in pages and profiles', async (t) => {
  const odd = 'https://hw.example.com/a&b<c>"';
  t.notMatch(applePage(odd), 'a&b<c>');
  t.match(applePage(odd), 'a&amp;b&lt;c&gt;&quot;');
  t.match(appleProfile('ios', odd), '<string>https://hw.example.com/a&amp;b&lt;c&gt;&quot;</string>');
});

t.test('profiles set ControlURL in the preference domain of each app, with fresh UUIDs', async (t) => {
  const domains = { ios: 'io.tailscale.ipn.ios', 'macos-app-store': 'io.tailscale.ipn.macos', 'macos-standalone': 'io.tailscale.ipn.macsys' } as const;
  for (const [platform, domain] of Object.entries(domains)) {
    t.ok(isApplePlatform(platform));
    const xml = appleProfile(platform as keyof typeof domains, url);
    t.match(xml, /^<\?xml version="1.0" encoding="UTF-8"\?>\n<!DOCTYPE plist/);
    t.match(xml, `<key>PayloadType</key><string>${domain}</string>`);
    t.match(xml, `<key>ControlURL</key><string>${url}</string>`);
    const uuids = [...xml.matchAll(/<key>PayloadUUID<\/key><string>([0-9a-f-]{36})<\/string>/g)].map((m) => m[1]);
    t.equal(new Set(uuids).size, 2, `${platform}: two distinct UUIDs`);
  }
  t.not(appleProfile('ios', url), appleProfile('ios', url), 'each download is a new profile');
  t.notOk(isApplePlatform('android'));
  t.notOk(isApplePlatform('__proto__'));
});

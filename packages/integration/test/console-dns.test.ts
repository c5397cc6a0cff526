/**
 * The console's DNS page in Chromium: on a dns.mode: database server a change saved on the page (nameservers,
 * MagicDNS, search and split domains) reaches a device streaming its map, and is in the audit log as console:<admin>;
 * a bad nameserver is refused with the server's message and changes nothing; on a dns.mode: file server the page is
 * read-only and names the config keys; extra records are listed with where each is set.
 */
import t from 'tap';
import type { AuditLog } from '@headway/core';
import type { TestDevice } from '@headway/testkit';
import { startTestServer } from '../src/index.js';
import { axeViolations, launchChromium, openPage, prepareAxe, signIn } from '../src/console.js';
import { streamingDevice } from '../src/console-seed.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(180_000);

const DNS = { base_domain: 'example.net', magic_dns: false, nameservers: { global: ['1.1.1.1'] }, extra_records: [{ name: 'grafana.example.net', type: 'A', value: '100.64.0.5' }] };

type DnsConfig = { Resolvers?: { Addr: string }[]; FallbackResolvers?: { Addr: string }[]; Routes?: Record<string, unknown[]>; Domains?: string[]; Proxied?: boolean };
const dnsOf = (d: TestDevice) => (d.netmap.dnsConfig ?? {}) as DnsConfig;
const resolvers = (d: TestDevice) => [...(dnsOf(d).Resolvers ?? []), ...(dnsOf(d).FallbackResolvers ?? [])].map((r) => r.Addr);

t.test('dns.mode database: a change saved in the console reaches a streaming device', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const s = await startTestServer({ dns: { ...DNS, mode: 'database' } });
  t.teardown(() => s.stop());
  const device = await streamingDevice(t, s, 'alice', 'laptop');
  t.same(resolvers(device), ['1.1.1.1'], 'the device starts with the seeded nameserver');
  t.notOk(dnsOf(device).Proxied, 'MagicDNS is off');

  const page = await signIn(browser, s, 'dana');
  await prepareAxe(page);
  await openPage(page, 'dns');
  await page.waitForSelector('#dns-nameservers');
  t.same(await axeViolations(page), [], 'no accessibility violations on the form');
  t.equal(await page.$eval('#dns-nameservers', (e) => (e as unknown as { value: string }).value), '1.1.1.1', 'the form shows the settings in force');
  t.match(await page.$eval('table.stack', (e) => e.textContent), /grafana\.example\.net.*100\.64\.0\.5.*dns\.extra_records/, 'extra records are listed with their source');

  // A bad nameserver: refused with the server's message, nothing changes.
  await page.$eval('#dns-nameservers', (e) => { (e as unknown as { value: string }).value = ''; });
  await page.type('#dns-nameservers', 'not-an-address');
  await page.click('.dns-form button[type=submit]');
  await page.waitForSelector('.dns-form [role=alert]');
  t.match(await page.$eval('.dns-form [role=alert]', (e) => e.textContent), /nameservers.*not-an-address/, 'the refusal names the bad value');
  t.same(s.container.resolve<{ current(): { nameservers: string[] } }>('dnsSettings').current().nameservers, ['1.1.1.1'], 'nothing changed');

  await page.$eval('#dns-nameservers', (e) => { (e as unknown as { value: string }).value = ''; });
  await page.type('#dns-nameservers', '9.9.9.9\nhttps://dns.example.org/dns-query');
  await page.click('#dns-magic');
  await page.type('#dns-search', 'lab.example.com');
  await page.click('.dns-form fieldset:nth-of-type(2) > button');
  await page.type('#split-domain-0', 'corp.example.com');
  await page.type('#split-servers-0', '10.0.0.53');
  await page.click('.dns-form button[type=submit]');
  await page.waitForSelector('.dns-form [role=status]');
  t.match(await page.$eval('.dns-form [role=status]', (e) => e.textContent), /saved/);

  await device.waitFor(() => resolvers(device).join() === '9.9.9.9,https://dns.example.org/dns-query' && dnsOf(device).Proxied === true);
  t.pass('the device got the new nameservers and MagicDNS');
  t.same(dnsOf(device).Domains, ['example.net', 'lab.example.com'], 'and the search domains after the MagicDNS domain');
  t.ok(dnsOf(device).Routes?.['corp.example.com'], 'and the split DNS domain');
  const audit = await s.container.resolve<AuditLog>('auditLog').list({ limit: 10 });
  t.same(audit.map((e) => [e.actor, e.action]), [['console:dana', 'v2SetDnsConfiguration']], 'one change, by the console administrator');

  // Reloaded, the page shows what is stored.
  await page.reload();
  await page.waitForSelector('#dns-nameservers');
  t.equal(await page.$eval('#split-domain-0', (e) => (e as unknown as { value: string }).value), 'corp.example.com');
  t.ok(await page.$eval('#dns-magic', (e) => (e as unknown as { checked: boolean }).checked), 'MagicDNS shows on');
});

t.test('dns.mode file: the page is read-only and names the config keys', async (t) => {
  const browser = await launchChromium();
  if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
  t.teardown(() => browser.close());
  const s = await startTestServer({ dns: DNS });
  t.teardown(() => s.stop());
  const page = await signIn(browser, s, 'dana');
  await prepareAxe(page);
  await openPage(page, 'dns');
  await page.waitForSelector('#dns-read-only');
  const notice = await page.$eval('#dns-read-only', (e) => e.textContent);
  t.match(notice, /dns\.mode: file/);
  t.match(notice, /dns\.nameservers\.global/);
  t.match(notice, /dns\.mode: database/, 'it says how to make them editable');
  t.equal(await page.$('.dns-form'), null, 'no form to change them');
  t.match(await page.$eval('dl.facts', (e) => e.textContent), /1\.1\.1\.1/, 'the settings in force are shown');
  t.same(await axeViolations(page), [], 'no accessibility violations');
});

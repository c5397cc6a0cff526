/**
 * The console's DNS page against a real tailscaled: nameservers and MagicDNS saved on the page (dns.mode: database)
 * reach the device's network map, and the client reports MagicDNS on.
 */
import t from 'tap';
import { startTestServer } from '../src/server.js';
import { launchChromium, openPage, signIn } from '../src/console.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type NetworkMapJson } from '../src/tailscale.js';
import { unmet } from '../src/unmet.js';

t.setTimeout(240_000);

const TIMEOUT_MS = 60_000;
const dnsOf = (nm: NetworkMapJson) => (nm.DNS ?? {}) as { Resolvers?: Array<{ Addr?: string }> | null; FallbackResolvers?: Array<{ Addr?: string }> | null; Proxied?: boolean };
const nameservers = (nm: NetworkMapJson) => [...(dnsOf(nm).Resolvers ?? []), ...(dnsOf(nm).FallbackResolvers ?? [])].map((r) => r.Addr).sort();

const installed = requireTailscale(t);
if (installed.length > 0) {
  const binaries = installed[0]!;
  t.test(`DNS saved in the console reaches tailscaled ${binaries.version}`, async (t) => {
    const browser = await launchChromium();
    if (!browser) return unmet(t, 'chromium is not installed (apt-get install chromium, or set CHROMIUM_PATH)');
    const cleanups = cleanupStack(t);
    cleanups.push(() => browser.close());
    const s = await startTestServer({ dns: { mode: 'database', base_domain: 'example.net', magic_dns: false, nameservers: { global: ['1.1.1.1'] } } });
    cleanups.push(() => s.stop());
    const alice = await s.state.users.create({ name: 'alice' });
    const { secret } = await s.state.keys.createPreAuthKey({ userId: alice.id });
    const dev = await TailscaleDevice.start({ name: 'consoledns', version: binaries.version });
    cleanups.push(() => dev.stop());
    await dev.up({ loginServer: s.urls.http, authKey: secret, hostname: 'laptop', timeoutMs: TIMEOUT_MS });
    const before = await dev.waitNetmap((nm) => nameservers(nm).join() === '1.1.1.1', { timeoutMs: TIMEOUT_MS });
    t.not(dnsOf(before).Proxied, true, 'before: MagicDNS off');

    const page = await signIn(browser, s, 'dana');
    await openPage(page, 'dns');
    await page.waitForSelector('#dns-nameservers');
    await page.$eval('#dns-nameservers', (e) => { (e as unknown as { value: string }).value = ''; });
    await page.type('#dns-nameservers', '9.9.9.9');
    await page.click('#dns-magic');
    await page.click('.dns-form button[type=submit]');
    await page.waitForSelector('.dns-form [role=status]');

    const nm = await dev.waitNetmap((nm) => dnsOf(nm).Proxied === true && nameservers(nm).join() === '9.9.9.9',
      { timeoutMs: TIMEOUT_MS, brief: (nm) => ({ nameservers: nameservers(nm), Proxied: dnsOf(nm).Proxied }) });
    t.same(nameservers(nm), ['9.9.9.9'], 'the device got the nameserver saved in the console');
    t.equal((await dev.status()).CurrentTailnet?.MagicDNSEnabled, true, 'the client reports MagicDNS on');
  });
}

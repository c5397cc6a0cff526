/**
 * Device certificates with the real client: `tailscale cert <name>.<base_domain>` runs ACME DNS-01 against
 * pebble (the ACME test CA), asks Headway over /machine/set-dns to publish the challenge record, Headway
 * publishes it in a real Knot through @headway/dns-rfc2136 (RFC 2136 with TSIG), pebble reads it from Knot,
 * and the device ends with a certificate for its MagicDNS name chained to pebble's issuing root.
 * tailscaled is pointed at pebble by TS_DEBUG_ACME_DIRECTORY_URL (through FinalizeLocationProxy, see
 * src/acme-proxy.ts) and trusts pebble's HTTPS listener through SSL_CERT_FILE.
 */
import t from 'tap';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFinalizeLocationProxy } from '../src/acme-proxy.js';
import { knotMissing, startKnot } from '../src/knot.js';
import { pebbleMissing, startPebble } from '../src/pebble.js';
import { startTestServer } from '../src/server.js';
import { requireTailscale, TailscaleDevice, type NetworkMapJson } from '../src/tailscale.js';
import { unmet } from '../src/unmet.js';
import { TestDevice } from '@headway/testkit';

const BASE = 'tailnet.example';

/** pemBlocks splits a PEM file into its certificates, leaf first. */
function pemBlocks(pem: string): X509Certificate[] {
  return (pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? []).map((b) => new X509Certificate(b));
}

const certDomains = (nm: NetworkMapJson | null) => ((nm?.DNS as { CertDomains?: string[] } | undefined)?.CertDomains) ?? [];
const selfCaps = (nm: NetworkMapJson | null) => ((nm?.SelfNode as { CapMap?: Record<string, unknown> } | undefined)?.CapMap) ?? {};

const missing = knotMissing() ?? pebbleMissing();
const installed = missing ? [] : requireTailscale(t);
if (missing) t.test('device certificates with the real client', async (t) => unmet(t, missing));

for (const binaries of installed) {
  t.test(`${binaries.version}: tailscale cert gets a certificate for the device's MagicDNS name through RFC 2136 to Knot`, async (t) => {
    const knot = await startKnot({ zone: BASE });
    t.teardown(() => knot.stop());
    const pebble = await startPebble({ dnsServer: knot.address });
    t.teardown(() => pebble.stop());
    const acme = await startFinalizeLocationProxy(pebble);
    t.teardown(() => acme.stop());
    const s = await startTestServer({
      dns: { magic_dns: true, base_domain: BASE, certificates: { enabled: true } },
      plugins: [{
        package: '@headway/dns-rfc2136', port: 'dns',
        options: { server: knot.address, zone: BASE, key_name: knot.key.name, key_secret: knot.key.secret },
      }],
    });
    t.teardown(() => s.stop());
    const user = await s.state.users.create({ name: 'alice' });
    const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
    const tag = binaries.version.replace(/\W/g, '');
    const dev = await TailscaleDevice.start({
      name: `cert${tag}`, version: binaries.version,
      env: { TS_DEBUG_ACME_DIRECTORY_URL: acme.directory, SSL_CERT_FILE: pebble.listenerCaFile },
    });
    t.teardown(() => dev.stop());
    await dev.up({ loginServer: s.urls.http, authKey: secret, hostname: 'web', timeoutMs: 60_000 });
    const name = `web.${BASE}`;
    const nm = await dev.waitNetmap((m) => certDomains(m).length > 0, { timeoutMs: 30_000 });
    t.same(certDomains(nm), [name], 'the netmap names the device\'s own MagicDNS name as its one cert domain');
    t.ok('https' in selfCaps(nm), 'the device holds the https capability');

    const out = mkdtempSync(join(tmpdir(), 'hw-cert-'));
    t.teardown(() => rmSync(out, { recursive: true, force: true }));
    const certFile = join(out, 'web.crt');
    const keyFile = join(out, 'web.key');
    const r = await dev.cli(['cert', '--cert-file', certFile, '--key-file', keyFile, name], { timeoutMs: 120_000 });
    t.equal(r.code, 0, `tailscale cert succeeded: ${r.stderr.trim()}\n${r.code ? dev.logTail() : ''}`);
    if (r.code !== 0) return;
    const chain = pemBlocks(readFileSync(certFile, 'utf8'));
    const root = new X509Certificate(await pebble.issuerRootPem());
    const leaf = chain[0]!;
    t.match(leaf.subjectAltName ?? '', `DNS:${name}`, 'the certificate names the device');
    t.notMatch(leaf.subjectAltName ?? '', /,/, 'and only the device');
    const issuer = chain.slice(1).find((c) => leaf.checkIssued(c) && leaf.verify(c.publicKey));
    t.ok(issuer, 'the leaf is signed by the intermediate sent with it');
    const chained = issuer && (issuer.checkIssued(root) && issuer.verify(root.publicKey) || chain.slice(1).some((c) => c.checkIssued(root) && c.verify(root.publicKey)));
    t.ok(chained, 'the chain ends at pebble\'s issuing root');
    t.match(readFileSync(keyFile, 'utf8'), /PRIVATE KEY/, 'the key was written');
    t.match(s.logs.join('\n'), /ACME challenge record published component=acme-dns name=_acme-challenge\.web\.tailnet\.example/, 'the record went through Headway for the device\'s own name');
    t.equal((await knot.txt(`_acme-challenge.${name}`)).length, 1, 'Knot holds the challenge record (until txt_lifetime ends)');

    // Another device, speaking the protocol itself, asks for web's name: refused, and Knot unchanged.
    const other = new TestDevice({ serverUrl: s.urls.http, hostname: 'intruder' });
    t.teardown(() => other.close());
    await other.connect();
    await other.register({ authKey: secret });
    const before = await knot.txt(`_acme-challenge.${name}`);
    const value = 'A'.repeat(43);
    const stolen = await other.request('/machine/set-dns', { Version: 130, NodeKey: other.nodeKeyText, Name: `_acme-challenge.${name}`, Type: 'TXT', Value: value });
    t.equal(stolen.status, 403, 'another device\'s name is refused');
    t.equal(stolen.body.toString().trim(), `name "_acme-challenge.${name}" is not allowed: this device may set only _acme-challenge.intruder.${BASE}`);
    t.same(await knot.txt(`_acme-challenge.${name}`), before, 'the record of web is untouched');
    const own = await other.request('/machine/set-dns', { Version: 130, NodeKey: other.nodeKeyText, Name: `_acme-challenge.intruder.${BASE}.`, Type: 'TXT', Value: value });
    t.equal(own.status, 200, 'its own name is accepted');
    t.same(await knot.txt(`_acme-challenge.intruder.${BASE}`), [value], 'and published in Knot');

    await s.stop();
    t.same(await knot.txt(`_acme-challenge.${name}`), [], 'the server removes the records it published when it stops');
    t.same(await knot.txt(`_acme-challenge.intruder.${BASE}`), []);
  });

  t.test(`${binaries.version}: with certificates off the netmap has no cert domains, tailscale cert and set-dns are refused`, async (t) => {
    const s = await startTestServer({ dns: { magic_dns: true, base_domain: BASE } });
    t.teardown(() => s.stop());
    const user = await s.state.users.create({ name: 'alice' });
    const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
    const tag = binaries.version.replace(/\W/g, '');
    const dev = await TailscaleDevice.start({ name: `nocert${tag}`, version: binaries.version });
    t.teardown(() => dev.stop());
    await dev.up({ loginServer: s.urls.http, authKey: secret, hostname: 'web', timeoutMs: 60_000 });
    const nm = await dev.netmap();
    t.same(certDomains(nm), [], 'no cert domains');
    t.notOk('https' in selfCaps(nm), 'no https capability');
    const r = await dev.cli(['cert', `web.${BASE}`], { timeoutMs: 30_000 });
    // Newer clients refuse by themselves (no CertDomains); 1.80 tries the CA first, which is unreachable here.
    t.not(r.code, 0, 'tailscale cert fails');
    t.notMatch(s.logs.join('\n'), /ACME challenge record published/, 'nothing was published');
    const d = new TestDevice({ serverUrl: s.urls.http, hostname: 'raw' });
    t.teardown(() => d.close());
    await d.connect();
    await d.register({ authKey: secret });
    const refused = await d.request('/machine/set-dns', { Version: 130, NodeKey: d.nodeKeyText, Name: `_acme-challenge.raw.${BASE}`, Type: 'TXT', Value: 'A'.repeat(43) });
    t.equal(refused.status, 403);
    t.equal(refused.body.toString().trim(), 'device certificates are not enabled on this server (dns.certificates.enabled is false)');
  });
}

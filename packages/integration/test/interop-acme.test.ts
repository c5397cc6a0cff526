/**
 * A real tailscaled joins a Headway whose certificate comes from pebble (Let's Encrypt's test CA), over https://
 * and trusting only pebble's issuing root (SSL_CERT_FILE); the certificate is short-lived, and its renewal is
 * swapped into the running listener: the served serial changes while the device keeps the same map session.
 */
import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestServer } from '../src/server.js';
import { pebbleMissing } from '../src/pebble.js';
import { servedCertificate, startAcmeRig } from '../src/acme-rig.js';
import { requireTailscale, TailscaleDevice } from '../src/tailscale.js';
import { unmet } from '../src/unmet.js';
import { until } from '../src/until.js';

/** VALIDITY_S: pebble's certificates last this long, so the renewal (at two thirds) comes while the device is connected. */
const VALIDITY_S = 45;

const missing = pebbleMissing();
const installed = missing ? [] : requireTailscale(t);
if (missing) unmet(t, missing);
// The newest client: the renewal takes most of a minute, so one version.
for (const binaries of installed.slice(0, 1)) {
  t.test(`${binaries.version}: joins over https with pebble's certificate, which is renewed in place without dropping the map stream`, async (t) => {
    const rig = await startAcmeRig({ validitySeconds: VALIDITY_S });
    t.teardown(() => rig.stop());
    const s = await startTestServer(rig.config('TLS-ALPN-01'));
    t.teardown(() => s.stop());
    const root = await rig.pebble.issuerRootPem();
    const caFile = join(mkdtempSync(join(tmpdir(), 'hw-acme-ca-')), 'pebble-root.pem');
    writeFileSync(caFile, root);
    const first = s.certificates!.current!;
    t.equal(first.notAfter - first.notBefore <= VALIDITY_S * 1000, true, `a ${VALIDITY_S} s certificate`);

    const user = await s.state.users.create({ name: 'alice' });
    const key = (await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true })).secret;
    // DERP over TLS as shipped (the harness default is plain HTTP), so the relay is verified under pebble's root too.
    const d = await TailscaleDevice.start({ name: 'acme', version: binaries.version, env: { SSL_CERT_FILE: caFile, TS_DEBUG_USE_DERP_HTTP: '' } });
    t.teardown(() => d.stop());
    t.match(s.config.server_url, /^https:\/\/localhost:/);
    await d.up({ loginServer: s.config.server_url, authKey: key, hostname: 'acme-dev', timeoutMs: 60_000 });
    await d.waitFor((st) => st.BackendState === 'Running' && st.Self?.Online === true, 30_000);
    const node = s.state.nodes.list().find((n) => n.hostname === 'acme-dev')!;
    t.ok(node, 'the device registered over https');
    await until('the device holds a map stream', () => s.control.hub.currentSession(node.id) !== undefined, 20_000);
    const session = s.control.hub.currentSession(node.id);
    t.equal((await servedCertificate(rig.tlsPort, rig.host, root)).serialNumber.toLowerCase(), first.serial);

    await until('the certificate is renewed', () => s.certificates!.current!.serial !== first.serial, VALIDITY_S * 1000);
    const renewed = s.certificates!.current!;
    t.equal(s.certificates!.ordered.ok, 2, 'one renewal order');
    t.equal((await servedCertificate(rig.tlsPort, rig.host, root)).serialNumber.toLowerCase(), renewed.serial, 'a new connection gets the renewed certificate');
    t.equal(s.control.hub.currentSession(node.id), session, 'the device keeps the same map session across the renewal');
    const st = await d.status();
    t.equal(st.BackendState, 'Running');
    t.ok(s.logs.some((l) => /renewed the TLS certificate/.test(l) && l.includes(renewed.serial)));
    // Past the first certificate's expiry the device still talks to the server (a new request over the same session).
    await until('the first certificate has expired', () => Date.now() > first.notAfter + 1000, VALIDITY_S * 1000);
    t.equal(s.control.hub.currentSession(node.id), session, 'still the same map session after the first certificate expired');
    t.equal((await d.status()).Self?.Online, true);
  });
}

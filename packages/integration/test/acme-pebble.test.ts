/**
 * Let's Encrypt for the server's own TLS, against pebble (Let's Encrypt's test CA), which validates for real: the
 * certificate is obtained by TLS-ALPN-01 on listen_addr and by HTTP-01 on tls_letsencrypt_listen, cached 0600 in
 * tls_letsencrypt_cache_dir and reused by a restart without a new order, and its expiry is on /health and /metrics.
 */
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import https from 'node:https';
import { join } from 'node:path';
import { startTestServer, type TestServer } from '../src/server.js';
import { pebbleMissing } from '../src/pebble.js';
import { servedCertificate, startAcmeRig, type AcmeRig } from '../src/acme-rig.js';
import { unmet } from '../src/unmet.js';

/** get fetches `path` over https from 127.0.0.1:port as `host`, trusting only `ca`. */
function get(port: number, host: string, path: string, ca: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.get({ host: '127.0.0.1', port, path, servername: host, headers: { host: `${host}:${port}` }, ca }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { body += c; });
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.once('error', reject);
  });
}

const missing = pebbleMissing();
if (missing) unmet(t, missing);
else {
  let rig: AcmeRig;
  t.before(async () => { rig = await startAcmeRig(); });
  t.teardown(() => rig.stop());

  t.test('TLS-ALPN-01: the certificate is obtained on listen_addr, cached 0600, and reused by a restart without a new order', async (t) => {
    const s = await startTestServer(rig.config('TLS-ALPN-01'));
    let second: TestServer | undefined;
    t.teardown(async () => { await second?.stop(); await s.stop({ remove: true }); });
    const root = await rig.pebble.issuerRootPem();
    const first = s.certificates!.current!;
    t.equal(s.certificates!.ordered.ok, 1, 'one order');
    const served = await servedCertificate(rig.tlsPort, rig.host, root);
    t.equal(served.serialNumber.toLowerCase(), first.serial, 'the obtained certificate is served, verified under pebble\'s root');
    t.equal(s.urls.http.startsWith('https://'), true);
    const health = await get(rig.tlsPort, rig.host, '/health', root);
    t.equal(health.status, 200);
    t.match(JSON.parse(health.body), { status: 'pass', details: { 'tls:certificate': [{ status: 'pass', observedUnit: 'notAfter', observedValue: new Date(first.notAfter).toISOString(), serial: first.serial }] } });
    const metrics = await (await fetch(`${s.urls.metrics}/metrics`)).text();
    t.match(metrics, new RegExp(`^headway_tls_certificate_not_after_seconds ${Math.floor(first.notAfter / 1000)}$`, 'm'), 'the expiry is a gauge in seconds since the epoch');
    t.match(metrics, /^headway_acme_orders_total\{result="ok"\} 1$/m);

    const cache = s.config.tls_letsencrypt_cache_dir;
    const files = readdirSync(cache).filter((f) => !f.startsWith('.'));
    t.same(files.sort(), ['account.key', 'localhost.crt', 'localhost.key']);
    for (const f of files) t.equal(statSync(join(cache, f)).mode & 0o777, 0o600, `${f} is 0600`);
    t.equal(statSync(cache).mode & 0o777, 0o700);
    t.notOk(s.logs.some((l) => /PRIVATE KEY/.test(l)), 'no key in the logs');
    t.ok(s.logs.some((l) => /obtained the TLS certificate/.test(l) && l.includes(first.serial)));

    await s.close();
    second = await startTestServer(rig.config('TLS-ALPN-01'), { dataDir: s.dataDir });
    t.equal(second.certificates!.ordered.ok + second.certificates!.ordered.failed, 0, 'the restart sent no order');
    t.equal(second.certificates!.current!.serial, first.serial);
    t.equal((await servedCertificate(rig.tlsPort, rig.host, root)).serialNumber.toLowerCase(), first.serial, 'the cached certificate is served');
    t.ok(second.logs.some((l) => /using the cached TLS certificate/.test(l)));
    t.equal(readFileSync(join(cache, 'account.key'), 'utf8').includes('PRIVATE KEY'), true);
  });

  t.test('HTTP-01: validated on tls_letsencrypt_listen, which redirects everything else to server_url; a renewal reaches the gRPC port too', async (t) => {
    const s = await startTestServer({ ...rig.config('HTTP-01'), grpc_listen_addr: '127.0.0.1:0' });
    t.teardown(() => s.stop());
    const root = await rig.pebble.issuerRootPem();
    t.equal(s.certificates!.ordered.ok, 1);
    const served = await servedCertificate(rig.mainPort, rig.host, root);
    t.equal(served.serialNumber.toLowerCase(), s.certificates!.current!.serial);
    t.equal((await get(rig.mainPort, rig.host, '/health', root)).status, 200);
    const redirect = await fetch(`http://127.0.0.1:${rig.httpPort}/register/abc?x=1`, { redirect: 'manual' });
    t.equal(redirect.status, 308);
    t.equal(redirect.headers.get('location'), `https://localhost:${rig.mainPort}/register/abc?x=1`);
    const unknown = await fetch(`http://127.0.0.1:${rig.httpPort}/.well-known/acme-challenge/nope`);
    t.equal(unknown.status, 404, 'a token not being validated is not answered');

    const grpcPort = Number(new URL(s.urls.grpc!).port);
    t.match(s.urls.grpc, /^grpcs:\/\//, 'the gRPC API takes the certificate');
    t.equal((await servedCertificate(grpcPort, rig.host, root, 'h2')).serialNumber.toLowerCase(), s.certificates!.current!.serial);
    const first = s.certificates!.current!.serial;
    await s.certificates!.renew();
    const renewed = s.certificates!.current!.serial;
    t.not(renewed, first, 'a renewal');
    t.equal((await servedCertificate(rig.mainPort, rig.host, root)).serialNumber.toLowerCase(), renewed, 'listen_addr serves the renewed certificate');
    t.equal((await servedCertificate(grpcPort, rig.host, root, 'h2')).serialNumber.toLowerCase(), renewed, 'and so does the gRPC port');
  });
}

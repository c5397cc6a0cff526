/**
 * Let's Encrypt in a cluster (two instances on one PostgreSQL database behind a TCP balancer on the port pebble
 * validates): one instance orders, the other uses the certificate from the database without an order of its own;
 * a renewal whose TLS-ALPN-01 validation reaches the other instance is answered there from the database, and the
 * other instance then serves the renewed certificate.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { serverDatabases, startTestServer, type TestServer } from '../src/server.js';
import { TcpBalancer } from '../src/cluster.js';
import { freePort } from '../src/ports.js';
import { pebbleMissing } from '../src/pebble.js';
import { servedCertificate, startAcmeRig } from '../src/acme-rig.js';
import { unmet } from '../src/unmet.js';

const FAST = { enabled: true, heartbeat_interval: '200ms', instance_timeout: '3s', poll_interval: '50ms' };

const missing = pebbleMissing();
const databases = missing ? [] : serverDatabases(t, 'the cluster certificate test', ['postgres']);
if (missing) unmet(t, missing);
for (const db of databases) {
  t.test(`${db.name}: one instance orders, the other uses its certificate; validation answers are shared`, async (t) => {
    await db.run(async (database) => {
      const rig = await startAcmeRig();
      t.teardown(() => rig.stop());
      const ports = [await freePort(), await freePort()];
      const backends = ports.map((p) => `http://127.0.0.1:${p}`);
      // Only a: b's port is not listening yet (and another listener may take it until b binds it).
      const balancer = new TcpBalancer([backends[0]!]);
      await balancer.listen(rig.tlsPort);
      t.teardown(() => balancer.close());
      const shared = mkdtempSync(join(tmpdir(), 'headway-cluster-acme-'));
      t.teardown(() => rmSync(shared, { recursive: true, force: true }));
      const servers: TestServer[] = [];
      t.teardown(async () => { for (const s of servers.reverse()) await s.stop(); });
      const start = async (port: number) => {
        const s = await startTestServer({
          ...rig.config('TLS-ALPN-01'), listen_addr: `127.0.0.1:${port}`,
          database, cluster: FAST, policy: { mode: 'database' }, noise: { private_key_path: join(shared, 'noise.key') },
        });
        servers.push(s);
        return s;
      };
      const a = await start(ports[0]!);
      const b = await start(ports[1]!);
      const root = await rig.pebble.issuerRootPem();
      t.equal(a.certificates!.ordered.ok, 1, 'the first instance orders');
      t.equal(b.certificates!.ordered.ok + b.certificates!.ordered.failed, 0, 'the second sends no order');
      t.equal(b.certificates!.current!.serial, a.certificates!.current!.serial, 'and serves the same certificate');
      t.ok(b.logs.some((l) => /the TLS certificate is shared through the database/.test(l)));
      for (const port of ports) t.equal((await servedCertificate(port, rig.host, root)).serialNumber.toLowerCase(), a.certificates!.current!.serial);

      // The CA's validation of a's renewal goes to b only: b answers from the database.
      const first = a.certificates!.current!.serial;
      balancer.backends = [backends[1]!];
      await a.certificates!.renew();
      t.equal(a.certificates!.ordered.ok, 2, `a renewed with its validation answered by b (${a.certificates!.lastError ?? 'no error'})`);
      t.not(a.certificates!.current!.serial, first);
      t.equal(await b.certificates!.refresh(), true, 'b finds the renewed certificate in the database');
      t.equal((await servedCertificate(ports[1]!, rig.host, root)).serialNumber.toLowerCase(), a.certificates!.current!.serial, 'and serves it');
      t.equal(b.certificates!.ordered.ok + b.certificates!.ordered.failed, 0, 'still without an order of its own');
    });
  });
}

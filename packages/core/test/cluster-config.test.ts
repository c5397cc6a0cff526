// cluster.* keys: off by default, refused on SQLite, and a timeout that cannot tell a
// slow heartbeat from a dead instance is refused, each naming the key.
import t from 'tap';
import { resolveConfig } from '../src/config/load.js';

const errors = (raw: Record<string, unknown>) => resolveConfig(raw, { env: {}, home: '/tmp/headway-home' }).problems
  .filter((p) => p.level !== 'warn').map((p) => `${p.key}: ${p.message}`);

t.test('cluster is off by default', async (t) => {
  const { config } = resolveConfig({}, { env: {}, home: '/tmp/headway-home' });
  t.same(config.cluster, { enabled: false, advertise_addr: '', heartbeat_interval: 2000, instance_timeout: 10_000, poll_interval: 200, change_retention: 600_000 });
});

t.test('cluster.enabled on SQLite is an error naming the key', async (t) => {
  t.same(errors({ cluster: { enabled: true } }), ['cluster.enabled: needs database.type postgres or mysql: several instances cannot share one SQLite file']);
  t.same(errors({ cluster: { enabled: true }, database: { type: 'postgres' } }), [], 'PostgreSQL is accepted');
  t.same(errors({ cluster: { enabled: true }, database: { type: 'mysql' } }), [], 'MySQL/MariaDB is accepted');
});

t.test('cluster.instance_timeout shorter than two heartbeats is refused', async (t) => {
  t.same(errors({ cluster: { enabled: true, heartbeat_interval: '5s', instance_timeout: '8s' }, database: { type: 'postgres' } }),
    ['cluster.instance_timeout: must be at least twice cluster.heartbeat_interval (5000 ms), found 8000 ms']);
});

t.test('HEADWAY_CLUSTER_ENABLED turns it on', async (t) => {
  const { config } = resolveConfig({ database: { type: 'postgres' } }, { env: { HEADWAY_CLUSTER_ENABLED: 'true' }, home: '/tmp/headway-home' });
  t.equal(config.cluster.enabled, true);
});

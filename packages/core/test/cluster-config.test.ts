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

// Clustered instances behind a balancer on one machine are not warned that server_url "points at port ...
// devices would be sent to the wrong port": that is the intended address.
t.test('server_url on another port of this machine: no warning in cluster mode, a warning alone', async (t) => {
  const portWarnings = (raw: Record<string, unknown>) => resolveConfig({ listen_addr: '127.0.0.1:8081', server_url: 'http://127.0.0.1:8080', ...raw }, { env: {}, home: '/tmp/headway-home' })
    .problems.filter((p) => p.key === 'server_url');
  t.same(portWarnings({ cluster: { enabled: true }, database: { type: 'postgres' } }), [], 'a clustered instance behind a balancer is not warned');
  const alone = portWarnings({});
  t.equal(alone.length, 1, 'a lone server is');
  t.match(alone[0], { level: 'warn', code: 'server_url_port', message: /points at port 8080 of this machine but listen_addr is 127\.0\.0\.1:8081/ });
});

import t from 'tap';
import { resolveConfig } from '../src/config/load.js';

// A headscale config moved over: keys it leaves out whose default differs from headscale's are named.

/** HEADSCALE is the shape of a headscale 0.29 config: its files under /var/lib/headscale, public DNS, a DERP map URL. */
const HEADSCALE = {
  server_url: 'https://hs.example.com',
  noise: { private_key_path: '/var/lib/headscale/noise_private.key' },
  derp: { urls: ['https://controlplane.tailscale.com/derpmap/default'] },
  dns: { base_domain: 'ts.example.com', nameservers: { global: ['1.1.1.1'] } },
};

const defaults = (problems: Array<{ code?: string; key: string; message: string }>) => problems.filter((p) => p.code === 'headscale_default');

t.test('a headscale config without the keys whose defaults differ: one warning each, naming both values; the values are Headway\'s', async (t) => {
  const { config, problems } = resolveConfig(HEADSCALE, { env: {} });
  const found = defaults(problems);
  t.same(found.map((p) => p.key), ['dns.override_local_dns', 'derp.server.enabled', 'derp.auto_update_enabled', 'node.ephemeral.inactivity_timeout']);
  const by = Object.fromEntries(found.map((p) => [p.key, p.message]));
  t.match(by['dns.override_local_dns'], /its default false where headscale used true/);
  t.match(by['derp.server.enabled'], /its default true where headscale used false/);
  t.match(by['derp.auto_update_enabled'], /its default true where headscale used false/);
  t.match(by['node.ephemeral.inactivity_timeout'], /its default 30m where headscale used 120s/);
  t.match(by['dns.override_local_dns'], /its noise\.private_key_path is under a headscale directory/, 'the message says why the config reads as headscale\'s');
  t.ok(problems.every((p) => p.level === 'warn'), 'warnings: the server starts');
  t.same([config.dns.override_local_dns, config.derp.server.enabled, config.node.ephemeral.inactivity_timeout], [false, true, 30 * 60_000], 'nothing is changed behind the administrator\'s back');
});

t.test('each key set (in the file or as HEADWAY_ variable) silences its warning, whatever its value', async (t) => {
  const explicit = {
    ...HEADSCALE,
    dns: { ...HEADSCALE.dns, override_local_dns: true },
    derp: { ...HEADSCALE.derp, auto_update_enabled: false, server: { enabled: false } },
  };
  const { config, problems } = resolveConfig(explicit, { env: { HEADWAY_NODE_EPHEMERAL_INACTIVITY_TIMEOUT: '120s' } });
  t.same(defaults(problems), []);
  t.same([config.dns.override_local_dns, config.derp.server.enabled, config.derp.auto_update_enabled, config.node.ephemeral.inactivity_timeout], [true, false, false, 120_000]);
});

t.test('a config with no headscale marker is not warned about', async (t) => {
  const { problems } = resolveConfig({ server_url: 'https://hw.example.com', dns: { nameservers: { global: ['1.1.1.1'] } }, derp: { urls: ['https://x.example/derp.json'] } }, { env: {} });
  t.same(defaults(problems), []);
});

t.test('a headscale-only key marks the config too; a key whose headscale default needed other keys is skipped without them', async (t) => {
  const { problems } = resolveConfig({ database: { gorm: { prepare_stmt: true } } }, { env: {} });
  const found = defaults(problems);
  // headscale would not start with override_local_dns and no nameservers; no DERP sources means nothing to re-read.
  t.same(found.map((p) => p.key), ['derp.server.enabled', 'node.ephemeral.inactivity_timeout']);
  t.match(found[0]!.message, /it sets database\.gorm, a headscale key/);
});

t.test('auto_update.enabled: headscale\'s key is accepted; false is what Headway does, true is a not-implemented warning', async (t) => {
  t.same(resolveConfig({ auto_update: { enabled: false } }, { env: {} }).problems, []);
  const on = resolveConfig({ auto_update: { enabled: true } }, { env: {} }).problems;
  t.same(on.map((p) => [p.level, p.key, p.code]), [['warn', 'auto_update.enabled', 'not_implemented']]);
  t.match(on[0]!.message, /not implemented: client auto-update/);
  t.match(resolveConfig({ auto_update: { enabled: 'yes please' } }, { env: {} }).problems, [{ level: 'error', key: 'auto_update.enabled' }]);
});

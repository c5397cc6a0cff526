import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, resolveConfig, envName, KEYS, REMOVED, parseDuration, formatDuration } from '../src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'hw-config-'));
const write = (name: string, text: string) => { const p = join(dir, name); writeFileSync(p, text); return p; };
const errors = (problems: { level: string; key: string; message: string }[]) => problems.filter((p) => p.level !== 'warn');

t.test('built-in defaults: local-only addresses, sqlite under the data dir', async (t) => {
  const { config, source, problems } = loadConfig({ env: {}, home: dir, cwd: dir });
  t.equal(source, null);
  t.same(problems, []);
  t.equal(config.listen_addr, '127.0.0.1:8080');
  t.equal(config.metrics_listen_addr, '127.0.0.1:9090');
  t.equal(config.database.type, 'sqlite');
  t.equal(config.database.sqlite.write_ahead_log, true);
  t.equal(config.data_dir, join(dir, '.local', 'share', 'headway'));
  t.equal(config.database.sqlite.path, join(config.data_dir, 'db.sqlite'));
  t.equal(config.noise.private_key_path, join(config.data_dir, 'noise_private.key'));
  t.equal(config.unix_socket, join(config.data_dir, 'headway.sock'));
  t.same(config.derp.urls, [], 'no public DERP map unless configured');
  t.equal(config.prefixes.v4, '100.64.0.0/10');
});

t.test('search order: explicit path, HEADWAY_CONFIG, then ./config.yaml', async (t) => {
  const a = write('a.yaml', 'listen_addr: 127.0.0.1:1111\n');
  const b = write('config.yaml', 'listen_addr: 127.0.0.1:2222\n');
  t.equal(loadConfig({ path: a, env: { HEADWAY_CONFIG: b }, home: dir, cwd: dir }).config.listen_addr, '127.0.0.1:1111');
  t.equal(loadConfig({ env: { HEADWAY_CONFIG: a }, home: dir, cwd: dir }).config.listen_addr, '127.0.0.1:1111');
  t.equal(loadConfig({ env: {}, home: dir, cwd: dir }).config.listen_addr, '127.0.0.1:2222');
  const missing = loadConfig({ path: join(dir, 'nope.yaml'), env: {}, home: dir, cwd: dir });
  t.match(errors(missing.problems)[0]!.message, /nope\.yaml does not exist/);
});

t.test('environment overrides every key, dots become underscores', async (t) => {
  t.equal(envName('database.sqlite.write_ahead_log'), 'HEADWAY_DATABASE_SQLITE_WRITE_AHEAD_LOG');
  const { config, problems } = resolveConfig({ listen_addr: '127.0.0.1:1' }, {
    env: {
      HEADWAY_LISTEN_ADDR: '0.0.0.0:9999', HEADWAY_SERVER_URL: 'http://127.0.0.1:9999', HEADWAY_DATABASE_TYPE: 'postgres', HEADWAY_DATABASE_POSTGRES_PORT: '6543',
      HEADWAY_DNS_NAMESERVERS_GLOBAL: '1.1.1.1, 9.9.9.9', HEADWAY_NODE_EXPIRY: '90d', HEADWAY_CLI_INSECURE: 'true',
    },
  });
  t.same(problems, []);
  t.equal(config.listen_addr, '0.0.0.0:9999');
  t.equal(config.server_url, 'http://127.0.0.1:9999');
  t.equal(config.database.type, 'postgres');
  t.equal(config.database.postgres.port, 6543);
  t.same(config.dns.nameservers.global, ['1.1.1.1', '9.9.9.9']);
  t.equal(config.node.expiry, 90 * 86_400_000);
  t.equal(config.cli.insecure, true);
  const bad = resolveConfig({}, { env: { HEADWAY_DATABASE_POSTGRES_PORT: 'abc' } });
  t.match(errors(bad.problems)[0], { key: 'HEADWAY_DATABASE_POSTGRES_PORT (database.postgres.port)', message: /whole number/ });
});

t.test('removed keys are fatal and say exactly what to change', async (t) => {
  const { problems } = resolveConfig({
    randomize_client_port: true,
    acl_policy_path: '/etc/acl.hujson',
    dns_config: { magic_dns: true, base_domain: 'x.net', nameservers: ['1.1.1.1'] },
    oidc: { expiry: '180d' },
  });
  const fatal = problems.filter((p) => p.level === 'fatal');
  const by = (k: string) => fatal.find((p) => p.key === k)?.message;
  t.match(by('randomize_client_port'), /randomizeClientPort: true.*top level of the policy file/);
  t.match(by('acl_policy_path'), /policy\.path/);
  t.match(by('dns_config.magic_dns'), /dns\.magic_dns/);
  t.match(by('dns_config.base_domain'), /dns\.base_domain/);
  t.match(by('dns_config.nameservers'), /dns\.nameservers\.global/);
  t.match(by('oidc.expiry'), /node\.expiry/);
  for (const k of Object.keys(REMOVED)) t.ok(!(k in KEYS), `${k} is not also a live key`);
});

t.test('renamed keys warn and keep working', async (t) => {
  const { config, problems: all } = resolveConfig({ ephemeral_node_inactivity_timeout: '5m' });
  t.equal(config.node.ephemeral.inactivity_timeout, 5 * 60_000);
  // The old name marks a config written for headscale: the defaults that differ are named too (config-headscale-defaults.test).
  const problems = all.filter((p) => p.code !== 'headscale_default');
  t.equal(problems.length, 1);
  t.match(problems[0], { level: 'warn', key: 'ephemeral_node_inactivity_timeout', message: /node\.ephemeral\.inactivity_timeout/ });
});

t.test('wrong types, bad CIDRs and durations name the key, what was found and what is expected', async (t) => {
  const { problems } = resolveConfig({
    listen_addr: 'localhost', prefixes: { v4: '100.64.0.0/33', allocation: 'roundrobin' }, node: { expiry: 'soon' },
    log: { level: 'loud' }, database: { sqlite: { write_ahead_log: 'yes' } }, dns: { nameservers: { global: ['not-an-ip'] } },
    unix_socket_permission: 'rwx', server_url: 'ftp://x',
  });
  const by = (k: string) => errors(problems).find((p) => p.key === k)?.message;
  t.match(by('listen_addr'), /expected host:port.*found string "localhost"/);
  t.match(by('prefixes.v4'), /CIDR prefix.*100\.64\.0\.0\/33/);
  t.match(by('prefixes.allocation'), /one of sequential, random, found string "roundrobin"/);
  t.match(by('node.expiry'), /duration such as 30m, 24h or 90d, found string "soon"/);
  t.match(by('log.level'), /one of trace, debug, info, warn, error/);
  t.match(by('database.sqlite.write_ahead_log'), /true or false, found string "yes"/);
  t.match(by('dns.nameservers.global'), /not-an-ip/);
  t.match(by('unix_socket_permission'), /octal file mode/);
  t.match(by('server_url'), /http:\/\/ or https:\/\//);
});

t.test('conflicting keys', async (t) => {
  const a = resolveConfig({ dns: { magic_dns: true, base_domain: '' } });
  t.match(errors(a.problems)[0], { key: 'dns.base_domain', message: /must be set when dns.magic_dns/ });
  const b = resolveConfig({ dns: { extra_records: [{ name: 'a.x', type: 'A', value: '10.0.0.1' }], extra_records_path: '/tmp/r.json' } });
  t.match(errors(b.problems)[0], { key: 'dns.extra_records', message: /together with dns.extra_records_path/ });
  const c = resolveConfig({ server_url: 'https://hw.example.net', dns: { base_domain: 'example.net' } });
  t.match(errors(c.problems)[0], { key: 'dns.base_domain', message: /must not be inside the MagicDNS domain/ });
  const d = resolveConfig({ tls_cert_path: '/x.pem' });
  t.match(errors(d.problems)[0], { message: /must be set together/ });
  const e = resolveConfig({ dns: { extra_records: [{ name: 'a', type: 'A', value: 'fd00::1' }] } });
  t.match(errors(e.problems)[0], { key: 'dns.extra_records', message: /record 1: value must be an IPv4 address/ });
});

// config check must not pass keys Headway ignores (database.gorm.*, say) as valid.
t.test('unknown keys warn; headscale keys accepted but not implemented warn naming each key, grouped by feature', async (t) => {
  const { problems } = resolveConfig({
    colour: 'blue', database: { gorm: { prepare_stmt: true, skip_err_record_not_found: true } }, policy: { v1: { x: 1 } }, disable_check_updates: true,
  });
  t.same(problems.filter((p) => !p.code), [{ level: 'warn', key: 'colour', message: 'unknown key (ignored)' }]);
  const unimplemented = problems.filter((p) => p.code === 'not_implemented');
  t.same(unimplemented.map((p) => [p.level, p.key]), [
    ['warn', 'database.gorm.prepare_stmt, database.gorm.skip_err_record_not_found'],
    ['warn', 'policy.v1.x'],
  ], 'disable_check_updates true is what Headway does anyway');
  t.match(unimplemented[1]!.message, /not implemented: the version 1 policy format \(this key is ignored\)/);
  t.same(resolveConfig({ logtail: { enabled: true } }).problems.map((p) => p.key), ['logtail.enabled']);
  t.same(resolveConfig({ oidc: { expiry: '1d' } }).problems.filter((p) => p.code !== 'headscale_default').map((p) => p.level), ['fatal'], 'a removed oidc key still stops the server');
});

t.test('YAML syntax errors carry line and column', async (t) => {
  const p = write('broken.yaml', 'listen_addr: 127.0.0.1:8080\n  bad: [\n');
  const { problems } = loadConfig({ path: p, env: {}, home: dir, cwd: dir });
  t.match(errors(problems)[0]!.message, /broken\.yaml:\d+:\d+: invalid YAML/);
  for (const p of errors(problems)) t.notMatch(p.message, /(:|at line \d+, column \d+)$/, `no dangling colon or second position: ${p.message}`);
});

t.test('durations', async (t) => {
  t.equal(parseDuration('30m'), 1_800_000);
  t.equal(parseDuration('1h30m'), 5_400_000);
  t.equal(parseDuration('87600h'), 87600 * 3_600_000);
  t.equal(parseDuration('90d'), 90 * 86_400_000);
  t.equal(parseDuration('0'), 0);
  for (const bad of ['', '10', 'h', '1y', '-5m', '5 m']) t.equal(parseDuration(bad), undefined, bad);
  t.equal(formatDuration(86_400_000 * 2), '2d');
  t.equal(formatDuration(1500), '1500ms');
});

t.test('the oidc block: checked when oidc.issuer is set, headscale\'s removed keys stop the server', async (t) => {
  const off = resolveConfig({ oidc: { client_id: 'x' } });
  t.same(off.problems, [], 'without an issuer the block is not required');
  t.equal(off.config.oidc.issuer, '');
  t.same(off.config.oidc.scope, ['openid', 'profile', 'email'], 'headscale\'s default scopes');
  t.equal(off.config.oidc.email_verified_required, true);
  t.equal(off.config.oidc.only_start_if_oidc_is_available, true);
  t.same(off.config.oidc.pkce, { enabled: false, method: 'S256' });

  const errs = (raw: Record<string, unknown>) => resolveConfig(raw).problems.filter((p) => p.level !== 'warn').map((p) => `${p.key}: ${p.message}`);
  t.match(errs({ oidc: { issuer: 'https://idp.example.com' } }), [/oidc.client_id: is required/, /oidc.client_secret: oidc.client_secret or oidc.client_secret_path is required/]);
  t.match(errs({ oidc: { issuer: 'idp.example.com', client_id: 'c', client_secret: 's' } }), [/oidc.issuer: expected an http:\/\/ or https:\/\/ URL/]);
  t.match(errs({ oidc: { issuer: 'https://idp.example.com', client_id: 'c', client_secret: 's', client_secret_path: '/nonexistent/secret' } }), [/mutually exclusive/, /\/nonexistent\/secret does not exist/]);
  t.match(errs({ oidc: { issuer: 'https://idp.example.com', client_id: 'c', client_secret: 's', pkce: { method: 'S512' } } }), [/oidc.pkce.method: expected one of S256, plain/]);
  t.match(errs({ oidc: { issuer: 'https://idp.example.com', client_id: 'c', client_secret: 's', scope: ['profile'] } }), [/oidc.scope: must include openid/]);
  t.match(errs({ oidc: { issuer: 'https://idp.example.com', client_id: 'c', client_secret: 's', extra_params: { state: 'x' } } }), [/oidc.extra_params: state is set by the login flow itself/]);
  t.match(errs({ oidc: { issuer: 'https://idp.example.com', client_id: 'c', client_secret: 's', extra_params: ['x'] } }), [/oidc.extra_params: expected a mapping/]);

  const good = resolveConfig({ oidc: {
    issuer: 'https://idp.example.com', client_id: 'c', client_secret: 's', extra_params: { domain_hint: 'example.com', prompt: 'login' },
    allowed_domains: ['example.com'], pkce: { enabled: true, method: 'plain' }, use_expiry_from_token: true,
  } });
  t.same(good.problems, []);
  t.same(good.config.oidc.extra_params, { domain_hint: 'example.com', prompt: 'login' });
  t.same(good.config.oidc.pkce, { enabled: true, method: 'plain' });
  const plain = resolveConfig({ oidc: { issuer: 'http://idp.example.com', client_id: 'c', client_secret: 's' } });
  t.match(plain.problems, [{ level: 'warn', key: 'oidc.issuer', message: /plain http/ }], 'a remote http issuer warns');
  t.same(resolveConfig({ oidc: { issuer: 'http://127.0.0.1:9000', client_id: 'c', client_secret: 's' } }).problems, [], 'a loopback http issuer is fine');

  const withVar = resolveConfig({ oidc: { issuer: 'https://idp.example.com', client_id: 'c', client_secret_path: '${CREDS}/secret' } }, { env: { CREDS: '/run/creds' } });
  t.equal(withVar.config.oidc.client_secret_path, '/run/creds/secret', '${VAR} expanded in client_secret_path');

  const removed = resolveConfig({ oidc: { strip_email_domain: true, map_legacy_users: true } }).problems;
  t.match(removed, [
    { level: 'fatal', key: 'oidc.strip_email_domain', message: /removed/ },
    { level: 'fatal', key: 'oidc.map_legacy_users', message: /users link/ },
  ]);
});

// grpc_listen_addr and grpc_allow_insecure are implemented, not accepted and ignored.
t.test('grpc_listen_addr serves the gRPC API: on 127.0.0.1:50443 by default, plaintext only on loopback or with grpc_allow_insecure', async (t) => {
  const grpcProblems = (raw: Record<string, unknown>) => resolveConfig(raw).problems.filter((p) => p.key.startsWith('grpc'));
  const defaults = resolveConfig({});
  t.equal(defaults.config.grpc_listen_addr, '127.0.0.1:50443', "headscale's port, on loopback");
  t.equal(defaults.config.grpc_allow_insecure, false);
  for (const addr of ['127.0.0.1:50443', '127.0.0.2:1', '[::1]:50443', 'localhost:50443', '']) {
    t.same(grpcProblems({ grpc_listen_addr: addr }), [], `${addr || 'empty (off)'}: plaintext on loopback is fine`);
  }
  const open = grpcProblems({ grpc_listen_addr: '0.0.0.0:50443' });
  t.same(open.map((p) => [p.level, p.key]), [['error', 'grpc_listen_addr']], 'plaintext on every interface stops the server');
  t.match(open[0]!.message, /0\.0\.0\.0:50443 is not a loopback address and no TLS is configured/);
  t.match(open[0]!.message, /tls_cert_path and tls_key_path/);
  t.match(open[0]!.message, /grpc_allow_insecure: true/);
  t.same(grpcProblems({ grpc_listen_addr: '[2001:db8::1]:50443' }).map((p) => p.key), ['grpc_listen_addr']);
  t.same(grpcProblems({ grpc_listen_addr: '0.0.0.0:50443', grpc_allow_insecure: true }), [], 'grpc_allow_insecure allows it (and is no longer a warning)');
  t.same(grpcProblems({ grpc_listen_addr: '0.0.0.0:50443', tls_cert_path: '/c.pem', tls_key_path: '/k.pem' }), [], 'with TLS the listener is encrypted');
  t.notOk(KEYS.grpc_listen_addr!.doc.includes('not implemented'), 'the key documentation no longer calls it inert');
});

t.test('node.routes.ha: headscale defaults, bounds and the timeout below the interval, each named', async (t) => {
  const def = resolveConfig({});
  t.equal(def.config.node.routes.ha.probe_interval, 10_000);
  t.equal(def.config.node.routes.ha.probe_timeout, 5000);
  t.same(errors(def.problems), []);
  const set = resolveConfig({ node: { routes: { ha: { probe_interval: '30s', probe_timeout: '2s' } } } });
  t.same(errors(set.problems), []);
  t.equal(set.config.node.routes.ha.probe_interval, 30_000);
  t.equal(set.config.node.routes.ha.probe_timeout, 2000);
  const off = resolveConfig({ node: { routes: { ha: { probe_interval: 0, probe_timeout: '1m' } } } });
  t.same(errors(off.problems), [], 'probing off: the timeout is not compared');
  const cases: [Record<string, unknown>, string, RegExp][] = [
    [{ probe_interval: 'soon' }, 'node.routes.ha.probe_interval', /duration/i],
    [{ probe_interval: '1s' }, 'node.routes.ha.probe_interval', /2s/],
    [{ probe_timeout: '500ms' }, 'node.routes.ha.probe_timeout', /1s/],
    [{ probe_timeout: '10s' }, 'node.routes.ha.probe_timeout', /less than node\.routes\.ha\.probe_interval/],
    [{ probe_interval: '5s', probe_timeout: '5s' }, 'node.routes.ha.probe_timeout', /less than/],
    [{ probe_timeout: 0 }, 'node.routes.ha.probe_timeout', /at least 1s/],
  ];
  for (const [ha, key, message] of cases) {
    const { problems } = resolveConfig({ node: { routes: { ha } } });
    t.match(errors(problems), [{ key, message }], `${JSON.stringify(ha)} names ${key}`);
  }
  const env = resolveConfig({}, { env: { HEADWAY_NODE_ROUTES_HA_PROBE_INTERVAL: '20s' } });
  t.equal(env.config.node.routes.ha.probe_interval, 20_000);
});

import t from 'tap';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, resolveConfig } from '../src/index.js';
import { makeDirectory, preflight } from '../src/kernel/preflight.js';

// Hostile or mistaken configuration values found by a sweep of every key: each is refused at load with an error
// naming the key (nothing started, nothing written), or, where the value works but is unusual, a warning.

const dir = mkdtempSync(join(tmpdir(), 'hw-config-hostile-'));
const write = (name: string, text: string) => { const p = join(dir, name); writeFileSync(p, text); return p; };
type Problem = { level: string; key: string; message: string };
const errors = (problems: Problem[]) => problems.filter((p) => p.level !== 'warn');
const load = (yaml: string) => loadConfig({ path: write('c.yaml', yaml), env: {}, home: dir, cwd: dir });
const resolved = (raw: Record<string, unknown>) => resolveConfig(raw, { env: {}, home: dir, baseDir: dir });
const errorOf = (raw: Record<string, unknown>, key: string) => errors(resolved(raw).problems).find((p) => p.key === key)?.message;

t.test('durations: none past the longest timer Node can set, node.expiry within 100 years, no busy loops', async (t) => {
  // Past 2^31 - 1 ms Node runs a timer after 1 ms: a 25-day handshake timeout would close every connection at once.
  for (const key of ['noise.handshake_timeout', 'noise.idle_timeout', 'registration.gc_interval', 'registration.pending_expiry', 'derp.update_frequency', 'cli.timeout']) {
    const [a, b] = key.split('.') as [string, string];
    t.match(errorOf({ [a]: { [b]: '25d' } }, key), /must be at most 24d, found 25d/, `${key}: 25d`);
    t.equal(errorOf({ [a]: { [b]: '24d' } }, key), undefined, `${key}: 24d`);
  }
  t.match(errorOf({ node: { ephemeral: { inactivity_timeout: '720h' } } }, 'node.ephemeral.inactivity_timeout'), /at most 24d, found 720h/);
  t.match(errorOf({ ephemeral_node_inactivity_timeout: '99999999999h' }, 'ephemeral_node_inactivity_timeout (node.ephemeral.inactivity_timeout)'), /at most 24d/);
  // node.expiry is added to the login time: year 10240 is no time a client can read, 99999999999h no Date at all.
  t.match(errorOf({ node: { expiry: '3000000d' } }, 'node.expiry'), /must be at most 36500d, found 3000000d/);
  t.match(errorOf({ node: { expiry: '99999999999h' } }, 'node.expiry'), /at most 36500d/);
  t.equal(resolved({ node: { expiry: '87600h' } }).config.node.expiry, 87600 * 3_600_000, 'ten years is fine');
  // A sweep every millisecond used a quarter of a core while idle.
  t.match(errorOf({ registration: { gc_interval: '1ms' } }, 'registration.gc_interval'), /must be at least 100ms, found 1ms/);
  t.equal(resolved({ registration: { gc_interval: 0 } }).config.registration.gc_interval, 0, '0 still turns the sweep off');
  t.match(errorOf({ derp: { update_frequency: '1s' } }, 'derp.update_frequency'), /at least 10s/);
  t.match(errorOf({ noise: { handshake_timeout: '5ms' } }, 'noise.handshake_timeout'), /at least 100ms/);
  t.match(errors(loadConfig({ env: { HEADWAY_NOISE_IDLE_TIMEOUT: '30d' }, home: dir, cwd: dir }).problems)[0]?.message, /at most 24d/, 'from the environment too');
});

t.test('prefixes: no host bits, room for a node, no special ranges; outside Tailscale\'s ranges a warning', async (t) => {
  t.match(errorOf({ prefixes: { v4: '100.64.1.5/10' } }, 'prefixes.v4'), /has host bits set; did you mean 100\.64\.0\.0\/10\?/);
  for (const [family, text] of [['v4', '100.64.0.1/32'], ['v4', '100.64.0.0/31'], ['v6', 'fd7a:115c:a1e0::/127'], ['v6', 'fd7a:115c:a1e0::1/128']] as const) {
    t.match(errorOf({ prefixes: { [family]: text } }, `prefixes.${family}`), /holds no address to give a node|host bits/, text);
  }
  t.equal(errorOf({ prefixes: { v4: '100.64.0.0/30' } }, 'prefixes.v4'), undefined, 'a /30 holds two');
  for (const [family, text, what] of [['v4', '0.0.0.0/0', '"this network"'], ['v4', '127.0.0.0/8', 'loopback'], ['v4', '224.0.0.0/4', 'multicast'],
    ['v6', '::/0', 'unspecified'], ['v6', '::ffff:100.64.0.0/106', 'IPv4-mapped'], ['v6', 'fe80::/64', 'link-local']] as const) {
    t.match(errorOf({ prefixes: { [family]: text } }, `prefixes.${family}`), new RegExp(`overlaps .*${what}`), text);
  }
  const outside = resolved({ prefixes: { v4: '10.20.0.0/16', v6: 'fd00:1::/64' } });
  t.same(errors(outside.problems), [], 'a private range works');
  t.match(outside.problems.filter((p) => p.level === 'warn').map((p) => `${p.key}: ${p.message}`),
    [/prefixes\.v4: 10\.20\.0\.0\/16 is outside 100\.64\.0\.0\/10/, /prefixes\.v6: fd00:1::\/64 is outside fd7a:115c:a1e0::\/48/]);
  t.same(resolved({ prefixes: { v4: '100.64.0.0/16' } }).problems.filter((p) => p.key.startsWith('prefixes')), [], 'inside: no warning');
});

t.test('DNS names, DoH URLs, DERP addresses and URLs are checked before devices are sent them', async (t) => {
  t.match(errorOf({ dns: { search_domains: ['corp.example.com', 'not a domain'] } }, 'dns.search_domains'), /found "not a domain"/);
  t.match(errorOf({ dns: { search_domains: [''] } }, 'dns.search_domains'), /found ""/);
  t.match(errorOf({ dns: { search_domains: ['..'] } }, 'dns.search_domains'), /found "\.\."/);
  t.match(errorOf({ dns: { nameservers: { global: ['https://'] } } }, 'dns.nameservers.global'), /found "https:\/\/"/);
  t.match(errorOf({ dns: { nameservers: { global: ['https://a b'] } } }, 'dns.nameservers.global'), /found "https:\/\/a b"/);
  t.equal(errorOf({ dns: { nameservers: { global: ['1.1.1.1', 'https://dns.example/dns-query'] } } }, 'dns.nameservers.global'), undefined);
  t.match(errorOf({ dns: { nameservers: { split: { '': ['10.0.0.1'] } } } }, 'dns.nameservers.split'), /domain name .* found ""/);
  t.match(errorOf({ dns: { nameservers: { split: { 'bad name!!': ['10.0.0.1'] } } } }, 'dns.nameservers.split'), /found "bad name!!"/);
  t.match(errorOf({ dns: { extra_records: [{ name: 'bad name!!', type: 'A', value: '1.2.3.4' }] } }, 'dns.extra_records'), /record 1: name must be a DNS name/);
  t.equal(errorOf({ dns: { extra_records: [{ name: 'grafana.example.com.', type: 'A', value: '1.2.3.4' }] } }, 'dns.extra_records'), undefined);
  t.match(errorOf({ dns: { base_domain: '100.64.0.1' } }, 'dns.base_domain'), /expected a domain name/);
  t.match(errorOf({ dns: { base_domain: 5 } }, 'dns.base_domain'), /expected a domain name/);
  t.match(errorOf({ derp: { server: { ipv4: 'not-an-ip' } } }, 'derp.server.ipv4'), /expected an IPv4 address, found "not-an-ip"/);
  t.match(errorOf({ derp: { server: { ipv6: '1.2.3.4' } } }, 'derp.server.ipv6'), /expected an IPv6 address/);
  t.equal(errorOf({ derp: { server: { ipv4: '203.0.113.7', ipv6: '2001:db8::7' } } }, 'derp.server.ipv4'), undefined);
  t.match(errorOf({ derp: { urls: ['not a url'] } }, 'derp.urls'), /found "not a url"/);
  t.match(errorOf({ derp: { urls: ['ftp://x/y'] } }, 'derp.urls'), /found "ftp:\/\/x\/y"/);
});

t.test('server_url: no credentials (every device is sent it), no query or fragment', async (t) => {
  const creds = errors(resolved({ server_url: 'http://admin:s3cret@127.0.0.1:8080' }).problems);
  t.match(creds[0]?.message, /must not hold a user name or password/);
  t.notMatch(JSON.stringify(creds), /s3cret/, 'the password is not echoed');
  t.match(errorOf({ server_url: 'http://127.0.0.1:8080/?x=1#f' }, 'server_url'), /must not have a query/);
  t.match(errorOf({ server_url: 'http://127.0.0.1:8080/#f' }, 'server_url'), /must not have a query/);
});

t.test('a connection URL in a database host is refused without echoing it', async (t) => {
  for (const type of ['postgres', 'mysql']) {
    const { problems } = resolved({ database: { type, [type]: { host: 'postgres://u:Sup3rSecretPW@127.0.0.1:1/db' } } });
    const e = errors(problems).find((p) => p.key === `database.${type}.host`);
    t.match(e?.message, /found a connection URL or user@host/, type);
    t.notMatch(JSON.stringify(problems), /Sup3rSecret/, `${type}: the password is not echoed`);
  }
  t.equal(errorOf({ database: { type: 'postgres', postgres: { host: '/var/run/postgresql' } } }, 'database.postgres.host'), undefined, 'a socket directory is a host');
});

t.test('keys are set once, own keys only, and the socket path fits', async (t) => {
  const both = resolved({ ephemeral_node_inactivity_timeout: '5m', node: { ephemeral: { inactivity_timeout: '10m' } } });
  t.match(errors(both.problems).map((p) => `${p.key}: ${p.message}`), [/set twice/]);
  const reversed = load('node:\n  ephemeral:\n    inactivity_timeout: 10m\nephemeral_node_inactivity_timeout: 5m\n');
  t.match(errors(reversed.problems).map((p) => `${p.key}: ${p.message}`), [/set twice/], 'in either order');
  for (const key of ['__proto__', 'toString', 'constructor', 'hasOwnProperty']) {
    const { problems } = load(`${key}: 1\n`);
    t.match(problems.map((p) => `${p.key}: ${p.message}`), [new RegExp(`^${key}: unknown key \\(ignored\\)`)], key);
  }
  const long = errorOf({ unix_socket: '/tmp/' + 'a'.repeat(120) + '.sock' }, 'unix_socket');
  t.match(long, /is 130 bytes long; a socket path may be at most 107/);
  t.match(errorOf({ prefixes: { allocation: 1 }, database: { sqlite: { wal_autocheckpoint: Number.NaN } } }, 'database.sqlite.wal_autocheckpoint'), /found number NaN/, '.nan is named as such');
});

t.test('YAML: merge keys read, file modes written as numbers keep their digits, no runaway parse', async (t) => {
  const merged = load('base: &b\n  magic_dns: false\n  base_domain: corp.example\ndns:\n  <<: *b\n  search_domains: [a.example]\n');
  t.equal(merged.config.dns.magic_dns, false, 'merged key');
  t.equal(merged.config.dns.base_domain, 'corp.example');
  t.same(merged.config.dns.search_domains, ['a.example']);
  t.notMatch(merged.problems.map((p) => p.key), [/<</], 'no "<<" unknown key');
  // YAML 1.2 reads 0o770 as 504 and 0770 as 770: read as numbers, the socket would get mode 0504.
  t.equal(load('unix_socket_permission: 0o770\n').config.unix_socket_permission, '0770');
  t.equal(load('unix_socket_permission: 0770\n').config.unix_socket_permission, '0770');
  t.equal(load('unix_socket_permission: 770\n').config.unix_socket_permission, '0770');
  t.equal(load('unix_socket_permission: "0750"\n').config.unix_socket_permission, '0750');
  t.match(errors(load('a: 1\nb: 2\na: 3\n').problems)[0]?.message, /c\.yaml:3:1: invalid YAML: Map keys must be unique/, 'duplicate keys located');
  // 40,000 keys in one mapping: the yaml package's own duplicate check is quadratic, so it is not used.
  const many = Array.from({ length: 40_000 }, (_, i) => `k${i}: 1`).join('\n') + '\n';
  const big = load(many);
  t.equal(big.problems.filter((p) => p.message.startsWith('unknown key')).length, 40_000, 'every key read (and reported unknown)');
  t.match(errors(load('x: ' + 'a'.repeat(1 << 20) + '\n').problems)[0]?.message, /a config file may be at most 1048576 bytes/);
  const bomb = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]'];
  for (let i = 1; i < 9; i++) bomb.push(`${String.fromCharCode(97 + i)}: &${String.fromCharCode(97 + i)} [${Array(9).fill('*' + String.fromCharCode(96 + i)).join(',')}]`);
  t.match(errors(load(bomb.join('\n') + '\n').problems)[0]?.message, /c\.yaml: invalid YAML: .*alias/i, 'an alias bomb is a config error');
  t.match(errors(load('a: ' + '['.repeat(20_000) + ']'.repeat(20_000) + '\n').problems)[0]?.message, /c\.yaml.*invalid YAML/, 'deep nesting is a config error');
});

t.test('preflight: a configured path that is wrong stops the server before anything is written', async (t) => {
  const base = resolved({ data_dir: join(dir, 'data') }).config;
  const cfg = (patch: Record<string, unknown>) => ({ ...base, ...patch }) as typeof base;
  const notPem = write('not.pem', 'hello\n');
  t.throws(() => preflight(cfg({ tls_cert_path: join(dir, 'nope.pem'), tls_key_path: notPem })), /^tls_cert_path: cannot read .*nope\.pem: no such file/);
  t.throws(() => preflight(cfg({ tls_cert_path: notPem, tls_key_path: notPem })), /^tls_cert_path: .*not\.pem is not a PEM certificate/);
  t.throws(() => preflight(cfg({ noise: { ...base.noise, private_key_path: dir } })), /^noise\.private_key_path: cannot read key file/);
  t.throws(() => preflight(cfg({ noise: { ...base.noise, private_key_path: notPem } })), /^noise\.private_key_path: key file .* is not a private key/);
  t.throws(() => preflight(cfg({ policy: { ...base.policy, mode: 'file', path: dir } })), /^policy\.path: .* is not a file/);
  t.throws(() => preflight(cfg({ derp: { ...base.derp, paths: [join(dir, 'none.yaml')] } })), /^derp\.paths: cannot read/);
  t.throws(() => preflight(cfg({ dns: { ...base.dns, extra_records_path: join(dir, 'none.json') } })), /^dns\.extra_records_path: cannot read/);
  t.doesNotThrow(() => preflight(base), 'the defaults pass (keys are made later)');
  // Node's recursive mkdir loops forever under /proc, and a file in the way gives a bare EEXIST.
  t.throws(() => makeDirectory('/proc/headway-test/x', 'data_dir'), /^data_dir: cannot create directory \/proc\/headway-test: ENOENT/);
  t.throws(() => makeDirectory(join(notPem, 'sub'), 'data_dir'), /^data_dir: .*not\.pem is not a directory/);
  const made = join(dir, 'a', 'b', 'c');
  makeDirectory(made, 'data_dir');
  makeDirectory(made, 'data_dir');
  t.pass('made, twice');
});

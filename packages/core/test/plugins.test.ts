import t from 'tap';
import { createContainer, InjectionMode } from 'awilix';
import { fileURLToPath } from 'node:url';
import { checkPlugins, defaultConfig, loadPlugins, PluginOptionsError, resolveConfig, silentLogger, type DnsPort, type PluginEntry } from '../src/index.js';
import { DnsConfigSource } from '@headway/control';

const fixture = (name: string) => fileURLToPath(new URL(`../../test/fixtures/${name}/index.js`, import.meta.url));
const ctx = () => ({ container: createContainer({ injectionMode: InjectionMode.PROXY, strict: true }), config: defaultConfig(), logger: silentLogger });
const dnsEntry = (options: Record<string, unknown>): PluginEntry => ({ package: fixture('dns-zod'), port: 'dns', options });
const pluginErrors = (plugins: unknown) => resolveConfig({ plugins }).problems.filter((p) => p.key === 'plugins').map((p) => p.message);

t.test('plugins: entries are {package, port, options}; a bare name is a DNS plugin', async (t) => {
  const { config, problems } = resolveConfig({ plugins: ['@acme/dns', { package: '@acme/dns2', port: 'dns', options: { zone: 'lab' } }] });
  t.same(problems.filter((p) => p.level !== 'warn'), []);
  t.same(config.plugins, [
    { package: '@acme/dns', port: 'dns', options: {} },
    { package: '@acme/dns2', port: 'dns', options: { zone: 'lab' } },
  ]);
  const env = resolveConfig({}, { env: { HEADWAY_PLUGINS: '[{"package":"@acme/dns","port":"dns","options":{"a":1}}]' } });
  t.same(env.config.plugins, [{ package: '@acme/dns', port: 'dns', options: { a: 1 } }], 'HEADWAY_PLUGINS takes JSON');
});

t.test('a storage or policy plugins: entry is refused, naming the key that chooses that port', async (t) => {
  t.match(pluginErrors([{ package: '@acme/store', port: 'storage' }]),
    [/^plugins\[0\]: @acme\/store: the storage port is not loaded from plugins: it has exactly one adapter, chosen by database\.type \(set database\.type: @acme\/store\)$/]);
  t.match(pluginErrors([{ package: '@acme/pol', port: 'policy', options: {} }]), [/plugins\[0\]: @acme\/pol: the policy port .*chosen by policy\.mode/]);
});

t.test('malformed plugins: entries name the entry and the field', async (t) => {
  t.match(pluginErrors('@acme/dns'), [/expected a list of \{package, port, options\} entries, found string/]);
  t.match(pluginErrors([{ package: '@acme/dns' }]), [/plugins\[0\]: @acme\/dns: port is required \(one of dns, drive, identity\)/]);
  t.match(pluginErrors([{ package: '@acme/dns', port: 'dsn' }]), [/port: expected one of dns, drive, identity, found string "dsn"/]);
  t.match(pluginErrors([{ port: 'dns' }]), [/plugins\[0\]: package is required/]);
  t.match(pluginErrors([{ package: 'Not A Name', port: 'dns' }]), [/package: expected an npm package name/]);
  t.match(pluginErrors([{ package: '@acme/dns', port: 'dns', option: {} }]), [/unknown field "option" \(expected package, port, options\)/]);
  t.match(pluginErrors([{ package: '@acme/dns', port: 'dns', options: ['a'] }]), [/options: expected a mapping of the plugin's options, found a list/]);
  t.match(pluginErrors([{ package: '@acme/a', port: 'storage' }, 'ok-dns', { package: '@acme/b' }]),
    [/plugins\[0\].*; plugins\[2\]/], 'every bad entry is reported at once');
});

t.test('several DNS plugins load in the listed order, each with its own options and schema defaults', async (t) => {
  const c = ctx();
  const loaded = await loadPlugins({ plugins: [dnsEntry({ name: 'b.lab' }), dnsEntry({ name: 'a.lab', address: '10.1.1.1' })] }, c);
  t.equal(loaded.dns.length, 2);
  t.same(await loaded.dns[0]!.records!(), [{ name: 'b.lab', type: 'A', value: '10.9.9.9' }], 'the schema default filled in');
  t.same(await loaded.dns[1]!.records!(), [{ name: 'a.lab', type: 'A', value: '10.1.1.1' }]);
  t.equal(c.container.resolve<DnsPort[]>('dnsAdapters'), loaded.dns, 'the list is in the container');
});

t.test('bad options: every problem of every plugin named at once, and nothing registers', async (t) => {
  const c = ctx();
  const err = await loadPlugins({ plugins: [dnsEntry({ name: 'ok.lab' }), dnsEntry({ address: 5, colour: 'red' })] }, c).catch((e: unknown) => e);
  t.type(err, Error);
  const msg = (err as Error).message;
  t.match(msg, /plugins\[1\] \(.*dns-zod.*\): option "name": /);
  t.match(msg, /plugins\[1\] \(.*dns-zod.*\): option "address": /);
  t.match(msg, /colour/);
  t.notMatch(msg, /plugins\[0\]/, 'the good entry is not blamed');
  t.notOk(c.container.hasRegistration('dns'), 'no plugin registered');

  const problems = await checkPlugins([dnsEntry({ name: 'ok.lab' }), dnsEntry({ address: 5 })]);
  t.same(problems.map((p) => p.key).sort(), [`plugins[1] (${fixture('dns-zod')}) options.address`, `plugins[1] (${fixture('dns-zod')}) options.name`]);
  t.ok(problems.every((p) => p.level === 'error'));
  t.same(await checkPlugins([dnsEntry({ name: 'ok.lab' })]), [], 'good options: no problems');
});

t.test('a missing plugin package and a descriptor for another port are named', async (t) => {
  t.match(await checkPlugins([{ package: '@acme/not-installed', port: 'dns', options: {} }]),
    [{ level: 'error', message: /plugins\[0\] \(@acme\/not-installed\): unknown dns adapter "@acme\/not-installed" \(package @acme\/not-installed not found\)/ }]);
  await t.rejects(loadPlugins({ plugins: [{ package: fixture('throws-register'), port: 'dns', options: {} }] }, ctx()),
    { message: /plugins\[0\] .*provides the storage port, not dns/ });
});

t.test('PluginOptionsError names the plugin and each option', async (t) => {
  const e = new PluginOptionsError('plugins[2] (@acme/x)', [{ option: 'file', message: 'required' }, { option: '', message: 'expected a mapping' }]);
  t.equal(e.message, 'plugins[2] (@acme/x): option "file": required\nplugins[2] (@acme/x): option (options): expected a mapping');
});

t.test('DNS records: extra records, then each plugin in order; tailnetRecords are qualified with the tailnet domain', async (t) => {
  const c = ctx();
  const loaded = await loadPlugins({ plugins: [dnsEntry({ name: 'printer', tailnet: true }), dnsEntry({ name: 'nas.lab' })] }, c);
  const dns = { ...defaultConfig().dns, base_domain: 'corp.example', extra_records: [{ name: 'first.lab', type: 'A', value: '10.0.0.1' }] };
  const src = new DnsConfigSource(dns, ['100.64.0.0/10'], silentLogger, () => undefined, loaded.dns);
  await src.init();
  t.teardown(() => src.close());
  t.same(src.config().ExtraRecords, [
    { Name: 'first.lab', Type: 'A', Value: '10.0.0.1' },
    { Name: 'printer.corp.example', Type: 'A', Value: '10.9.9.9' },
    { Name: 'nas.lab', Type: 'A', Value: '10.9.9.9' },
  ]);

  const bad: DnsPort = { async records() { return [{ name: 'x', type: 'A', value: 'fd00::1' }]; } };
  const src2 = new DnsConfigSource(dns, [], silentLogger, () => undefined, [bad]);
  await t.rejects(src2.init(), { message: /plugins: dns plugin 1 of 1: records\(\) record 1: value must be an IPv4 address/ }, 'a plugin record is checked like dns.extra_records');
  const qualified: DnsPort = { async records() { return []; }, async tailnetRecords() { return [{ name: 'nas.corp.example', type: 'A', value: '10.0.0.2' }]; } };
  const src3 = new DnsConfigSource(dns, [], silentLogger, () => undefined, [qualified]);
  await t.rejects(src3.init(), { message: /must be relative to the tailnet domain/ });
});

t.test('an identity plugin serves the login port; one only, and it must have begin and complete', async (t) => {
  const entry: PluginEntry = { package: fixture('identity-magic-link'), port: 'identity', options: { mailer: 'https://mailer.example.com' } };
  const loaded = await loadPlugins({ plugins: [entry] }, ctx());
  t.equal(loaded.identity?.provider, 'magic-link');
  t.equal(loaded.identity?.callbackPath, '/magic/callback');
  t.match(await loaded.identity!.begin('k1', { url: new URL('http://x/register/k1'), method: 'GET', cookies: {} }), { location: 'https://mailer.example.com/send?login=k1' }, 'the plugin got its options');
  await t.rejects(loadPlugins({ plugins: [entry, entry] }, ctx()), { message: /plugins\[1\].*the identity port takes one plugin/ });
  await t.rejects(loadPlugins({ plugins: [{ package: fixture('dns-zod'), port: 'identity', options: {} }] }, ctx()), { message: /provides the dns port, not identity/ });
});

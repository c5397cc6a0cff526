/**
 * Tailscale's API (/api/v2) as infrastructure-as-code drives it: Tailscale's official Go client
 * (tailscale.com/client/tailscale/v2, built into `tsapi` by .ci/install-tsapi.sh) against a real
 * Headway on SQLite and on PostgreSQL, with two real tailscaled. An OAuth client limited to
 * `auth_keys devices:core` creates a tagged, preauthorized key that a real device joins with; the
 * device is listed, renamed, retagged, given its subnet route and deleted through the client, and
 * the other real device (or the device itself) shows each change. The policy file is set with
 * If-Match (a stale ETag is refused with 412) and validated; nameservers and MagicDNS set through
 * the client reach the device's DNS config; tokens without the scope or with a wrong secret are
 * refused. Mandatory under CI=true.
 */
import t, { type Test } from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { serverDatabases, startTestServer, type TestServer } from '../src/server.js';
import { cleanupStack, requireTailscale, TailscaleDevice, type NetworkMapJson, type TailscaleBinaries, type TailscaleStatus } from '../src/tailscale.js';
import { tsapi, tsapiBinary, tsapiMissing, type TsapiAuth } from '../src/tsapi.js';
import { unmet } from '../src/unmet.js';
import { until } from '../src/until.js';

const BASE = 'ts.test';
const ROUTE = '10.77.0.0/24';
const JOIN_TIMEOUT_MS = 60_000;
const SYNC_TIMEOUT_MS = 60_000;
const CLIENT_VERSION = '1.102.5';

/** policy owns the tags the OAuth client assigns and lets every device reach every other. */
function policy(marker = 'first'): string {
  return `// Headway /api/v2 interop policy (${marker})
{
  "groups": { "group:admins": ["alice@"] },
  "tagOwners": { "tag:ci": ["group:admins"], "tag:web": ["group:admins"], "tag:other": ["group:admins"] },
  "acls": [{ "action": "accept", "src": ["*"], "dst": ["*:*"] }],
}
`;
}

/** V2Device is the part of the client's Device struct the test reads (tsapi prints the struct as Go marshals it). */
interface V2Device {
  id: string;
  nodeId: string;
  name: string;
  hostname: string;
  addresses: string[];
  os: string;
  clientVersion: string;
  tags: string[] | null;
  authorized: boolean;
  connectedToControl: boolean;
  isEphemeral: boolean;
  machineKey: string;
  nodeKey: string;
  AdvertisedRoutes: string[] | null;
  enabledRoutes: string[] | null;
}

interface V2Key { id: string; key: string; keyType: string; capabilities: { devices: { create: { reusable: boolean; ephemeral: boolean; preauthorized: boolean; tags: string[] | null } } } }

const peerNamed = (s: TailscaleStatus, host: string) => Object.values(s.Peer ?? {}).find((p) => p.HostName === host || p.DNSName?.startsWith(`${host}.`));
const dnsOf = (nm: NetworkMapJson) => (nm.DNS ?? {}) as { Resolvers?: Array<{ Addr?: string }> | null; FallbackResolvers?: Array<{ Addr?: string }> | null; Proxied?: boolean };
/** nameservers are the global resolvers a device was sent: Resolvers, or FallbackResolvers when local DNS is not overridden. */
const nameservers = (nm: NetworkMapJson) => [...(dnsOf(nm).Resolvers ?? []), ...(dnsOf(nm).FallbackResolvers ?? [])].map((r) => r.Addr).sort();
const sorted = (l: readonly string[] | null | undefined) => [...(l ?? [])].sort();

const bin = tsapiBinary();
const installed = requireTailscale(t);
if (!bin) {
  unmet(t, tsapiMissing()!);
} else if (installed.length > 0) {
  const binaries = installed.find((b) => b.version.replace(/^v/, '') === CLIENT_VERSION) ?? installed[0]!;
  const databases = [
    { name: 'sqlite', run: (body: (database?: Record<string, unknown>) => Promise<void>) => body(undefined) },
    ...serverDatabases(t, "the /api/v2 suite with Tailscale's Go client", ['postgres']),
  ];
  for (const db of databases) {
    t.test(`${db.name}: Tailscale's Go client drives /api/v2 with real tailscaled ${binaries.version}`, (t) => db.run((database) => scenario(t, bin, binaries, db.name, database)));
  }
}

async function scenario(t: Test, bin: string, binaries: TailscaleBinaries, label: string, database?: Record<string, unknown>): Promise<void> {
  const cleanups = cleanupStack(t);
  const s: TestServer = await startTestServer({
    ...(database ? { database } : {}),
    policy: { mode: 'database' },
    dns: { mode: 'database', base_domain: BASE, magic_dns: false, nameservers: { global: ['1.1.1.1'] } },
    derp: { server: { enabled: true, stun_listen_addr: '127.0.0.1:0' } },
  });
  cleanups.push(() => s.stop());
  const files = mkdtempSync(join(tmpdir(), 'hw-api-v2-'));
  cleanups.push(() => rmSync(files, { recursive: true, force: true }));
  /** file writes a policy for tsapi to send. */
  const file = (name: string, text: string) => {
    writeFileSync(join(files, name), text);
    return join(files, name);
  };
  await s.policy.set(policy());
  const alice = await s.state.users.create({ name: 'alice' });
  const apiKey: TsapiAuth = { apiKey: (await s.state.keys.createApiKey(null)).secret };

  /** call runs one tsapi command; it throws, with the API's answer, unless the call succeeded. */
  const call = async <T = any>(auth: TsapiAuth, ...args: string[]): Promise<T> => {
    const r = await tsapi<T>(bin, s.urls.http, auth, args);
    if (r.code !== 0) throw new Error(`tsapi ${args[0]}: ${JSON.stringify(r.json)} ${r.stderr.trim()}`);
    return r.json;
  };
  /** refused runs one tsapi command expected to fail and returns the status the API answered (undefined if it succeeded). */
  const refused = async (auth: TsapiAuth, ...args: string[]): Promise<number | undefined> => {
    const r = await tsapi<{ status?: number }>(bin, s.urls.http, auth, args);
    return r.code === 0 ? undefined : r.json.status;
  };

  // OAuth clients, created through the Go client with the API key as Tailscale's own are.
  const ci = await call<V2Key>(apiKey, 'oauth-client-create', '--scopes', 'auth_keys,devices:core', '--tags', 'tag:ci,tag:web', '--description', 'ci');
  const reader = await call<V2Key>(apiKey, 'oauth-client-create', '--scopes', 'devices:core:read', '--description', 'reader');
  t.ok(ci.id && ci.key, 'the OAuth client has an id and a secret');
  const oauth: TsapiAuth = { oauthId: ci.id, oauthSecret: ci.key, scopes: ['auth_keys', 'devices:core'] };
  const readOnly: TsapiAuth = { oauthId: reader.id, oauthSecret: reader.key };

  const tag = label.replace(/\W/g, '');
  const dev = await TailscaleDevice.start({ name: `v2ci${tag}`, version: binaries.version });
  cleanups.push(() => dev.stop());
  const peer = await TailscaleDevice.start({ name: `v2peer${tag}`, version: binaries.version });
  cleanups.push(() => peer.stop());
  let device: V2Device | undefined;

  await t.test('an OAuth token (auth_keys, devices:core) creates a tagged, preauthorized key; a real tailscaled joins with it', async (t) => {
    const key = await call<V2Key>(oauth, 'keys-create', '--tags', 'tag:ci', '--preauthorized', '--expiry', '3600', '--description', 'ci runner');
    t.equal(key.keyType, 'auth');
    t.match(key.capabilities.devices.create, { reusable: false, ephemeral: false, preauthorized: true });
    t.same(key.capabilities.devices.create.tags, ['tag:ci']);
    const got = await call<V2Key>(oauth, 'key-get', key.id);
    t.equal(got.id, key.id);
    t.equal(got.key, '', 'a key read back carries no secret');
    t.same(got.capabilities.devices.create.tags, ['tag:ci']);
    const listed = await call<{ keys: V2Key[] }>(oauth, 'keys-list', '--all');
    t.ok(listed.keys.some((k) => k.id === key.id), 'the key is listed');

    const spare = await call<V2Key>(oauth, 'keys-create', '--tags', 'tag:ci');
    await call(oauth, 'key-delete', spare.id);
    t.equal(await refused(oauth, 'key-get', spare.id), 404, 'a deleted key is gone');
    t.equal(await refused(oauth, 'keys-create', '--tags', 'tag:other'), 403, "a tag outside the OAuth client's tags is refused");

    await dev.up({ loginServer: s.urls.http, authKey: key.key, hostname: 'ci', advertiseRoutes: [ROUTE], timeoutMs: JOIN_TIMEOUT_MS });
    const peerKey = (await s.state.keys.createPreAuthKey({ userId: alice.id })).secret;
    await peer.up({ loginServer: s.urls.http, authKey: peerKey, hostname: 'peer', timeoutMs: JOIN_TIMEOUT_MS });
    await peer.waitFor((st) => peerNamed(st, 'ci')?.Online === true, SYNC_TIMEOUT_MS);
    t.pass('the device joined and its peer sees it online');
  });

  await t.test('the device is listed and read with all fields, as the real client reports itself', async (t) => {
    const { devices } = await call<{ devices: V2Device[] }>(oauth, 'devices-list', '--all');
    device = devices.find((d) => d.hostname === 'ci');
    if (!device) return t.fail(`no device with hostname ci in ${JSON.stringify(devices.map((d) => d.hostname))}`);
    const ips = (await dev.cliOk(['ip'])).stdout.split('\n').map((l) => l.trim()).filter(Boolean);
    const version = await dev.version();
    for (const [how, d] of [['list', device], ['get', await call<V2Device>(oauth, 'device-get', '--all', device.nodeId)]] as const) {
      t.same(sorted(d.addresses), sorted(ips), `${how}: addresses are what tailscale ip shows`);
      t.equal(d.name, `ci.${BASE}`, `${how}: name is the MagicDNS name`);
      t.equal(d.os, 'linux', `${how}: os`);
      t.ok(d.clientVersion.startsWith(version), `${how}: clientVersion ${d.clientVersion} is the client's ${version}`);
      t.same(d.tags, ['tag:ci'], `${how}: tags come from the key`);
      t.equal(d.authorized, true, `${how}: preauthorized`);
      t.equal(d.connectedToControl, true, `${how}: connected`);
      t.equal(d.isEphemeral, false, `${how}: not ephemeral`);
      t.match(d.machineKey, /^mkey:[0-9a-f]{64}$/, `${how}: machine key`);
      t.match(d.nodeKey, /^nodekey:[0-9a-f]{64}$/, `${how}: node key`);
      t.same(d.AdvertisedRoutes, [ROUTE], `${how}: the advertised route`);
      t.same(d.enabledRoutes ?? [], [], `${how}: no route enabled yet`);
    }
    const byLegacyId = await call<V2Device>(oauth, 'device-get', device.id);
    t.equal(byLegacyId.nodeId, device.nodeId, 'the numeric id finds the same device');
    const plain = await call<{ devices: V2Device[] }>(readOnly, 'devices-list');
    t.ok(plain.devices.some((d) => d.nodeId === device!.nodeId), 'a devices:core:read token lists it too');
  });

  await t.test('renamed and retagged through the client, the other real device shows it', async (t) => {
    if (!device) return t.fail('no device');
    await call(oauth, 'device-name', device.nodeId, 'ci-renamed');
    await call(oauth, 'device-tags', device.nodeId, 'tag:web');
    const st = await peer.waitFor((st) => {
      const p = peerNamed(st, 'ci');
      return p?.DNSName === `ci-renamed.${BASE}.` && sorted(p.Tags).join() === 'tag:web';
    }, SYNC_TIMEOUT_MS, 100);
    t.same(peerNamed(st, 'ci')?.Tags, ['tag:web'], 'the peer sees the new tags');
    const got = await call<V2Device>(oauth, 'device-get', device.nodeId);
    t.equal(got.name, `ci-renamed.${BASE}`);
    t.same(got.tags, ['tag:web']);
    t.equal(await refused(oauth, 'device-tags', device.nodeId, 'tag:other'), 403, "a tag outside the OAuth client's tags is refused");
  });

  await t.test('an advertised subnet route enabled through the client reaches the other device', async (t) => {
    if (!device) return t.fail('no device');
    t.equal(await refused(oauth, 'routes-get', device.nodeId), 403, 'reading routes needs devices:routes, which the OAuth client lacks');
    t.equal(await refused(oauth, 'routes-set', device.nodeId, ROUTE), 403, 'so does enabling them');
    const routes = await call<{ advertisedRoutes: string[]; enabledRoutes: string[] | null }>(apiKey, 'routes-set', device.nodeId, ROUTE);
    t.same(routes, { advertisedRoutes: [ROUTE], enabledRoutes: [ROUTE] });
    const st = await peer.waitFor((st) => (peerNamed(st, 'ci')?.PrimaryRoutes ?? []).includes(ROUTE), SYNC_TIMEOUT_MS, 100);
    t.ok(peerNamed(st, 'ci')?.AllowedIPs?.includes(ROUTE), 'the route is in the peer\'s AllowedIPs');
    const all = await call<V2Device>(apiKey, 'device-get', '--all', device.nodeId);
    t.same(all.enabledRoutes, [ROUTE]);
  });

  await t.test('the policy file is set with If-Match; a stale ETag is refused with 412', async (t) => {
    const first = await call<{ hujson: string; etag: string }>(apiKey, 'acl-get');
    t.match(first.hujson, /interop policy \(first\)/, 'HuJSON as stored, comments kept');
    t.ok(first.etag, 'with an ETag');
    await call(apiKey, 'acl-set', '--if-match', first.etag, file('second.hujson', policy('second')));
    const second = await call<{ hujson: string; etag: string }>(apiKey, 'acl-get');
    t.match(second.hujson, /interop policy \(second\)/);
    t.not(second.etag, first.etag, 'a new ETag');
    t.equal(await refused(apiKey, 'acl-set', '--if-match', first.etag, file('third.hujson', policy('third'))), 412, 'the stale ETag');
    t.equal((await call<{ etag: string }>(apiKey, 'acl-get')).etag, second.etag, 'the refused write changed nothing');
    const parsed = await call<{ acl: { tagOwners: Record<string, string[]> } }>(apiKey, 'acl-get', '--json');
    t.same(Object.keys(parsed.acl.tagOwners).sort(), ['tag:ci', 'tag:other', 'tag:web'], 'the client parses the policy');
  });

  await t.test('validation reports a broken policy and a failing tests block', async (t) => {
    const withTests = (tests: string) => policy('tests').replace(/\}\s*$/, `  "tests": [${tests}],\n}\n`);
    const good = await call<{ valid: boolean }>(apiKey, 'acl-validate', file('good.hujson', withTests('{ "src": "alice@", "accept": ["tag:web:22"] }')));
    t.same(good, { valid: true }, 'a policy whose tests pass is valid');
    const broken = await call<{ valid: boolean; message: string }>(apiKey, 'acl-validate', file('broken.hujson', '{ "acls": [ { "action": "accept", '));
    t.equal(broken.valid, false, `a policy that does not parse is invalid: ${broken.message}`);
    const failing = await call<{ valid: boolean; message: string }>(apiKey, 'acl-validate', file('failing.hujson', withTests('{ "src": "alice@", "deny": ["tag:web:22"] }')));
    t.equal(failing.valid, false, `a policy whose tests fail is invalid: ${failing.message}`);
    t.match((await call<{ hujson: string }>(apiKey, 'acl-get')).hujson, /interop policy \(second\)/, 'validating stored nothing');
  });

  await t.test('nameservers and MagicDNS set through the client reach the device', async (t) => {
    const before = await dev.netmap();
    if (!before) return t.fail('the device has no network map');
    t.same(nameservers(before), ['1.1.1.1'], 'before: the nameserver of the config file (dns.mode: database starts from it)');
    t.not(dnsOf(before).Proxied, true, 'before: MagicDNS off');
    await call(apiKey, 'dns-nameservers-set', '9.9.9.9');
    t.same(await call(apiKey, 'dns-nameservers-get'), { dns: ['9.9.9.9'] });
    t.same(await call(apiKey, 'dns-preferences-set', '--magic-dns=true'), { magicDNS: true });
    const nm = await dev.waitNetmap((nm) => dnsOf(nm).Proxied === true && nameservers(nm).join() === '9.9.9.9',
      { timeoutMs: SYNC_TIMEOUT_MS, brief: (nm) => ({ nameservers: nameservers(nm), Proxied: dnsOf(nm).Proxied }) });
    t.same(nameservers(nm), ['9.9.9.9'], 'the new nameserver replaced the configured one');
    t.equal((await dev.status()).CurrentTailnet?.MagicDNSEnabled, true, 'the client reports MagicDNS on');
  });

  await t.test('tokens without the scope, or from a wrong secret, are refused', async (t) => {
    t.equal(await refused(readOnly, 'keys-create', '--tags', 'tag:ci'), 403, 'devices:core:read cannot create keys');
    if (device) t.equal(await refused(readOnly, 'device-delete', device.nodeId), 403, 'nor delete devices');
    t.equal(await refused({ oauthId: ci.id, oauthSecret: `${ci.key}x` }, 'devices-list'), 401, 'a wrong client secret');
    t.equal(await refused({ apiKey: 'hwkey-api-aaaaaaaaaaaa-' + 'A'.repeat(43) }, 'devices-list'), 401, 'an unknown API key');
    t.ok(await call(readOnly, 'devices-list'), 'the read-only client lists devices');
    const narrowed = await call<V2Key>(apiKey, 'oauth-client-set', '--scopes', 'dns:read', '--description', 'dns reader', reader.id);
    t.match(narrowed, { id: reader.id, scopes: ['dns:read'], description: 'dns reader' }, "SetOAuthClient replaces the client's scopes and description");
    t.equal(await refused(readOnly, 'devices-list'), 403, 'a token of the changed client no longer lists devices');
    t.ok(await call({ ...readOnly, scopes: ['dns:read'] }, 'dns-nameservers-get'), 'and reads DNS');
    await call(apiKey, 'key-delete', reader.id);
    t.equal(await refused(readOnly, 'devices-list'), 401, 'an OAuth client deleted through the keys endpoint gets no token');
  });

  await t.test('deleted through the client, the real device is logged out', async (t) => {
    if (!device) return t.fail('no device');
    await call(oauth, 'device-delete', device.nodeId);
    const st = await dev.waitFor((st) => st.BackendState === 'NeedsLogin', SYNC_TIMEOUT_MS, 100);
    t.equal(st.BackendState, 'NeedsLogin');
    await until('the peer drops the deleted device', async () => peerNamed(await peer.status(), 'ci') === undefined, SYNC_TIMEOUT_MS);
    const { devices } = await call<{ devices: V2Device[] }>(oauth, 'devices-list');
    t.notOk(devices.some((d) => d.nodeId === device!.nodeId), 'no longer listed');
    t.equal(await refused(oauth, 'device-get', device.nodeId), 404);
  });
}

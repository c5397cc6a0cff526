import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CERT_PIN_MIN_CAPABILITY_VERSION, DerpMapSource, embeddedRegion, relayHostName, relayNeedsOwnTls, type DerpMap } from '../src/index.js';
import { createLogger, resolveConfig, type HeadwayConfig } from '@headway/core';

const dir = mkdtempSync(join(tmpdir(), 'hw-derpmap-'));
function config(raw: Record<string, unknown>): HeadwayConfig {
  const { config, problems } = resolveConfig({ data_dir: dir, ...raw }, { env: {}, baseDir: dir });
  const bad = problems.filter((p) => p.level !== 'warn');
  if (bad.length) throw new Error(bad.map((p) => `${p.key}: ${p.message}`).join('; '));
  return config;
}
const pin = { port: 41234, certSha256: 'ab'.repeat(32) };
const nodeOf = (m: DerpMap) => m.Regions['999']!.Nodes[0]!;

t.test('the relay needs its own TLS port only with an http:// server_url and no tls_cert_path', async (t) => {
  t.equal(relayNeedsOwnTls(config({})), true, 'default server_url http://127.0.0.1:8080');
  t.equal(relayNeedsOwnTls(config({ server_url: 'https://hw.example.com' })), false, 'https: today\'s relay on listen_addr');
  t.equal(relayNeedsOwnTls(config({ tls_cert_path: join(dir, 'c.pem'), tls_key_path: join(dir, 'k.pem') })), false, 'TLS on listen_addr already');
  t.equal(relayNeedsOwnTls(config({ derp: { server: { enabled: false } } })), false, 'no relay');
  t.equal(config({}).derp.server.tls_listen_addr, '', 'default: listen_addr\'s host, any port');
  t.equal(config({ derp: { server: { tls_listen_addr: '0.0.0.0:8443' } } }).derp.server.tls_listen_addr, '0.0.0.0:8443');
  t.throws(() => config({ derp: { server: { tls_listen_addr: 'nonsense' } } }), /derp\.server\.tls_listen_addr: expected host:port/);
  t.equal(relayHostName(config({ server_url: 'http://[fd00::5]:8080' })), 'fd00::5');
});

t.test('DERP map entry for the relay\'s own TLS port: pinned for 1.82+, unverified TLS for older clients', async (t) => {
  const c = config({ server_url: 'http://hw.example.com:8080' });
  const pinned = embeddedRegion(c, 3478, pin).Nodes[0]!;
  t.same(pinned, {
    Name: '999', RegionID: 999, HostName: 'hw.example.com', DERPPort: 41234, STUNPort: 3478, CanPort80: false,
    CertName: `sha256-raw:${'ab'.repeat(32)}`,
  }, 'the bound TLS port and the certificate pin; no InsecureForTests');
  const legacy = embeddedRegion(c, 3478, pin, false).Nodes[0]!;
  t.same(legacy, { Name: '999', RegionID: 999, HostName: 'hw.example.com', DERPPort: 41234, STUNPort: 3478, CanPort80: false, InsecureForTests: true },
    'no CertName (1.80 would take it for a host name); TLS without verification');
  const plain = embeddedRegion(c, 3478).Nodes[0]!;
  t.match(plain, { DERPPort: 8080, InsecureForTests: true }, 'without a TLS port: the old plain-HTTP entry');
  t.notOk('CertName' in plain);
  const https = embeddedRegion(config({ server_url: 'https://hw.example.com' }), 3478, pin).Nodes[0]!;
  t.match(https, { DERPPort: pin.port }, 'the caller decides whether a TLS port exists');
  const httpsOnly = embeddedRegion(config({ server_url: 'https://hw.example.com' }), 3478).Nodes[0]!;
  t.match(httpsOnly, { DERPPort: 443, CanPort80: false });
  t.notOk('InsecureForTests' in httpsOnly || 'CertName' in httpsOnly, 'https: a normal CA-verified entry');
});

t.test('DerpMapSource: per-capability-version maps, serialized once; a new pin is published at once', async (t) => {
  const c = config({ server_url: 'http://127.0.0.1:8080' });
  let changes = 0;
  const src = new DerpMapSource(c, createLogger({ write: () => undefined }), () => changes++);
  src.stunPort = 3478;
  src.setRelayTls(pin);
  t.equal(changes, 0, 'before init nothing is published');
  await src.init();
  t.teardown(() => src.close());
  t.equal(nodeOf(src.map).CertName, `sha256-raw:${pin.certSha256}`);
  t.equal(nodeOf(src.mapFor(CERT_PIN_MIN_CAPABILITY_VERSION)).CertName, `sha256-raw:${pin.certSha256}`, `capability version ${CERT_PIN_MIN_CAPABILITY_VERSION} (1.82) pins`);
  t.equal(nodeOf(src.mapFor(130)).CertName, `sha256-raw:${pin.certSha256}`);
  t.equal(nodeOf(src.mapFor(undefined)).CertName, `sha256-raw:${pin.certSha256}`);
  const old = nodeOf(src.mapFor(113));
  t.equal(old.InsecureForTests, true, 'capability version 113 (1.80) gets unverified TLS');
  t.notOk('CertName' in old);
  t.equal(old.DERPPort, pin.port, 'on the same TLS port');
  t.same(JSON.parse(src.jsonFor(113)), src.mapFor(113));
  t.same(JSON.parse(src.jsonFor(130)), src.map);
  t.equal(src.jsonFor(130), src.jsonFor(131), 'one string per variant');

  src.setRelayTls({ port: pin.port, certSha256: 'cd'.repeat(32) });
  t.equal(changes, 1, 'a renewed certificate is published');
  t.equal(nodeOf(src.mapFor(130)).CertName, `sha256-raw:${'cd'.repeat(32)}`);
  t.match(src.jsonFor(130), /sha256-raw:(cd){32}/);
  t.equal(nodeOf(src.mapFor(113)).InsecureForTests, true);
  t.equal(await src.refresh(), false, 'a refresh with nothing new keeps the map');
  t.equal(changes, 1);
});

t.test('DerpMapSource without a TLS port: one map for every version', async (t) => {
  const src = new DerpMapSource(config({ server_url: 'https://hw.example.com' }), createLogger({ write: () => undefined }), () => undefined);
  src.stunPort = -1;
  await src.init();
  t.teardown(() => src.close());
  t.equal(src.jsonFor(113), src.jsonFor(130));
  t.equal(nodeOf(src.mapFor(113)).DERPPort, 443);
});

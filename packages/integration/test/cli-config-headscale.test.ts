/**
 * `headway config check` on headscale's configs: headscale v0.29.2's own config-example.yaml
 * (every key it sets) loads with no unknown key, and a trimmed headscale config that leaves out
 * keys whose defaults differ is warned about, naming each key and both values.
 */
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { runHeadway } from '../src/cli.js';
import { HEADSCALE_VERSION } from '../src/headscale-cli.js';
import { unmet } from '../src/unmet.js';

/** headscaleExample is config-example.yaml in the Go module cache .ci/install-headscale.sh builds headscale from. */
function headscaleExample(): string {
  const cache = process.env.GOMODCACHE || join(process.env.GOPATH || join(homedir(), 'go'), 'pkg', 'mod');
  return join(cache, 'github.com', 'juanfont', `headscale@${HEADSCALE_VERSION}`, 'config-example.yaml');
}

t.test('headscale\'s config-example.yaml: no unknown key, only not-implemented warnings, valid', async (t) => {
  const example = headscaleExample();
  if (!existsSync(example)) return unmet(t, `no headscale ${HEADSCALE_VERSION} source at ${example}; run .ci/install-headscale.sh`);
  const r = await runHeadway({}, ['config', 'check', '-c', example, '-o', 'json']);
  const out = JSON.parse(r.stdout) as { valid: boolean; problems: Array<{ level: string; key: string; message: string; code?: string }> };
  t.equal(out.valid, true, r.stdout);
  t.same(out.problems.filter((p) => /unknown key/.test(p.message)).map((p) => p.key), [], 'no unknown key');
  t.same(out.problems.filter((p) => p.level !== 'warn'), [], 'warnings only');
  t.same(out.problems.filter((p) => p.code === 'headscale_default'), [], 'the example sets every key whose default differs');
});

t.test('a headscale config leaving out keys whose defaults differ: config check warns, naming each', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-hs-defaults-'));
  const path = join(dir, 'config.yaml');
  writeFileSync(path, [
    'server_url: https://hs.example.com',
    'listen_addr: 127.0.0.1:8080',
    `noise:\n  private_key_path: ${join(dir, 'headscale', 'noise_private.key')}`,
    'dns:\n  base_domain: ts.example.com\n  nameservers:\n    global: [1.1.1.1]',
    '',
  ].join('\n'));
  const r = await runHeadway({}, ['config', 'check', '-c', path]);
  t.equal(r.code, 0, 'warnings only: it starts');
  t.match(r.stdout, /^warning: dns\.override_local_dns: absent, so Headway uses its default false where headscale used true .*noise\.private_key_path is under a headscale directory/m);
  t.match(r.stdout, /^warning: derp\.server\.enabled: absent, so Headway uses its default true where headscale used false/m);
  t.match(r.stdout, /^warning: node\.ephemeral\.inactivity_timeout: absent, so Headway uses its default 30m where headscale used 120s/m);
  t.notMatch(r.stdout, /derp\.auto_update_enabled/, 'no DERP map source: nothing to re-read either way');

  writeFileSync(path, [
    'server_url: https://hs.example.com',
    `noise:\n  private_key_path: ${join(dir, 'headscale', 'noise_private.key')}`,
    'dns:\n  override_local_dns: true\n  nameservers:\n    global: [1.1.1.1]',
    'derp:\n  server:\n    enabled: false',
    'node:\n  ephemeral:\n    inactivity_timeout: 120s',
    '',
  ].join('\n'));
  const set = await runHeadway({}, ['config', 'check', '-c', path, '--strict']);
  t.equal(set.code, 0, set.stdout);
  t.equal(set.stdout, `Config is valid (${path})\n`, 'every key set: nothing to say');
});

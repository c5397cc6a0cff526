import { execFile, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { running } from './pebble.js';
import { freePort } from './ports.js';

/**
 * Knot is a real authoritative DNS server (Debian's knotd) on 127.0.0.1 serving one
 * zone that accepts RFC 2136 updates signed with one TSIG key, as an operator's
 * BIND, Knot or PowerDNS would for ACME DNS-01 records.
 */
export interface Knot {
  /** address is host:port (UDP and TCP). */
  address: string;
  host: string;
  port: number;
  zone: string;
  /** key is the TSIG key updates must be signed with (secret in base64). */
  key: { name: string; algorithm: 'hmac-sha256'; secret: string };
  /** txt asks the server (kdig, over TCP) for the TXT values at `name`; [] when there are none. */
  txt(name: string): Promise<string[]>;
  stop(): Promise<void>;
}

/** knotMissing says why knotd cannot run here (undefined when it can): `.ci/run` installs Debian's knot and knot-dnsutils. */
export function knotMissing(): string | undefined {
  for (const tool of [['knotd', '--version'], ['kdig', '--version']]) {
    const r = spawnSync(tool[0]!, tool.slice(1), { stdio: 'ignore' });
    if (r.error || r.status !== 0) return `${tool[0]} is not installed (Debian packages knot and knot-dnsutils)`;
  }
  return undefined;
}

/** startKnot starts knotd with a fresh zone `zone` (SOA and NS only) and a fresh hmac-sha256 key. */
export async function startKnot(opts: { zone: string; keyName?: string }): Promise<Knot> {
  const work = mkdtempSync(join(tmpdir(), 'headway-knot-'));
  const port = await freePort();
  const zone = opts.zone.replace(/\.$/, '');
  const keyName = (opts.keyName ?? 'headway-acme').replace(/\.$/, '');
  const secret = randomBytes(32).toString('base64');
  writeFileSync(join(work, `${zone}.zone`), [
    `$ORIGIN ${zone}.`, '$TTL 60',
    `@ SOA ns.${zone}. hostmaster.${zone}. 1 3600 600 86400 60`,
    '@ NS ns', 'ns A 127.0.0.1', '',
  ].join('\n'));
  writeFileSync(join(work, 'knot.conf'), [
    'server:', `  rundir: "${work}"`, `  listen: 127.0.0.1@${port}`,
    'log:', '  - target: stderr', '    any: info',
    'database:', `  storage: "${work}"`,
    'key:', `  - id: ${keyName}.`, '    algorithm: hmac-sha256', `    secret: ${secret}`,
    'acl:', '  - id: acme-update', `    key: ${keyName}.`, '    action: update',
    'zone:', `  - domain: ${zone}.`, `    storage: "${work}"`, `    file: "${zone}.zone"`, '    acl: acme-update', '    zonefile-sync: -1', '',
  ].join('\n'));
  const child = spawn('knotd', ['-c', join(work, 'knot.conf')], { stdio: ['ignore', 'pipe', 'pipe'] });
  const { stop } = await running(child, port, work, 'knotd');
  const txt = async (name: string): Promise<string[]> => {
    const { stdout } = await promisify(execFile)('kdig', ['+tcp', '+short', '+time=2', '+retry=0', `@127.0.0.1`, '-p', String(port), name, 'TXT']);
    return stdout.split('\n').filter(Boolean).map((line) => line.replace(/^"|"$/g, ''));
  };
  // Listening comes before the zone is loaded: ready once the zone answers its SOA.
  for (let i = 0; ; i++) {
    const soa = await promisify(execFile)('kdig', ['+tcp', '+short', '+time=1', '+retry=0', '@127.0.0.1', '-p', String(port), `${zone}.`, 'SOA']).then((r) => r.stdout, () => '');
    if (soa.includes(`ns.${zone}.`)) break;
    if (i >= 100) { await stop(); throw new Error(`knotd did not serve ${zone} on port ${port}`); }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { address: `127.0.0.1:${port}`, host: '127.0.0.1', port, zone, key: { name: keyName, algorithm: 'hmac-sha256', secret }, txt, stop };
}

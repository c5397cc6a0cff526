import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { DNS, type AdapterDescriptor, type DnsPort, type OptionProblem } from '@headway/core/ports';
import { TSIG_ALGORITHMS, type TsigAlgorithm } from './tsig.js';
import { UpdateClient } from './update.js';

export { UpdateClient, type UpdateClientOptions } from './update.js';
export { TSIG_ALGORITHMS, type TsigAlgorithm, type TsigKey } from './tsig.js';

/**
 * Rfc2136Options are the plugin's `options:`. The key secret is given inline or,
 * better, as a file readable only by Headway (a BIND/Knot key file or the bare
 * base64 secret); it is never logged or echoed in an error.
 */
export interface Rfc2136Options {
  /** server: the primary's address, `host`, `host:port` or `[v6]:port` (port 53 when left out). */
  server: string;
  /** zone: the zone that holds dns.base_domain (its apex). */
  zone: string;
  key_name: string;
  key_algorithm?: TsigAlgorithm;
  key_secret?: string;
  key_secret_path?: string;
  /** ttl of the TXT records, in seconds (default 60). */
  ttl?: number;
  /** timeout of one update, in milliseconds (default 5000). */
  timeout?: number;
}

const OPTIONS = ['server', 'zone', 'key_name', 'key_algorithm', 'key_secret', 'key_secret_path', 'ttl', 'timeout'];
const DOMAIN = /^(?=.{1,253}\.?$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$/i;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/** parseServer splits `host`, `host:port` or `[v6]:port`. */
function parseServer(s: string): { host: string; port: number } | undefined {
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(s);
  const [host, port] = v6 ? [v6[1]!, v6[2]] : isIP(s) === 6 ? [s, undefined] : s.split(':') as [string, string | undefined];
  const p = port === undefined ? 53 : Number(port);
  if (!host || !Number.isInteger(p) || p < 1 || p > 65535 || (!isIP(host) && !DOMAIN.test(host))) return undefined;
  return { host, port: p };
}

/** readSecret takes the base64 secret from a key file: BIND/Knot `secret "..."` syntax, or the bare secret. */
function readSecret(path: string): string {
  const text = readFileSync(path, 'utf8');
  return (/secret\s*:?\s*"?([A-Za-z0-9+/=]+)"?/.exec(text)?.[1] ?? text).trim();
}

/** check returns every problem of the options, and the client they describe when there are none. */
export function checkOptions(o: Record<string, unknown>): { problems: OptionProblem[]; client?: UpdateClient } {
  const problems: OptionProblem[] = [];
  const bad = (option: string, message: string) => problems.push({ option, message });
  for (const k of Object.keys(o)) if (!OPTIONS.includes(k)) bad(k, `unknown option (this plugin takes: ${OPTIONS.join(', ')})`);
  const server = typeof o.server === 'string' ? parseServer(o.server) : undefined;
  if (!server) bad('server', o.server === undefined ? 'required: the DNS primary, host or host:port' : `expected host or host:port, found ${JSON.stringify(o.server)}`);
  const zone = typeof o.zone === 'string' && DOMAIN.test(o.zone) ? o.zone.replace(/\.$/, '').toLowerCase() : undefined;
  if (!zone) bad('zone', o.zone === undefined ? 'required: the zone that holds dns.base_domain' : `expected a zone name such as example.net, found ${JSON.stringify(o.zone)}`);
  const keyName = typeof o.key_name === 'string' && DOMAIN.test(o.key_name) ? o.key_name.replace(/\.$/, '') : undefined;
  if (!keyName) bad('key_name', o.key_name === undefined ? 'required: the TSIG key name the DNS server knows' : 'expected a key name such as headway-acme');
  const algorithm = (o.key_algorithm ?? 'hmac-sha256') as TsigAlgorithm;
  if (!(algorithm in TSIG_ALGORITHMS)) bad('key_algorithm', `expected one of ${Object.keys(TSIG_ALGORITHMS).join(', ')}`);
  let secret: string | undefined;
  if ((o.key_secret === undefined) === (o.key_secret_path === undefined)) {
    bad('key_secret', 'set exactly one of key_secret (base64) and key_secret_path (a file holding it)');
  } else if (o.key_secret !== undefined) {
    if (typeof o.key_secret === 'string' && BASE64.test(o.key_secret)) secret = o.key_secret;
    else bad('key_secret', 'expected the key secret in base64');
  } else if (typeof o.key_secret_path !== 'string' || !o.key_secret_path) {
    bad('key_secret_path', 'expected a file path');
  } else {
    try {
      secret = readSecret(o.key_secret_path);
      if (!BASE64.test(secret)) { secret = undefined; bad('key_secret_path', `${o.key_secret_path} holds no base64 secret`); }
    } catch (err) {
      bad('key_secret_path', `cannot read ${o.key_secret_path}: ${(err as NodeJS.ErrnoException).code ?? 'error'}`);
    }
  }
  const ttl = o.ttl ?? 60;
  if (!Number.isInteger(ttl) || (ttl as number) < 1 || (ttl as number) > 86_400) bad('ttl', 'expected whole seconds from 1 to 86400');
  const timeout = o.timeout ?? 5000;
  if (!Number.isInteger(timeout) || (timeout as number) < 100 || (timeout as number) > 120_000) bad('timeout', 'expected milliseconds from 100 to 120000');
  if (problems.length) return { problems };
  const client = new UpdateClient({
    host: server!.host, port: server!.port, zone: zone!, ttl: ttl as number, timeoutMs: timeout as number,
    key: { name: keyName!, algorithm, secret: Buffer.from(secret!, 'base64') },
  });
  return { problems, client };
}

/**
 * Rfc2136Publisher is the DNS plugin: it adds no MagicDNS records and publishes the
 * ACME challenge records of device certificates in a zone on a DNS server that
 * takes RFC 2136 updates signed with TSIG.
 */
export class Rfc2136Publisher implements DnsPort {
  constructor(private readonly client: UpdateClient) {}
  setTxt(fqdn: string, values: string[]): Promise<void> { return this.client.setTxt(fqdn, values); }
  removeTxt(fqdn: string): Promise<void> { return this.client.removeTxt(fqdn); }
}

const descriptor: AdapterDescriptor<Rfc2136Options> = {
  port: 'dns',
  id: 'rfc2136',
  validate: (options) => checkOptions(options).problems,
  register({ container, options, config }) {
    const { problems, client } = checkOptions((options ?? {}) as Record<string, unknown>);
    if (!client) throw new Error(problems.map((p) => `option "${p.option}": ${p.message}`).join('; '));
    const zone = (options as Rfc2136Options).zone.replace(/\.$/, '').toLowerCase();
    const base = config.dns.base_domain.replace(/\.$/, '').toLowerCase();
    if (config.dns.certificates.enabled && base !== zone && !base.endsWith(`.${zone}`)) {
      throw new Error(`option "zone": ${zone} does not hold dns.base_domain ${base}; device names are published under it`);
    }
    const plugin = new Rfc2136Publisher(client);
    container.register(DNS, { resolve: () => plugin, lifetime: 'SINGLETON' });
  },
};
export default descriptor;

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.js';

/**
 * Pebble is Let's Encrypt's ACME test CA running on 127.0.0.1, built by .ci/install-pebble.sh into
 * $PEBBLE_HOME/<version>/. It validates challenges for real: HTTP-01 on `httpPort`, TLS-ALPN-01 on `tlsPort`
 * and DNS-01 by asking `dnsServer` for the TXT record; names are resolved through `dnsServer` too.
 */
export interface Pebble {
  /** directory is the ACME directory URL (https, served with pebble's own test certificate). */
  directory: string;
  /** listenerCaPem is the root that signs pebble's HTTPS listener (its test minica): an ACME client must trust it. */
  listenerCaPem: string;
  /** listenerCaFile is that root as a file, for SSL_CERT_FILE or NODE_EXTRA_CA_CERTS of a child process. */
  listenerCaFile: string;
  /** issuerRootPem is the root pebble issues certificates under (new on every start): what a TLS client must trust. */
  issuerRootPem(): Promise<string>;
  stop(): Promise<void>;
}

/** PebbleChallTestSrv is pebble-challtestsrv used only as a DNS server with a management API (A records, TXT records). */
export interface PebbleChallTestSrv {
  dnsAddress: string;
  /** setA answers `host` with 127.0.0.1 (pebble connects there for HTTP-01 and TLS-ALPN-01). */
  setA(host: string, address?: string): Promise<void>;
  setTxt(host: string, value: string): Promise<void>;
  clearTxt(host: string): Promise<void>;
  /** managementUrl is the challenge-server API (`/set-txt`, `/clear-txt`, `/add-a`, ...). */
  managementUrl: string;
  stop(): Promise<void>;
}

/** pebbleDir is where .ci/install-pebble.sh put the binaries and certs, or undefined when it has not run. */
export function pebbleDir(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const root = env['PEBBLE_HOME'] || join(homedir(), '.cache', 'headway', 'pebble');
  if (!existsSync(root)) return undefined;
  const versions = readdirSync(root).filter((v) => /^v\d/.test(v) && existsSync(join(root, v, 'pebble'))).sort();
  const v = versions.at(-1);
  return v ? join(root, v) : undefined;
}

/** pebbleMissing says why pebble cannot run here (undefined when it can). */
export function pebbleMissing(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const dir = pebbleDir(env);
  if (!dir || !existsSync(join(dir, 'pebble-challtestsrv'))) return 'pebble is not built (bash .ci/install-pebble.sh)';
  return undefined;
}

export interface PebbleOptions {
  /** dnsServer: host:port pebble resolves names and DNS-01 records with. */
  dnsServer: string;
  /** httpPort and tlsPort: where pebble connects for HTTP-01 and TLS-ALPN-01 (the ACME client's listeners). */
  httpPort?: number;
  tlsPort?: number;
  /** validitySeconds of issued certificates (pebble's default profile: 90 days). */
  validitySeconds?: number;
}

/** startPebble starts pebble with a fresh CA; PEBBLE_VA_NOSLEEP keeps validation immediate. */
export async function startPebble(opts: PebbleOptions): Promise<Pebble> {
  const dir = pebbleDir();
  if (!dir) throw new Error(pebbleMissing());
  const work = mkdtempSync(join(tmpdir(), 'headway-pebble-'));
  const port = await freePort();
  const managementPort = await freePort();
  const config = {
    pebble: {
      listenAddress: `127.0.0.1:${port}`,
      managementListenAddress: `127.0.0.1:${managementPort}`,
      certificate: join(dir, 'certs', 'localhost', 'cert.pem'),
      privateKey: join(dir, 'certs', 'localhost', 'key.pem'),
      httpPort: opts.httpPort ?? 5002,
      tlsPort: opts.tlsPort ?? 5001,
      ocspResponderURL: '',
      externalAccountBindingRequired: false,
      retryAfter: { authz: 1, order: 1 },
      profiles: { default: { description: 'test', validityPeriod: opts.validitySeconds ?? 7_776_000 } },
    },
  };
  const cfg = join(work, 'pebble.json');
  writeFileSync(cfg, JSON.stringify(config));
  const listenerCaFile = join(dir, 'certs', 'pebble.minica.pem');
  const child = spawn(join(dir, 'pebble'), ['-config', cfg, '-dnsserver', opts.dnsServer], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, PEBBLE_VA_NOSLEEP: '1', PEBBLE_WFE_NONCEREJECT: '0', PEBBLE_AUTHZREUSE: '0' },
  });
  const { stop } = await running(child, port, work, 'pebble');
  const managementBase = `https://127.0.0.1:${managementPort}`;
  const caPem = readFileSync(listenerCaFile, 'utf8');
  return {
    directory: `https://127.0.0.1:${port}/dir`,
    listenerCaPem: caPem,
    listenerCaFile,
    issuerRootPem: () => httpsGet(`${managementBase}/roots/0`, caPem),
    stop,
  };
}

/** startChallTestSrv runs pebble-challtestsrv as a DNS server only (every other listener off). */
export async function startChallTestSrv(): Promise<PebbleChallTestSrv> {
  const dir = pebbleDir();
  if (!dir) throw new Error(pebbleMissing());
  const dnsPort = await freePort();
  const managementPort = await freePort();
  const child = spawn(join(dir, 'pebble-challtestsrv'), [
    '-dnsserver', `127.0.0.1:${dnsPort}`, '-management', `127.0.0.1:${managementPort}`,
    '-http01', '', '-https01', '', '-tlsalpn01', '', '-doh', '', '-defaultIPv6', '',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  const { stop } = await running(child, managementPort, undefined, 'pebble-challtestsrv');
  const managementUrl = `http://127.0.0.1:${managementPort}`;
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${managementUrl}${path}`, { method: 'POST', body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`pebble-challtestsrv ${path}: ${res.status} ${await res.text()}`);
  };
  return {
    dnsAddress: `127.0.0.1:${dnsPort}`,
    managementUrl,
    setA: (host, address = '127.0.0.1') => post('/add-a', { host, addresses: [address] }),
    setTxt: (host, value) => post('/set-txt', { host: host.endsWith('.') ? host : `${host}.`, value }),
    clearTxt: (host) => post('/clear-txt', { host: host.endsWith('.') ? host : `${host}.` }),
    stop,
  };
}

/** running waits for a child server to listen on 127.0.0.1:port; its stop ends it and removes `work`. */
export async function running(child: ChildProcess, port: number, work: string | undefined, name: string): Promise<{ stop(): Promise<void> }> {
  let output = '';
  child.stdout!.on('data', (c: Buffer) => { output += c.toString(); });
  child.stderr!.on('data', (c: Buffer) => { output += c.toString(); });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    await exited;
    if (work) rmSync(work, { recursive: true, force: true });
  };
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) { await stop(); throw new Error(`${name} exited: ${output.trim()}`); }
    if (await reachable(port)) return { stop };
    if (i >= 200) { await stop(); throw new Error(`${name} did not listen on ${port}: ${output.trim()}`); }
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function httpsGet(url: string, caPem: string): Promise<string> {
  const { request } = await import('node:https');
  return new Promise((resolve, reject) => {
    const req = request(url, { ca: caPem }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => { body += c; });
      res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`${url}: ${res.statusCode} ${body}`))));
    });
    req.on('error', reject);
    req.end();
  });
}

function reachable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => resolve(false));
  });
}

import { X509Certificate, createPrivateKey } from 'node:crypto';
import { mkdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { HeadwayConfig } from '../config/schema.js';
import { readKeyFile } from './keyfile.js';

/** StartupError is a problem with a configured path or file, named by its key, found before anything is changed. */
export class StartupError extends Error {
  constructor(readonly key: string, message: string) {
    super(`${key}: ${message}`);
    this.name = 'StartupError';
  }
}

const code = (err: unknown) => (err as NodeJS.ErrnoException).code ?? (err as Error).message;

/**
 * makeDirectory creates `dir` and its missing parents one level at a time (mode `mode`), naming `key` in any
 * error. Node's recursive mkdirSync loops forever where a parent refuses new entries with ENOENT (a path under
 * /proc held the server at 100% CPU with no output), and answered a file in the way with a bare EEXIST.
 */
export function makeDirectory(dir: string, key: string, mode = 0o700): void {
  const missing: string[] = [];
  for (let at = resolve(dir); ; ) {
    let isDir: boolean;
    try {
      isDir = statSync(at).isDirectory();
    } catch (err) {
      if (code(err) !== 'ENOENT' && code(err) !== 'ENOTDIR') throw new StartupError(key, `cannot use ${at}: ${code(err)}`);
      missing.push(at);
      const up = dirname(at);
      if (up === at) break;
      at = up;
      continue;
    }
    if (!isDir) throw new StartupError(key, `${at} is not a directory`);
    break;
  }
  for (const d of missing.reverse()) {
    try {
      mkdirSync(d, { mode });
    } catch (err) {
      if (code(err) !== 'EEXIST') throw new StartupError(key, `cannot create directory ${d}: ${code(err)}`);
    }
  }
}

/** readable reads a configured file whole, or throws naming its key. */
function readable(key: string, path: string): Buffer {
  let isFile: boolean;
  try {
    isFile = statSync(path).isFile();
  } catch (err) {
    throw new StartupError(key, `cannot read ${path}: ${code(err) === 'ENOENT' ? 'no such file' : code(err)}`);
  }
  if (!isFile) throw new StartupError(key, `${path} is not a file`);
  try {
    return readFileSync(path);
  } catch (err) {
    throw new StartupError(key, `cannot read ${path}: ${code(err)}`);
  }
}

/**
 * preflight checks the files the configuration names before the database is opened (and migrated) or any key is
 * generated, so that a typo in a path stops the server having changed nothing: the TLS certificate and key (read
 * and parsed), the existing private keys, the policy file (file mode), DERP map files and the extra records file.
 * The TLS files it has read and parsed are returned for the listener; the others are read again, and checked in
 * full, where they are used.
 */
export function preflight(config: HeadwayConfig): { tls?: { cert: Buffer; key: Buffer } } {
  let tls: { cert: Buffer; key: Buffer } | undefined;
  if (config.tls_cert_path) {
    const cert = readable('tls_cert_path', config.tls_cert_path);
    try { new X509Certificate(cert); } catch { throw new StartupError('tls_cert_path', `${config.tls_cert_path} is not a PEM certificate`); }
    const key = readable('tls_key_path', config.tls_key_path);
    try { createPrivateKey(key); } catch { throw new StartupError('tls_key_path', `${config.tls_key_path} is not a PEM private key`); }
    tls = { cert, key };
  }
  const keys: [string, string][] = [['noise.private_key_path', config.noise.private_key_path]];
  if (config.derp.server.enabled) keys.push(['derp.server.private_key_path', config.derp.server.private_key_path]);
  for (const [key, path] of keys) {
    try {
      readKeyFile(path);
    } catch (err) {
      throw new StartupError(key, (err as Error).message);
    }
  }
  if (config.policy.mode === 'file' && config.policy.path) readable('policy.path', config.policy.path);
  for (const p of config.derp.paths) readable('derp.paths', p);
  if (config.dns.extra_records_path) readable('dns.extra_records_path', config.dns.extra_records_path);
  return { tls };
}

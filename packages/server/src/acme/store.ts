import { chmodSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/*
 * Where the ACME account key and the certificate live between starts. A single server keeps them in
 * tls_letsencrypt_cache_dir; cluster instances share them through the database (store-db.ts).
 */

/** CachedCertificate is a PEM chain and its key as stored. */
export interface CachedCertificate { certPem: string; keyPem: string }

/** CertificateStore keeps the account key and the certificate; a cluster's also hands out the lease to order. */
export interface CertificateStore {
  /** where names the store in log lines and errors. */
  readonly where: string;
  /** shared: several instances use the store (a cluster's database), so one may renew for all. */
  readonly shared?: boolean;
  loadAccountKey(): Promise<string | undefined>;
  saveAccountKey(pem: string): Promise<void>;
  load(): Promise<CachedCertificate | undefined>;
  save(cert: CachedCertificate): Promise<void>;
  /**
   * lease asks to be the one instance that orders for the next `ms`: true when this holder has it (a store
   * for one server always says true). Another instance's certificate arrives through load().
   */
  lease(holder: string, ms: number): Promise<boolean>;
  release(holder: string): Promise<void>;
  /**
   * shared stores (a cluster's) also carry the answers to a running validation, so that whichever instance the CA
   * reaches answers it: putAnswer with undefined deletes.
   */
  putAnswer?(name: string, value: string | undefined): Promise<void>;
  getAnswer?(name: string): Promise<string | undefined>;
}

/** FILE_MODE: the keys are secrets; the certificate is kept with its key. */
const FILE_MODE = 0o600;

/**
 * DirectoryStore keeps `account.key`, `<host>.key` and `<host>.crt` in tls_letsencrypt_cache_dir (0700, files
 * 0600), each written to a temporary file and renamed so a crash never leaves half a key.
 */
export class DirectoryStore implements CertificateStore {
  readonly where: string;
  constructor(private readonly dir: string, private readonly host: string) { this.where = dir; }

  private path(name: string): string { return join(this.dir, name); }

  private read(name: string): string | undefined {
    try { return readFileSync(this.path(name), 'utf8'); } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw new Error(`tls_letsencrypt_cache_dir: cannot read ${this.path(name)}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }

  private write(name: string, text: string): void {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const tmp = this.path(`.${name}.${process.pid}.tmp`);
    writeFileSync(tmp, text, { mode: FILE_MODE });
    chmodSync(tmp, FILE_MODE);
    renameSync(tmp, this.path(name));
  }

  /** check says, at start, whether the directory can be made and written (a wrong path stops the start naming the key). */
  check(): void {
    try {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      if (!statSync(this.dir).isDirectory()) throw new Error('not a directory');
      const probe = this.path(`.probe.${process.pid}`);
      writeFileSync(probe, '', { mode: FILE_MODE });
      renameSync(probe, this.path('.probe'));
    } catch (err) {
      throw new Error(`tls_letsencrypt_cache_dir: ${this.dir} cannot be written: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
  }

  async loadAccountKey(): Promise<string | undefined> { return this.read('account.key'); }
  async saveAccountKey(pem: string): Promise<void> { this.write('account.key', pem); }

  async load(): Promise<CachedCertificate | undefined> {
    const certPem = this.read(`${this.host}.crt`);
    const keyPem = this.read(`${this.host}.key`);
    if (certPem && keyPem) return { certPem, keyPem };
    return this.loadHeadscale();
  }

  /** loadHeadscale reads the file headscale's cache (Go's autocert) keeps for the host: the key, then the chain. */
  private loadHeadscale(): CachedCertificate | undefined {
    const text = this.read(this.host);
    if (!text) return undefined;
    const blocks = text.match(/-----BEGIN ([A-Z ]+)-----[\s\S]+?-----END \1-----/g) ?? [];
    const keyPem = blocks.find((b) => /^-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(b));
    const certs = blocks.filter((b) => b.startsWith('-----BEGIN CERTIFICATE-----'));
    return keyPem && certs.length ? { keyPem: `${keyPem}\n`, certPem: `${certs.join('\n')}\n` } : undefined;
  }

  async save(cert: CachedCertificate): Promise<void> {
    // The key first: a crash between the two leaves a new key with the old certificate, which load() refuses.
    this.write(`${this.host}.key`, cert.keyPem);
    this.write(`${this.host}.crt`, cert.certPem);
  }

  async lease(): Promise<boolean> { return true; }
  async release(): Promise<void> { /* one server: nothing to release */ }
}

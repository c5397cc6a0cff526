import { createHash } from 'node:crypto';
import type { ClusterPort } from '@headway/core';
import type { CachedCertificate, CertificateStore } from './store.js';

/*
 * The certificate of a cluster (several instances on one database): one row holds the chain and its key, another
 * the ACME account key; a lease lets one instance order at a time, and the answers to its validation are rows too,
 * so the CA may reach any instance behind the balancer.
 */

/** SharedValues are the optional ClusterPort methods the store needs. */
type SharedValues = Required<Pick<ClusterPort, 'getValue' | 'setValue'>> & Pick<ClusterPort, 'acquireLease' | 'releaseLease'>;

/** sharedValues is the cluster port when its adapter keeps shared values, else undefined (each instance then uses its cache dir). */
export function sharedValues(cluster: ClusterPort | undefined): SharedValues | undefined {
  return cluster?.getValue && cluster.setValue ? (cluster as SharedValues) : undefined;
}

/** fit keeps a row name within its column (lease names 64 characters, value names 255): a longer one is hashed. */
function fit(name: string, max: number): string {
  return name.length <= max ? name : `acme:${createHash('sha256').update(name).digest('hex').slice(0, 40)}`;
}

export class DatabaseStore implements CertificateStore {
  readonly where = 'the database';
  readonly shared = true;
  private readonly account: string;
  constructor(private readonly db: SharedValues, private readonly host: string, directoryUrl: string) {
    this.account = fit(`acme:account:${directoryUrl}`, 255);
  }

  loadAccountKey(): Promise<string | undefined> { return this.db.getValue(this.account); }
  saveAccountKey(pem: string): Promise<void> { return this.db.setValue(this.account, pem); }

  async load(): Promise<CachedCertificate | undefined> {
    const text = await this.db.getValue(fit(`acme:certificate:${this.host}`, 255));
    if (!text) return undefined;
    try {
      const v = JSON.parse(text) as Partial<CachedCertificate>;
      return typeof v.certPem === 'string' && typeof v.keyPem === 'string' ? { certPem: v.certPem, keyPem: v.keyPem } : undefined;
    } catch { return undefined; }
  }

  save(cert: CachedCertificate): Promise<void> {
    return this.db.setValue(fit(`acme:certificate:${this.host}`, 255), JSON.stringify({ certPem: cert.certPem, keyPem: cert.keyPem }));
  }

  lease(holder: string, ms: number): Promise<boolean> { return this.db.acquireLease(fit(`acme:${this.host}`, 64), holder, ms); }
  release(holder: string): Promise<void> { return this.db.releaseLease(fit(`acme:${this.host}`, 64), holder); }

  putAnswer(name: string, value: string | undefined): Promise<void> { return this.db.setValue(fit(`acme:answer:${name}`, 255), value); }
  getAnswer(name: string): Promise<string | undefined> { return this.db.getValue(fit(`acme:answer:${name}`, 255)); }
}

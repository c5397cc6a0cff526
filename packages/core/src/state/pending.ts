import type { PendingRegistration } from '../domain.js';
import type { HeadwayConfig } from '../config/schema.js';
import { HeadwayError } from '../errors.js';
import type { Logger } from '../log.js';
import type { StoragePort } from '../ports/storage.js';
import { randomToken } from '../secrets.js';
import { atomically } from './writes.js';

/** PendingLimits are the caps PendingQuota enforces (registration.max_pending, registration.max_pending_per_address). */
export interface PendingLimits {
  max_pending: number;
  max_pending_per_address: number;
}

interface Entry { key: string; source: string; machineKey: string; nodeKey: string; expiresAt: number }

/**
 * PER_MACHINE caps the logins one machine may have waiting, one per node key. More than one:
 * tailscaled retries the register of an earlier attempt (after a rejection it even uses the
 * previous node key), and with one per machine that retry would replace the login the person is
 * about to approve.
 */
export const PER_MACHINE = 3;

/** pendingQuotaError is the 429 for a login refused by a cap (the same whichever of memory or the database refused it). */
export function pendingQuotaError(limit: 'perSource' | 'total', source: string, limits: PendingLimits): HeadwayError {
  return limit === 'perSource'
    ? new HeadwayError('rate_limited', `too many logins waiting for approval from ${source} (registration.max_pending_per_address ${limits.max_pending_per_address}); approve or let them expire first`)
    : new HeadwayError('rate_limited', `too many logins waiting for approval (registration.max_pending ${limits.max_pending}); approve or let them expire first`);
}

/**
 * PendingQuota counts interactive logins waiting for approval, overall and per source address, in memory: the
 * register path's look-up of the login a machine already waits on (keyOf), and a cheap first filter in front of
 * the database, which decides (PendingRegistrationRepository.putWithinQuota): its entries are logins this
 * process stored and has not seen go, a subset of the rows while one instance owns the database, so a refusal
 * here is one the database would make too. A machine holds at most one per node key and PER_MACHINE in all
 * (a new one replaces the oldest), so the entry a new login replaces is not counted against it.
 * After a restart, rows written before it are not counted here, but the database counts them.
 */
export class PendingQuota {
  private readonly byKey = new Map<string, Entry>();
  private readonly byMachine = new Map<string, Entry[]>();
  private readonly bySource = new Map<string, Set<Entry>>();

  constructor(private readonly limits: () => PendingLimits, private readonly now: () => number = Date.now) {}

  /** check throws a 429 naming the limit when one more login for machineKey from source is too many. */
  check(source: string, machineKey: string, nodeKey = ''): void {
    const limits = this.limits();
    const { max_pending, max_pending_per_address } = limits;
    const own = this.replaced(machineKey, nodeKey);
    const count = (n: number, mine: boolean) => n - (own && (!mine || own.source === source) ? 1 : 0);
    if (count(this.bySource.get(source)?.size ?? 0, true) >= max_pending_per_address || count(this.byKey.size, false) >= max_pending) this.prune();
    if (count(this.bySource.get(source)?.size ?? 0, true) >= max_pending_per_address) throw pendingQuotaError('perSource', source, limits);
    if (count(this.byKey.size, false) >= max_pending) throw pendingQuotaError('total', source, limits);
  }

  /** replaced is the login a new one for (machineKey, nodeKey) replaces: the same node key's, or the machine's oldest when it has PER_MACHINE. */
  replaced(machineKey: string, nodeKey: string): Entry | undefined {
    const list = this.byMachine.get(machineKey) ?? [];
    return list.find((e) => e.nodeKey === nodeKey) ?? (list.length >= PER_MACHINE ? list[0] : undefined);
  }

  /**
   * add records a login the database stored, and forgets the ones it replaced (putWithinQuota's answer) and any
   * other of the same node key still listed (one stored concurrently, which the database replaced as well).
   */
  add(key: string, source: string, machineKey: string, expiresAt: number, nodeKey: string, replaced: readonly string[]): void {
    for (const k of replaced) this.remove(k);
    for (const e of [...(this.byMachine.get(machineKey) ?? [])]) if (e.nodeKey === nodeKey) this.remove(e.key);
    const e: Entry = { key, source, machineKey, nodeKey, expiresAt };
    this.byKey.set(key, e);
    const list = this.byMachine.get(machineKey) ?? this.byMachine.set(machineKey, []).get(machineKey)!;
    list.push(e);
    const set = this.bySource.get(source) ?? this.bySource.set(source, new Set()).get(source)!;
    set.add(e);
  }

  /** keyOf is the key of the login (machineKey, nodeKey) waits on, if it has one that has not expired. */
  keyOf(machineKey: string, nodeKey: string): string | undefined {
    const e = this.byMachine.get(machineKey)?.find((x) => x.nodeKey === nodeKey);
    return e && e.expiresAt > this.now() ? e.key : undefined;
  }

  remove(key: string): void {
    const e = this.byKey.get(key);
    if (!e) return;
    this.byKey.delete(key);
    const list = this.byMachine.get(e.machineKey);
    if (list) {
      const i = list.indexOf(e);
      if (i >= 0) list.splice(i, 1);
      if (!list.length) this.byMachine.delete(e.machineKey);
    }
    const set = this.bySource.get(e.source);
    if (set?.delete(e) && !set.size) this.bySource.delete(e.source);
  }

  /** prune forgets expired entries (their rows are deleted by the periodic sweep). */
  prune(): void {
    const now = this.now();
    for (const e of [...this.byKey.values()]) if (e.expiresAt <= now) this.remove(e.key);
  }

  /** size counts the logins tracked, overall or from one source. */
  size(source?: string): number {
    return source === undefined ? this.byKey.size : this.bySource.get(source)?.size ?? 0;
  }
}

/**
 * PendingLogins are the interactive logins waiting for approval. They live in the
 * database (a login may be approved on any instance); `quota` counts the ones this
 * process stored, a first filter in front of the database's caps (registration.*).
 */
export class PendingLogins {
  readonly quota = new PendingQuota(() => this.config.registration);
  /** turn is the create running now, which the next one waits for. */
  private turn: Promise<unknown> = Promise.resolve();

  /** clustered says whether other instances write the same database (then their logins count too, and only it decides). */
  constructor(
    private readonly storage: StoragePort,
    private readonly config: HeadwayConfig,
    private readonly logger: Logger,
    private readonly clustered: () => boolean,
  ) {}

  /**
   * create stores an interactive login waiting for approval. The Hostinfo kept with it is bounded, and
   * the database decides the rest in the one transaction that writes the row (putWithinQuota): the machine's
   * login for the same node key (or its oldest of PER_MACHINE) is replaced, and the per-source and overall caps
   * are counted there, under a lock every instance on the database takes, so concurrent logins cannot pass a cap
   * together (a count in memory before the write cannot see the others in flight).
   */
  async create(input: { machineKey: string; nodeKey: string; hostinfo: Record<string, unknown> | null; source?: string }): Promise<PendingRegistration> {
    const limits = this.config.registration;
    const size = input.hostinfo ? Buffer.byteLength(JSON.stringify(input.hostinfo)) : 0;
    if (size > limits.max_hostinfo_bytes) {
      throw new HeadwayError('payload_too_large', `Hostinfo is ${size} bytes; a login waiting for approval stores at most ${limits.max_hostinfo_bytes} (registration.max_hostinfo_bytes)`, 'Hostinfo');
    }
    const source = input.source ?? 'unknown';
    // One at a time in this process, so memory learns of the database's decisions in the order it made them: two
    // answered out of order would leave memory holding a login the later one had replaced (the database serializes
    // them anyway, with its lock; across instances that lock alone decides, since memory is not consulted there).
    const turn = this.turn.then(() => this.admit(input, source));
    this.turn = turn.catch(() => undefined);
    return turn;
  }

  private async admit(input: { machineKey: string; nodeKey: string; hostinfo: Record<string, unknown> | null }, source: string): Promise<PendingRegistration> {
    const limits = this.config.registration;
    // Alone, every login memory counts is a row in the database, so a refusal here is the database's too and
    // spares it the locked transaction; in a cluster another instance may have approved some, so it decides.
    if (!this.clustered()) this.quota.check(source, input.machineKey, input.nodeKey);
    const now = new Date();
    const reg: PendingRegistration = {
      // Letters and digits: the key goes on a command line, where a leading '-' reads as a flag (randomToken).
      key: randomToken(24),
      machineKey: input.machineKey, nodeKey: input.nodeKey, hostinfo: input.hostinfo,
      createdAt: now, expiresAt: new Date(now.getTime() + limits.pending_expiry),
    };
    const caps = { perMachine: PER_MACHINE, perSource: limits.max_pending_per_address, total: limits.max_pending };
    const admission = await atomically(this.storage, this.logger, (tx) => tx.pendingRegistrations.putWithinQuota(reg, source, caps, now));
    if (!admission.stored) throw pendingQuotaError(admission.limit, source, limits);
    this.quota.add(reg.key, source, reg.machineKey, reg.expiresAt.getTime(), reg.nodeKey, admission.replaced);
    return reg;
  }

  /** get reads a waiting login from the database (any instance may have stored it); an expired one is deleted and not returned. */
  async get(key: string): Promise<PendingRegistration | undefined> {
    const reg = await this.storage.pendingRegistrations.get(key);
    if (!reg) return undefined;
    if (reg.expiresAt.getTime() <= Date.now()) {
      await this.delete(key);
      return undefined;
    }
    return reg;
  }

  async delete(key: string): Promise<void> {
    await this.storage.pendingRegistrations.delete(key);
    this.quota.remove(key);
  }

  /** deleteExpired removes every expired waiting login; called periodically (registration.gc_interval). */
  async deleteExpired(): Promise<number> {
    const n = await this.storage.pendingRegistrations.deleteExpired(new Date());
    this.quota.prune();
    return n;
  }

  /** consumed forgets a login a registration's committed transaction deleted (approved). */
  consumed(key: string): void { this.quota.remove(key); }
}

import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { ConsoleSessionRepository, ConsoleSessionRow } from '../ports/storage.js';
import { hashSecret } from '../secrets.js';

/** ConsoleSessionLimits: how long a sign-in link and a session live (admin.* configuration keys). */
export interface ConsoleSessionLimits {
  /** linkLifetimeMs: a sign-in link made on the host is refused after this long, used or not. */
  linkLifetimeMs: number;
  /** idleMs: a session not used for this long is over. */
  idleMs: number;
  /** maxAgeMs: a session is over this long after sign-in, however busy. */
  maxAgeMs: number;
}

/** ConsoleSession is a signed-in administrator as a request sees it. */
export interface ConsoleSession {
  admin: string;
  via: ConsoleSessionRow['via'];
  csrf: string;
  createdAt: Date;
  /** expiresAt is when the session ends if it stays idle (never after the absolute limit). */
  expiresAt: Date;
}

/** TOUCH_EVERY_MS: a session's last use is written at most this often, so a page's many calls are not one write each. */
const TOUCH_EVERY_MS = 60_000;

/** PRUNE_EVERY_MS: sessions past their limits and expired links are deleted hourly. */
const PRUNE_EVERY_MS = 3_600_000;

/** PruneHooks: what start reports, and (for tests) the timer it runs on. */
export interface PruneHooks {
  /** every runs `fn` each `ms` and answers how to stop it; default setInterval, unref'd. */
  every?: (fn: () => Promise<void>, ms: number) => () => void;
  pruned?: (rows: number) => void;
  failed?: (err: unknown) => void;
}

/** newSecret is 256 random bits, base64url (cookies and links carry it; only its hash is stored). */
function newSecret(): string {
  return randomBytes(32).toString('base64url');
}

/**
 * ConsoleSessions signs administrators in to the console and recognises them afterwards. A sign-in link (made on the
 * host by `headway console link`) and a session cookie each carry a 256-bit secret that is shown once and stored as
 * its SHA-256 hash. Sessions end when idle for `idleMs`, `maxAgeMs` after sign-in, or at sign-out.
 */
export class ConsoleSessions {
  private readonly repo: ConsoleSessionRepository;
  private stopTimer?: () => void;

  constructor(
    repo: ConsoleSessionRepository | undefined,
    readonly limits: ConsoleSessionLimits,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.repo = repo ?? new MemoryConsoleSessions();
  }

  /** persistent says whether sessions outlive the process and are shared by a cluster's instances. */
  get persistent(): boolean { return !(this.repo instanceof MemoryConsoleSessions); }

  /** createLink makes a single-use sign-in token for `admin`; the caller shows it once. */
  async createLink(admin: string): Promise<{ token: string; expiresAt: Date }> {
    const token = newSecret();
    const expiresAt = new Date(this.now().getTime() + this.limits.linkLifetimeMs);
    await this.repo.createLink(hashSecret(token), admin, expiresAt);
    return { token, expiresAt };
  }

  /** redeemLink spends a sign-in token and opens a session; undefined when the token is unknown, spent or expired. */
  async redeemLink(token: string): Promise<{ cookie: string; session: ConsoleSession } | undefined> {
    if (!token || token.length > 100) return undefined;
    const admin = await this.repo.spendLink(hashSecret(token), this.now());
    return admin === undefined ? undefined : this.open(admin, 'link');
  }

  /** open starts a session for `admin` (signed in by `via`); the cookie's value is shown once. */
  async open(admin: string, via: ConsoleSessionRow['via']): Promise<{ cookie: string; session: ConsoleSession }> {
    const cookie = newSecret();
    const at = this.now();
    const row: ConsoleSessionRow = { id: hashSecret(cookie), admin, via, csrf: newSecret(), createdAt: at, lastSeenAt: at };
    await this.repo.create(row);
    return { cookie, session: this.view(row) };
  }

  /** check answers the live session a cookie names, moving its idle deadline; undefined when there is none. */
  check(cookie: string | undefined): Promise<ConsoleSession | undefined> {
    return this.live(cookie, true);
  }

  /** peek is check without moving the idle deadline: a long-lived stream asks whether its session is still on. */
  peek(cookie: string | undefined): Promise<ConsoleSession | undefined> {
    return this.live(cookie, false);
  }

  private async live(cookie: string | undefined, touch: boolean): Promise<ConsoleSession | undefined> {
    if (!cookie || cookie.length > 100) return undefined;
    const id = hashSecret(cookie);
    const row = await this.repo.get(id);
    if (!row) return undefined;
    const now = this.now();
    if (this.expired(row, now)) {
      await this.repo.delete(id);
      return undefined;
    }
    if (touch && now.getTime() - row.lastSeenAt.getTime() >= TOUCH_EVERY_MS) {
      await this.repo.touch(id, now);
      row.lastSeenAt = now;
    }
    return this.view(row);
  }

  /** csrfMatches compares a request's CSRF header with its session's token in constant time. */
  static csrfMatches(session: ConsoleSession, presented: string | undefined): boolean {
    if (!presented) return false;
    const a = Buffer.from(session.csrf);
    const b = Buffer.from(presented);
    return a.length === b.length && timingSafeEqual(a, b);
  }

  /** close ends the session a cookie names (sign-out); answers whether there was one. */
  close(cookie: string): Promise<boolean> {
    return this.repo.delete(hashSecret(cookie));
  }

  /** prune deletes sessions past their limits and expired links; returns how many rows went. */
  async prune(): Promise<number> {
    const now = this.now().getTime();
    const sessions = await this.repo.deleteIdle(new Date(now - this.limits.idleMs), new Date(now - this.limits.maxAgeMs));
    return sessions + await this.repo.deleteExpiredLinks(new Date(now));
  }

  /** start prunes hourly; `mayRun` lets one instance of a cluster do it. */
  start(mayRun: () => boolean = () => true, hooks: PruneHooks = {}): void {
    if (this.stopTimer) return;
    const every = hooks.every ?? ((fn, ms) => {
      const timer = setInterval(() => void fn(), ms);
      timer.unref();
      return () => clearInterval(timer);
    });
    this.stopTimer = every(async () => {
      if (!mayRun()) return;
      try {
        const n = await this.prune();
        if (n) hooks.pruned?.(n);
      } catch (err) {
        hooks.failed?.(err);
      }
    }, PRUNE_EVERY_MS);
  }

  /** stop ends the hourly prune. */
  stop(): void {
    this.stopTimer?.();
    this.stopTimer = undefined;
  }

  private expired(row: ConsoleSessionRow, now: Date): boolean {
    return now.getTime() - row.lastSeenAt.getTime() >= this.limits.idleMs
      || now.getTime() - row.createdAt.getTime() >= this.limits.maxAgeMs;
  }

  private view(row: ConsoleSessionRow): ConsoleSession {
    const idleEnd = row.lastSeenAt.getTime() + this.limits.idleMs;
    const absoluteEnd = row.createdAt.getTime() + this.limits.maxAgeMs;
    return { admin: row.admin, via: row.via, csrf: row.csrf, createdAt: row.createdAt, expiresAt: new Date(Math.min(idleEnd, absoluteEnd)) };
  }
}

/** MemoryConsoleSessions keeps sessions and links in this process: a storage without a console repository. */
export class MemoryConsoleSessions implements ConsoleSessionRepository {
  private readonly sessions = new Map<string, ConsoleSessionRow>();
  private readonly links = new Map<string, { admin: string; expiresAt: Date; spent: boolean }>();

  create(row: ConsoleSessionRow): Promise<void> {
    this.sessions.set(row.id, { ...row });
    return Promise.resolve();
  }

  get(id: string): Promise<ConsoleSessionRow | undefined> {
    const row = this.sessions.get(id);
    return Promise.resolve(row ? { ...row } : undefined);
  }

  touch(id: string, at: Date): Promise<void> {
    const row = this.sessions.get(id);
    if (row && at > row.lastSeenAt) row.lastSeenAt = at;
    return Promise.resolve();
  }

  delete(id: string): Promise<boolean> {
    return Promise.resolve(this.sessions.delete(id));
  }

  deleteIdle(idleBefore: Date, createdBefore: Date): Promise<number> {
    let n = 0;
    for (const [id, row] of this.sessions) {
      if (row.lastSeenAt < idleBefore || row.createdAt < createdBefore) { this.sessions.delete(id); n++; }
    }
    return Promise.resolve(n);
  }

  createLink(hash: string, admin: string, expiresAt: Date): Promise<void> {
    this.links.set(hash, { admin, expiresAt, spent: false });
    return Promise.resolve();
  }

  spendLink(hash: string, now: Date): Promise<string | undefined> {
    const link = this.links.get(hash);
    if (!link || link.spent || link.expiresAt <= now) return Promise.resolve(undefined);
    link.spent = true;
    return Promise.resolve(link.admin);
  }

  deleteExpiredLinks(now: Date): Promise<number> {
    let n = 0;
    for (const [hash, link] of this.links) if (link.expiresAt < now) { this.links.delete(hash); n++; }
    return Promise.resolve(n);
  }
}

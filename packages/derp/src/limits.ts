import { sourceOf, TokenBuckets } from '@headway/noise';
import type { ClientConn } from './conn.js';
import type { HandshakeFailureLog } from './failurelog.js';
import { DERP_LOGIN_LIMITS, type DerpServerOptions, type DerpServerStats } from './types.js';

/**
 * LoginLimits bounds what clients that have not logged in yet may cost, per source (an IPv4
 * address or an IPv6 /64): how many connections they may hold open, and how fast they may
 * present logins, each a public-key box the relay must open.
 */
export class LoginLimits {
  readonly maxUnauthenticatedPerAddress: number;
  readonly loginRate: number;
  readonly loginBurst: number;
  /** unauthenticatedBySource counts connections not logged in yet per source. */
  private readonly unauthenticatedBySource = new Map<string, number>();
  /** logins rate-limits login frames per source before their box is opened. */
  private readonly logins: TokenBuckets;

  constructor(
    options: DerpServerOptions,
    private readonly counters: DerpServerStats,
    private readonly failures: HandshakeFailureLog,
  ) {
    const maxUnauthenticated = options.maxUnauthenticatedPerAddress ?? DERP_LOGIN_LIMITS.maxUnauthenticatedPerAddress;
    if (!Number.isInteger(maxUnauthenticated) || maxUnauthenticated < 1) throw new Error('DerpServer: maxUnauthenticatedPerAddress must be a positive integer');
    this.maxUnauthenticatedPerAddress = maxUnauthenticated;
    this.loginRate = options.loginRate ?? DERP_LOGIN_LIMITS.loginRate;
    this.loginBurst = options.loginBurst ?? DERP_LOGIN_LIMITS.loginBurst;
    this.logins = new TokenBuckets({ rate: this.loginRate, burst: this.loginBurst, ...(options.now ? { now: options.now } : {}) });
  }

  /**
   * refuse reports (and counts) that remoteAddress's source already has
   * maxUnauthenticatedPerAddress connections that have not logged in, so a new one must be refused.
   */
  refuse(remoteAddress: string | undefined): boolean {
    const source = sourceOf(remoteAddress);
    if ((this.unauthenticatedBySource.get(source) ?? 0) < this.maxUnauthenticatedPerAddress) return false;
    this.counters.connectionsRefusedPerAddress++;
    this.failures.report({ remote: remoteAddress, reason: `too many connections not logged in from ${source} (limit ${this.maxUnauthenticatedPerAddress})` });
    return true;
  }

  /** charge counts a new connection against its source's cap until it logs in or closes. */
  charge(conn: ClientConn): void {
    conn.unauthenticated = true;
    this.unauthenticatedBySource.set(conn.source, (this.unauthenticatedBySource.get(conn.source) ?? 0) + 1);
  }

  /** release stops counting a connection against its source's cap (it logged in, or it closed). */
  release(conn: ClientConn): void {
    if (!conn.unauthenticated) return;
    conn.unauthenticated = false;
    const n = (this.unauthenticatedBySource.get(conn.source) ?? 1) - 1;
    if (n > 0) this.unauthenticatedBySource.set(conn.source, n);
    else this.unauthenticatedBySource.delete(conn.source);
  }

  /** unauthenticated counts connections not logged in yet from the source of remoteAddress. */
  unauthenticated(remoteAddress: string): number {
    return this.unauthenticatedBySource.get(sourceOf(remoteAddress)) ?? 0;
  }

  /**
   * takeLogin spends one of the connection's source's login tokens; when there is none it
   * reports and counts the refusal and returns false, and the caller closes the connection.
   */
  takeLogin(conn: ClientConn): boolean {
    if (this.logins.take(conn.source)) return true;
    this.counters.loginsRateLimited++;
    this.counters.loginFailures++;
    this.failures.report({ remote: conn.remoteAddress, reason: `over the login rate of ${conn.source} (login attempts per address are limited)` });
    return false;
  }
}

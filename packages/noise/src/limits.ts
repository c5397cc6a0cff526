import { isIP } from 'node:net';

/**
 * sourceOf names the party a connection is charged to: the IPv4 address, or the /64 of an IPv6 address
 * (one host usually owns a whole /64, so per-address limits keyed on full IPv6 addresses would be free to
 * evade). IPv4-mapped IPv6 addresses count as their IPv4 address.
 */
export function sourceOf(remoteAddress: string | undefined): string {
  if (!remoteAddress) return 'unknown';
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(remoteAddress);
  if (mapped) return mapped[1]!;
  if (isIP(remoteAddress) !== 6) return remoteAddress;
  const [head = '', tail = ''] = remoteAddress.toLowerCase().split('%')[0]!.split('::');
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups = remoteAddress.includes('::') ? [...left, ...Array(8 - left.length - right.length).fill('0'), ...right] : left;
  return groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, '')).join(':') + '::/64';
}

/** TokenBucketOptions: `rate` tokens per second refill a bucket holding at most `burst`. */
export interface TokenBucketOptions {
  rate: number;
  burst: number;
  /** maxKeys bounds how many sources are tracked; full buckets are forgotten first (default 100,000). */
  maxKeys?: number;
  now?: () => number;
}

/**
 * TokenBuckets rate-limits work per source. A source that has been quiet long enough to refill is
 * indistinguishable from a new one, so full buckets are dropped to keep memory bounded.
 */
export class TokenBuckets {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly now: () => number;
  private readonly maxKeys: number;

  constructor(private readonly opts: TokenBucketOptions) {
    if (!(opts.rate > 0) || !(opts.burst >= 1)) throw new RangeError(`token bucket needs rate > 0 and burst >= 1, got rate ${opts.rate}, burst ${opts.burst}`);
    this.now = opts.now ?? (() => Date.now());
    this.maxKeys = opts.maxKeys ?? 100_000;
  }

  /** take spends one token of `key`'s bucket; false means the caller must refuse the work. */
  take(key: string): boolean {
    const now = this.now();
    const b = this.buckets.get(key);
    let tokens = this.opts.burst;
    if (b) tokens = Math.min(this.opts.burst, b.tokens + ((now - b.at) / 1000) * this.opts.rate);
    if (tokens < 1) {
      b!.tokens = tokens;
      b!.at = now;
      return false;
    }
    if (b) { b.tokens = tokens - 1; b.at = now; } else {
      if (this.buckets.size >= this.maxKeys) this.prune(now);
      this.buckets.set(key, { tokens: tokens - 1, at: now });
    }
    return true;
  }

  /** size is how many sources are tracked (for tests and metrics). */
  get size(): number { return this.buckets.size; }

  private prune(now: number): void {
    const refill = (this.opts.burst / this.opts.rate) * 1000;
    for (const [k, b] of this.buckets) if (now - b.at >= refill) this.buckets.delete(k);
    // Still full: forget the oldest sources (Map keeps insertion order), which refill soonest.
    for (const k of this.buckets.keys()) {
      if (this.buckets.size < this.maxKeys) break;
      this.buckets.delete(k);
    }
  }
}

/**
 * ReplayFilter remembers the initiator ephemeral keys of recent accepted handshakes. A real client draws a
 * fresh ephemeral for every initiation, so seeing one again means a replay: refusing it before any
 * X25519 work makes replaying a captured initiation cost the attacker as much as the server. Entries older
 * than `windowMs` are forgotten, and at most `capacity` are kept (oldest first out).
 */
export class ReplayFilter {
  private readonly seen = new Map<string, number>();
  private readonly now: () => number;

  constructor(private readonly windowMs: number, private readonly capacity = 200_000, now?: () => number) {
    this.now = now ?? (() => Date.now());
  }

  /** seenBefore reports whether this ephemeral was accepted within the window. */
  seenBefore(ephemeral: Uint8Array): boolean {
    const at = this.seen.get(Buffer.from(ephemeral).toString('latin1'));
    return at !== undefined && this.now() - at < this.windowMs;
  }

  /** remember records an accepted initiation's ephemeral key. */
  remember(ephemeral: Uint8Array): void {
    const now = this.now();
    for (const [k, at] of this.seen) {
      if (now - at < this.windowMs && this.seen.size < this.capacity) break;
      this.seen.delete(k);
    }
    this.seen.set(Buffer.from(ephemeral).toString('latin1'), now);
  }

  get size(): number { return this.seen.size; }
}

/** SessionLimitOptions bound sessions whose machine key has no registered node yet. */
export interface SessionLimitOptions {
  maxUnauthenticated: number;
  maxUnauthenticatedPerSource: number;
  /** isAuthenticated reports whether a machine key belongs to a registered node (checked again when a cap is reached). */
  isAuthenticated: (machineKey: string) => boolean;
}

interface Session { source: string; machineKey: string }

/**
 * SessionLimits counts open unauthenticated Noise sessions overall and per source. A session stops counting
 * when its connection closes or, checked lazily when a cap is reached, when its machine key registers.
 */
export class SessionLimits {
  private readonly all = new Set<Session>();
  private readonly bySource = new Map<string, Set<Session>>();

  constructor(private readonly opts: SessionLimitOptions) {}

  /**
   * admit counts a new session, or returns why it is refused. `release` must be called when the connection
   * closes (admit returns it). Sessions of registered machines are never refused.
   */
  admit(source: string, machineKey: string): { release: () => void } | { refused: string } {
    if (this.opts.isAuthenticated(machineKey)) return { release: () => undefined };
    let mine = this.bySource.get(source);
    if (mine && mine.size >= this.opts.maxUnauthenticatedPerSource) this.prune(mine);
    mine = this.bySource.get(source);
    if (mine && mine.size >= this.opts.maxUnauthenticatedPerSource) {
      return { refused: `too many unauthenticated sessions from ${source} (limit ${this.opts.maxUnauthenticatedPerSource}); register this machine or retry later` };
    }
    if (this.all.size >= this.opts.maxUnauthenticated) this.prune(this.all);
    if (this.all.size >= this.opts.maxUnauthenticated) {
      return { refused: `too many unauthenticated sessions on this server (limit ${this.opts.maxUnauthenticated}); retry later` };
    }
    const s: Session = { source, machineKey };
    this.all.add(s);
    if (!mine) this.bySource.set(source, (mine = new Set()));
    mine.add(s);
    return { release: () => this.drop(s) };
  }

  /** unauthenticated counts sessions still charged, overall or for one source. */
  unauthenticated(source?: string): number {
    return source === undefined ? this.all.size : this.bySource.get(source)?.size ?? 0;
  }

  private prune(set: Set<Session>): void {
    for (const s of [...set]) if (this.opts.isAuthenticated(s.machineKey)) this.drop(s);
  }

  private drop(s: Session): void {
    this.all.delete(s);
    const mine = this.bySource.get(s.source);
    if (mine?.delete(s) && !mine.size) this.bySource.delete(s.source);
  }
}

/** Ts2021LimitOptions configure Ts2021Limits; every number must be positive. */
export interface Ts2021LimitOptions extends SessionLimitOptions {
  /** handshakeRate is the sustained initiations per second one source may make. */
  handshakeRate: number;
  handshakeBurst: number;
  /** replayWindowMs is how long accepted initiation ephemerals are remembered. */
  replayWindowMs: number;
  now?: () => number;
}

/** Ts2021Limits bundles the checks handleTs2021Upgrade applies before and after the handshake's key agreement. */
export class Ts2021Limits {
  readonly handshakes: TokenBuckets;
  readonly replays: ReplayFilter;
  readonly sessions: SessionLimits;
  /** refused counts refusals by reason since start (for metrics and tests). */
  readonly refused = { 'rate-limited': 0, replayed: 0, 'too-many-sessions': 0 };

  constructor(opts: Ts2021LimitOptions) {
    this.handshakes = new TokenBuckets({ rate: opts.handshakeRate, burst: opts.handshakeBurst, now: opts.now });
    this.replays = new ReplayFilter(opts.replayWindowMs, undefined, opts.now);
    this.sessions = new SessionLimits(opts);
  }
}

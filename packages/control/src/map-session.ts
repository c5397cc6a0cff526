import type { FilterRule } from '@headway/policy';
import { systemClock, type Clock, type Timer } from './clock.js';
import { KEEPALIVE_BASE_MS, KEEPALIVE_JITTER_MS, KEEPALIVE_STEP_MS } from './fanout-knobs.js';
import { frame, type WireMessage } from './frames.js';
import { KEEPALIVE_JSON } from './map-json.js';
import { PeerSet } from './peerset.js';

/** keepAliveWait is a session's wait for a keep-alive: the base, plus a jitter drawn once in KEEPALIVE_STEP_MS steps. */
export function keepAliveWait(random = Math.random): number {
  return KEEPALIVE_BASE_MS + KEEPALIVE_STEP_MS * Math.floor(random() * (KEEPALIVE_JITTER_MS / KEEPALIVE_STEP_MS));
}

/** MapSession is one streaming /machine/map response: what it last told its node, and how to reach it. */
export class MapSession {
  /** peers are the node ids the client was last sent, held compactly (see PeerSet); any id collection may be assigned. */
  get peers(): PeerSet { return this.peerIds; }
  set peers(ids: Iterable<number>) { this.peerIds = ids instanceof PeerSet ? ids : new PeerSet(ids); }
  private peerIds = new PeerSet();
  /** profiles: owner id → the UserProfile text this session sent (the client keeps every profile it was sent). */
  profiles = new Map<number, string>();
  /**
   * shownOwners are the owners whose profiles the client's last full netmap holds. `tailscale status` resolves
   * owners from that netmap only, and a delta applied incrementally leaves it untouched, so a peer whose owner is
   * not here shows as a raw `userid:N` until the client rebuilds its netmap.
   */
  shownOwners: ReadonlySet<number> = new Set<number>();
  /**
   * filterRules is the compiled packet filter the client was last sent, in chunks (filterUpdate diffs against it);
   * filterNames the names of its rules' chunks, undefined while they are positional (see filter-chunks.ts).
   */
  filterRules: readonly FilterRule[] = [];
  filterNames: readonly string[] | undefined = undefined;
  ssh = '';
  /** certDomain is the CertDomains name the client was last sent (see Mapper.certDomain). */
  certDomain: string | undefined;
  /**
   * renderedAt is the number of the last change published when this session's full map was rendered: a pending
   * change numbered at or below it is already in that map and is not sent to it again.
   */
  renderedAt = 0;
  private keepalive?: Timer;
  /** quietSince: when the last message went out (or the wait began). */
  private quietSince = 0;
  closed = false;

  constructor(
    readonly nodeId: number,
    readonly capVersion: number | undefined,
    readonly zstd: boolean,
    private readonly writeFrame: (msg: WireMessage) => void,
    private readonly onKeepAlive: () => void,
    /** keepAliveMs: how long a quiet stream waits for a keep-alive (keepAliveWait). */
    private readonly keepAliveMs = keepAliveWait(),
    private readonly clock: Clock = systemClock,
  ) {}

  send(msg: WireMessage): void {
    if (this.closed) return;
    this.writeFrame(msg);
    this.armKeepAlive();
  }

  /**
   * armKeepAlive restarts the wait for a keep-alive: one is sent once the stream has been quiet for keepAliveMs.
   * A message only notes when it went out; the session's one timer looks at that when it fires and waits out the
   * rest if something was sent meanwhile. Moving a timer on every message (out of its timer list and back in) costs
   * more than the message's own bookkeeping when a flush reaches thousands of sessions.
   */
  armKeepAlive(): void {
    if (this.closed) return;
    this.quietSince = this.clock.now();
    if (!this.keepalive) this.waitKeepAlive(this.keepAliveMs);
  }

  private waitKeepAlive(ms: number): void {
    this.keepalive = this.clock.setTimeout(keepAliveDue, ms, this);
    this.clock.unref(this.keepalive);
  }

  /** keepAliveDue: the timer fired; a keep-alive goes out if nothing else did for keepAliveMs, else it waits the rest. */
  keepAliveDue(): void {
    this.keepalive = undefined;
    if (this.closed) return;
    const rest = this.quietSince + this.keepAliveMs - this.clock.now();
    if (rest >= 1) { this.waitKeepAlive(rest); return; }
    this.onKeepAlive();
    this.send(frame(KEEPALIVE_JSON, this.zstd));
  }

  close(): void {
    this.closed = true;
    this.clock.clearTimeout(this.keepalive);
  }
}

const keepAliveDue = (s: MapSession): void => s.keepAliveDue();

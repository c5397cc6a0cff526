import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import { peerListOf, type CompiledNode, type FilterRule, type Policy } from '@headway/policy';
import type { Node, User } from '@headway/core';
import type { Logger } from '@headway/core';
import type { Change, PeerPatch } from '@headway/core';
import type { State } from '@headway/core';
import type { Metrics } from '@headway/core';
import { filterUpdate, type SharedText } from './filter-chunks.js';
import { compressJson, frame, frameSegments, sharedFrameMinInForce, type WireMessage } from './frames.js';
import { ListDiffs, PeerSet } from './peerset.js';
import type { Mapper } from './mapper.js';

const KEEPALIVE_BASE_MS = 50_000;
const KEEPALIVE_JITTER_MS = 9_000;
/**
 * KEEPALIVE_STEP_MS is the jitter's granularity. Node keeps one timer list per distinct duration, alive until
 * that duration has passed, so jitter to the millisecond left up to 9,000 lists behind re-armed keep-alives;
 * 100 ms steps bound them to 90. Timers still fire at their own times (a list orders them by start).
 */
const KEEPALIVE_STEP_MS = 100;
/**
 * BATCH_WINDOW_MS is how long changes are collected before they are sent (longer under load, see nextBatchWindow).
 * It is also the longest a new session's full map waits for others to share one rebuild of the view (see begin).
 */
export const BATCH_WINDOW_MS = 20;
/**
 * QUIET_WINDOW_MS is the window of a change that finds the hub quiet (no flush ended in the last BATCH_WINDOW_MS):
 * long enough for the rest of the same operation (one commit publishes its changes in one go, and a follow-up such
 * as an auto-approval comes right after) to share its flush, short enough that a lone rename or tag change does not
 * wait 20 ms for company that rarely comes. At 1,000 devices the base window was a fifth of a tag change's p99.
 * A burst still batches: its first change goes out alone, the next ones arrive right behind that flush and wait
 * the base window or longer.
 */
export const QUIET_WINDOW_MS = 2;
/**
 * MAX_BATCH_WINDOW_MS caps the window under sustained load (headscale's batcher waits 800 ms always). New sessions'
 * full maps do not wait for it (see begin), so the cap delays only what already-connected peers learn of a burst.
 */
export const MAX_BATCH_WINDOW_MS = 1280;
/**
 * HURRY_GAP_MS: a change that comes this long after the one before, while a batch waits a window longer than the
 * quiet one, sends that batch after QUIET_WINDOW_MS instead. The long window spreads a burst's fan-out; once changes
 * stop coming back to back the burst is over, and a rename made then waited out the window set by the burst's last
 * flush (1.3 s at 1,000 devices, behind a trailing endpoint update). In a join burst changes come every few ms, but
 * gaps of 100 ms happen there too: the loop's utilization since the batch was scheduled tells them apart (0.76-1.0
 * in the gaps of a burst at 1,000 devices; without that check it sent 4-6 more batches a burst).
 */
export const HURRY_GAP_MS = 100;
/**
 * LULL_MS: a batch waiting a window longer than this goes out after QUIET_WINDOW_MS once this long has passed with
 * no change at all, no flush or round under way (they hold changes back) and the event loop mostly idle (under
 * BUSY_UTILIZATION). HURRY_GAP_MS needs a change to come after the lull; at the end of a burst none comes, and the
 * burst's last changes waited out the window its flushes set (at 5,000 and 10,000 joining devices, windows of
 * several seconds: peers learned of the last joiners 5-10 s after they joined). Nothing more is coming to share
 * that batch, so waiting longer only delays it. Inside a burst the loop is busy: a gap in changes there is the loop
 * held up (a long first map, a collection), not a lull, and without the idle test a 5,000-device join sent 3 of
 * its batches early so.
 */
export const LULL_MS = 500;
/** LONE_FLUSH_CHANGES: a flush that carried this many changes or fewer was not a burst's (see nextBatchWindow). */
export const LONE_FLUSH_CHANGES = 3;
/** BUSY_UTILIZATION is the event-loop utilization, while the previous batch was collected, above which the server counts as loaded. */
const BUSY_UTILIZATION = 0.75;

/**
 * nextBatchWindow picks the batch window for the changes now arriving. Each flush costs a message per session
 * (encode, encrypt, a socket write each), so a burst of joins flushed every 20 ms made that fan-out grow with
 * the square of the tailnet and starve the joins themselves. While changes come back to back (this one less
 * than BATCH_WINDOW_MS after the previous flush ended: they queued up while it ran) and the event loop was
 * busy while the previous batch was collected (utilization from its scheduling to its flush, the flush's own
 * work not counted, at or above BUSY_UTILIZATION), the window doubles; and with changes back to back it is at
 * least FLUSH_SHARE times the last flush's cost; the doubling up to MAX_BATCH_WINDOW_MS, that floor up to MAX_SHARE_WINDOW_MS, so more changes share one message
 * per session. Otherwise it is BATCH_WINDOW_MS, and a change that did not queue up behind a flush and came
 * BATCH_WINDOW_MS or more after the change before it (sinceChangeMs: a lone rename, route or tag change) waits only
 * QUIET_WINDOW_MS, even on a server busy with something else. (Without the second condition a join burst sent about
 * 35% more batches, 26-28 against 19-20 at 1,000 devices; counting as quiet only what came 100 ms or more after a
 * flush, the bench's changes, made one after another, were not: rename p99 40-48 ms against 22-29 ms.) A change right
 * behind a flush that came HURRY_GAP_MS or more after the change before it waits BATCH_WINDOW_MS, not the burst's
 * longer window: a rename made just after a policy change's flush waited FLUSH_SHARE times that flush (190-360 ms at
 * 1,000 devices). Taking 20 ms for that lull instead, a join burst of 1,000 sent 33-45 batches instead of about 20.
 * (When joining devices' first maps waited for this window, a longer cap held them waiting, the loop went idle and
 * joins slowed, 23 to 17 per second at 1,000 devices with a 5 s cap; first maps now have their own short timer.)
 * Nor is a flush that carried at most LONE_FLUSH_CHANGES changes (lastFlushChanges) a burst's: at 1,000 devices a
 * rename made 89 ms after a policy change, 16 ms after that change's 30 ms flush ended, waited FLUSH_SHARE times the
 * flush (121 ms) for company that never came. (Judging by whether a change came while the flush ran instead made
 * every change after a short flush a lone one, which runs in one go: a 1,000-device join sent 63 batches, not 17.)
 */
export function nextBatchWindow(current: number, utilization: number, sinceFlushEndMs: number, lastFlushMs = 0, sinceChangeMs = 0,
  lastFlushChanges = Number.POSITIVE_INFINITY): number {
  if (sinceFlushEndMs >= BATCH_WINDOW_MS) return sinceChangeMs >= BATCH_WINDOW_MS ? QUIET_WINDOW_MS : BATCH_WINDOW_MS;
  // Right behind a flush but after a lull in changes, or behind a flush of a lone change or two: not a burst.
  if (sinceChangeMs >= HURRY_GAP_MS || lastFlushChanges <= LONE_FLUSH_CHANGES) return BATCH_WINDOW_MS;
  const grown = utilization >= BUSY_UTILIZATION ? current * 2 : BATCH_WINDOW_MS;
  return Math.max(Math.min(MAX_BATCH_WINDOW_MS, Math.max(BATCH_WINDOW_MS, grown)), Math.min(MAX_SHARE_WINDOW_MS, FLUSH_SHARE * lastFlushMs));
}
/**
 * FLUSH_SHARE: with changes back to back, the window is at least this many times the last flush's
 * own sending time, so fanning batches out takes at most about a fifth of the server's time and the rest is left to
 * the work producing the changes (joins, handshakes, first maps). At 1,000 joining devices (realistic policy, 2 cores)
 * this cut batches from 206 to 32 and the join from 45.7 to 21.0 s: doubling alone rarely got past a few steps, as
 * each change that came more than BATCH_WINDOW_MS after a flush, or on a loop that measured under BUSY_UTILIZATION
 * (contended by other processes), started over from the base window; gating this floor on utilization as well
 * gave 71 batches and 29.9 s. A cheap flush (a small tailnet) keeps the base window.
 */
export const FLUSH_SHARE = 4;
/**
 * MAX_SHARE_WINDOW_MS caps the FLUSH_SHARE floor, which may take the window past MAX_BATCH_WINDOW_MS (doubling alone
 * never does): only a flush costing more than MAX_BATCH_WINDOW_MS / FLUSH_SHARE (320 ms: thousands of sessions with
 * a policy) sets a longer one, so that fanning out still takes at most about a fifth of the server's time. At 5,000
 * joining devices, capped at MAX_BATCH_WINDOW_MS, the flushes cost ~0.5 s each and came every ~1.3 s (39 s of the
 * server's 134 s in the join, 84 batches); with this cap 60 batches took 33 s, the join took as long (its pace is
 * set by the joins in flight) and the devices converged 1.1 s after the last join against 2.0 s. At 10,000 a flush
 * costs ~2 s, and a cap of 5 s held the window under FLUSH_SHARE times it: 122 flushes took 227 s of the server's
 * 521-544 s; with 10 s, 74 flushes took 162 s, the join took 615 s against 729 s (server CPU 446 s against 521 s,
 * the load generator's 658 s against 794 s on the same two cores); the burst's last batch then waited out a longer
 * window (converged 8.6 s after the last join against 5.3 s), which LULL_MS now cuts short.
 */
export const MAX_SHARE_WINDOW_MS = 10000;
/**
 * FLUSH_SLICE_MS: a batch timer's flush sends its messages in slices of about this much work, with the event loop
 * free in between, and changes that arrive meanwhile wait for its end (the flush keeps one view of the tailnet).
 * A flush to thousands of sessions takes seconds; run in one piece it held up every handshake, registration and
 * map request for that long, and joins (each several round trips) slowed to a few per second at 2,000 devices.
 */
export const FLUSH_SLICE_MS = 20;
/**
 * OPEN_SHARE: new sessions wait for their first maps (while a batch is pending and joins left the policy's view
 * stale, see begin) at least this many times what the last preparation of that view cost, so that in a join burst
 * preparing it (extending the tailnet context, which grows with the tailnet: ~30 ms at 1,000 devices, ~150 ms at
 * 5,000) takes at most about a third of the server's time, however many devices join meanwhile. A cheap view
 * keeps BATCH_WINDOW_MS; the wait never exceeds MAX_OPEN_WAIT_MS.
 */
export const OPEN_SHARE = 2;
export const MAX_OPEN_WAIT_MS = 250;
/** openWait is how long new sessions wait for their first maps when the view's last preparation took prepareMs. */
export function openWait(prepareMs: number): number {
  return Math.min(MAX_OPEN_WAIT_MS, Math.max(BATCH_WINDOW_MS, OPEN_SHARE * prepareMs));
}
/**
 * SHARED_BLOCK_MIN: a block of a rule's sources in a packet filter update (FilterUpdate.pieces) at least this long, or
 * SHARED_FRAME_MIN when that is set lower, is compressed once per flush and sent as a frame of its own. In a join
 * burst every session whose filter lists the joiners gets the blocks they fell in, around its own destinations: at
 * 2,000 devices a flush compressed 15-22 KB of filter text per session, nearly all of it those shared blocks.
 */
export const SHARED_BLOCK_MIN = 256;
const isSharedBlock = (x: string | SharedText): boolean => typeof x !== 'string' && x.text.length >= Math.min(sharedFrameMinInForce(), SHARED_BLOCK_MIN);

/**
 * FILTER_PART stands in a flush's message parts for a PacketFilters update longer than UNSHARED_KEY_LENGTH (only its
 * session receives such a message): the update's text whole is made only for a session that sends it so (not
 * zstd, or no shared block in it), not as a part of the message's key nor beside the blocks a zstd session sends
 * apart. A policy change at 10,000 devices sent thousands of sessions a filter update of hundreds of KB each, and
 * every one was joined into flat strings twice for nothing; the collector took 36% of that change's CPU.
 */
const FILTER_PART = '\u0000PacketFilters';
/** UNSHARED_KEY_LENGTH: a message key longer than this names a message only its session receives (see sendAll). */
const UNSHARED_KEY_LENGTH = 2048;
/** OWNER_SETS_MAX bounds the table of shared shownOwners sets (SessionHub.ownerSet); a tailnet shows far fewer. */
const OWNER_SETS_MAX = 4096;

/**
 * OpenRound is a round of first maps sent in slices of FLUSH_SLICE_MS with the event loop free in between, like a
 * flush: the first map of a round extends the policy's view for every joiner since the last round (~100 ms at
 * 9,000 devices) and each map costs ~10 ms (5,000 devices), so a round of twenty held up every handshake,
 * registration and map request for a quarter of a second or more. Changes that arrive meanwhile wait for its
 * end, so the whole round shares one view of the tailnet (and one extension of it); sessions opening meanwhile
 * wait for the next round.
 */
interface OpenRound {
  opens: DeferredOpen[];
  next: number;
}

/** FlushJob is one flush being sent: its sessions, the next to send, the per-session step and the time spent. */
interface FlushJob {
  sessions: MapSession[];
  next: number;
  one: (s: MapSession) => void;
  busyMs: number;
}

/**
 * LoadMeter measures how busy the process was between a mark and now, as a fraction (0 idle, 1 saturated).
 * The SessionHub uses the event loop's utilization; a test can put in its own to drive nextBatchWindow.
 */
export interface LoadMeter {
  mark(): unknown;
  since(mark: unknown): number;
}
/** eventLoopMeter is the default LoadMeter: the event loop's utilization (perf_hooks). */
export const eventLoopMeter: LoadMeter = {
  mark: () => performance.eventLoopUtilization(),
  since: (mark) => performance.eventLoopUtilization(mark as EventLoopUtilization).utilization,
};
/** DELETED_REMEMBERED bounds how many deleted nodes are remembered to answer their devices. */
const DELETED_REMEMBERED = 4096;

/** DeferredOpen is a new session waiting for the pending flush, or begin's own timer, to send its full map (SessionHub.begin). */
interface DeferredOpen {
  session: MapSession;
  node: Node;
  writeFull: (node: Node) => void;
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
   * shownOwners are the owners whose profiles the client's last full netmap holds.
   * `tailscale status` (1.9x+) resolves owners from that netmap only, and a delta
   * applied incrementally leaves it untouched, so a peer whose owner is not here
   * shows as a raw `userid:N` until the client rebuilds its netmap.
   */
  shownOwners: ReadonlySet<number> = new Set<number>();
  /**
   * filterRules is the compiled packet filter the client was last sent, in chunks (filterUpdate diffs against it);
   * filterNames the names of its rules' chunks, undefined while they are positional (see filter-chunks.ts).
   */
  filterRules: readonly FilterRule[] = [];
  filterNames: readonly string[] | undefined = undefined;
  ssh = '';
  /**
   * renderedAt is the hub's change sequence number when this session's full map was rendered: a pending change
   * numbered at or below it is already in that map and is not sent to it again (see SessionHub.send).
   */
  renderedAt = 0;
  private keepalive?: NodeJS.Timeout;
  /** quietSince: when the last message went out (or the wait began), by performance.now(). */
  private quietSince = 0;
  closed = false;

  constructor(
    readonly nodeId: number,
    readonly capVersion: number | undefined,
    readonly zstd: boolean,
    private readonly writeFrame: (msg: WireMessage) => void,
    private readonly onKeepAlive: () => void,
    /** keepAliveMs: how long a quiet stream waits for a keep-alive (default 50 s plus a per-session jitter of up to 9 s). */
    private readonly keepAliveMs = KEEPALIVE_BASE_MS + KEEPALIVE_STEP_MS * Math.floor(Math.random() * (KEEPALIVE_JITTER_MS / KEEPALIVE_STEP_MS)),
  ) {}

  send(msg: WireMessage): void {
    if (this.closed) return;
    this.writeFrame(msg);
    this.armKeepAlive();
  }

  /**
   * armKeepAlive restarts the wait for a keep-alive: one is sent once the stream has been quiet for keepAliveMs.
   * A message only notes when it went out; the one timer per session, its jittered delay drawn once, looks at that
   * when it fires and waits out the rest if something was sent meanwhile. Restarting the timer on every message
   * (Timeout.refresh: out of its timer list and back in) showed as 12 ms of a profiled 1,000-device tag change's
   * ~150 ms on the server; a new timer per message was also an allocation.
   */
  armKeepAlive(): void {
    if (this.closed) return;
    this.quietSince = performance.now();
    if (!this.keepalive) this.waitKeepAlive(this.keepAliveMs);
  }

  private waitKeepAlive(ms: number): void {
    this.keepalive = setTimeout(keepAliveDue, ms, this);
    this.keepalive.unref();
  }

  /** keepAliveDue: the timer fired; a keep-alive goes out if nothing else did for keepAliveMs, else it waits the rest. */
  keepAliveDue(): void {
    this.keepalive = undefined;
    if (this.closed) return;
    const rest = this.quietSince + this.keepAliveMs - performance.now();
    if (rest >= 1) { this.waitKeepAlive(rest); return; }
    this.onKeepAlive();
    this.send(frame('{"KeepAlive":true}', this.zstd));
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.keepalive);
  }
}

const keepAliveDue = (s: MapSession): void => s.keepAliveDue();

interface Shape { tags: string; ips: string; routes: string; user: number | null }
const shapeOf = (n: Node): Shape => ({
  tags: n.tags.join(','), ips: `${n.ipv4},${n.ipv6}`, routes: `${n.availableRoutes.join(',')}|${n.approvedRoutes.join(',')}`, user: n.userId,
});
const sameShape = (a: Shape | undefined, b: Shape) => Boolean(a) && a!.tags === b.tags && a!.ips === b.ips && a!.routes === b.routes && a!.user === b.user;

/**
 * Upserts are the nodes a flush's message sends whole (PeersChanged), the key of that part among the flush's shared
 * parts ('C' + their ids), and their owners' profiles, each once; for sessions moving between the same two shared
 * peer lists also the PeersRemoved part and the ids as a set, made for the first that needs them.
 */
interface Upserts {
  readonly nodes: Node[];
  readonly key: string;
  readonly owners: ReadonlyArray<{ id: number; json: string }>;
  removed?: string;
  ids?: Set<number>;
}

/**
 * peerSetOf is a compiled node's peers as a session holds them: its peer class's shared list, parsed once per class,
 * less the node itself (a copied result, which has no class list, gives its own).
 */
function peerSetOf(view: CompiledNode): PeerSet {
  const list = peerListOf(view);
  return list ? PeerSet.ofList(list.ids, Number(list.self)) : PeerSet.ofList(view.peers);
}

const removedPart = (gone: readonly number[]): string => `"PeersRemoved":${JSON.stringify(gone)}`;

/**
 * SessionHub turns each published change into the smallest message per affected
 * session: patches for online/endpoint/expiry changes, PeersChanged for changed
 * nodes, PeersRemoved and filter updates when visibility changes. Identical
 * messages are compressed once per change and shared.
 */
export class SessionHub {
  private readonly byNode = new Map<number, Set<MapSession>>();
  private readonly shapes = new Map<number, Shape>();
  private unsubscribe?: () => void;
  /** closeNode ends a node's live sessions (set by the control handler). */
  closeNode?: (nodeId: number) => void;
  /** deleted remembers recently deleted nodes by machine key, to answer their devices as themselves. */
  private readonly deleted = new Map<string, Node>();

  constructor(
    private readonly state: State,
    private readonly mapper: Mapper,
    private readonly logger: Logger,
    private readonly metrics: Metrics,
    /** policy is the compiled policy in force (PolicyService.compiled): the hub never parses policy text. */
    private readonly policy: () => Policy | null,
  ) {}

  start(): void {
    for (const n of this.state.nodes.list()) this.shapes.set(n.id, shapeOf(n));
    this.mapper.view.setPolicy(this.policy());
    this.mapper.view.updatePrimaries();
    this.unsubscribe = this.state.bus.subscribe((c) => {
      // While a flush or a round of first maps is sent in slices its view of the tailnet stays as it began; later
      // changes wait for its end.
      if (this.busy) { this.queued.push(c); return; }
      this.dispatch(c);
    });
  }

  private dispatch(c: Change): void {
    try {
      this.apply(c);
    } catch (err) {
      this.logger.error('failed to dispatch a change to map sessions', { change: c.type, error: (err as Error).message });
    }
  }

  stop(): void {
    this.unsubscribe?.();
    this.job = undefined;
    this.round = undefined;
    this.queued = [];
    clearTimeout(this.flushTimer);
    clearTimeout(this.lullTimer);
    clearTimeout(this.opensTimer);
    for (const set of this.byNode.values()) for (const s of set) s.close();
    this.byNode.clear();
  }

  get sessionCount(): number {
    let n = 0;
    for (const s of this.byNode.values()) n += s.size;
    return n;
  }

  sessions(): Iterable<MapSession> {
    const all: MapSession[] = [];
    for (const set of this.byNode.values()) all.push(...set);
    return all;
  }

  /**
   * begin sends a new session its full map (writeFull) and registers it. While a batch is pending and the policy's
   * view of the tailnet is stale (a join invalidates it), the full map waits up to openWait (or the batch's
   * flush, if sooner) so that every session opening meanwhile shares one rebuild of the view: in a join burst each
   * join used to rebuild it for its own first map, O(tailnet) per join. The wait does not grow with the batch
   * window, so under load joining devices get their maps promptly while the fan-out of the burst to connected
   * peers is coalesced. With nothing pending the map goes out at once.
   */
  begin(session: MapSession, node: Node, writeFull: (node: Node) => void): void {
    const opening = { session, node, writeFull };
    if (this.busy || ((this.flushTimer || this.opensTimer) && this.mapper.view.stale)) {
      this.deferredOpens.push(opening);
      // During a round the timer starts at its end (endRound): started now, it cut the next round short (at 5,000
      // devices a third more rounds, each extending the policy's view).
      if (!this.round) this.armOpens();
    } else this.beginNow(opening);
  }

  /** armOpens sets begin's timer: the waiting sessions get their maps in slices when it fires (see OpenRound). */
  private armOpens(): void {
    this.opensTimer ??= setTimeout(() => this.openInSlices(), openWait(this.mapper.view.lastPrepareMs));
  }

  /**
   * openInSlices sends the sessions waiting for their first map their full maps as begin's timer does: in slices of
   * about sliceMs of work (tests: 0, one session a slice), unless a flush or a round is under way (its end opens them).
   */
  openInSlices(sliceMs = FLUSH_SLICE_MS): void {
    clearTimeout(this.opensTimer);
    this.opensTimer = undefined;
    if (!this.busy) this.openDeferred(sliceMs);
  }

  private beginNow({ session, node, writeFull }: DeferredOpen): void {
    if (session.closed) return;
    this.syncPrimaries();
    const current = this.state.nodes.get(node.id) ?? node;
    // Everything published so far is in this map: the pending batch sends the session only what comes after.
    session.renderedAt = this.seq;
    if (this.pendingPolicyOld) this.openedUnderPendingPolicy = true;
    writeFull(current);
    this.open(session, current);
  }

  /** openDeferredNow sends the sessions waiting for their first map their full maps at once, leaving the batch pending (tests). */
  openDeferredNow(): void {
    clearTimeout(this.opensTimer);
    this.opensTimer = undefined;
    this.finishRound();
    // A flush being sent in slices opens them when it ends, with the changes it held back applied.
    if (this.job) return;
    this.openDeferred();
  }

  /**
   * openDeferred sends every waiting session its full map (see begin); with sliceMs, in slices of about that much
   * work with the event loop free in between (see OpenRound).
   */
  private openDeferred(sliceMs?: number): void {
    const opens = this.deferredOpens;
    this.deferredOpens = [];
    if (!opens.length) return;
    const round: OpenRound = { opens, next: 0 };
    this.round = round;
    if (sliceMs === undefined) this.finishRound();
    else this.continueRound(round, sliceMs);
  }

  /** continueRound sends the next slice of a round of first maps, and ends the round after its last. */
  private continueRound(round: OpenRound, sliceMs: number): void {
    if (this.round !== round) return;
    if (!this.runRound(round, sliceMs)) {
      setImmediate(() => this.continueRound(round, sliceMs));
      return;
    }
    this.round = undefined;
    this.endRound();
  }

  /** finishRound sends what is left of a round of first maps at once (flushNow, tests). */
  private finishRound(): void {
    const round = this.round;
    if (!round) return;
    this.round = undefined;
    this.runRound(round, Number.POSITIVE_INFINITY);
    this.endRound();
  }

  /** runRound opens the round's sessions for about sliceMs; true when every one has had its turn. */
  private runRound(round: OpenRound, sliceMs: number): boolean {
    const started = performance.now();
    while (round.next < round.opens.length) {
      const o = round.opens[round.next++]!;
      try {
        this.beginNow(o);
      } catch (err) {
        this.logger.error('failed to send a new map session its first map', { node: o.node.id, error: (err as Error).message });
      }
      if (performance.now() - started >= sliceMs) break;
    }
    return round.next >= round.opens.length;
  }

  /** endRound applies the changes that arrived during a round of first maps, and sends the batch if it came due then. */
  private endRound(): void {
    this.applyQueued();
    if (this.flushAfterJob) {
      // The batch came due during the round: sent now (a timer those changes set would be one batch too many).
      this.flushAfterJob = false;
      this.flushInSlices();
    } else if (this.deferredOpens.length) this.armOpens();
  }

  /** open registers a session after its full map was sent, recording what that map contained. */
  open(session: MapSession, node: Node): void {
    const v = this.mapper.view.forNode(node.id);
    // The peer class's shared list, as a structural flush gives it (see send): sessions of one class then hold one
    // array, and the next flush walks their difference to a new list once for the class (ListDiffs).
    session.peers = peerSetOf(v);
    const peers: Node[] = [];
    for (const id of session.peers) {
      const n = this.state.nodes.get(id);
      if (n) peers.push(n);
    }
    session.profiles = this.mapper.profiles([node, ...peers]);
    session.shownOwners = this.ownerSet(session.profiles.keys());
    session.filterRules = v.packetFilter;
    session.filterNames = undefined;
    session.ssh = this.mapper.sshJson(node.id);
    (this.byNode.get(node.id) ?? this.byNode.set(node.id, new Set()).get(node.id)!).add(session);
    this.metrics.mapSessions.inc();
    session.armKeepAlive();
  }

  close(session: MapSession): void {
    session.close();
    const set = this.byNode.get(session.nodeId);
    if (set?.delete(session)) this.metrics.mapSessions.dec();
    if (set && !set.size) this.byNode.delete(session.nodeId);
  }

  // ---- change batching ----
  // Changes are collected for a short window and sent as one message per session:
  // a burst of joins then costs one fan-out instead of one per join. A node that is
  // sent whole in a batch absorbs its own patches (its JSON is rendered at flush).
  // Each pending node (sent whole, its own Node, a patch) is kept with the sequence number of its latest change,
  // so that a session opened while the batch was pending skips what its full map already held (MapSession.renderedAt).
  private seq = 0;
  private readonly pendingFull = new Map<number, number>();
  private readonly pendingSelf = new Map<number, number>();
  private readonly pendingRemoved = new Set<number>();
  private readonly pendingPatch = new Map<number, { patch: Record<string, unknown>; seq: number }>();
  /** pendingUsers are users whose profile (name, display name) may have changed. */
  private readonly pendingUsers = new Set<number>();
  private pendingStructural = false;
  /** pendingPolicyOld is every peer's text from before a pending policy change (see 'policy-changed'), pendingPolicySeq the latest such change. */
  private pendingPolicyOld?: Map<number, string>;
  private pendingPolicySeq = 0;
  /** openedUnderPendingPolicy: a session's full map was rendered while a policy change was pending. */
  private openedUnderPendingPolicy = false;
  private pendingPrimaries = false;
  /** deferredOpens are new sessions whose full map waits for the pending flush (see begin). */
  private deferredOpens: DeferredOpen[] = [];
  private flushTimer?: NodeJS.Timeout;
  /**
   * job is the flush being sent in slices (see FLUSH_SLICE_MS), round the first maps (see OpenRound); queued the
   * changes that arrived meanwhile.
   */
  private job?: FlushJob;
  private queued: Change[] = [];
  private round?: OpenRound;
  /** flushAfterJob: the batch timer fired while a flush was still being sent. */
  private flushAfterJob = false;
  /** opensTimer sends the deferred sessions their full maps if the batch's flush has not by then (see begin). */
  private opensTimer?: NodeJS.Timeout;
  /**
   * window is the batch window in force (nextBatchWindow); collectMark is the loop's utilization when the
   * pending batch was scheduled, collectBusy the utilization while the previous sent batch was collected, and
   * flushEnd when that batch's flush ended.
   */
  private window = BATCH_WINDOW_MS;
  private collectMark?: unknown;
  private collectBusy = 0;
  /** loadMeter measures how busy the server was while a batch was collected (see nextBatchWindow). */
  loadMeter: LoadMeter = eventLoopMeter;
  private flushEnd = Number.NEGATIVE_INFINITY;
  /** lastFlushMs is how long the last flush that sent something took (see FLUSH_SHARE). */
  private lastFlushMs = 0;

  /** lastFlushCost is how long, in ms, the last flush that sent something took (see FLUSH_SHARE; tests). */
  get lastFlushCost(): number { return this.lastFlushMs; }

  /** batchWindow is the window the next batch waits (exposed for metrics and tests). */
  get batchWindow(): number { return this.window; }

  private schedule(): void {
    const now = performance.now();
    const sinceChange = now - this.lastChangeAt;
    this.lastChangeAt = now;
    this.batchChanges++;
    if (this.flushTimer) {
      // A change after a lull, joining a batch that waits a long window, on a loop mostly idle since that batch
      // was scheduled: the burst that set the window is over.
      if (sinceChange >= HURRY_GAP_MS && this.collectMark !== undefined && this.loadMeter.since(this.collectMark) < BUSY_UTILIZATION
        && this.sendSoon('change', now)) this.hurried++;
      return;
    }
    this.window = nextBatchWindow(this.window, this.collectBusy, now - this.flushEnd, this.lastFlushMs, sinceChange, this.lastFlushChanges);
    this.metrics.mapBatchWindow.set(this.window / 1000);
    this.collectMark = this.loadMeter.mark();
    this.scheduledAt = now;
    this.flushTimer = setTimeout(this.onBatchTimer, this.window);
    if (this.window > LULL_MS) this.armLull(LULL_MS);
  }

  /** armLull sets the timer that looks for a lull in changes under a long window (see LULL_MS). */
  private armLull(delayMs: number): void {
    clearTimeout(this.lullTimer);
    this.lullMark = this.loadMeter.mark();
    this.lullTimer = setTimeout(this.onLull, delayMs);
  }

  private readonly onLull = (): void => {
    this.lullTimer = undefined;
    // Sent already, or due at the end of a flush under way.
    if (!this.flushTimer) return;
    const now = performance.now();
    const quiet = now - this.lastChangeAt;
    // While a flush or a round is sent, changes wait for its end: no lull can be told then.
    if (this.busy || quiet < LULL_MS) { this.armLull(this.busy ? LULL_MS : LULL_MS - quiet); return; }
    if (this.loadMeter.since(this.lullMark) >= BUSY_UTILIZATION) { this.armLull(LULL_MS); return; }
    if (this.sendSoon('lull', now)) this.lulled++;
  };

  /**
   * sendSoon sends the pending batch after QUIET_WINDOW_MS instead of the rest of its window, counted by reason
   * (HURRY_GAP_MS, LULL_MS); false when it is due by then anyway.
   */
  private sendSoon(reason: 'change' | 'lull', now: number): boolean {
    if (this.scheduledAt + this.window - now <= QUIET_WINDOW_MS) return false;
    clearTimeout(this.flushTimer);
    this.window = QUIET_WINDOW_MS;
    this.flushTimer = setTimeout(this.onBatchTimer, QUIET_WINDOW_MS);
    this.metrics.mapBatchesEarly.inc({ reason });
    return true;
  }
  private lullTimer?: NodeJS.Timeout;
  private lullMark?: unknown;

  private readonly onBatchTimer = (): void => {
    this.flushTimer = undefined;
    if (this.busy) { this.flushAfterJob = true; return; }
    try {
      this.flush(FLUSH_SLICE_MS);
    } catch (err) {
      this.logger.error('failed to send a batch of changes to map sessions', { error: (err as Error).message });
    }
  };
  /** lastChangeAt: when the last change was scheduled; scheduledAt: when the pending batch's timer was set. */
  private lastChangeAt = Number.NEGATIVE_INFINITY;
  /** batchChanges counts the changes scheduled since the last flush began; lastFlushChanges, those it carried. */
  private batchChanges = 0;
  private lastFlushChanges = Number.POSITIVE_INFINITY;
  private scheduledAt = 0;
  /** hurried counts batches sent early by a change after a lull (see HURRY_GAP_MS; tests). */
  hurried = 0;
  /** lulled counts batches sent early after a lull with no change (see LULL_MS; tests, the benchmark). */
  lulled = 0;
  /** blockFrames counts the blocks of filter sources compressed once per flush for the sessions sending them (tests). */
  blockFrames = 0;
  /** partFrames counts the shared PeersChanged and PeersChangedPatch parts compressed once per flush as frames of their own (tests). */
  partFrames = 0;
  /** upsertLists counts the (non-empty) lists of nodes a flush's messages send whole, built (upsertsOf) rather than reused (tests). */
  upsertLists = 0;
  /** segmentedMessages counts messages sent to zstd sessions as several frames around shared ones (tests). */
  segmentedMessages = 0;

  /** flushInSlices sends what is pending as the batch timer does, in slices of about sliceMs of work (tests: 0, one session a slice). */
  flushInSlices(sliceMs = FLUSH_SLICE_MS): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    this.flush(sliceMs);
  }

  /** flushing: a flush or a round of first maps is being sent in slices (see FLUSH_SLICE_MS). */
  get flushing(): boolean { return this.busy; }
  private get busy(): boolean { return this.job !== undefined || this.round !== undefined; }

  /** flushNow sends whatever is pending at once (shutdown, tests). */
  flushNow(): void {
    this.finishRound();
    clearTimeout(this.flushTimer);
    clearTimeout(this.opensTimer);
    this.flushTimer = undefined;
    this.opensTimer = undefined;
    this.flush();
  }

  private apply(c: Change): void {
    const seq = ++this.seq;
    // Drive grants make filters depend on who is where, as a policy does.
    const policy = this.mapper.view.hasPolicy || this.mapper.view.hasDriveGrants;
    switch (c.type) {
      case 'node-patch': return this.queuePatch(c.nodeId, c.patch);
      case 'node-added':
        this.deleted.delete(c.node.machineKey);
        this.shapes.set(c.node.id, shapeOf(c.node));
        this.mapper.view.nodeChanged();
        this.pendingFull.set(c.node.id, seq);
        this.pendingPrimaries = true;
        if (policy) this.pendingStructural = true;
        break;
      case 'node-removed':
        this.shapes.delete(c.node.id);
        this.mapper.forget(c.nodeId);
        this.mapper.view.nodeRemoved(c.nodeId);
        this.rememberDeleted(c.node);
        this.tellDeleted(c.node);
        this.closeNode?.(c.nodeId);
        this.pendingFull.delete(c.nodeId);
        this.pendingSelf.delete(c.nodeId);
        this.pendingPatch.delete(c.nodeId);
        this.pendingRemoved.add(c.nodeId);
        this.pendingPrimaries = true;
        if (policy) this.pendingStructural = true;
        break;
      case 'node-changed': {
        const shape = shapeOf(c.node);
        const same = sameShape(this.shapes.get(c.node.id), shape);
        this.shapes.set(c.node.id, shape);
        this.mapper.forget(c.node.id);
        this.pendingFull.set(c.node.id, seq);
        this.pendingSelf.set(c.node.id, seq);
        if (!same) {
          this.mapper.view.nodeChanged();
          this.pendingPrimaries = true;
          if (policy) this.pendingStructural = true;
        }
        break;
      }
      case 'user-changed':
        this.pendingUsers.add(c.user.id);
        this.mapper.view.invalidate();
        this.pendingStructural = true;
        // Who an approver names may have changed, and with it which routers' routes are approved.
        this.pendingPrimaries = true;
        break;
      case 'user-removed':
        this.mapper.view.invalidate();
        this.pendingStructural = true;
        this.pendingPrimaries = true;
        break;
      case 'policy-changed':
      case 'drive-changed': {
        // What every peer looks like under the old policy (what clients hold): at the flush only
        // the peers whose text the new policy changes are sent again, not every peer to everyone.
        // A session opened since the pending policy change holds peers as that policy shows them, which a
        // comparison with the texts from before it cannot see: send the pending batch first (rare: two policy
        // changes within one window with a device joining between them).
        if (this.pendingPolicyOld && this.openedUnderPendingPolicy) this.flushChanges();
        if (!this.pendingPolicyOld) {
          this.openedUnderPendingPolicy = false;
          this.pendingPolicyOld = new Map();
          for (const n of this.state.nodes.list()) this.pendingPolicyOld.set(n.id, this.mapper.peer(n));
        }
        this.pendingPolicySeq = seq;
        this.mapper.view.setPolicy(this.policy());
        this.mapper.forgetAll();
        // A node's own entry is sent again only if the policy changed it, judged at the flush like its peer entry
        // (they differ in the session's capability version and the fixed self capabilities alone): sent to every
        // session, it made every message distinct and every client rebuild its netmap (at 2,000 devices, 2,000
        // messages for 556 devices whose view changed).
        this.pendingStructural = true;
        this.pendingPrimaries = true;
        break;
      }
      case 'dns-changed': this.flushNow(); return this.broadcast(`{"DNSConfig":${JSON.stringify(this.mapper.dnsConfig())}}`, true);
      case 'derp-changed': this.flushNow(); return this.broadcast((s) => `{"DERPMap":${this.mapper.derpMapJson(s.capVersion)}}`, true);
    }
    this.schedule();
  }

  private queuePatch(nodeId: number, patch: PeerPatch): void {
    const seq = this.seq;
    this.mapper.forget(nodeId);
    const pc = this.pendingPatch.get(nodeId)?.patch ?? { NodeID: nodeId };
    if (patch.online !== undefined) { pc.Online = patch.online; this.pendingPrimaries = true; }
    if (patch.lastSeen) pc.LastSeen = patch.lastSeen.toISOString();
    if (patch.endpoints) pc.Endpoints = patch.endpoints;
    if (patch.derpRegion !== undefined) pc.DERPRegion = patch.derpRegion;
    if (patch.keyExpiry !== undefined) pc.KeyExpiry = patch.keyExpiry ? patch.keyExpiry.toISOString() : '0001-01-01T00:00:00Z';
    if (patch.discoKey) pc.DiscoKey = patch.discoKey;
    if (patch.nodeKey) pc.Key = patch.nodeKey;
    this.pendingPatch.set(nodeId, { patch: pc, seq });
    if (patch.keyExpiry !== undefined || patch.nodeKey) this.pendingSelf.set(nodeId, seq);
    this.schedule();
  }

  /**
   * sendAll sends each target its message, encoding (and compressing) each distinct message once. A target
   * names its message by a key that is equal exactly when the text is, and gives the text lazily, so sessions
   * that share a large message (the same PeersChanged) are matched on a short key, not their whole text.
   */
  private sendAll(targets: Array<{ s: MapSession; key: string; json: () => string }>, frames = new Map<string, WireMessage>()): void {
    for (const { s, key, json } of targets) this.sendOne(s, key, json, frames);
    this.countDeltas();
  }

  /**
   * sendOne is sendAll for one target; the message is counted at the next countDeltas (a flush's end). build, when
   * given, makes the frame in place of compressing json() whole (a zstd session's message with a large shared part).
   */
  private sendOne(s: MapSession, text: string | null, json: () => string, frames: Map<string, WireMessage>, build?: () => WireMessage): void {
    // A key this long holds a part's whole text (a packet filter, the node itself): one session's own message,
    // which no other session shares. Hashing it and keeping its frame to the end of the flush cost more than
    // the rare match saved.
    const key = text === null || text.length > UNSHARED_KEY_LENGTH ? undefined : `${s.zstd ? 'z' : 'p'}${text}`;
    let buf = key === undefined ? undefined : frames.get(key);
    if (!buf) {
      buf = build ? build() : frame(json(), s.zstd);
      if (key !== undefined) frames.set(key, buf);
    }
    s.send(buf);
    this.deltasSent++;
  }

  /** countDeltas adds the messages sent since to the metric at once: a labelled counter hashes its labels on every
   * inc, which was 7 ms of a 120 ms flush to 951 sessions. */
  private countDeltas(): void {
    if (this.deltasSent) this.metrics.mapMessages.inc({ kind: 'delta' }, this.deltasSent);
    this.deltasSent = 0;
  }
  private deltasSent = 0;

  /**
   * broadcast sends every session one message (the same text, or one per session, e.g.
   * by capability version); `rebuilds` says the client rebuilds its netmap from it.
   */
  private broadcast(json: string | ((s: MapSession) => string), rebuilds = false): void {
    const all = [...this.sessions()];
    const ownerOf = this.ownerMemo();
    if (rebuilds) for (const s of all) this.rebuilt(s, ownerOf);
    this.sendAll(all.map((s) => {
      const text = typeof json === 'string' ? json : json(s);
      return { s, key: text, json: () => text };
    }));
  }

  /**
   * rebuilt records that the session's client rebuilt its netmap: it now shows its own and its peers' owners.
   * ownerOf is one flush's memo of node → owner: a policy change marks every session rebuilt, and building each
   * peer's owner anew for every session (O(sessions × peers)) was 10% of that change at 1,000 devices. The walk
   * stops once every owner in the tailnet is in (a handful of users, met within a few dozen peers).
   */
  private rebuilt(s: MapSession, ownerOf: ReturnType<SessionHub['ownerMemo']>): void {
    const owners = new Set<number>();
    const mine = ownerOf(s.nodeId);
    if (mine !== undefined) owners.add(mine);
    const all = ownerOf.count();
    if (owners.size < all) {
      s.peers.some((id) => {
        const o = ownerOf(id);
        if (o !== undefined) owners.add(o);
        return owners.size >= all;
      });
    }
    s.shownOwners = this.ownerSet(owners);
  }

  /**
   * ownerSets are the distinct shownOwners sets, shared by every session showing the same owners (a session's set
   * is replaced, never changed): each idle device kept a Set of its own, and devices of one class show the same few.
   */
  private readonly ownerSets = new Map<string, ReadonlySet<number>>();

  /** ownerSet is the shared set of these owner ids. */
  private ownerSet(ids: Iterable<number>): ReadonlySet<number> {
    const sorted = [...ids].sort((a, b) => a - b);
    const key = sorted.join(',');
    let set = this.ownerSets.get(key);
    if (!set) {
      // Kept while in use, bounded: past the bound the table starts over (sessions keep the sets they hold).
      if (this.ownerSets.size >= OWNER_SETS_MAX) this.ownerSets.clear();
      set = new Set(sorted);
      this.ownerSets.set(key, set);
    }
    return set;
  }

  /** ownerMemo answers a node's owner id (undefined for a node gone), each node looked up once; count() is how
   * many distinct owners the tailnet's nodes have. */
  private ownerMemo(): ((id: number) => number | undefined) & { count: () => number } {
    const memo = new Map<number, number | undefined>();
    let distinct: number | undefined;
    const ownerOf = (id: number): number | undefined => {
      let o = memo.get(id);
      if (o === undefined && !memo.has(id)) {
        const n = this.state.nodes.get(id);
        o = n ? this.mapper.ownerId(n) : undefined;
        memo.set(id, o);
      }
      return o;
    };
    return Object.assign(ownerOf, {
      count: () => (distinct ??= new Set(this.state.nodes.list().map((n) => this.mapper.ownerId(n))).size),
    });
  }

  /** deletedNode is a node deleted since start-up that had this machine key (its device may still ask for a map). */
  deletedNode(machineKey: string): Node | undefined { return this.deleted.get(machineKey); }

  private rememberDeleted(node: Node): void {
    this.deleted.delete(node.machineKey);
    this.deleted.set(node.machineKey, node);
    if (this.deleted.size > DELETED_REMEMBERED) this.deleted.delete(this.deleted.keys().next().value!);
  }

  /**
   * tellDeleted sends a deleted node's open map streams their last message: the
   * node itself, logged out, and no peers. The stream is ended right after (by
   * closeNode); the device then shows NeedsLogin instead of staying Running.
   */
  private tellDeleted(node: Node): void {
    const self = this.mapper.deletedSelf(node);
    for (const s of [...(this.byNode.get(node.id) ?? [])]) {
      s.send(frame(this.mapper.loggedOutMap(self, s.capVersion, { gone: [...s.peers].sort((a, b) => a - b) }), s.zstd));
      this.metrics.mapMessages.inc({ kind: 'delta' });
    }
    // A session still waiting for its first map gets the first map of a logged-out machine instead.
    if (!this.deferredOpens.some((o) => o.node.id === node.id)) return;
    const still: DeferredOpen[] = [];
    for (const o of this.deferredOpens) {
      if (o.node.id !== node.id) { still.push(o); continue; }
      o.session.send(frame(this.mapper.loggedOutMap(self, o.session.capVersion, { first: true }), o.session.zstd));
      this.metrics.mapMessages.inc({ kind: 'full' });
    }
    this.deferredOpens = still;
  }

  /**
   * syncPrimaries brings primary routers up to date now (for API reads and full
   * maps), queueing the nodes whose role moved for the next flush.
   */
  syncPrimaries(): void {
    if (!this.pendingPrimaries) return;
    this.pendingPrimaries = false;
    let queued = false;
    for (const id of this.mapper.view.updatePrimaries()) {
      this.mapper.forget(id);
      if (this.state.nodes.get(id)) { const seq = ++this.seq; this.pendingFull.set(id, seq); this.pendingSelf.set(id, seq); queued = true; }
    }
    // Only a moved role needs a flush: scheduling one regardless chained an empty flush after every real one,
    // which kept the batch window at its cap after a join burst (nextBatchWindow saw flushes back to back).
    if (queued) this.schedule();
  }

  /**
   * electPrimaries runs the primary-route election now, over memory as it stands
   * (RouteService calls it right after a route write commits, before publishing it),
   * and queues the nodes whose role moved.
   */
  electPrimaries(): void {
    this.mapper.view.invalidate();
    this.pendingPrimaries = true;
    this.syncPrimaries();
  }

  /**
   * flush turns everything pending into at most one message per session, then sends the sessions still waiting
   * their full maps (rendered after the batch, so they skip it; see MapSession.renderedAt). With sliceMs (the
   * batch timer) the messages go out in slices of about that much work with the event loop free in between (see
   * FLUSH_SLICE_MS); the waiting sessions then get their maps when the last slice is sent.
   */
  private flush(sliceMs?: number): void {
    try {
      this.flushChanges(sliceMs);
    } finally {
      if (!this.job) this.openDeferred(sliceMs);
    }
  }

  private flushChanges(sliceMs?: number): void {
    this.finishJob();
    this.syncPrimaries();
    if (this.pendingPolicyOld) {
      for (const [id, before] of this.pendingPolicyOld) {
        const n = this.state.nodes.get(id);
        if (n && this.mapper.peer(n) !== before) {
          this.pendingFull.set(id, Math.max(this.pendingFull.get(id) ?? 0, this.pendingPolicySeq));
          this.pendingSelf.set(id, Math.max(this.pendingSelf.get(id) ?? 0, this.pendingPolicySeq));
        }
      }
      this.pendingPolicyOld = undefined;
    }
    const full = [...this.pendingFull.keys()].map((id) => this.state.nodes.get(id)).filter((n): n is Node => Boolean(n)).sort((a, b) => a.id - b.id);
    const fullSeq = new Map(this.pendingFull);
    const self = new Map(this.pendingSelf);
    const removed = [...this.pendingRemoved];
    const patches = [...this.pendingPatch.values()].filter((p) => this.state.nodes.get(p.patch.NodeID as number));
    const structural = this.pendingStructural;
    const users = [...this.pendingUsers].map((id) => this.state.users.get(id)).filter((u): u is NonNullable<typeof u> => Boolean(u));
    this.pendingFull.clear(); this.pendingSelf.clear(); this.pendingRemoved.clear(); this.pendingPatch.clear(); this.pendingUsers.clear();
    this.pendingStructural = false;
    if (!full.length && !removed.length && !patches.length && !structural && !self.size && !users.length) return;
    // Only a flush that sends something counts for nextBatchWindow.
    this.collectBusy = this.collectMark !== undefined ? this.loadMeter.since(this.collectMark) : 0;
    this.lastFlushChanges = this.batchChanges;
    this.batchChanges = 0;
    this.job = { sessions: [...this.sessions()], next: 0, one: this.send(full, fullSeq, self, removed, patches, structural, users), busyMs: 0 };
    if (sliceMs === undefined) this.finishJob();
    else this.continueJob(this.job, sliceMs);
  }

  /** continueJob sends the next slice of a flush and, when sessions remain, lets the event loop run before the next. */
  private continueJob(job: FlushJob, sliceMs: number): void {
    if (this.job !== job) return;
    try {
      if (!this.runJob(job, sliceMs)) {
        setImmediate(() => this.continueJob(job, sliceMs));
        return;
      }
    } catch (err) {
      this.logger.error('failed to send a batch of changes to map sessions', { error: (err as Error).message });
    }
    this.job = undefined;
    this.endJob(job);
    this.openDeferred(sliceMs);
  }

  /** runJob sends sessions their messages for about sliceMs; true when every session has had its turn. */
  private runJob(job: FlushJob, sliceMs: number): boolean {
    const started = performance.now();
    try {
      while (job.next < job.sessions.length) {
        const s = job.sessions[job.next++]!;
        if (!s.closed) job.one(s);
        if (performance.now() - started >= sliceMs) break;
      }
    } finally {
      job.busyMs += performance.now() - started;
    }
    return job.next >= job.sessions.length;
  }

  /** finishJob sends what is left of a flush under way at once (an unsliced flush, or one that must not wait, e.g. flushNow). */
  private finishJob(): void {
    const job = this.job;
    if (!job) return;
    this.job = undefined;
    try {
      this.runJob(job, Number.POSITIVE_INFINITY);
    } finally {
      this.endJob(job);
    }
  }

  /** applyQueued applies the changes that arrived while a flush or a round of first maps was under way. */
  private applyQueued(): void {
    const queued = this.queued;
    this.queued = [];
    // Changes that waited came back to back with what held them (a burst goes on): the window is set as for one
    // right behind another change.
    if (queued.length) this.lastChangeAt = performance.now();
    for (const c of queued) this.dispatch(c);
  }

  /** endJob records a flush's cost and applies the changes that arrived while it was being sent. */
  private endJob(job: FlushJob): void {
    this.countDeltas();
    this.flushEnd = performance.now();
    this.lastFlushMs = job.busyMs;
    this.metrics.mapBatches.observe(job.busyMs / 1000);
    this.applyQueued();
    if (this.flushAfterJob) {
      this.flushAfterJob = false;
      this.schedule();
    }
  }

  /**
   * send builds and sends one flush's messages (see flush). fullSeq, self and each patch carry the sequence number
   * of the node's latest change: a session whose full map was rendered after it (MapSession.renderedAt) skips it.
   */
  private send(full: Node[], fullSeq: Map<number, number>, self: Map<number, number>, removed: number[],
    patches: Array<{ patch: Record<string, unknown>; seq: number }>, structural: boolean, users: User[]): (s: MapSession) => void {
    const userText = new Map(users.map((u) => [u.id, this.mapper.userProfile(u)] as const));
    const profileText = new Map<number, { id: number; json: string }>();
    const profileOf = (n: Node) => profileText.get(n.id) ?? profileText.set(n.id, this.mapper.profile(n)).get(n.id)!;
    const ownerOf = this.ownerMemo();

    const peerText = new Map(full.map((n) => [n.id, this.mapper.peer(n)] as const));
    const patchText = new Map(patches.map(({ patch }) => [patch.NodeID as number, JSON.stringify(patch)] as const));
    // A PeersChanged or PeersChangedPatch list is the same text for every session sending the same nodes:
    // built once per flush and keyed by the node ids, so each session costs its ids, not the peers' bytes.
    const shared = new Map<string, string>();
    const sharedPart = (key: string, build: () => string): string => {
      let text = shared.get(key);
      if (text === undefined) { text = build(); shared.set(key, text); }
      return text;
    };
    // Sessions of one peer class move between the same two shared lists: their difference is walked once, and
    // what a message makes of it built once (upsertsOf, kept as the pair's memo).
    const listDiffs = new ListDiffs<Upserts>();
    const nodesOf = (ids: readonly number[]): Node[] => {
      const nodes: Node[] = [];
      for (const id of ids) {
        const n = this.state.nodes.get(id);
        if (n) nodes.push(n);
      }
      return nodes;
    };
    const upsertsOf = (nodes: Node[]): Upserts => {
      if (nodes.length) this.upsertLists++;
      const owners: Array<{ id: number; json: string }> = [];
      const seen = new Map<number, string>();
      for (const n of nodes) {
        const p = profileOf(n);
        if (seen.get(p.id) !== p.json) { seen.set(p.id, p.json); owners.push(p); }
      }
      return { nodes, key: `C${nodes.map((n) => n.id).join(',')}`, owners };
    };
    // Sessions sending the same text share one frame (see sendAll), across the slices of this flush.
    const frames = new Map<string, WireMessage>();
    // A large shared part, compressed once for every zstd session that sends it (see frameSegments).
    const sharedFrames = new Map<string, Uint8Array>();
    const sharedFrame = (key: string, text: string): Uint8Array => {
      let f = sharedFrames.get(key);
      if (!f) {
        f = compressJson(Buffer.from(text));
        sharedFrames.set(key, f);
        if (key[0] === 'B') this.blockFrames++; else this.partFrames++;
      }
      return f;
    };
    // The ids of the blocks of sources some zstd session of this flush has sent (see blocks below).
    const blockSent = new Set<number>();
    const sharedMin = sharedFrameMinInForce();
    // In a message already cut around shared blocks of sources, a shorter shared part goes as a frame of its own
    // too: compressed with the session's own text it cost a compressor call per session (a tag change at 1,000
    // devices: half the sessions get a filter update around their blocks and the retagged peer's 530 B entry,
    // which every one of them compressed), as a frame it costs about 12 bytes and one call per flush.
    const blockMin = Math.min(sharedMin, SHARED_BLOCK_MIN);
    const isShared = (key: string, text: string, inBlocks = false): boolean =>
      (key[0] === 'C' || key[0] === 'P') && text.length >= (inBlocks ? blockMin : sharedMin);
    // A block of a rule's sources that sessions send the same, compressed once with the shared parts (see
    // FilterUpdate.pieces): keyed 'B' + its id.
    const blockFrame = (x: SharedText): Uint8Array => sharedFrame(`B${x.id}`, x.text);
    return (s: MapSession): void => {
      const me = this.state.nodes.get(s.nodeId);
      if (!me) return;
      const parts: string[] = [];
      // keys[i] names parts[i]: its text, or for a shared part 'C'/'P' + node ids (no part text starts with a letter).
      const keys: string[] = [];
      const add = (text: string, key = text): void => { parts.push(text); keys.push(key); };
      // The PacketFilters part, when there is one, and its pieces around the blocks of sources it sends.
      let filterAt = -1;
      // filterText: the PacketFilters part whole, made on demand, when parts holds FILTER_PART in its place.
      let filterText: (() => string) | undefined;
      let filterPieces: ReadonlyArray<string | SharedText> | null = null;
      // newer(seq): the change numbered seq came after this session's full map was rendered.
      const newer = (seq: number | undefined): boolean => seq !== undefined && seq > s.renderedAt;
      const selfChanged = newer(self.get(s.nodeId));
      if (selfChanged) add(`"Node":${this.mapper.selfNode(me, s.capVersion)}`);
      let gone: readonly number[];
      let upsert: Node[];
      // The upserted nodes with their part's key and owners (upsertsOf), and the PeersRemoved part when it is shared.
      let ups: Upserts | undefined;
      let removedText: string | undefined;
      if (structural) {
        // Visibility may have changed: compare what the session has with what it should see.
        const view = this.mapper.view.forNode(s.nodeId);
        const next = peerSetOf(view);
        // To send: the peers new to the session, and those it holds whose entry changed since its map. The batch's
        // changed nodes are usually few: look those up in the two sets rather than every peer in the batch's map
        // (a lookup per peer per session was most of a tag change's per-session assembly).
        if (fullSeq.size < next.size) {
          // Sessions of one peer class moving between the same two shared lists get the same difference, and build
          // its nodes, its part's key and owners once (a policy change gave 1,411 sessions at 5,000 devices hundreds
          // of new peers each: looking them up and joining their ids per session was a quarter of the flush's own work).
          const pair = s.peers.sharedChanges(next, listDiffs);
          const d = pair ?? s.peers.changes(next);
          gone = d.gone;
          let held: number[] | undefined;
          for (const [id, seq] of fullSeq) {
            if (newer(seq) && next.has(id) && s.peers.has(id)) (held ??= []).push(id);
          }
          if (held) ups = upsertsOf(nodesOf([...d.added, ...held].sort((a, b) => a - b)));
          else if (pair) {
            ups = pair.memo ??= upsertsOf(nodesOf(d.added));
            if (gone.length) removedText = ups.removed ??= removedPart(gone);
          } else ups = upsertsOf(nodesOf(d.added));
        } else {
          const ids: number[] = [];
          gone = s.peers.diff(next, (id, added) => { if (added || newer(fullSeq.get(id))) ids.push(id); });
          ups = upsertsOf(nodesOf(ids));
        }
        upsert = ups.nodes;
        s.peers = next;
        const update = filterUpdate(s.filterRules, s.filterNames, view.packetFilter);
        s.filterRules = view.packetFilter;
        s.filterNames = update.names;
        const ssh = this.mapper.sshJson(s.nodeId);
        if (update.pieces !== null) {
          filterAt = parts.length;
          filterPieces = update.pieces;
          // A long filter update's text is made only if the message is wanted whole (see FILTER_PART).
          const long = update.pieces.reduce((n, x) => n + (typeof x === 'string' ? x.length : x.text.length), 0) > UNSHARED_KEY_LENGTH;
          if (long) { add(FILTER_PART); filterText = () => `"PacketFilters":${update.json}`; } else add(`"PacketFilters":${update.json}`);
        }
        if (ssh !== s.ssh) { add(`"SSHPolicy":${ssh}`); s.ssh = ssh; }
      } else {
        // No visibility change: every node sees every node, or only content changed.
        gone = removed.filter((id) => s.peers.delete(id));
        upsert = full.filter((n) => newer(fullSeq.get(n.id)) && (this.mapper.view.hasPolicy ? s.peers.has(n.id) : n.id !== s.nodeId));
        for (const n of upsert) s.peers.add(n.id);
      }
      if (gone.length) add(removedText ?? removedPart(gone));
      if (upsert.length) {
        ups ??= upsertsOf(upsert);
        const { key } = ups;
        add(sharedPart(key, () => `"PeersChanged":[${upsert.map((n) => peerText.get(n.id) ?? this.mapper.peer(n)).join(',')}]`), key);
      }
      // Profiles: every owner this message introduces or changes, once per session.
      const profiles: string[] = [];
      let stale = false;
      const offer = (id: number, json: string, introduced: boolean): void => {
        if (introduced && !s.shownOwners.has(id)) stale = true;
        if (s.profiles.get(id) === json) return;
        if (s.shownOwners.has(id)) stale = true; // a changed profile the client's netmap shows
        s.profiles.set(id, json);
        profiles.push(json);
      };
      // The node's own owner first, then its new peers' (each owner once: offering it again changes nothing).
      if (selfChanged) { const p = profileOf(me); offer(p.id, p.json, true); }
      if (upsert.length) for (const p of ups!.owners) offer(p.id, p.json, true);
      for (const [id, json] of userText) if (s.profiles.has(id)) offer(id, json, false);
      if (profiles.length) add(`"UserProfiles":[${profiles.join(',')}]`);
      // A node sent whole in this message absorbs its patch (its JSON was rendered now).
      const sent = upsert.length && patches.length ? (ups!.ids ??= new Set(upsert.map((n) => n.id))) : undefined;
      const mine = patches.filter(({ patch, seq }) => newer(seq) && s.peers.has(patch.NodeID as number) && !sent?.has(patch.NodeID as number));
      if (mine.length) {
        const key = `P${mine.map(({ patch }) => patch.NodeID).join(',')}`;
        add(sharedPart(key, () => `"PeersChangedPatch":[${mine.map(({ patch }) => patchText.get(patch.NodeID as number)).join(',')}]`), key);
      }
      // Newer clients apply UserProfiles and peer changes without rebuilding their
      // netmap, and `tailscale status` keeps showing the owners of the last rebuild:
      // when this message shows an owner that netmap lacks, also resend the
      // (unchanged) Domain, which makes every client rebuild it.
      const rebuilds = selfChanged || parts.some((p) => p.startsWith('"SSHPolicy"'));
      if (stale && !rebuilds) add(`"Domain":${JSON.stringify(this.mapper.domain())}`);
      if (stale || rebuilds) this.rebuilt(s, ownerOf);
      if (!parts.length) return;
      // A block of sources goes as a frame of its own from the second zstd session of the flush that sends it; the
      // first sends it inline. A block only one session sends (a retagged device's own rules, sent again whole around
      // ~250 blocks at 1,000 devices) cost a compressor call for it and one for each piece between blocks.
      let blocks = false;
      let inline: Set<SharedText> | undefined;
      if (s.zstd && filterPieces) {
        for (const x of filterPieces) {
          if (typeof x === 'string' || !isSharedBlock(x)) continue;
          if (blockSent.has(x.id)) blocks = true;
          else { blockSent.add(x.id); (inline ??= new Set()).add(x); }
        }
      }
      const segmented = s.zstd && (blocks || keys.some((k, i) => isShared(k, parts[i]!)));
      if (segmented) this.segmentedMessages++;
      const whole = (p: string): string => (p === FILTER_PART ? filterText!() : p);
      this.sendOne(s, filterText ? null : keys.join('\n'), () => `{${parts.map(whole).join(',')}}`, frames, segmented ? () => {
        // The message's text, cut around its large shared parts: what lies between is this session's own.
        const segments: Array<string | Uint8Array> = [];
        let own = '{';
        parts.forEach((p, i) => {
          if (i) own += ',';
          if (isShared(keys[i]!, p, blocks)) { segments.push(own, sharedFrame(keys[i]!, p)); own = ''; return; }
          if (i !== filterAt || !blocks) { own += whole(p); return; }
          own += '"PacketFilters":';
          for (const x of filterPieces!) {
            if (typeof x === 'string') own += x;
            else if (isSharedBlock(x) && !inline?.has(x)) { segments.push(own, blockFrame(x)); own = ''; }
            else own += x.text;
          }
        });
        segments.push(`${own}}`);
        return frameSegments(segments);
      } : undefined);
    };
  }
}

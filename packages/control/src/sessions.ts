import type { Policy } from '@headway/policy';
import type { Change, DNSConfig, Logger, Metrics, Node, PingRequest, State } from '@headway/core';
import { eventLoopMeter, systemClock, type Clock, type LoadMeter } from './clock.js';
import { DeltaComposer, peerSetOf } from './delta-composer.js';
import { DeltaEncoder, type FanoutCounters } from './delta-encoder.js';
import { DELETED_REMEMBERED } from './fanout-knobs.js';
import { frame } from './frames.js';
import { encode, mapResponse, member } from './map-json.js';
import type { MapSession } from './map-session.js';
import type { Mapper } from './mapper.js';
import { OwnerSets, ownerMemo } from './owners.js';
import { PendingBatch } from './pending-batch.js';
import { FanoutScheduler, SlicedJob, type FanoutWork } from './scheduler.js';

/** WaitingSession is a new session waiting for its first map (see SessionHub.begin). */
interface WaitingSession {
  session: MapSession;
  node: Node;
  writeFull: (node: Node) => void;
}

/** Shape is what of a node decides who sees it and what routes it serves: a change to it may move both. */
interface Shape { tags: string; ips: string; routes: string; user: number | null }
const shapeOf = (n: Node): Shape => ({
  tags: n.tags.join(','), ips: `${n.ipv4},${n.ipv6}`, routes: `${n.availableRoutes.join(',')}|${n.approvedRoutes.join(',')}`, user: n.userId,
});
const sameShape = (a: Shape | undefined, b: Shape) => Boolean(a) && a!.tags === b.tags && a!.ips === b.ips && a!.routes === b.routes && a!.user === b.user;

/** HubOptions: the clock and load meter the fan-out runs on (tests put in their own). */
export interface HubOptions {
  clock?: Clock;
  loadMeter?: LoadMeter;
}

/**
 * SessionHub is the registry of map sessions: it opens them (a full map, now or with the next round), closes them,
 * finds them, and hands each published change to the pending batch and the scheduler. The scheduler decides when a
 * batch goes out; the composer makes each session's message of it; the encoder turns messages into frames.
 */
export class SessionHub {
  readonly scheduler: FanoutScheduler<Change>;
  readonly clock: Clock;
  /** closeNode ends a node's live sessions (set by the control handler). */
  closeNode?: (nodeId: number) => void;
  private readonly byNode = new Map<number, Set<MapSession>>();
  /** everyone: byNode's sessions as one list, made when a flush asks after a session opened or closed. */
  private everyone: readonly MapSession[] | undefined;
  private readonly shapes = new Map<number, Shape>();
  /** deleted remembers recently deleted nodes by machine key, to answer their devices as themselves. */
  private readonly deleted = new Map<string, Node>();
  private readonly batch = new PendingBatch();
  /** waiting are new sessions whose full map waits for the pending flush or a round of first maps (see begin). */
  private waiting: WaitingSession[] = [];
  private readonly owners = new OwnerSets();
  private readonly counters: FanoutCounters = { blockFrames: 0, partFrames: 0, upsertLists: 0, segmentedMessages: 0, deltas: 0 };
  private unsubscribe?: () => void;

  constructor(
    private readonly state: State,
    private readonly mapper: Mapper,
    private readonly logger: Logger,
    private readonly metrics: Metrics,
    /** policy is the compiled policy in force (PolicyService.compiled): the hub never parses policy text. */
    private readonly policy: () => Policy | null,
    options: HubOptions = {},
  ) {
    this.clock = options.clock ?? systemClock;
    this.scheduler = new FanoutScheduler(this.work, { clock: this.clock, loadMeter: options.loadMeter ?? eventLoopMeter, metrics, logger });
  }

  start(): void {
    for (const n of this.state.nodes.list()) this.shapes.set(n.id, shapeOf(n));
    this.mapper.view.setPolicy(this.policy());
    this.mapper.view.updatePrimaries();
    this.unsubscribe = this.state.bus.subscribe((c) => this.scheduler.admit(c));
  }

  stop(): void {
    this.unsubscribe?.();
    this.scheduler.stop();
    for (const set of this.byNode.values()) for (const s of set) s.close();
    this.byNode.clear();
    this.everyone = undefined;
  }

  get sessionCount(): number {
    let n = 0;
    for (const s of this.byNode.values()) n += s.size;
    return n;
  }

  /** sessions are the open sessions; the list is not changed afterwards (a session opening or closing makes a new one). */
  sessions(): readonly MapSession[] {
    if (this.everyone) return this.everyone;
    const all: MapSession[] = [];
    for (const set of this.byNode.values()) for (const s of set) all.push(s);
    return (this.everyone = all);
  }

  /**
   * begin sends a new session its full map (writeFull) and registers it. While a batch is pending and the policy's
   * view of the tailnet is stale (a join makes it so), the full map waits for the scheduler's first-map timer (or
   * the batch, if sooner), so that every session opening meanwhile shares one preparation of the view rather than
   * each join preparing it for its own first map. With nothing pending the map goes out at once.
   */
  begin(session: MapSession, node: Node, writeFull: (node: Node) => void): void {
    const opening = { session, node, writeFull };
    if (this.scheduler.busy || (this.scheduler.timerPending && this.mapper.view.stale)) {
      this.waiting.push(opening);
      this.scheduler.waitForFirstMaps();
    } else this.beginNow(opening);
  }

  /** open registers a session after its full map was sent, recording what that map contained. */
  open(session: MapSession, node: Node): void {
    const v = this.mapper.view.forNode(node.id);
    // The peer class's shared list, as a structural flush gives it: sessions of one class then hold one array, and
    // the next flush walks their difference to a new list once for the class (ListDiffs).
    session.peers = peerSetOf(v);
    const peers: Node[] = [];
    for (const id of session.peers) {
      const n = this.state.nodes.get(id);
      if (n) peers.push(n);
    }
    session.profiles = this.mapper.profiles([node, ...peers]);
    session.shownOwners = this.owners.of(session.profiles.keys());
    session.filterRules = v.packetFilter;
    session.filterNames = undefined;
    session.ssh = this.mapper.sshJson(node.id);
    (this.byNode.get(node.id) ?? this.byNode.set(node.id, new Set()).get(node.id)!).add(session);
    this.everyone = undefined;
    // A router that reconnects has shown it is reachable again (the HA prober's verdict against it is dropped).
    if (!this.mapper.view.isHealthy(node.id)) this.setHealth(new Map([[node.id, true]]));
    this.metrics.mapSessions.inc();
    session.armKeepAlive();
  }

  close(session: MapSession): void {
    session.close();
    const set = this.byNode.get(session.nodeId);
    if (set?.delete(session)) { this.metrics.mapSessions.dec(); this.everyone = undefined; }
    if (set && !set.size) this.byNode.delete(session.nodeId);
  }

  // ---- What the HA prober (ha-prober.ts) asks of the hub ----

  /** haRouters are the online routers of the subnet routes two or more online routers serve (the election brought up to date first). */
  haRouters(): readonly number[] {
    this.syncPrimaries();
    return this.mapper.view.haRouters();
  }

  /** currentSession is the node's newest open map session. */
  currentSession(nodeId: number): MapSession | undefined {
    let last: MapSession | undefined;
    for (const s of this.byNode.get(nodeId) ?? []) if (!s.closed) last = s;
    return last;
  }

  /** sendPing puts a MapResponse holding only the PingRequest on the session's stream. */
  sendPing(session: MapSession, ping: PingRequest): void {
    session.send(frame(mapResponse([member('PingRequest', encode(ping))]), session.zstd));
    this.metrics.mapMessages.inc({ kind: 'ping' });
  }

  /** setHealth records the prober's verdicts and, when a router's health changed, runs the election again. */
  setHealth(verdicts: ReadonlyMap<number, boolean>): void {
    if (!this.mapper.view.setHealth(verdicts)) return;
    this.batch.reelect = true;
    this.syncPrimaries();
  }

  /** deletedNode is a node deleted since start-up that had this machine key (its device may still ask for a map). */
  deletedNode(machineKey: string): Node | undefined { return this.deleted.get(machineKey); }

  /**
   * syncPrimaries brings primary routers up to date now (for API reads and full maps), queueing the nodes whose
   * role moved for the next flush. Only a moved role schedules one: an empty flush after every real one would keep
   * the batch window long after a burst (changes would look back to back).
   */
  syncPrimaries(): void {
    if (!this.batch.reelect) return;
    this.batch.reelect = false;
    let queued = false;
    for (const id of this.mapper.view.updatePrimaries()) {
      this.mapper.forget(id);
      if (this.state.nodes.get(id)) { this.batch.roleMoved(id, this.batch.next()); queued = true; }
    }
    if (queued) this.scheduler.changeQueued();
  }

  /**
   * electPrimaries runs the primary-route election now, over memory as it stands (RouteService calls it right
   * after a route write commits, before publishing it), and queues the nodes whose role moved.
   */
  electPrimaries(): void {
    this.mapper.view.invalidate();
    this.batch.reelect = true;
    this.syncPrimaries();
  }

  // ---- The scheduler's controls, as tests and shutdown use them ----

  /** flushNow sends whatever is pending at once (shutdown, tests). */
  flushNow(): void { this.scheduler.flushNow(); }
  /** flushInSlices sends what is pending as the batch timer does, in slices of about sliceMs of work (tests: 0, one session a slice). */
  flushInSlices(sliceMs?: number): void { this.scheduler.flushInSlices(sliceMs); }
  /** openInSlices sends the waiting sessions their first maps as the first-map timer does (tests: 0, one session a slice). */
  openInSlices(sliceMs?: number): void { this.scheduler.openInSlices(sliceMs); }
  /** openDeferredNow sends the waiting sessions their first maps at once, leaving the batch pending (tests). */
  openDeferredNow(): void { this.scheduler.openWaitingNow(); }
  /** flushing: a flush or a round of first maps is being sent in slices. */
  get flushing(): boolean { return this.scheduler.busy; }
  /** batchWindow is the window the pending (or next) batch waits (metrics, tests). */
  get batchWindow(): number { return this.scheduler.window.ms; }
  /** lastFlushCost is how long, in ms, the last flush that sent something took. */
  get lastFlushCost(): number { return this.scheduler.window.lastFlushMs; }
  get hurried(): number { return this.scheduler.hurried; }
  get lulled(): number { return this.scheduler.lulled; }
  get blockFrames(): number { return this.counters.blockFrames; }
  get partFrames(): number { return this.counters.partFrames; }
  get upsertLists(): number { return this.counters.upsertLists; }
  get segmentedMessages(): number { return this.counters.segmentedMessages; }

  // ---- What the scheduler runs ----

  private readonly work: FanoutWork<Change> = {
    apply: (c) => {
      try {
        this.apply(c);
      } catch (err) {
        this.logger.error('failed to dispatch a change to map sessions', { change: c.type, error: (err as Error).message });
      }
    },
    takeBatch: () => {
      this.syncPrimaries();
      const batch = this.batch.take({
        node: (id) => this.state.nodes.get(id),
        user: (id) => this.state.users.get(id),
        peerTextChanged: (n, before) => this.mapper.peer(n) !== before,
      });
      if (!batch) return undefined;
      const composer = new DeltaComposer(batch, { state: this.state, mapper: this.mapper, owners: this.owners, counters: this.counters });
      const encoder = new DeltaEncoder(this.counters);
      return new SlicedJob(this.sessions(), (s: MapSession) => {
        if (s.closed) return;
        const m = composer.messageFor(s);
        if (m) encoder.send(s, m);
      });
    },
    batchSent: () => this.countDeltas(),
    takeFirstMaps: () => {
      const waiting = this.waiting;
      this.waiting = [];
      if (!waiting.length) return undefined;
      return new SlicedJob(waiting, (w: WaitingSession) => {
        try {
          this.beginNow(w);
        } catch (err) {
          this.logger.error('failed to send a new map session its first map', { node: w.node.id, error: (err as Error).message });
        }
      });
    },
    firstMapsWaiting: () => this.waiting.length > 0,
    prepareCostMs: () => this.mapper.view.lastPrepareMs,
  };

  private beginNow({ session, node, writeFull }: WaitingSession): void {
    if (session.closed) return;
    this.syncPrimaries();
    const current = this.state.nodes.get(node.id) ?? node;
    // Everything published so far is in this map: the pending batch sends the session only what comes after.
    session.renderedAt = this.batch.seq;
    session.certDomain = this.mapper.certDomain(current);
    this.batch.sessionOpened();
    writeFull(current);
    this.open(session, current);
  }

  /** apply puts a change into the pending batch (forgetting what it outdates) and has the scheduler send it. */
  private apply(c: Change): void {
    const seq = this.batch.next();
    const { view } = this.mapper;
    // Drive grants make filters depend on who is where, as a policy does.
    const visibility = view.hasPolicy || view.hasDriveGrants;
    switch (c.type) {
      case 'node-patch':
        this.mapper.forget(c.nodeId);
        this.batch.patch(c.nodeId, c.patch, seq);
        break;
      case 'node-added':
        this.deleted.delete(c.node.machineKey);
        this.shapes.set(c.node.id, shapeOf(c.node));
        view.nodeChanged();
        this.batch.nodeAdded(c.node.id, seq, visibility);
        break;
      case 'node-removed':
        this.shapes.delete(c.node.id);
        this.mapper.forget(c.nodeId);
        view.nodeRemoved(c.nodeId);
        this.rememberDeleted(c.node);
        this.tellDeleted(c.node);
        this.closeNode?.(c.nodeId);
        this.batch.nodeRemoved(c.nodeId, visibility);
        break;
      case 'node-changed': {
        const shape = shapeOf(c.node);
        const reshaped = !sameShape(this.shapes.get(c.node.id), shape);
        this.shapes.set(c.node.id, shape);
        this.mapper.forget(c.node.id);
        if (reshaped) view.nodeChanged();
        this.batch.nodeChanged(c.node.id, seq, reshaped, visibility);
        break;
      }
      case 'user-changed':
      case 'user-removed':
        // Who an approver names may have changed too, and with it which routers' routes are approved.
        view.invalidate();
        this.batch.userChanged(c.type === 'user-changed' ? c.user.id : undefined);
        break;
      case 'policy-changed':
      case 'drive-changed':
        if (this.batch.mustSendBeforePolicy) this.scheduler.sendPendingNow();
        // Every peer's text under the old policy (what clients hold): at the flush only the peers whose text the new
        // policy changes are sent again, and a node's own entry only if the policy changed it.
        this.batch.policyChanged(seq, () => new Map(this.state.nodes.list().map((n) => [n.id, this.mapper.peer(n)] as const)));
        view.setPolicy(this.policy());
        this.mapper.forgetAll();
        break;
      case 'dns-changed': {
        this.scheduler.flushNow();
        const shared = mapResponse([member('DNSConfig', encode<DNSConfig>(this.mapper.dnsConfig()))]);
        return this.broadcast((s) => {
          const node = this.state.nodes.get(s.nodeId);
          s.certDomain = node && this.mapper.certDomain(node);
          return s.certDomain ? mapResponse([member('DNSConfig', encode<DNSConfig>(this.mapper.dnsConfig(node)))]) : shared;
        });
      }
      case 'derp-changed':
        this.scheduler.flushNow();
        return this.broadcast((s) => mapResponse([member('DERPMap', this.mapper.derpMapJson(s.capVersion))]));
    }
    this.scheduler.changeQueued();
  }

  /** broadcast sends every session one message, which makes its client rebuild its netmap (DNS and DERP changes). */
  private broadcast(json: (s: MapSession) => string): void {
    const all = this.sessions();
    const ownerOf = ownerMemo(this.state, (n) => this.mapper.ownerId(n));
    for (const s of all) this.owners.rebuilt(s, ownerOf);
    const encoder = new DeltaEncoder(this.counters);
    for (const s of all) encoder.sendText(s, json(s));
    this.countDeltas();
  }

  /** countDeltas adds the messages sent since to the metric at once (a labelled counter hashes its labels on every inc). */
  private countDeltas(): void {
    if (this.counters.deltas) this.metrics.mapMessages.inc({ kind: 'delta' }, this.counters.deltas);
    this.counters.deltas = 0;
  }

  private rememberDeleted(node: Node): void {
    this.deleted.delete(node.machineKey);
    this.deleted.set(node.machineKey, node);
    if (this.deleted.size > DELETED_REMEMBERED) this.deleted.delete(this.deleted.keys().next().value!);
  }

  /**
   * tellDeleted sends a deleted node's open map streams their last message: the node itself, logged out, and no
   * peers. The stream is ended right after (by closeNode); the device then shows NeedsLogin instead of staying
   * Running. A session still waiting for its first map gets the first map of a logged-out machine instead.
   */
  private tellDeleted(node: Node): void {
    const self = this.mapper.deletedSelf(node);
    for (const s of [...(this.byNode.get(node.id) ?? [])]) {
      s.send(frame(this.mapper.loggedOutMap(self, s.capVersion, { gone: [...s.peers].sort((a, b) => a - b) }), s.zstd));
      this.metrics.mapMessages.inc({ kind: 'delta' });
    }
    if (!this.waiting.some((o) => o.node.id === node.id)) return;
    const still: WaitingSession[] = [];
    for (const o of this.waiting) {
      if (o.node.id !== node.id) { still.push(o); continue; }
      o.session.send(frame(this.mapper.loggedOutMap(self, o.session.capVersion, { first: true }), o.session.zstd));
      this.metrics.mapMessages.inc({ kind: 'full' });
    }
    this.waiting = still;
  }
}

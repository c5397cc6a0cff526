import type { ChangeBus } from './bus.js';
import type { NodeStore } from './nodes.js';

/** SessionRecord is a map session as the cluster records it: which instance holds which node's, since when. */
export interface SessionRecord { instanceId: string; nodeId: number; since?: Date }

/**
 * Presence keeps which nodes are online: the map sessions this instance holds,
 * those other cluster instances hold, and since when. A node's first session
 * publishes it online, its last one closing offline with its last-seen time.
 */
export class Presence {
  /** local: live map sessions of this instance per node. */
  private readonly local = new Map<number, number>();
  /** remote: nodes whose map session another cluster instance holds (node id → instance ids). */
  private readonly remote = new Map<number, Set<string>>();
  /**
   * since: when each instance's map session of a node opened (node id → instance id, or
   * '' for this one, → epoch ms). Every instance holds the same values (they travel with the
   * session records), so a cluster-wide choice by it (the HA route primary) agrees everywhere.
   */
  private readonly since = new Map<number, Map<string, number>>();
  /**
   * onLocalSession is told when this instance's first map session of a node opens or
   * its last one closes (the cluster records and announces it); unset alone.
   */
  onLocalSession?: (id: number, online: boolean, lastSeen?: Date, since?: Date) => void;

  /** now is the clock last-seen times are read from (tests set their own). */
  now: () => Date = () => new Date();

  /** nodes store a node's last-seen time when its first session opens and when its last one closes. */
  constructor(private readonly bus: ChangeBus, private readonly nodes: NodeStore) {}

  isOnline(id: number): boolean { return (this.local.get(id) ?? 0) > 0 || this.remote.has(id); }

  onlineCount(): number {
    const ids = new Set([...this.remote.keys()].filter((id) => this.nodes.get(id)));
    for (const [id, c] of this.local) if (c > 0) ids.add(id);
    return ids.size;
  }

  /** localSessionNodes are the nodes this instance holds a map session of. */
  localSessionNodes(): number[] {
    return [...this.local].filter(([, c]) => c > 0).map(([id]) => id);
  }

  /** localSessionCount is how many map sessions this instance holds (cluster heartbeats report it). */
  localSessionCount(): number {
    let n = 0;
    for (const c of this.local.values()) n += c;
    return n;
  }

  /** sessionOpened counts live map sessions; the first one marks the node online. */
  sessionOpened(id: number): void {
    const count = (this.local.get(id) ?? 0) + 1;
    this.local.set(id, count);
    if (count !== 1) return;
    const since = this.now();
    this.noteSince(id, '', since);
    // lastSeen is the connect time while the node stays connected (as headscale stamps it at a map request), so
    // the API shows when it came online, not the time of the request asking.
    const node = this.nodes.get(id);
    if (node) {
      // In memory at once (an API call right after the connect sees it), stored best-effort.
      this.nodes.remember({ ...node, lastSeen: since });
      void this.nodes.update(id, { lastSeen: since }, 'silent').catch(() => undefined);
    }
    this.onLocalSession?.(id, true, undefined, since);
    if (!this.remote.has(id)) this.bus.publish({ type: 'node-patch', nodeId: id, patch: { online: true } });
  }

  async sessionClosed(id: number): Promise<void> {
    const count = Math.max(0, (this.local.get(id) ?? 0) - 1);
    this.local.set(id, count);
    if (count > 0) return;
    this.noteSince(id, '', undefined);
    if (!this.nodes.get(id)) {
      // A deleted node's last session: its cluster record goes too.
      this.onLocalSession?.(id, false);
      return;
    }
    const lastSeen = this.now();
    await this.nodes.update(id, { lastSeen }, 'silent').catch(() => undefined);
    this.onLocalSession?.(id, false, lastSeen);
    // A session of the node still open on another instance keeps it online.
    if (this.isOnline(id)) return;
    this.bus.publish({ type: 'node-patch', nodeId: id, patch: { online: false, lastSeen } });
  }

  /**
   * setRemoteOnline records that another instance opened (or closed) a node's map
   * session, and publishes the node's online state here when that changed it.
   */
  setRemoteOnline(id: number, instance: string, online: boolean, lastSeen?: Date, since?: Date): void {
    this.noteSince(id, instance, online ? since ?? this.now() : undefined);
    const before = this.isOnline(id);
    const set = this.remote.get(id) ?? new Set<string>();
    if (online) set.add(instance); else set.delete(instance);
    if (set.size) this.remote.set(id, set); else this.remote.delete(id);
    const node = this.nodes.get(id);
    if (!node || before === this.isOnline(id)) return;
    if (online) this.bus.publishRemote({ type: 'node-patch', nodeId: id, patch: { online: true } });
    else {
      const at = lastSeen ?? this.now();
      this.nodes.remember({ ...node, lastSeen: at });
      this.bus.publishRemote({ type: 'node-patch', nodeId: id, patch: { online: false, lastSeen: at } });
    }
  }

  private noteSince(id: number, instance: string, since: Date | undefined): void {
    const m = this.since.get(id);
    if (since) {
      // A session already known keeps its first time (a repeated record does not make it newer).
      const map = m ?? this.since.set(id, new Map()).get(id)!;
      if (!map.has(instance)) map.set(instance, since.getTime());
    } else if (m) {
      m.delete(instance);
      if (!m.size) this.since.delete(id);
    }
  }

  /** onlineSince is when the node's oldest open map session (on any instance) opened; undefined when offline. */
  onlineSince(id: number): number | undefined {
    const m = this.since.get(id);
    return m?.size ? Math.min(...m.values()) : undefined;
  }

  /** forgetInstance drops every session a dead instance held (its devices go offline unless connected elsewhere). */
  forgetInstance(instance: string): void {
    for (const [id, set] of [...this.remote]) if (set.has(instance)) this.setRemoteOnline(id, instance, false);
  }

  /** remoteInstances are the other instances this one believes hold map sessions. */
  remoteInstances(): Set<string> {
    const out = new Set<string>();
    for (const set of this.remote.values()) for (const i of set) out.add(i);
    return out;
  }

  /**
   * reconcile brings the other instances' sessions in line with the cluster's
   * records (`self` is this instance, whose own records are skipped): sessions no
   * longer recorded close, newly recorded ones open.
   */
  reconcile(sessions: SessionRecord[], self?: string): void {
    const want = new Map<number, Map<string, Date | undefined>>();
    for (const s of sessions) {
      if (s.instanceId === self) continue;
      (want.get(s.nodeId) ?? want.set(s.nodeId, new Map()).get(s.nodeId)!).set(s.instanceId, s.since);
    }
    for (const [id, set] of [...this.remote]) for (const inst of set) if (!want.get(id)?.has(inst)) this.setRemoteOnline(id, inst, false);
    for (const [id, map] of want) for (const [inst, since] of map) if (!this.remote.get(id)?.has(inst)) this.setRemoteOnline(id, inst, true, undefined, since);
  }

  /** forgetLocal drops the count of this instance's sessions of a node deleted from memory. */
  forgetLocal(id: number): void { this.local.delete(id); }

  /** forgetRemote drops what other instances' sessions said of a node another instance deleted. */
  forgetRemote(id: number): void {
    this.remote.delete(id);
    this.since.delete(id);
  }
}

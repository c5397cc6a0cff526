import type { Node } from '../domain.js';
import type { Logger } from '../log.js';
import type { Change, PeerPatch } from '../state/bus.js';
import type { State } from '../state/state.js';
import type { Metrics } from '../server/metrics.js';
import { frame } from './frames.js';
import type { Mapper } from './mapper.js';

const KEEPALIVE_BASE_MS = 50_000;
const KEEPALIVE_JITTER_MS = 9_000;

/** MapSession is one streaming /machine/map response: what it last told its node, and how to reach it. */
export class MapSession {
  peers = new Set<number>();
  filter = '';
  ssh = '';
  private keepalive?: NodeJS.Timeout;
  closed = false;

  constructor(
    readonly nodeId: number,
    readonly capVersion: number | undefined,
    readonly zstd: boolean,
    private readonly writeFrame: (buf: Buffer) => void,
    private readonly onKeepAlive: () => void,
  ) {}

  send(buf: Buffer): void {
    if (this.closed) return;
    this.writeFrame(buf);
    this.armKeepAlive();
  }

  armKeepAlive(): void {
    clearTimeout(this.keepalive);
    if (this.closed) return;
    this.keepalive = setTimeout(() => {
      this.onKeepAlive();
      this.send(frame('{"KeepAlive":true}', this.zstd));
    }, KEEPALIVE_BASE_MS + Math.floor(Math.random() * KEEPALIVE_JITTER_MS));
    this.keepalive.unref();
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.keepalive);
  }
}

interface Shape { tags: string; ips: string; routes: string; user: number | null }
const shapeOf = (n: Node): Shape => ({
  tags: n.tags.join(','), ips: `${n.ipv4},${n.ipv6}`, routes: `${n.availableRoutes.join(',')}|${n.approvedRoutes.join(',')}`, user: n.userId,
});
const sameShape = (a: Shape | undefined, b: Shape) => Boolean(a) && a!.tags === b.tags && a!.ips === b.ips && a!.routes === b.routes && a!.user === b.user;

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

  constructor(
    private readonly state: State,
    private readonly mapper: Mapper,
    private readonly logger: Logger,
    private readonly metrics: Metrics,
    private readonly policyText: () => string | undefined,
  ) {}

  start(): void {
    for (const n of this.state.listNodes()) this.shapes.set(n.id, shapeOf(n));
    this.mapper.view.setPolicy(this.policyText());
    this.mapper.view.updatePrimaries();
    this.unsubscribe = this.state.bus.subscribe((c) => {
      try {
        this.apply(c);
      } catch (err) {
        this.logger.error('failed to dispatch a change to map sessions', { change: c.type, error: (err as Error).message });
      }
    });
  }

  stop(): void {
    this.unsubscribe?.();
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

  /** open registers a session after its full map was sent, recording what that map contained. */
  open(session: MapSession, node: Node): void {
    const v = this.mapper.view.forNode(node.id);
    session.peers = new Set(v.peers.map(Number));
    session.filter = this.mapper.filterJson(node.id);
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

  private apply(c: Change): void {
    switch (c.type) {
      case 'node-patch': return this.patch(c.nodeId, c.patch);
      case 'node-added':
        this.shapes.set(c.node.id, shapeOf(c.node));
        return this.mapper.view.hasPolicy ? this.structural([c.node.id]) : this.openAdded(c.node);
      case 'node-removed':
        this.shapes.delete(c.node.id);
        this.mapper.forget(c.nodeId);
        this.closeNode?.(c.nodeId);
        return this.mapper.view.hasPolicy ? this.structural([]) : this.openRemoved(c.nodeId);
      case 'node-changed': {
        const shape = shapeOf(c.node);
        const same = sameShape(this.shapes.get(c.node.id), shape);
        this.shapes.set(c.node.id, shape);
        this.mapper.forget(c.node.id);
        if (same) return this.peerChanged(c.node);
        return this.mapper.view.hasPolicy ? this.structural([c.node.id]) : this.openChanged(c.node);
      }
      case 'user-changed': case 'user-removed': return this.structural([]);
      case 'policy-changed':
        this.mapper.view.setPolicy(this.policyText());
        this.mapper.forgetAll();
        return this.structural(this.state.listNodes().map((n) => n.id));
      case 'dns-changed': return this.broadcast(`{"DNSConfig":${JSON.stringify((this.mapper as unknown as { dns: { config(): unknown } }).dns.config())}}`);
      case 'derp-changed': return this.broadcast(`{"DERPMap":${JSON.stringify((this.mapper as unknown as { derp: { map: unknown } }).derp.map)}}`);
    }
  }

  private sendAll(targets: Array<[MapSession, string]>): void {
    const frames = new Map<string, Buffer>();
    for (const [s, json] of targets) {
      const key = `${s.zstd ? 'z' : 'p'}${json}`;
      let buf = frames.get(key);
      if (!buf) { buf = frame(json, s.zstd); frames.set(key, buf); }
      s.send(buf);
      this.metrics.mapMessages.inc({ kind: 'delta' });
    }
  }

  private broadcast(json: string): void {
    this.sendAll([...this.sessions()].map((s) => [s, json] as [MapSession, string]));
  }

  /*
   * Without a policy every node sees every node with the same allow-all filter, so
   * a join, a delete or a routing change is applied to each session directly
   * instead of re-deriving every session's peer set (which made a join cost
   * sessions x peers, and a fleet's arrival cubic).
   */

  private openAdded(node: Node): void {
    this.mapper.view.invalidate();
    const moved = this.primariesMoved();
    const upsert = [node.id, ...moved].map((id) => this.state.getNode(id)).filter((n): n is Node => Boolean(n));
    const text = upsert.map((n) => this.mapper.peer(n)).join(',');
    const json = `{"PeersChanged":[${text}],"UserProfiles":${this.mapper.profilesFor(upsert)}}`;
    const targets: Array<[MapSession, string]> = [];
    for (const s of this.sessions()) {
      if (s.nodeId === node.id) continue;
      s.peers.add(node.id);
      targets.push([s, json]);
    }
    this.sendAll(targets);
  }

  private openRemoved(nodeId: number): void {
    this.mapper.view.invalidate();
    const moved = this.primariesMoved().map((id) => this.state.getNode(id)).filter((n): n is Node => Boolean(n));
    const changed = moved.length ? `,"PeersChanged":[${moved.map((n) => this.mapper.peer(n)).join(',')}]` : '';
    const json = `{"PeersRemoved":[${nodeId}]${changed}}`;
    const targets: Array<[MapSession, string]> = [];
    for (const s of this.sessions()) {
      if (!s.peers.delete(nodeId) && !changed) continue;
      targets.push([s, json]);
    }
    this.sendAll(targets);
  }

  private openChanged(node: Node): void {
    this.mapper.view.invalidate();
    const ids = [...new Set([node.id, ...this.primariesMoved()])];
    const nodes = ids.map((id) => this.state.getNode(id)).filter((n): n is Node => Boolean(n));
    const json = `{"PeersChanged":[${nodes.map((n) => this.mapper.peer(n)).join(',')}],"UserProfiles":${this.mapper.profilesFor(nodes)}}`;
    const targets: Array<[MapSession, string]> = [];
    for (const s of this.sessions()) {
      if (ids.includes(s.nodeId)) {
        const self = this.state.getNode(s.nodeId);
        const others = nodes.filter((n) => n.id !== s.nodeId);
        const parts = [`"Node":${this.mapper.selfNode(self!, s.capVersion)}`];
        if (others.length) parts.push(`"PeersChanged":[${others.map((n) => this.mapper.peer(n)).join(',')}]`);
        targets.push([s, `{${parts.join(',')}}`]);
      } else targets.push([s, json]);
    }
    this.sendAll(targets);
  }

  /** primariesMoved recomputes primary routers and forgets the cached JSON of nodes that changed role. */
  private primariesMoved(): number[] {
    const moved = [...this.mapper.view.updatePrimaries()];
    for (const id of moved) this.mapper.forget(id);
    return moved;
  }

  /** peerChanged: a node changed in a way that does not alter who sees whom (e.g. renamed). */
  private peerChanged(node: Node): void {
    const peerText = this.mapper.peer(node);
    const profiles = this.mapper.profilesFor([node]);
    const targets: Array<[MapSession, string]> = [];
    for (const s of this.sessions()) {
      if (s.nodeId === node.id) targets.push([s, `{"Node":${this.mapper.selfNode(node, s.capVersion)}}`]);
      else if (s.peers.has(node.id)) targets.push([s, `{"PeersChanged":[${peerText}],"UserProfiles":${profiles}}`]);
    }
    this.sendAll(targets);
  }

  private patch(nodeId: number, patch: PeerPatch): void {
    this.mapper.forget(nodeId);
    const pc: Record<string, unknown> = { NodeID: nodeId };
    if (patch.online !== undefined) pc.Online = patch.online;
    if (patch.lastSeen) pc.LastSeen = patch.lastSeen.toISOString();
    if (patch.endpoints) pc.Endpoints = patch.endpoints;
    if (patch.derpRegion !== undefined) pc.DERPRegion = patch.derpRegion;
    if (patch.keyExpiry !== undefined) pc.KeyExpiry = patch.keyExpiry ? patch.keyExpiry.toISOString() : '0001-01-01T00:00:00Z';
    if (patch.discoKey) pc.DiscoKey = patch.discoKey;
    if (patch.nodeKey) pc.Key = patch.nodeKey;
    const json = `{"PeersChangedPatch":[${JSON.stringify(pc)}]}`;
    const targets: Array<[MapSession, string]> = [];
    const node = this.state.getNode(nodeId);
    for (const s of this.sessions()) {
      if (s.nodeId === nodeId) {
        if ((patch.keyExpiry !== undefined || patch.nodeKey) && node) targets.push([s, `{"Node":${this.mapper.selfNode(node, s.capVersion)}}`]);
      } else if (s.peers.has(nodeId)) targets.push([s, json]);
    }
    this.sendAll(targets);
    // Online changes can move subnet routes to another router.
    if (patch.online !== undefined) {
      const moved = this.mapper.view.updatePrimaries();
      if (moved.size) {
        for (const id of moved) this.mapper.forget(id);
        this.resync([...moved]);
      }
    }
  }

  /** structural: visibility may have changed; recompute every session's view and send differences. */
  private structural(changed: number[]): void {
    this.mapper.view.invalidate();
    const moved = this.mapper.view.updatePrimaries();
    for (const id of moved) this.mapper.forget(id);
    this.resync([...new Set([...changed, ...moved])]);
  }

  private resync(changed: number[]): void {
    const changedSet = new Set(changed);
    const targets: Array<[MapSession, string]> = [];
    for (const s of this.sessions()) {
      const self = this.state.getNode(s.nodeId);
      if (!self) continue;
      const v = this.mapper.view.forNode(s.nodeId);
      const next = new Set(v.peers.map(Number));
      const removed = [...s.peers].filter((id) => !next.has(id));
      const upsert: Node[] = [];
      for (const id of next) {
        if (!s.peers.has(id) || changedSet.has(id)) {
          const n = this.state.getNode(id);
          if (n) upsert.push(n);
        }
      }
      const filter = this.mapper.filterJson(s.nodeId);
      const ssh = this.mapper.sshJson(s.nodeId);
      const parts: string[] = [];
      if (changedSet.has(s.nodeId)) parts.push(`"Node":${this.mapper.selfNode(self, s.capVersion)}`);
      if (removed.length) parts.push(`"PeersRemoved":${JSON.stringify(removed)}`);
      if (upsert.length) {
        upsert.sort((a, b) => a.id - b.id);
        parts.push(`"PeersChanged":[${upsert.map((n) => this.mapper.peer(n)).join(',')}]`, `"UserProfiles":${this.mapper.profilesFor(upsert)}`);
      }
      if (filter !== s.filter) parts.push(`"PacketFilter":${filter}`);
      if (ssh !== s.ssh) parts.push(`"SSHPolicy":${ssh}`);
      s.peers = next;
      s.filter = filter;
      s.ssh = ssh;
      if (parts.length) targets.push([s, `{${parts.join(',')}}`]);
    }
    this.sendAll(targets);
  }
}

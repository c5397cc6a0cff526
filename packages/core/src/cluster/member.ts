import { randomUUID } from 'node:crypto';
import type { ClusterConfig } from '../config/schema.js';
import type { Logger } from '../log.js';
import type { ClusterAnnouncement, ClusterFollower, ClusterMessage, ClusterPort, InstanceRecord } from '../ports/cluster.js';
import type { Change, PeerPatch } from '../state/bus.js';
import type { State } from '../state/state.js';

/** JOBS_LEASE names the lease whose holder runs the cluster-wide periodic jobs (ephemeral-node GC, pending-login sweep). */
export const JOBS_LEASE = 'jobs';

/** ClusterHooks are the kernel services a member drives without importing them. */
export interface ClusterHooks {
  /** reloadPolicy re-reads the policy source after another instance changed it (marked remote: not announced again). */
  reloadPolicy(): Promise<unknown>;
  /** reloadDns re-reads the stored DNS settings after another instance changed them (dns.mode: database). */
  reloadDns?(): Promise<unknown>;
  /** endStreams closes every map stream this instance serves (the database was lost: devices move to another instance). */
  endStreams(): void;
}

/** ClusterInstanceView is one instance as `headway cluster status` shows it. */
export interface ClusterInstanceView {
  id: string;
  address: string;
  startedAt: string;
  heartbeat: string;
  sessions: number;
  live: boolean;
  self: boolean;
  jobs: boolean;
}

/** PATCH_DATES are the PeerPatch fields that travel as ISO text. */
const PATCH_DATES = ['lastSeen', 'keyExpiry'] as const;

/**
 * ClusterMember makes this instance one of several on a shared database. It
 * announces every change this instance commits (after commit, naming ids only),
 * applies other instances' announcements by reloading the named rows into State
 * (which publishes them on the local bus, so map streaming works unchanged),
 * records which node's map session it holds, writes its heartbeat, forgets
 * instances whose heartbeat stopped, and holds the jobs lease when it is free.
 * When the database stops answering it closes its map streams (devices move to
 * another instance) and reports itself unhealthy, then resynchronises and
 * serves again once the database is back.
 */
export class ClusterMember {
  readonly id = randomUUID();
  readonly startedAt = new Date();
  address: string;
  private follower?: ClusterFollower;
  private timer?: NodeJS.Timeout;
  private unsubscribe?: () => void;
  private started = false;
  private stopped = false;
  /** held: messages that arrived before start (state not loaded yet). */
  private held: Array<ClusterMessage | 'gap'> = [];
  /** applying chains the application of remote announcements, in arrival order. */
  private applying: Promise<void> = Promise.resolve();
  /** writing chains this instance's session records and announcements, in order. */
  private writing: Promise<void> = Promise.resolve();
  private pendingNodes = new Set<number>();
  private pendingUsers = new Set<number>();
  /** pendingRemovedUsers are announced after the nodes (a user deleted with its nodes: the nodes go first). */
  private pendingRemovedUsers = new Set<number>();
  private pendingPolicy = false;
  private pendingDns = false;
  private pendingPatches: ClusterAnnouncement[] = [];
  private flushQueued = false;
  private lost = false;
  private beating = false;
  private live: InstanceRecord[] = [];
  private jobs = false;
  /** healthy is false while the database is unreachable (/health answers 500). */
  healthy = true;
  /** onLive hears the other live instances after every heartbeat (the relay mesh follows it). */
  onLive?: (others: readonly InstanceRecord[]) => void;

  constructor(
    private readonly port: ClusterPort,
    private readonly state: State,
    private readonly config: ClusterConfig,
    private readonly logger: Logger,
    private readonly noisePublicKey: string,
    listenAddr: string,
    private readonly hooks: ClusterHooks,
  ) {
    this.address = config.advertise_addr || listenAddr;
  }

  /**
   * join records this instance and starts following the change feed (messages are
   * held until start, once State is loaded). It refuses to start beside a live
   * instance serving another control key: devices moved between the two would fail
   * the Noise handshake.
   */
  async join(): Promise<void> {
    const others = await this.port.join({ id: this.id, address: this.address, noisePublicKey: this.noisePublicKey }, this.liveSince());
    const foreign = others.filter((o) => o.noisePublicKey !== this.noisePublicKey);
    if (foreign.length) {
      await this.port.leave(this.id).catch(() => undefined);
      const o = foreign[0]!;
      throw new Error(`cluster: instance ${o.id} at ${o.address} serves another noise key (${o.noisePublicKey.slice(0, 16)}..., this one ${this.noisePublicKey.slice(0, 16)}...); every instance on one database must use the same noise.private_key_path contents`);
    }
    this.live = others;
    this.follower = await this.port.follow({
      message: (m) => { if (m.origin !== this.id) this.receive(m); },
      gap: () => this.receive('gap'),
      error: (err) => this.logger.warn('cluster change feed failed; retrying', { error: err.message }),
    });
    this.logger.info('joined the cluster', { instance: this.id, address: this.address, others: others.length });
  }

  /** start applies held announcements, loads other instances' sessions and begins heartbeats and announcing. */
  async start(): Promise<void> {
    this.state.cluster.clustered = true;
    this.state.presence.onLocalSession = (id, online, lastSeen, since) => this.localSession(id, online, lastSeen, since);
    this.unsubscribe = this.state.bus.subscribe((c) => this.observe(c));
    this.started = true;
    const held = this.held.splice(0);
    for (const m of held) this.enqueue(m);
    await this.loadSessions();
    await this.beat();
    this.schedule();
  }

  private liveSince(): Date { return new Date(Date.now() - this.config.instance_timeout); }

  private schedule(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => { void this.beat().finally(() => this.schedule()); }, this.config.heartbeat_interval);
    this.timer.unref();
  }

  /** loadSessions marks the nodes other live instances serve as online here. */
  private async loadSessions(): Promise<void> {
    const live = new Set(this.live.map((i) => i.id));
    for (const s of await this.port.sessions()) {
      if (s.instanceId !== this.id && live.has(s.instanceId)) this.state.presence.setRemoteOnline(s.nodeId, s.instanceId, true, undefined, s.since);
    }
  }

  /**
   * beat writes the heartbeat, prunes instances whose heartbeat stopped, forgets
   * the sessions of instances no longer listed, and takes or renews the jobs lease.
   * A failure means the database is lost: map streams are closed and /health fails
   * until a beat succeeds again, which resynchronises memory first.
   */
  async beat(): Promise<void> {
    if (this.beating || this.stopped) return;
    this.beating = true;
    try {
      const rewritten = await this.port.heartbeat({ id: this.id, address: this.address, noisePublicKey: this.noisePublicKey, startedAt: this.startedAt, sessions: this.state.presence.localSessionCount() });
      if (rewritten) {
        // Another instance took this one for dead (a late heartbeat) and removed its session rows: record them again.
        const held = this.state.presence.localSessionNodes();
        if (held.length) this.logger.warn('cluster: this instance was pruned as dead; recording its map sessions again', { sessions: held.length });
        for (const id of held) this.localSession(id, true);
      }
      await this.port.prune(this.liveSince());
      const all = await this.port.instances();
      this.live = all.filter((i) => i.id !== this.id);
      try { this.onLive?.(this.live); } catch (err) { this.logger.warn('cluster: an instance-list listener failed', { error: (err as Error).message }); }
      if (this.lost) await this.recover();
      const known = new Set(this.live.map((i) => i.id));
      for (const inst of this.state.presence.remoteInstances()) {
        if (!known.has(inst)) {
          this.logger.warn('cluster instance gone: its devices count as offline until they reconnect', { instance: inst });
          this.state.presence.forgetInstance(inst);
        }
      }
      const jobs = await this.port.acquireLease(JOBS_LEASE, this.id, this.config.instance_timeout);
      if (jobs !== this.jobs) this.logger.info(jobs ? 'this instance now runs the cluster jobs' : 'another instance runs the cluster jobs', { instance: this.id });
      this.jobs = jobs;
    } catch (err) {
      this.jobs = false;
      if (!this.lost) {
        this.lost = true;
        this.healthy = false;
        this.state.cluster.serving = false;
        this.logger.error('cluster: the database is unreachable; closing map streams so devices move to another instance', { error: (err as Error).message });
        this.hooks.endStreams();
      }
    } finally {
      this.beating = false;
    }
  }

  /** recover reloads everything after the database came back, then serves again. */
  private async recover(): Promise<void> {
    await this.resync();
    // Sessions closed while the database was away could not clear their rows: clear them now,
    // or the other instances would count those devices online for good.
    const held = new Set(this.state.presence.localSessionNodes());
    for (const s of await this.port.sessions()) {
      if (s.instanceId === this.id && !held.has(s.nodeId)) this.localSession(s.nodeId, false);
    }
    for (const id of held) this.localSession(id, true);
    this.lost = false;
    this.healthy = true;
    this.state.cluster.serving = true;
    this.logger.info('cluster: the database is back; serving map streams again');
  }

  private async resync(): Promise<void> {
    const live = new Set(this.live.map((i) => i.id));
    const sessions = (await this.port.sessions()).filter((s) => live.has(s.instanceId));
    await this.state.cluster.resync(sessions, this.id);
    await this.hooks.reloadDns?.();
  }

  /** liveInstances are the other instances live at the last heartbeat. */
  liveInstances(): readonly InstanceRecord[] { return this.live; }

  /** runsJobs says whether this instance holds the jobs lease (NodeGc asks before deleting). */
  runsJobs(): boolean { return this.jobs && !this.lost; }

  /**
   * status lists the instances for `headway cluster status`. Which one runs the jobs comes
   * from the lease row, so every instance names the holder, not only the holder itself.
   */
  async status(): Promise<ClusterInstanceView[]> {
    const [all, holder] = await Promise.all([this.port.instances(), this.jobsHolder()]);
    const since = this.liveSince().getTime();
    return all.map((i) => ({
      id: i.id, address: i.address, startedAt: i.startedAt.toISOString(), heartbeat: i.heartbeat.toISOString(),
      sessions: i.id === this.id ? this.state.presence.localSessionCount() : i.sessions,
      live: i.heartbeat.getTime() >= since, self: i.id === this.id, jobs: i.id === holder,
    }));
  }

  /** jobsHolder is the instance holding the jobs lease, read from the database (this one's own view with an adapter that cannot read it). */
  private async jobsHolder(): Promise<string | undefined> {
    if (!this.port.leaseHolder) return this.runsJobs() ? this.id : undefined;
    return this.port.leaseHolder(JOBS_LEASE);
  }

  // ---- announcing this instance's changes ----

  /** observe collects what a change on this instance touched; one flush per tick announces it all. */
  private observe(c: Change): void {
    if (this.state.bus.applyingRemote) return;
    switch (c.type) {
      case 'node-added': case 'node-changed': this.pendingNodes.add(c.node.id); break;
      case 'node-removed': this.pendingNodes.add(c.nodeId); break;
      case 'user-changed': this.pendingUsers.add(c.user.id); break;
      case 'user-removed': this.pendingRemovedUsers.add(c.userId); break;
      case 'policy-changed': this.pendingPolicy = true; break;
      case 'dns-settings-changed': this.pendingDns = true; break;
      case 'node-patch': {
        // Online state travels with the session records (localSession).
        const { online: _o, lastSeen: _l, ...rest } = c.patch;
        if (!Object.keys(rest).length) return;
        const patch: Record<string, unknown> = { ...rest };
        for (const k of PATCH_DATES) if (rest[k as keyof typeof rest] instanceof Date) patch[k] = (rest[k as keyof typeof rest] as Date).toISOString();
        this.pendingPatches.push({ kind: 'node-patch', id: c.nodeId, patch });
        break;
      }
      default: return;
    }
    if (!this.flushQueued) {
      this.flushQueued = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    this.flushQueued = false;
    const out: ClusterAnnouncement[] = [];
    if (this.pendingUsers.size) out.push({ kind: 'users', ids: [...this.pendingUsers] });
    if (this.pendingNodes.size) out.push({ kind: 'nodes', ids: [...this.pendingNodes] });
    // A node announced whole needs no patch as well.
    for (const p of this.pendingPatches) if (p.kind === 'node-patch' && !this.pendingNodes.has(p.id)) out.push(p);
    if (this.pendingRemovedUsers.size) out.push({ kind: 'users', ids: [...this.pendingRemovedUsers] });
    if (this.pendingPolicy) out.push({ kind: 'policy' });
    if (this.pendingDns) out.push({ kind: 'dns' });
    this.pendingUsers.clear();
    this.pendingRemovedUsers.clear();
    this.pendingNodes.clear();
    this.pendingPatches = [];
    this.pendingPolicy = false;
    this.pendingDns = false;
    for (const a of out) this.write(() => this.port.announce(this.id, a), `announce ${a.kind}`);
  }

  private localSession(id: number, online: boolean, lastSeen?: Date, since?: Date): void {
    this.write(async () => {
      await this.port.setSession(this.id, id, online, since);
      await this.port.announce(this.id, {
        kind: 'online', id, online, ...(lastSeen ? { lastSeen: lastSeen.toISOString() } : {}), ...(since ? { since: since.toISOString() } : {}),
      });
    }, 'session record');
  }

  /** write runs database work after the previous one, retrying a few times; a lost announcement is logged. */
  private write(fn: () => Promise<void>, what: string): void {
    this.writing = this.writing.then(async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          await fn();
          return;
        } catch (err) {
          if (attempt >= 3 || this.stopped) {
            this.logger.error('cluster: could not tell the other instances; they catch up at their next resync', { what, error: (err as Error).message });
            return;
          }
          await new Promise((r) => setTimeout(r, 100 * attempt));
        }
      }
    });
  }

  // ---- applying other instances' changes ----

  private receive(m: ClusterMessage | 'gap'): void {
    if (!this.started) { this.held.push(m); return; }
    this.enqueue(m);
  }

  private enqueue(m: ClusterMessage | 'gap'): void {
    this.applying = this.applying.then(() => this.apply(m)).catch((err: Error) => {
      this.logger.warn('cluster: could not apply another instance\'s change; reloading everything', { error: err.message });
      return this.resync().catch(() => undefined);
    });
  }

  private async apply(m: ClusterMessage | 'gap'): Promise<void> {
    if (this.stopped) return;
    if (m === 'gap') return this.resync();
    switch (m.kind) {
      case 'nodes': return this.state.cluster.reloadNodes(m.ids.filter(Number.isInteger));
      case 'users': return this.state.cluster.reloadUsers(m.ids.filter(Number.isInteger));
      case 'node-patch': {
        const patch = { ...m.patch } as Record<string, unknown>;
        for (const k of PATCH_DATES) if (typeof patch[k] === 'string') patch[k] = new Date(patch[k] as string);
        return this.state.cluster.reloadNodePatch(m.id, patch as PeerPatch);
      }
      case 'policy': await this.hooks.reloadPolicy(); return;
      case 'dns': await this.hooks.reloadDns?.(); return;
      case 'online':
        this.state.presence.setRemoteOnline(m.id, m.origin, m.online, m.lastSeen ? new Date(m.lastSeen) : undefined, m.since ? new Date(m.since) : undefined);
        return;
      default: return;
    }
  }

  /** settled resolves once every announcement received so far is applied and every local one written (tests). */
  async settled(): Promise<void> {
    await this.applying;
    await this.writing;
  }

  /** stop ends heartbeats and the feed, gives the jobs lease up and removes this instance's rows. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.timer);
    this.unsubscribe?.();
    this.state.presence.onLocalSession = undefined;
    await this.follower?.close().catch(() => undefined);
    await this.writing.catch(() => undefined);
    await this.port.releaseLease(JOBS_LEASE, this.id).catch(() => undefined);
    await this.port.leave(this.id).catch(() => undefined);
  }
}

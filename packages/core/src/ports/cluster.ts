/**
 * ClusterPort is what several Headway instances sharing one database need from it:
 * a registry of live instances (heartbeats), a change feed that tells every instance
 * which rows another one changed (after commit), leases so a periodic job runs on
 * one instance at a time, and the cluster-wide record of which instance holds a
 * node's map session. SQL adapters for servers (PostgreSQL, MySQL/MariaDB) provide
 * it as `StoragePort.cluster`; SQLite does not, and `cluster.enabled` refuses it.
 * Core never imports a driver: the adapter decides how announcements travel
 * (PostgreSQL LISTEN/NOTIFY, a change-log table polled by id on MySQL/MariaDB).
 */

/** InstanceRecord is one row of the instances table. */
export interface InstanceRecord {
  id: string;
  /** address is how operators and other instances name it (host:port or URL). */
  address: string;
  /** noisePublicKey is the control public key it serves (`mkey:` hex); every live instance must share one. */
  noisePublicKey: string;
  startedAt: Date;
  heartbeat: Date;
  /** sessions is how many map streams it held at its last heartbeat. */
  sessions: number;
}

/**
 * ClusterAnnouncement names what one instance changed, never the rows themselves:
 * receivers reload the named ids from the database, so an announcement costs
 * O(what changed) and a lost one is repaired by a full reload.
 */
export type ClusterAnnouncement =
  /** nodes: these node rows were created, changed or deleted. */
  | { kind: 'nodes'; ids: number[] }
  /** node-patch: a node's endpoints, disco key, home DERP or key expiry moved (stored already); dates as ISO text. */
  | { kind: 'node-patch'; id: number; patch: Record<string, unknown> }
  /** users: these user rows were created, changed or deleted. */
  | { kind: 'users'; ids: number[] }
  /** policy: the stored policy changed. */
  | { kind: 'policy' }
  /** dns: the stored DNS settings changed (dns.mode: database). */
  | { kind: 'dns' }
  /** online: a node's map session on the announcing instance opened or closed. */
  | { kind: 'online'; id: number; online: boolean; lastSeen?: string; since?: string };

/** ClusterSession is one node's map session on one instance, opened at `since`. */
export interface ClusterSession {
  instanceId: string;
  nodeId: number;
  since: Date;
}

/** ClusterMessage is an announcement with the instance it came from. */
export type ClusterMessage = ClusterAnnouncement & { origin: string };

/** ClusterFollower is a running subscription to the change feed. */
export interface ClusterFollower {
  close(): Promise<void>;
}

export interface ClusterFollowHandlers {
  /** message receives every announcement, including this instance's own (filter by origin), in commit order. */
  message(m: ClusterMessage): void;
  /**
   * gap says announcements may have been missed (the feed's connection dropped and
   * came back, or the change log was pruned past the reader): reload everything.
   */
  gap(): void;
  /** error reports a feed failure (the database is unreachable); the feed keeps retrying. */
  error(err: Error): void;
}

export interface ClusterPort {
  /**
   * join records this instance as live and returns the other live instances (those
   * whose heartbeat is newer than `liveSince`), so the caller can refuse to start
   * beside an instance serving another control key.
   */
  join(instance: { id: string; address: string; noisePublicKey: string }, liveSince: Date): Promise<InstanceRecord[]>;
  /**
   * heartbeat refreshes this instance's row; true when the row was gone (another instance
   * pruned it as dead, with its session rows) and had to be written again.
   */
  heartbeat(instance: { id: string; address: string; noisePublicKey: string; startedAt: Date; sessions: number }): Promise<boolean>;
  /** leave removes this instance's row and its session rows (a clean shutdown). */
  leave(id: string): Promise<void>;
  instances(): Promise<InstanceRecord[]>;
  /** prune removes instances whose heartbeat is older than `deadBefore` and their session rows; returns their ids. */
  prune(deadBefore: Date): Promise<string[]>;
  /** announce tells every instance (this one too) about a change already committed. */
  announce(origin: string, a: ClusterAnnouncement): Promise<void>;
  /** follow starts delivering announcements made from now on. */
  follow(handlers: ClusterFollowHandlers): Promise<ClusterFollower>;
  /**
   * acquireLease takes or renews the named lease for `ttlMs` when it is free, expired
   * or already held by `holder`; true when `holder` holds it afterwards. One guarded
   * UPDATE or one INSERT (the primary key decides a race), so two instances never both win.
   */
  acquireLease(name: string, holder: string, ttlMs: number): Promise<boolean>;
  /** releaseLease gives a lease up (a clean shutdown) so another instance takes over at once. */
  releaseLease(name: string, holder: string): Promise<void>;
  /**
   * leaseHolder reads the named lease's row: the holder while its time has not run out,
   * else undefined (never taken, given up, or expired). It writes nothing, so any
   * instance can say which one runs the jobs (`headway cluster status`). Optional for
   * adapters written before it; without it an instance knows only whether it holds the lease.
   */
  leaseHolder?(name: string): Promise<string | undefined>;
  /**
   * getValue and setValue keep small named texts every instance reads (the Let's Encrypt account key, certificate
   * and challenge answers); setValue with undefined deletes. Optional for adapters written before them; without
   * them each instance keeps its certificate in its own tls_letsencrypt_cache_dir.
   */
  getValue?(name: string): Promise<string | undefined>;
  setValue?(name: string, value: string | undefined): Promise<void>;
  /** setSession records (online, opened at `since`) or clears a node's map session on an instance. */
  setSession(instanceId: string, nodeId: number, online: boolean, since?: Date): Promise<void>;
  /** sessions lists every recorded map session: which node is online on which instance, since when. */
  sessions(): Promise<ClusterSession[]>;
}

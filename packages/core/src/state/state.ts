import type { HeadwayConfig } from '../config/schema.js';
import type { Logger } from '../log.js';
import type { StoragePort } from '../ports/storage.js';
import { ChangeBus } from './bus.js';
import { KeyStore } from './keys.js';
import { OAuthClientStore } from '../oauth/clients.js';
import { NodeStore } from './nodes.js';
import { PendingLogins } from './pending.js';
import { Presence } from './presence.js';
import { ClusterSync } from './resync.js';
import { UserStore } from './users.js';

/**
 * State is the single writer, in parts by what each keeps: users, nodes (with
 * their names and addresses), keys, pending logins, presence, and the cluster
 * sync that applies what other instances wrote. Users and nodes live in memory,
 * so reads never touch the database; every change is stored first (a write of
 * several rows in one transaction), then applied to memory, then published once
 * on the one ChangeBus all parts share. Callers use the parts directly
 * (`state.nodes.get(id)`); State only builds them over one storage and wires
 * them to each other.
 */
export class State {
  readonly bus = new ChangeBus();
  readonly pending: PendingLogins;
  readonly nodes: NodeStore;
  readonly presence: Presence;
  readonly users: UserStore;
  readonly keys: KeyStore;
  /** oauth keeps /api/v2's OAuth clients and their access tokens. */
  readonly oauth: OAuthClientStore;
  readonly cluster: ClusterSync;

  constructor(readonly storage: StoragePort, readonly config: HeadwayConfig, readonly logger: Logger) {
    this.pending = new PendingLogins(storage, config, logger, () => this.cluster.clustered);
    // Nodes and presence refer to each other: a deleted node's sessions are forgotten, a closed session stores last-seen.
    this.nodes = new NodeStore(storage, config, logger, this.bus, this.pending, () => this.presence);
    this.presence = new Presence(this.bus, this.nodes);
    this.users = new UserStore(storage, this.bus, logger, this.nodes);
    this.keys = new KeyStore(storage, this.users);
    this.oauth = new OAuthClientStore(storage.oauthClients);
    this.cluster = new ClusterSync(storage, this.bus, this.users, this.nodes, this.presence);
  }

  /** init loads the stored users, then the nodes (which refer to them). */
  async init(): Promise<void> {
    await this.users.load();
    await this.nodes.load();
  }
}

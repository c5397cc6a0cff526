import type { Node, User } from '../domain.js';
import type { StoragePort } from '../ports/storage.js';
import type { ChangeBus, PeerPatch } from './bus.js';
import type { NodeStore } from './nodes.js';
import type { Presence, SessionRecord } from './presence.js';
import type { UserStore } from './users.js';

/**
 * ClusterSync brings memory in line with rows another cluster instance wrote to
 * the shared database: it reads them and applies what differs, publishing each
 * change once, marked remote (ChangeBus.publishRemote) so the cluster does not
 * announce it again. The reloads are the cluster member's; the look-ups by key
 * read the database only while clustered.
 */
export class ClusterSync {
  /** clustered: other instances write the same database, so a key memory does not know is looked up there too. */
  clustered = false;
  /** serving is false while a cluster instance has lost its database: it accepts no map streams. */
  serving = true;

  constructor(
    private readonly storage: StoragePort,
    private readonly bus: ChangeBus,
    private readonly users: UserStore,
    private readonly nodes: NodeStore,
    private readonly presence: Presence,
  ) {}

  /** findStoredMachine is findStoredNode by machine key (a register request from a machine memory does not know). */
  async findStoredMachine(machineKey: string): Promise<Node | undefined> {
    const known = this.nodes.byMachineKey(machineKey);
    if (known || !this.clustered) return known;
    const row = await this.storage.nodes.getByMachineKey(machineKey);
    if (row) this.applyNodeRow(row.id, row);
    return this.nodes.byMachineKey(machineKey);
  }

  /**
   * findStoredNode looks a node key up in the database when memory does not know it
   * and other instances write the same database (a device that registered on one
   * instance may reach another before the announcement does), and applies the row.
   */
  async findStoredNode(nodeKey: string): Promise<Node | undefined> {
    const known = this.nodes.byNodeKey(nodeKey);
    if (known || !this.clustered) return known;
    const row = await this.storage.nodes.getByNodeKey(nodeKey);
    if (row) this.applyNodeRow(row.id, row);
    return this.nodes.byNodeKey(nodeKey);
  }

  /**
   * reloadNodes reads the named nodes from storage after another instance changed
   * them and applies each here: added, changed or (no row any more) removed, each
   * published once as if it had been changed on this instance.
   */
  async reloadNodes(ids: number[]): Promise<void> {
    const rows = await Promise.all(ids.map((id) => this.storage.nodes.get(id)));
    ids.forEach((id, i) => this.applyNodeRow(id, rows[i]));
  }

  /** reloadNodePatch reads a node another instance patched (endpoints, disco key, expiry, ...) and publishes the patch. */
  async reloadNodePatch(id: number, patch: PeerPatch): Promise<void> {
    const row = await this.storage.nodes.get(id);
    if (!row) return this.applyNodeRow(id, undefined);
    const { damaged: _damaged, ...node } = row;
    if (!this.nodes.get(id)) return this.applyNodeRow(id, row);
    this.nodes.remember(node);
    this.bus.publishRemote({ type: 'node-patch', nodeId: id, patch });
  }

  /** reloadUsers reads the named users after another instance changed them, and applies each here. */
  async reloadUsers(ids: number[]): Promise<void> {
    const rows = await Promise.all(ids.map((id) => this.storage.users.get(id)));
    ids.forEach((id, i) => this.applyUserRow(id, rows[i]));
  }

  /**
   * resync reloads every user and node after announcements may have been missed
   * (the change feed lost its connection) and applies what differs, users first
   * (nodes refer to them); deletions last. With `sessions` (the cluster's session
   * records) it brings the other instances' sessions in line too.
   */
  async resync(sessions?: SessionRecord[], self?: string): Promise<void> {
    const [users, nodes] = [await this.storage.users.list(), await this.storage.nodes.list()];
    const userIds = new Set(users.map((u) => u.id));
    for (const u of users) this.applyUserRow(u.id, u);
    const nodeIds = new Set(nodes.map((n) => n.id));
    for (const n of nodes) this.applyNodeRow(n.id, n);
    for (const n of this.nodes.list()) if (!nodeIds.has(n.id)) this.applyNodeRow(n.id, undefined);
    for (const u of this.users.list()) if (!userIds.has(u.id)) this.applyUserRow(u.id, undefined);
    if (sessions) this.presence.reconcile(sessions, self);
  }

  private applyNodeRow(id: number, row: Node | undefined): void {
    // A row read before this instance deleted the node is stale.
    if (row && this.nodes.wasDeleted(id)) return;
    const known = this.nodes.get(id);
    if (!row) {
      if (known) {
        this.presence.forgetRemote(id);
        this.bus.asRemote(() => this.nodes.forget(known));
      }
      return;
    }
    const { damaged: _damaged, ...node } = row;
    if (known && known.updatedAt.getTime() === node.updatedAt.getTime() && JSON.stringify(known) === JSON.stringify(node)) return;
    this.nodes.rememberStored(node);
    this.bus.publishRemote(known ? { type: 'node-changed', node } : { type: 'node-added', node });
  }

  private applyUserRow(id: number, user: User | undefined): void {
    const known = this.users.get(id);
    if (!user) {
      if (known) {
        this.users.forget(id);
        this.bus.publishRemote({ type: 'user-removed', userId: id });
      }
      return;
    }
    if (known && JSON.stringify(known) === JSON.stringify(user)) return;
    this.users.remember(user);
    this.bus.publishRemote({ type: 'user-changed', user });
  }
}

import type { Policy } from '@headway/policy';
import { badField, HeadwayError, notFound, shown } from '../errors.js';
import type { Logger } from '../log.js';
import {
  DRIVE_SHARE_NAME, isDriveGrantStore, type DriveAccess, type DriveDestination, type DriveGrant, type DriveGrantRecord,
  type DriveGrantStore, type DrivePort, type DriveSource,
} from '../ports/drive.js';
import type { State } from '../state/state.js';

/**
 * policyDrive is the drive port's default adapter: the policy itself. Its
 * `nodeAttrs` (drive:share, drive:access) and `tailscale.com/cap/drive` grants
 * are compiled with the rest of the policy, so it adds no grants of its own; it
 * is always first in the adapter list.
 */
export const policyDrive: DrivePort & { readonly id: string } = {
  id: 'policy',
  async grants() { return []; },
};

/** DriveGrantInput is a grant as the API and CLI write it: selectors as text. */
export interface DriveGrantInput {
  /** src: `user:NAME|ID` (or a bare user name, `alice@` too), `group:NAME`, `tag:NAME` or `node:NAME|ID`. */
  src: string;
  /** dst: `node:NAME|ID` (or a bare node name) or `tag:NAME`. */
  dst: string;
  shares: string[];
  access: DriveAccess;
}

/** CompiledPolicy gives the policy in force as PolicyService compiled it (null: no policy); groups and tags are read from it, never re-parsed. */
export type CompiledPolicy = () => Policy | null;

/**
 * DriveService holds the Taildrive grants of every drive adapter in memory, in
 * `plugins:` order, for the compiler (which reads them synchronously), and
 * carries admin writes to the first adapter that stores grants. A write is
 * committed by the adapter first, then the in-memory list is re-read, then one
 * `drive-changed` is published, which recompiles and pushes every device's map.
 */
export class DriveService {
  private current: DriveGrant[] = [];
  private readonly byAdapter = new Map<DrivePort, DriveGrant[]>();
  private readonly unwatch: Array<() => void> = [];
  readonly adapters: DrivePort[];

  constructor(plugins: readonly DrivePort[], private readonly state: State, private readonly logger: Logger, private readonly policy: CompiledPolicy) {
    this.adapters = [policyDrive, ...plugins];
  }

  /** init reads every adapter's grants; an adapter that fails stops the server (its grants would silently vanish). */
  async init(): Promise<void> {
    for (const a of this.adapters) this.byAdapter.set(a, await a.grants());
    this.rebuild();
    this.unwatch.push(this.state.bus.subscribe((c) => {
      if (c.type === 'node-removed') void this.forget({ kind: 'node', id: c.nodeId });
      if (c.type === 'user-removed') void this.forget({ kind: 'user', id: c.userId });
    }));
    for (const a of this.adapters) {
      const off = a.watch?.(() => void this.refresh());
      if (off) this.unwatch.push(off);
    }
  }

  /** grants are every adapter's grants, in order; the network view compiles them. */
  grants(): readonly DriveGrant[] { return this.current; }

  /** refresh re-reads every adapter and publishes one change; an adapter that fails keeps its last grants. */
  async refresh(): Promise<void> {
    for (const a of this.adapters) {
      try {
        this.byAdapter.set(a, await a.grants());
      } catch (err) {
        this.logger.error('drive adapter failed to list its grants; keeping the last ones', { error: (err as Error).message });
      }
    }
    this.rebuild();
    this.state.bus.publish({ type: 'drive-changed' });
  }

  private rebuild(): void {
    this.current = this.adapters.flatMap((a) => this.byAdapter.get(a) ?? []);
  }

  /** store is the adapter that takes admin writes: the first listed that stores grants. */
  store(): DriveGrantStore {
    const s = this.adapters.find(isDriveGrantStore);
    if (!s) {
      throw new HeadwayError('conflict', 'no drive adapter stores grants: add `{package: "@headway/drive-db", port: drive}` under plugins: in the config to manage Taildrive grants with headway drive / /api/v1/drive');
    }
    return s;
  }

  async list(): Promise<DriveGrantRecord[]> { return this.store().list(); }

  /** grant checks the input against live users, nodes and the policy, stores it and pushes it to devices. */
  async grant(input: DriveGrantInput): Promise<DriveGrantRecord> {
    const grant = this.parse(input);
    const store = this.store();
    const record = await store.grant(grant);
    await this.refresh();
    this.logger.info('drive grant added', { id: record.id, src: input.src, dst: input.dst, shares: grant.shares.join(','), access: grant.access });
    return record;
  }

  /** revoke removes a grant by id (404 when none) and pushes the change. */
  async revoke(id: number): Promise<void> {
    if (!(await this.store().revoke(id))) throw notFound('drive grant', id);
    await this.refresh();
    this.logger.info('drive grant revoked', { id });
  }

  /**
   * forget drops the stored grants from or to a deleted user or node (ids are
   * never reused, so they would only match nobody and list as deleted).
   */
  private async forget(end: { kind: 'user' | 'node'; id: number }): Promise<void> {
    const store = this.adapters.find(isDriveGrantStore);
    if (!store?.revokeFor) return;
    try {
      const n = await store.revokeFor(end);
      if (n > 0) {
        this.logger.info('drive grants of a deleted ' + end.kind + ' removed', { [end.kind]: end.id, grants: n });
        await this.refresh();
      }
    } catch (err) {
      this.logger.warn('removing the drive grants of a deleted ' + end.kind + ' failed', { [end.kind]: end.id, error: (err as Error).message });
    }
  }

  /** parse turns text selectors into ids and names, refusing what does not exist. */
  parse(input: DriveGrantInput): DriveGrant {
    const shares = input.shares.length ? input.shares : ['*'];
    for (const s of shares) {
      if (!DRIVE_SHARE_NAME.test(s)) {
        throw badField('shares', `${JSON.stringify(s)} is not a Taildrive share name: use lower-case letters a-z, digits, _, (, ) and spaces, or * for all shares`);
      }
    }
    if (input.access !== 'ro' && input.access !== 'rw') throw badField('access', `expected ro or rw, found ${shown(input.access)}`);
    return { src: this.source(input.src), dst: this.destination(input.dst), shares: [...new Set(shares)], access: input.access };
  }

  private source(text: string): DriveSource {
    const t = text.trim();
    if (!t) throw badField('src', 'is required: user:NAME, group:NAME, tag:NAME or node:NAME');
    if (t.startsWith('group:')) {
      if (!/^group:[\w.@-]+$/.test(t)) throw badField('src', `${JSON.stringify(t)} is not a group name`);
      if (!(t in this.policyGroups())) throw notFound('group', `${t} (not defined in the policy's groups)`);
      return { kind: 'group', name: t };
    }
    if (t.startsWith('tag:')) return { kind: 'tag', name: this.tag(t, 'src') };
    if (t.startsWith('node:')) return { kind: 'node', id: this.node(t.slice(5), 'src') };
    const name = t.startsWith('user:') ? t.slice(5) : t.endsWith('@') ? t.slice(0, -1) : t;
    return { kind: 'user', id: this.state.users.resolve(name, 'src').id };
  }

  private destination(text: string): DriveDestination {
    const t = text.trim();
    if (!t) throw badField('dst', 'is required: node:NAME or tag:NAME');
    if (t.startsWith('tag:')) return { kind: 'tag', name: this.tag(t, 'dst') };
    if (/^(user|group):/.test(t)) throw badField('dst', `${JSON.stringify(t)}: a grant's destination is a node (node:NAME) or a tag (tag:NAME), whose shares are reached`);
    return { kind: 'node', id: this.node(t.startsWith('node:') ? t.slice(5) : t, 'dst') };
  }

  private tag(t: string, field: string): string {
    if (!/^tag:[a-zA-Z0-9][\w-]*$/.test(t)) throw badField(field, `${JSON.stringify(t)} is not a tag (tag:NAME)`);
    const owners = this.policyTagOwners();
    if (owners && !owners.includes(t)) throw notFound('tag', `${t} (not defined in the policy's tagOwners)`);
    return t;
  }

  private node(ref: string, field: string): number {
    const r = ref.trim();
    if (!r) throw badField(field, 'node: needs a node name or id');
    const byId = /^\d+$/.test(r) ? this.state.nodes.get(Number(r)) : undefined;
    const node = byId ?? this.state.nodes.list().find((n) => n.givenName === r);
    if (!node) throw notFound('node', r);
    return node.id;
  }

  private policyGroups(): Record<string, string[]> { return this.policy()?.groups ?? {}; }
  private policyTagOwners(): string[] | undefined {
    const p = this.policy();
    return p ? Object.keys(p.tagOwners) : undefined;
  }

  async close(): Promise<void> {
    for (const off of this.unwatch.splice(0)) off();
    for (const a of this.adapters) await a.close?.();
  }
}

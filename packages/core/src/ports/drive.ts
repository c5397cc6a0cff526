import { assertPort } from './assert.js';

/** DriveAccess is Taildrive's access level, as in the `tailscale.com/cap/drive` payload: read-only or read-write. */
export type DriveAccess = 'ro' | 'rw';

/**
 * DriveSource says who is granted access: a user's (untagged) devices, the
 * members of a policy group, the devices carrying a tag, or one node. Users and
 * nodes are held by id so a rename keeps the grant.
 */
export type DriveSource =
  | { kind: 'user'; id: number }
  | { kind: 'group'; name: string }
  | { kind: 'tag'; name: string }
  | { kind: 'node'; id: number };

/** DriveDestination says whose shares are granted: one node, or the devices carrying a tag. */
export type DriveDestination = { kind: 'node'; id: number } | { kind: 'tag'; name: string };

/**
 * DriveGrant lets `src` reach the Taildrive shares of `dst`: `shares` are share
 * names (or `*` for all) and `access` is `ro` or `rw`, exactly the payload of a
 * policy grant's `tailscale.com/cap/drive` app capability. A grant also lets
 * `dst` share (node attribute `drive:share`) and `src` access (`drive:access`),
 * so one grant is all an operator writes.
 */
export interface DriveGrant {
  src: DriveSource;
  dst: DriveDestination;
  shares: string[];
  access: DriveAccess;
}

/** DriveGrantRecord is a stored grant: its id (for revoke) and when it was made. */
export interface DriveGrantRecord extends DriveGrant {
  id: number;
  createdAt: Date;
}

/**
 * DrivePort decides which nodes may share and access Taildrive shares, and with
 * what access, beyond what the policy says. The policy's own `nodeAttrs`
 * (drive:share, drive:access) and `tailscale.com/cap/drive` grants always apply
 * (the default adapter, `policy`, adds nothing to them); every adapter listed
 * under `plugins:` with `port: drive` adds its grants, in the listed order, and
 * the compiler emits them exactly as it emits the policy's (self CapMap
 * attributes, CapGrant filter rules and the drive-sharer companion rule).
 */
export interface DrivePort {
  /** grants lists this adapter's grants; the kernel reads it at start-up and whenever watch fires. */
  grants(): Promise<DriveGrant[]>;
  /** watch calls onChange when the grants may have changed outside Headway; returns an unsubscribe. */
  watch?(onChange: () => void): () => void;
  /** close releases what the adapter holds at shutdown. */
  close?(): Promise<void> | void;
}

/**
 * DriveGrantStore is a drive adapter whose grants an admin manages
 * (`headway drive grant|revoke|list`, `/api/v1/drive`). The kernel checks the
 * grant (users, nodes, groups and tags exist; share names are valid) before
 * `grant` is called; the first store listed under `plugins:` takes the writes.
 */
export interface DriveGrantStore extends DrivePort {
  list(): Promise<DriveGrantRecord[]>;
  grant(grant: DriveGrant): Promise<DriveGrantRecord>;
  /** revoke deletes a grant; false when no grant has that id. */
  revoke(id: number): Promise<boolean>;
  /**
   * revokeFor (optional) deletes every grant from or to a user or node that was
   * just deleted, at once; without it such grants stay stored but match nobody.
   */
  revokeFor?(end: { kind: 'user' | 'node'; id: number }): Promise<number>;
}

export const DRIVE = 'drive';

/** DRIVE_SHARE_NAME is what Tailscale accepts as a share name (drive.NormalizeShareName: lower case a-z, 0-9, `_`, `(`, `)` and spaces), or `*`. */
export const DRIVE_SHARE_NAME = /^(\*|[a-z0-9_() ]+)$/;

/** isDriveGrantStore tells a drive adapter that stores grants from one that only reports them. */
export function isDriveGrantStore(port: DrivePort): port is DriveGrantStore {
  const p = port as Partial<DriveGrantStore>;
  return typeof p.list === 'function' && typeof p.grant === 'function' && typeof p.revoke === 'function';
}

export function assertDrivePort(value: unknown, adapter: string): asserts value is DrivePort {
  assertPort(value, adapter, 'drive', ['grants']);
}

/**
 * Domain records as the kernel sees them. Storage adapters persist exactly these
 * shapes; ids are database integers inside the kernel and strings on the API.
 */

export interface User {
  id: number;
  name: string;
  displayName: string;
  email: string;
  /** provider is how the user logs in: '' for a local user, `oidc` for one from an identity provider. */
  provider: string;
  /** providerId is the provider's stable identity (OIDC: `<iss>/<sub>`); unique; null for a local user. */
  providerId: string | null;
  profilePicUrl: string;
  /** groups are the provider's groups for the user (the `groups` claim), refreshed at each login. */
  groups: string[];
  createdAt: Date;
}

/** UserInput is what a user is created or updated with; provider fields are absent for local users. */
export interface UserInput {
  name: string;
  displayName?: string;
  email?: string;
  provider?: string;
  providerId?: string | null;
  profilePicUrl?: string;
  groups?: string[];
}

export type RegisterMethod = 'authkey' | 'cli' | 'api' | 'debug' | 'oidc';

export interface Node {
  id: number;
  /** machineKey is the Noise static key of the device, `mkey:<hex>`; unique. */
  machineKey: string;
  /** nodeKey is the WireGuard key, `nodekey:<hex>`; unique; rotates on re-login. */
  nodeKey: string;
  discoKey: string;
  /** hostname is what the device reports in Hostinfo. */
  hostname: string;
  /** givenName is the unique DNS label the node is known by (its display name). */
  givenName: string;
  /** userId owns the node; null only for nodes registered purely by tag. */
  userId: number | null;
  tags: string[];
  ipv4: string | null;
  ipv6: string | null;
  endpoints: string[];
  hostinfo: Record<string, unknown> | null;
  availableRoutes: string[];
  approvedRoutes: string[];
  registerMethod: RegisterMethod;
  expiry: Date | null;
  lastSeen: Date | null;
  ephemeral: boolean;
  authKeyId: number | null;
  createdAt: Date;
  updatedAt: Date;
  /**
   * damaged names the columns a storage reader could not decode (e.g. `hostinfo`):
   * it read safe defaults in their place instead of failing start-up, and State.init
   * writes those defaults back. Absent on healthy rows.
   */
  damaged?: string[];
}

/** ownedByTags: a node with tags (or without a user) belongs to its tags, not to a person. */
export function ownedByTags(n: Pick<Node, 'tags' | 'userId'>): boolean {
  return n.tags.length > 0 || n.userId === null;
}

/** TAGGED_USER_ID is the user id Tailscale shows for devices owned by tags. */
export const TAGGED_USER_ID = 2147455555;

export interface OwnerIdentity { id: number; loginName: string; displayName: string; profilePicUrl?: string }

/**
 * ownerIdentity is who a node belongs to as Tailscale shows it (node User,
 * UserProfiles, the register reply): its user, or the shared tagged-devices identity.
 */
export function ownerIdentity(node: Pick<Node, 'tags' | 'userId'>, user: User | undefined): OwnerIdentity {
  if (ownedByTags(node) || !user) return { id: TAGGED_USER_ID, loginName: 'tagged-devices', displayName: 'Tagged Devices' };
  return { id: user.id, loginName: user.email || user.name, displayName: user.displayName || user.name, profilePicUrl: user.profilePicUrl || undefined };
}

export type NewNode = Omit<Node, 'id' | 'createdAt' | 'updatedAt' | 'damaged'>;
export type NodePatch = Partial<Omit<Node, 'id' | 'createdAt' | 'updatedAt' | 'damaged'>>;

export interface PreAuthKey {
  id: number;
  userId: number | null;
  reusable: boolean;
  ephemeral: boolean;
  used: boolean;
  expiration: Date | null;
  tags: string[];
  /** description says what the key is for (set through /api/v2; empty otherwise). */
  description: string;
  /** prefix is the public, readable part of the key; the secret is kept only as `hash`. */
  prefix: string;
  hash: string;
  createdAt: Date;
}

export type NewPreAuthKey = Omit<PreAuthKey, 'id' | 'createdAt' | 'used' | 'description'> & { description?: string };

export interface ApiKey {
  id: number;
  prefix: string;
  hash: string;
  expiration: Date | null;
  lastSeen: Date | null;
  createdAt: Date;
}

export type NewApiKey = Omit<ApiKey, 'id' | 'createdAt' | 'lastSeen'>;

/**
 * OAuthClient issues /api/v2 access tokens (client-credentials grant): `clientId` is its public
 * id (also the readable part of its secret), the secret is kept only as `hash`, `scopes` limit
 * what its tokens may do and `tags` are the tags the keys it creates may carry.
 */
export interface OAuthClient {
  id: number;
  clientId: string;
  hash: string;
  description: string;
  scopes: string[];
  tags: string[];
  createdAt: Date;
  lastUsed: Date | null;
}

export type NewOAuthClient = Omit<OAuthClient, 'id' | 'createdAt' | 'lastUsed'>;

/** OAuthToken is an access token an OAuth client was issued: `prefix` finds it, the rest of it is kept only as `hash`. */
export interface OAuthToken {
  id: number;
  prefix: string;
  hash: string;
  /** client is the issuing OAuthClient's id (the row id, not its public clientId). */
  client: number;
  scopes: string[];
  expiresAt: Date;
  createdAt: Date;
}

export type NewOAuthToken = Omit<OAuthToken, 'id' | 'createdAt'>;

/** PendingRegistration is a device waiting for an administrator to approve its AuthURL. */
export interface PendingRegistration {
  /** key is the registration id embedded in the AuthURL. */
  key: string;
  machineKey: string;
  nodeKey: string;
  hostinfo: Record<string, unknown> | null;
  expiresAt: Date;
  createdAt: Date;
}

export interface PolicyRecord {
  text: string;
  updatedAt: Date;
}

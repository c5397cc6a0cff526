import type { ApiKey, Node, PreAuthKey, User } from '../domain.js';
import type { State } from '../state/state.js';

const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);

export interface UserView {
  id: string; name: string; displayName: string; email: string; createdAt: string;
  /** provider, providerId, profilePicUrl: as headscale's User (provider `oidc` or '' for a local user). */
  provider: string; providerId: string; profilePicUrl: string; groups: string[];
}

export function userView(u: User): UserView {
  return {
    id: String(u.id), name: u.name, displayName: u.displayName, email: u.email, createdAt: u.createdAt.toISOString(),
    provider: u.provider, providerId: u.providerId ?? '', profilePicUrl: u.profilePicUrl, groups: u.groups,
  };
}

const METHOD: Record<Node['registerMethod'], string> = {
  authkey: 'REGISTER_METHOD_AUTH_KEY',
  cli: 'REGISTER_METHOD_CLI',
  api: 'REGISTER_METHOD_API',
  debug: 'REGISTER_METHOD_DEBUG',
  oidc: 'REGISTER_METHOD_OIDC',
};

export interface NodeView {
  id: string; machineKey: string; nodeKey: string; discoKey: string; ipAddresses: string[];
  name: string; givenName: string; user: UserView | null; lastSeen: string | null; expiry: string | null;
  createdAt: string; registerMethod: string; tags: string[]; online: boolean; ephemeral: boolean;
  approvedRoutes: string[]; availableRoutes: string[]; subnetRoutes: string[];
}

/** nodeView is the API shape of a node; subnetRoutes are the approved routes it advertises. */
export function nodeView(n: Node, state: State, primary?: (n: Node) => string[]): NodeView {
  const user = n.userId !== null ? state.getUser(n.userId) : undefined;
  const advertised = new Set(n.availableRoutes);
  return {
    id: String(n.id),
    machineKey: n.machineKey,
    nodeKey: n.nodeKey,
    discoKey: n.discoKey,
    ipAddresses: [n.ipv4, n.ipv6].filter((x): x is string => Boolean(x)),
    name: n.hostname,
    givenName: n.givenName,
    user: user ? userView(user) : null,
    lastSeen: iso(n.lastSeen),
    expiry: iso(n.expiry),
    createdAt: n.createdAt.toISOString(),
    registerMethod: METHOD[n.registerMethod],
    tags: n.tags,
    online: state.isOnline(n.id),
    ephemeral: n.ephemeral,
    approvedRoutes: n.approvedRoutes,
    availableRoutes: n.availableRoutes,
    subnetRoutes: primary ? primary(n) : n.approvedRoutes.filter((r) => advertised.has(r)),
  };
}

export function preAuthKeyView(k: PreAuthKey, state: State, fullKey?: string) {
  const user = k.userId !== null ? state.getUser(k.userId) : undefined;
  return {
    id: String(k.id),
    key: fullKey ?? `hwkey-auth-${k.prefix}-***`,
    user: user ? userView(user) : null,
    reusable: k.reusable,
    ephemeral: k.ephemeral,
    used: k.used,
    expiration: iso(k.expiration),
    createdAt: k.createdAt.toISOString(),
    aclTags: k.tags,
  };
}

export function apiKeyView(k: ApiKey) {
  return { id: String(k.id), prefix: k.prefix, expiration: iso(k.expiration), createdAt: k.createdAt.toISOString(), lastSeen: iso(k.lastSeen) };
}

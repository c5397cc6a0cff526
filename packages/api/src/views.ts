import type { ApiKey, Node, PreAuthKey, User } from '@headway/core';
import type { State } from '@headway/core';
import { isBcryptHash, ownedByTags, ownerIdentity } from '@headway/core';
import type { ApiKeyView, NodeView, PreAuthKeyView, UserView } from './schemas.js';

const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);

export function userView(u: User): UserView {
  return {
    id: String(u.id), name: u.name, displayName: u.displayName, email: u.email, createdAt: u.createdAt.toISOString(),
    provider: u.provider, providerId: u.providerId ?? '', profilePicUrl: u.profilePicUrl, groups: u.groups,
  };
}

/**
 * TAGGED_DEVICES is the owner a node list shows for a tagged node, as headscale 0.29's
 * ListNodes does; one node's answer (get, tag, rename ...) shows none, as there.
 */
const TAGGED_DEVICES: UserView = (() => {
  const o = ownerIdentity({ tags: ['tag:'], userId: null }, undefined);
  return {
    id: String(o.id), name: o.loginName, displayName: o.displayName, email: '', createdAt: '0001-01-01T00:00:00.000Z',
    provider: '', providerId: '', profilePicUrl: '', groups: [],
  };
})();

const METHOD: Record<Node['registerMethod'], NodeView['registerMethod']> = {
  authkey: 'REGISTER_METHOD_AUTH_KEY',
  cli: 'REGISTER_METHOD_CLI',
  api: 'REGISTER_METHOD_API',
  debug: 'REGISTER_METHOD_DEBUG',
  oidc: 'REGISTER_METHOD_OIDC',
};

/**
 * nodeView is the API shape of a node; subnetRoutes are the approved routes it advertises.
 * lastSeen is when the node last connected (its first map session opened) or, offline, when it disconnected:
 * asking again while it stays connected gives the same time. preAuthKey is the key it registered with, if any.
 */
export function nodeView(n: Node, state: State, primary?: (n: Node) => string[], preAuthKey?: PreAuthKeyView, listed = false): NodeView {
  const user = n.userId !== null ? state.users.get(n.userId) : undefined;
  const owner = user ? userView(user) : listed && ownedByTags(n) ? TAGGED_DEVICES : null;
  const advertised = new Set(n.availableRoutes);
  const online = state.presence.isOnline(n.id);
  return {
    id: String(n.id),
    machineKey: n.machineKey,
    nodeKey: n.nodeKey,
    discoKey: n.discoKey,
    ipAddresses: [n.ipv4, n.ipv6].filter((x): x is string => Boolean(x)),
    name: n.hostname,
    givenName: n.givenName,
    user: owner,
    lastSeen: iso(n.lastSeen),
    expiry: iso(n.expiry),
    createdAt: n.createdAt.toISOString(),
    registerMethod: METHOD[n.registerMethod],
    tags: n.tags,
    online,
    ephemeral: n.ephemeral,
    approvedRoutes: n.approvedRoutes,
    availableRoutes: n.availableRoutes,
    subnetRoutes: primary ? primary(n) : n.approvedRoutes.filter((r) => advertised.has(r)),
    ...(preAuthKey ? { preAuthKey } : {}),
  };
}

/**
 * redactedAuthKey shows a stored pre-auth key the way its owner knows it: `hwkey-auth-<prefix>-***`,
 * or `hskey-auth-<prefix>-***` for a key imported from headscale 0.28+ (the one with a bcrypt hash).
 */
function redactedAuthKey(k: PreAuthKey): string {
  return isBcryptHash(k.hash) ? `hskey-auth-${k.prefix}-***` : `hwkey-auth-${k.prefix}-***`;
}

export function preAuthKeyView(k: PreAuthKey, state: State, fullKey?: string): PreAuthKeyView {
  const user = k.userId !== null ? state.users.get(k.userId) : undefined;
  return {
    id: String(k.id),
    key: fullKey ?? redactedAuthKey(k),
    user: user ? userView(user) : null,
    reusable: k.reusable,
    ephemeral: k.ephemeral,
    used: k.used,
    expiration: iso(k.expiration),
    createdAt: k.createdAt.toISOString(),
    aclTags: k.tags,
  };
}

export function apiKeyView(k: ApiKey): ApiKeyView {
  return { id: String(k.id), prefix: k.prefix, expiration: iso(k.expiration), createdAt: k.createdAt.toISOString(), lastSeen: iso(k.lastSeen) };
}

import type {
  ApiKey, DriveDestination, DriveGrantRecord, DriveSource, Node, OAuthClient, OAuthToken, PendingRegistration, PolicyRecord, PreAuthKey, RegisterMethod, User,
} from '@headway/core/ports';

/** Row is one database row as a driver returns it: column name to raw value. */
export type Row = Record<string, unknown>;

/**
 * toDate reads a timestamp column. PostgreSQL and MySQL (timezone 'Z') return
 * Date; SQLite returns the epoch milliseconds knex bound; strings are accepted
 * for rows written by hand. A value that is none of these is a corrupt row.
 */
export function toDate(value: unknown, column: string): Date {
  if (value instanceof Date) return value;
  if (typeof value === 'number' || typeof value === 'bigint') return new Date(Number(value));
  if (typeof value === 'string') {
    const numeric = /^-?\d+$/.test(value) ? new Date(Number(value)) : new Date(value);
    if (!Number.isNaN(numeric.getTime())) return numeric;
  }
  throw new Error(`storage: column ${column} holds ${JSON.stringify(value)}, not a timestamp`);
}

export function toDateOrNull(value: unknown, column: string): Date | null {
  return value === null || value === undefined ? null : toDate(value, column);
}

/** toBool reads a boolean column: PostgreSQL gives booleans, MySQL and SQLite give 0/1. */
export function toBool(value: unknown): boolean {
  return value === true || value === 1 || value === '1' || value === 1n;
}

export function toId(value: unknown): number {
  return Number(value);
}

export function toIdOrNull(value: unknown): number | null {
  return value === null || value === undefined ? null : Number(value);
}

export function toText(value: unknown): string {
  return value === null || value === undefined ? '' : String(value);
}

function parseJson(value: unknown, column: string): unknown {
  if (value === null || value === undefined) return null;
  try {
    return JSON.parse(String(value));
  } catch {
    throw new Error(`storage: column ${column} does not hold valid JSON`);
  }
}

export function toStringArray(value: unknown, column: string): string[] {
  const parsed = parseJson(value, column);
  if (parsed === null) return [];
  if (!Array.isArray(parsed) || parsed.some((v) => typeof v !== 'string')) {
    throw new Error(`storage: column ${column} does not hold a JSON array of strings`);
  }
  return parsed as string[];
}

export function toObjectOrNull(value: unknown, column: string): Record<string, unknown> | null {
  const parsed = parseJson(value, column);
  if (parsed === null) return null;
  if (typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new Error(`storage: column ${column} does not hold a JSON object`);
  }
  return parsed as Record<string, unknown>;
}

export function jsonText(value: unknown): string | null {
  return value === null || value === undefined ? null : JSON.stringify(value);
}

/**
 * objectText and stringArrayText encode JSON columns, refusing what toObjectOrNull
 * and toStringArray would refuse to read back: storage never writes a row its own
 * reader rejects.
 */
export function objectText(value: Record<string, unknown> | null | undefined, column: string): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value !== 'object' || Array.isArray(value)) throw new Error(`storage: refusing to write ${column}: not a JSON object`);
  return JSON.stringify(value);
}

export function stringArrayText(value: string[], column: string): string {
  if (!Array.isArray(value) || value.some((v) => typeof v !== 'string')) throw new Error(`storage: refusing to write ${column}: not an array of strings`);
  return JSON.stringify(value);
}

/**
 * lenient reads one column with `read`; a value it refuses becomes `fallback` and
 * `field` is added to `damaged`, so one bad row cannot stop the server from starting.
 */
function lenient<T>(damaged: string[], field: string, read: () => T, fallback: T): T {
  try {
    return read();
  } catch {
    damaged.push(field);
    return fallback;
  }
}

export function userFromRow(r: Row): User {
  return {
    id: toId(r.id),
    name: toText(r.name),
    displayName: toText(r.display_name),
    email: toText(r.email),
    provider: toText(r.provider),
    providerId: r.provider_id === null || r.provider_id === undefined ? null : String(r.provider_id),
    profilePicUrl: toText(r.profile_pic_url),
    groups: toStringArray(r.groups, 'users.groups'),
    createdAt: toDate(r.created_at, 'users.created_at'),
  };
}

/**
 * nodeFromRow reads a node row. Columns a client or an older Headway could have
 * filled with something unreadable are read leniently: the safe default takes the
 * value's place (no Hostinfo, no routes, an expiry in the past) and `damaged` names
 * the field, for State.init to log and write back.
 */
export function nodeFromRow(r: Row): Node {
  const damaged: string[] = [];
  const node: Node = {
    id: toId(r.id),
    machineKey: toText(r.machine_key),
    nodeKey: toText(r.node_key),
    discoKey: toText(r.disco_key),
    hostname: toText(r.hostname),
    givenName: toText(r.given_name),
    userId: toIdOrNull(r.user_id),
    tags: lenient(damaged, 'tags', () => toStringArray(r.tags, 'nodes.tags'), []),
    ipv4: r.ipv4 === null || r.ipv4 === undefined ? null : String(r.ipv4),
    ipv6: r.ipv6 === null || r.ipv6 === undefined ? null : String(r.ipv6),
    endpoints: lenient(damaged, 'endpoints', () => toStringArray(r.endpoints, 'nodes.endpoints'), []),
    hostinfo: lenient(damaged, 'hostinfo', () => toObjectOrNull(r.hostinfo, 'nodes.hostinfo'), null),
    availableRoutes: lenient(damaged, 'availableRoutes', () => toStringArray(r.available_routes, 'nodes.available_routes'), []),
    approvedRoutes: lenient(damaged, 'approvedRoutes', () => toStringArray(r.approved_routes, 'nodes.approved_routes'), []),
    registerMethod: toText(r.register_method) as RegisterMethod,
    expiry: lenient(damaged, 'expiry', () => toDateOrNull(r.expiry, 'nodes.expiry'), new Date(0)),
    lastSeen: lenient(damaged, 'lastSeen', () => toDateOrNull(r.last_seen, 'nodes.last_seen'), null),
    ephemeral: toBool(r.ephemeral),
    authKeyId: toIdOrNull(r.auth_key_id),
    createdAt: lenient(damaged, 'createdAt', () => toDate(r.created_at, 'nodes.created_at'), new Date(0)),
    updatedAt: lenient(damaged, 'updatedAt', () => toDate(r.updated_at, 'nodes.updated_at'), new Date(0)),
  };
  if (damaged.length) node.damaged = damaged;
  return node;
}

/** NODE_COLUMNS maps each writable Node field to its column and encoder. */
export const NODE_COLUMNS: { [K in keyof Omit<Node, 'id' | 'createdAt' | 'updatedAt' | 'damaged'>]: [string, (v: Node[K]) => unknown] } = {
  machineKey: ['machine_key', (v) => v],
  nodeKey: ['node_key', (v) => v],
  discoKey: ['disco_key', (v) => v],
  hostname: ['hostname', (v) => v],
  givenName: ['given_name', (v) => v],
  userId: ['user_id', (v) => v],
  tags: ['tags', (v) => stringArrayText(v, 'nodes.tags')],
  ipv4: ['ipv4', (v) => v],
  ipv6: ['ipv6', (v) => v],
  endpoints: ['endpoints', (v) => stringArrayText(v, 'nodes.endpoints')],
  hostinfo: ['hostinfo', (v) => objectText(v, 'nodes.hostinfo')],
  availableRoutes: ['available_routes', (v) => stringArrayText(v, 'nodes.available_routes')],
  approvedRoutes: ['approved_routes', (v) => stringArrayText(v, 'nodes.approved_routes')],
  registerMethod: ['register_method', (v) => v],
  expiry: ['expiry', (v) => v],
  lastSeen: ['last_seen', (v) => v],
  ephemeral: ['ephemeral', (v) => v],
  authKeyId: ['auth_key_id', (v) => v],
};

export function preAuthKeyFromRow(r: Row): PreAuthKey {
  return {
    id: toId(r.id),
    userId: toIdOrNull(r.user_id),
    reusable: toBool(r.reusable),
    ephemeral: toBool(r.ephemeral),
    used: toBool(r.used),
    expiration: toDateOrNull(r.expiration, 'pre_auth_keys.expiration'),
    tags: toStringArray(r.tags, 'pre_auth_keys.tags'),
    description: typeof r.description === 'string' ? r.description : '',
    prefix: toText(r.prefix),
    hash: toText(r.hash),
    createdAt: toDate(r.created_at, 'pre_auth_keys.created_at'),
  };
}

export function apiKeyFromRow(r: Row): ApiKey {
  return {
    id: toId(r.id),
    prefix: toText(r.prefix),
    hash: toText(r.hash),
    expiration: toDateOrNull(r.expiration, 'api_keys.expiration'),
    lastSeen: toDateOrNull(r.last_seen, 'api_keys.last_seen'),
    createdAt: toDate(r.created_at, 'api_keys.created_at'),
  };
}

export function pendingRegistrationFromRow(r: Row): PendingRegistration {
  return {
    key: toText(r.key),
    machineKey: toText(r.machine_key),
    nodeKey: toText(r.node_key),
    // A pending registration lives minutes: an unreadable Hostinfo is just dropped.
    hostinfo: lenient([], 'hostinfo', () => toObjectOrNull(r.hostinfo, 'pending_registrations.hostinfo'), null),
    expiresAt: toDate(r.expires_at, 'pending_registrations.expires_at'),
    createdAt: toDate(r.created_at, 'pending_registrations.created_at'),
  };
}

export function policyFromRow(r: Row): PolicyRecord {
  return { text: toText(r.text), updatedAt: toDate(r.updated_at, 'policies.updated_at') };
}

function driveEnd(kind: unknown, id: unknown, name: unknown, column: string): DriveSource {
  switch (kind) {
    case 'user': case 'node': return { kind, id: toId(id) };
    case 'group': case 'tag': return { kind, name: toText(name) };
    default: throw new Error(`storage: column ${column} holds ${JSON.stringify(kind)}, not user, group, tag or node`);
  }
}

export function driveGrantFromRow(r: Row): DriveGrantRecord {
  const dst = driveEnd(r.dst_kind, r.dst_id, r.dst_name, 'drive_grants.dst_kind');
  if (dst.kind !== 'node' && dst.kind !== 'tag') throw new Error(`storage: column drive_grants.dst_kind holds ${dst.kind}, not node or tag`);
  const access = toText(r.access);
  if (access !== 'ro' && access !== 'rw') throw new Error(`storage: column drive_grants.access holds ${JSON.stringify(access)}, not ro or rw`);
  return {
    id: toId(r.id),
    src: driveEnd(r.src_kind, r.src_id, r.src_name, 'drive_grants.src_kind'),
    dst: dst as DriveDestination,
    shares: toStringArray(r.shares, 'drive_grants.shares'),
    access,
    createdAt: toDate(r.created_at, 'drive_grants.created_at'),
  };
}

export function oauthClientFromRow(r: Row): OAuthClient {
  return {
    id: toId(r.id),
    clientId: toText(r.client_id),
    hash: toText(r.hash),
    description: toText(r.description),
    scopes: toStringArray(r.scopes, 'oauth_clients.scopes'),
    tags: toStringArray(r.tags, 'oauth_clients.tags'),
    createdAt: toDate(r.created_at, 'oauth_clients.created_at'),
    lastUsed: toDateOrNull(r.last_used, 'oauth_clients.last_used'),
  };
}

export function oauthTokenFromRow(r: Row): OAuthToken {
  return {
    id: toId(r.id),
    prefix: toText(r.prefix),
    hash: toText(r.hash),
    client: toId(r.client_id),
    scopes: toStringArray(r.scopes, 'oauth_tokens.scopes'),
    expiresAt: toDate(r.expires_at, 'oauth_tokens.expires_at'),
    createdAt: toDate(r.created_at, 'oauth_tokens.created_at'),
  };
}

import type { ApiKeyInfo, ApiNode, ApiPreAuthKey, ApiUser, ApiDriveEnd, ApiDriveGrant } from './api-types.js';

/** renderTable aligns columns with two spaces between them; list cells are joined with ", ". */
export function renderTable(header: string[], rows: (string | string[])[][]): string {
  const cells = [header, ...rows.map((r) => r.map((c) => (Array.isArray(c) ? c.join(', ') : c)))];
  const widths = header.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r) => r.map((c, i) => (i === r.length - 1 ? c : (c ?? '').padEnd(widths[i]!))).join('  ').trimEnd())
    .join('\n');
}

/** formatTime shows an RFC 3339 time as `YYYY-MM-DD HH:MM:SS` UTC (headscale's table format); absent → empty. */
export function formatTime(value: string | null | undefined): string {
  if (!value) return '';
  const d = new Date(value);
  if (Number.isNaN(d.getTime())) return value;
  return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, '').replace(/Z$/, '');
}

/** isPast says whether an RFC 3339 time lies before now; absent means "never expires". */
export function isPast(value: string | null | undefined, now = Date.now()): boolean {
  if (!value) return false;
  const t = Date.parse(value);
  return !Number.isNaN(t) && t <= now;
}

/** shortKey abbreviates a `nodekey:<hex>`-style key to its type and first 8 hex digits. */
export function shortKey(key: string | undefined): string {
  if (!key) return '';
  const i = key.indexOf(':');
  return i === -1 ? key.slice(0, 12) : `${key.slice(0, i + 1)}${key.slice(i + 1, i + 9)}`;
}

// The JSON/YAML output uses headscale's snake_case field names so scripts written
// against `headscale ... -o json` keep working after renaming the command.

export function userJson(u: ApiUser | null | undefined): Record<string, unknown> | null {
  if (!u) return null;
  return {
    id: u.id,
    name: u.name,
    display_name: u.displayName ?? '',
    email: u.email ?? '',
    created_at: u.createdAt ?? null,
    provider: u.provider ?? '',
    provider_id: u.providerId ?? '',
    profile_pic_url: u.profilePicUrl ?? '',
  };
}

export function nodeJson(n: ApiNode): Record<string, unknown> {
  return {
    id: n.id,
    machine_key: n.machineKey,
    node_key: n.nodeKey,
    disco_key: n.discoKey ?? '',
    ip_addresses: n.ipAddresses ?? [],
    name: n.name,
    user: userJson(n.user),
    last_seen: n.lastSeen ?? null,
    expiry: n.expiry ?? null,
    created_at: n.createdAt ?? null,
    register_method: n.registerMethod ?? 'REGISTER_METHOD_UNSPECIFIED',
    forced_tags: n.tags ?? [],
    tags: n.tags ?? [],
    given_name: n.givenName,
    online: n.online,
    approved_routes: n.approvedRoutes ?? [],
    available_routes: n.availableRoutes ?? [],
    subnet_routes: n.subnetRoutes ?? [],
    ephemeral: n.ephemeral ?? false,
  };
}

export function preAuthKeyJson(k: ApiPreAuthKey): Record<string, unknown> {
  return {
    id: k.id,
    key: k.key,
    user: userJson(k.user),
    reusable: k.reusable,
    ephemeral: k.ephemeral,
    used: k.used,
    expiration: k.expiration ?? null,
    created_at: k.createdAt ?? null,
    acl_tags: k.aclTags ?? [],
  };
}

export function apiKeyJson(k: ApiKeyInfo): Record<string, unknown> {
  return {
    id: k.id,
    prefix: k.prefix,
    expiration: k.expiration ?? null,
    created_at: k.createdAt ?? null,
    last_seen: k.lastSeen ?? null,
  };
}

/** usersTable leads with the user name (what every other command takes); the display name is optional and often blank. */
export function usersTable(users: ApiUser[]): string {
  return renderTable(
    ['ID', 'Name', 'Display name', 'Email', 'Created'],
    users.map((u) => [u.id, u.name, u.displayName ?? '', u.email ?? '', formatTime(u.createdAt)]),
  );
}

export function nodesTable(nodes: ApiNode[]): string {
  return renderTable(
    ['ID', 'Hostname', 'Name', 'MachineKey', 'NodeKey', 'User', 'Tags', 'IP addresses', 'Ephemeral', 'Last seen', 'Expiration', 'Connected', 'Expired'],
    nodes.map((n) => [
      n.id,
      n.name,
      n.givenName,
      shortKey(n.machineKey),
      shortKey(n.nodeKey),
      n.user?.name ?? '',
      n.tags ?? [],
      n.ipAddresses ?? [],
      String(n.ephemeral ?? false),
      formatTime(n.lastSeen),
      n.expiry ? formatTime(n.expiry) : 'N/A',
      n.online ? 'online' : 'offline',
      isPast(n.expiry) ? 'yes' : 'no',
    ]),
  );
}

/** routesTable shows the device's own hostname under "Hostname" and the name given to it in the tailnet under "Name", as `nodes list` does. */
export function routesTable(nodes: ApiNode[]): string {
  return renderTable(
    ['ID', 'Hostname', 'Name', 'Approved', 'Available', 'Serving (Primary)'],
    nodes.map((n) => [n.id, n.name, n.givenName, n.approvedRoutes ?? [], n.availableRoutes ?? [], n.subnetRoutes ?? []]),
  );
}

export function preAuthKeysTable(keys: ApiPreAuthKey[]): string {
  return renderTable(
    ['ID', 'Key/Prefix', 'Reusable', 'Ephemeral', 'Used', 'Expiration', 'Created', 'Owner'],
    keys.map((k) => [
      k.id,
      k.key,
      String(k.reusable),
      String(k.ephemeral),
      String(k.used),
      formatTime(k.expiration),
      formatTime(k.createdAt),
      k.aclTags?.length ? k.aclTags : (k.user?.name ?? '-'),
    ]),
  );
}

export function apiKeysTable(keys: ApiKeyInfo[]): string {
  return renderTable(
    ['ID', 'Prefix', 'Expiration', 'Created', 'Last seen'],
    keys.map((k) => [k.id, k.prefix, formatTime(k.expiration), formatTime(k.createdAt), formatTime(k.lastSeen)]),
  );
}

function driveEnd(e: ApiDriveEnd): string {
  return e.kind === 'user' || e.kind === 'node' ? `${e.kind}:${e.name}` : e.name;
}

export function driveGrantJson(g: ApiDriveGrant): Record<string, unknown> {
  return { id: Number(g.id), src: g.src, dst: g.dst, shares: g.shares, access: g.access, created_at: g.createdAt };
}

export function driveGrantsTable(grants: ApiDriveGrant[]): string {
  return renderTable(
    ['ID', 'From', 'To', 'Shares', 'Access', 'Created'],
    grants.map((g) => [g.id, driveEnd(g.src), driveEnd(g.dst), g.shares.join(','), g.access, formatTime(g.createdAt)]),
  );
}

/*
 * Tailscale's OAuth scopes as /api/v2 checks them. A scope names a resource and, with
 * `:read`, read access only; the resource without `:read` grants both. `all` and
 * `all:read` cover every resource. Older names Tailscale still accepts are read as the
 * scopes they became (`devices` → `devices:core`, `acl` → `policy_file`, ...).
 */

/** RESOURCES are the scope resources /api/v2 knows, each with what it governs. */
export const SCOPE_RESOURCES = {
  'devices:core': 'devices: list, get, delete, authorize, name, tags, key expiry',
  'devices:routes': "devices' subnet routes",
  'devices:posture_attributes': 'device posture attributes (not served: answers 501)',
  auth_keys: 'auth keys: create (with tags the client may assign), list, get, delete',
  oauth_keys: 'OAuth clients',
  api_access_tokens: 'API access tokens (API keys)',
  policy_file: 'the policy file: get, set, validate, preview',
  dns: 'DNS: nameservers, MagicDNS, search paths, split DNS',
  users: 'users',
  feature_settings: 'tailnet settings',
  logs: 'configuration and network logs (not served: answers 501)',
  webhooks: 'webhooks (not served: answers 501)',
  account_settings: 'contacts (not served: answers 501)',
  services: 'services (not served: answers 501)',
} as const;
export type ScopeResource = keyof typeof SCOPE_RESOURCES;

/** Scope is what a route needs: a resource, read or write. */
export interface Scope { resource: ScopeResource; write: boolean }

const LEGACY: Record<string, string> = {
  devices: 'devices:core', 'devices:read': 'devices:core:read',
  routes: 'devices:routes', 'routes:read': 'devices:routes:read',
  acl: 'policy_file', 'acl:read': 'policy_file:read',
  'logs:configuration:read': 'logs:read', 'logs:network:read': 'logs:read',
};

/**
 * parseScopes reads a space- or comma-separated scope list (what an OAuth client is created
 * with, or a token request's `scope`); unknown names are an error naming them.
 */
export function parseScopes(raw: string | string[]): { scopes: string[]; unknown: string[] } {
  const list = (Array.isArray(raw) ? raw : raw.split(/[\s,]+/)).map((s) => s.trim()).filter(Boolean);
  const scopes: string[] = [];
  const unknown: string[] = [];
  for (const name of list) {
    const s = LEGACY[name] ?? name;
    const { resource } = requested(s);
    if (resource === 'all' || resource in SCOPE_RESOURCES) { if (!scopes.includes(s)) scopes.push(s); } else unknown.push(name);
  }
  return { scopes, unknown };
}

/** allows says whether granted scopes (already parsed) cover what a route needs. */
export function allows(granted: readonly string[], need: Scope): boolean {
  const wanted = need.write ? [need.resource, 'all'] : [need.resource, `${need.resource}:read`, 'all', 'all:read'];
  return granted.some((g) => wanted.includes(g));
}

/** scopeName spells a need as Tailscale names it in errors. */
export const scopeName = (need: Scope) => (need.write ? need.resource : `${need.resource}:read`);

/** requested reads one scope name as the resource and access it asks for (`all` for every resource). */
function requested(name: string): { resource: string; write: boolean } {
  return name.endsWith(':read') ? { resource: name.slice(0, -':read'.length), write: false } : { resource: name, write: true };
}

/**
 * covers says whether granted scopes include a requested one (both parsed): `all` covers every
 * scope, `all:read` every read scope, a resource its own `:read` scope.
 */
export function covers(granted: readonly string[], name: string): boolean {
  const want = requested(name);
  if (want.resource === 'all') return granted.includes('all') || (!want.write && granted.includes('all:read'));
  return allows(granted, { resource: want.resource as ScopeResource, write: want.write });
}

/** TAGGING_SCOPES are the write scopes that create tagged keys or tag devices: a client holding one must have tags to assign. */
export const TAGGING_SCOPES: readonly string[] = ['auth_keys', 'devices:core'];

/**
 * narrowScopes is what a token issued with `held` may still do once its client has only `client`: each held scope
 * the client still covers, a write scope cut to reading where the client kept only that, and each client scope a
 * broad held one (`all`, `all:read`) covered, cut to reading the same way.
 */
export function narrowScopes(held: readonly string[], client: readonly string[]): string[] {
  const out = new Set<string>();
  for (const s of held) {
    if (covers(client, s)) out.add(s);
    else if (!s.endsWith(':read') && covers(client, `${s}:read`)) out.add(`${s}:read`);
  }
  for (const c of client) {
    const kept = covers(held, c) ? c : !c.endsWith(':read') && covers(held, `${c}:read`) ? `${c}:read` : undefined;
    if (kept && !covers([...out], kept)) out.add(kept);
  }
  return [...out];
}

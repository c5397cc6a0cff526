/*
 * model.ts: what the Machines page knows of a machine, read from /api/v1 (names, owner, addresses, tags, routes with
 * the primary ones, expiry, online state) and /api/v2 (the OS and client version the device reports), and the
 * filters the list applies, kept in the location's hash (#/machines?user=alice&status=online) so a reload keeps them.
 */
import { ApiError, call, raw, type ApiNode } from '../../api.js';

/** EXPIRING_SOON_DAYS: "expiring soon" is a key that expires within this many days (a week's notice to re-authenticate). */
export const EXPIRING_SOON_DAYS = 7;
/** EXIT_ROUTES: advertising both makes a device an exit node; approving either approves both. */
export const EXIT_ROUTES = ['0.0.0.0/0', '::/0'] as const;
/** TAGGED_OWNER: the owner name /api/v1 lists for a machine its tags own. */
export const TAGGED_OWNER = 'tagged-devices';

export const isExitRoute = (r: string) => (EXIT_ROUTES as readonly string[]).includes(r);

export interface Machine {
  id: string;
  givenName: string;
  hostname: string;
  /** owner: the user's name, or TAGGED_OWNER for a machine its tags own. */
  owner: string;
  addresses: string[];
  os: string;
  clientVersion: string;
  tags: string[];
  online: boolean;
  lastSeen: string | null;
  expiry: string | null;
  createdAt: string;
  ephemeral: boolean;
  /** advertised, approved and primary subnet routes (exit routes apart). */
  advertised: string[];
  approved: string[];
  primary: string[];
  exit: { advertised: boolean; approved: boolean };
}

/** DeviceFacts: what the machine view reads of /api/v2's device (the rest comes from /api/v1). */
interface DeviceFacts { id: string; os: string; clientVersion: string }

/** machineOf joins a /api/v1 node with the device facts /api/v2 has of it. */
export function machineOf(n: ApiNode, facts?: DeviceFacts): Machine {
  const subnet = (l: string[] | undefined) => (l ?? []).filter((r) => !isExitRoute(r));
  return {
    id: n.id, givenName: n.givenName, hostname: n.name,
    owner: n.user?.name ?? TAGGED_OWNER,
    addresses: n.ipAddresses, os: facts?.os ?? '', clientVersion: facts?.clientVersion ?? '',
    tags: n.tags, online: n.online, lastSeen: n.lastSeen, expiry: n.expiry, createdAt: n.createdAt, ephemeral: n.ephemeral,
    advertised: subnet(n.availableRoutes), approved: subnet(n.approvedRoutes), primary: subnet(n.subnetRoutes),
    exit: {
      advertised: EXIT_ROUTES.every((r) => n.availableRoutes.includes(r)),
      approved: EXIT_ROUTES.some((r) => n.approvedRoutes.includes(r)),
    },
  };
}

/**
 * readV2 reads what /api/v2 says of devices; a refusal there (other than the session's end) leaves the OS and
 * client version unknown rather than the page empty.
 */
async function readV2<T>(path: string, none: T): Promise<T> {
  try {
    return await (await raw('GET', path)).json() as T;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) throw err;
    return none;
  }
}

/** deviceFacts reads every device's OS and client version (one call). */
async function deviceFacts(): Promise<Map<string, DeviceFacts>> {
  const { devices } = await readV2<{ devices: DeviceFacts[] }>('/api/v2/tailnet/-/devices', { devices: [] });
  return new Map(devices.map((d) => [d.id, d]));
}

/** loadMachines reads every machine, sorted by name. */
export async function loadMachines(): Promise<Machine[]> {
  const [nodes, facts] = await Promise.all([call('get', '/api/v1/node'), deviceFacts()]);
  return nodes.nodes.map((n) => machineOf(n, facts.get(n.id))).sort((a, b) => a.givenName.localeCompare(b.givenName));
}

/** loadMachine reads one machine. */
export async function loadMachine(id: string): Promise<Machine> {
  const [node, facts] = await Promise.all([
    call('get', '/api/v1/node/{id}', { params: { id } }),
    readV2<DeviceFacts | undefined>(`/api/v2/device/${encodeURIComponent(id)}`, undefined),
  ]);
  return machineOf(node.node, facts);
}

export type Status = 'online' | 'offline';
export type Expiry = 'expired' | 'soon' | 'never';
export type RoutesFilter = 'any' | 'pending';

/** Filters: the list's search and filters; an absent field does not filter. */
export interface Filters {
  q?: string;
  user?: string;
  tag?: string;
  status?: Status;
  routes?: RoutesFilter;
  exit?: 'yes';
  expiry?: Expiry;
}

const KEYS = ['q', 'user', 'tag', 'status', 'routes', 'exit', 'expiry'] as const;
const ALLOWED: Partial<Record<keyof Filters, readonly string[]>> = {
  status: ['online', 'offline'], routes: ['any', 'pending'], exit: ['yes'], expiry: ['expired', 'soon', 'never'],
};

/** readFilters reads the filters from a hash such as #/machines?user=alice&status=online (unknown values are dropped). */
export function readFilters(hash: string): Filters {
  const at = hash.indexOf('?');
  const q = new URLSearchParams(at < 0 ? '' : hash.slice(at + 1));
  const f: Record<string, string> = {};
  for (const k of KEYS) {
    const v = q.get(k)?.trim();
    if (v && (!ALLOWED[k] || ALLOWED[k]!.includes(v))) f[k] = v;
  }
  return f as Filters;
}

/** filtersHash is the list's hash with these filters. */
export function filtersHash(f: Filters): string {
  const q = new URLSearchParams();
  for (const k of KEYS) if (f[k]) q.set(k, f[k]!);
  return q.size ? `#/machines?${q}` : '#/machines';
}

/** expiryState says whether a key never expires, has expired, expires soon, or neither. */
export function expiryState(m: Machine, now = Date.now()): Expiry | 'later' {
  if (!m.expiry) return 'never';
  const at = Date.parse(m.expiry);
  if (at <= now) return 'expired';
  return at - now <= EXPIRING_SOON_DAYS * 86_400_000 ? 'soon' : 'later';
}

/** matches says whether a machine passes every filter. */
export function matches(m: Machine, f: Filters, now = Date.now()): boolean {
  if (f.q) {
    const words = f.q.toLowerCase().split(/\s+/).filter(Boolean);
    const text = [m.givenName, m.hostname, m.owner, m.os, ...m.addresses, ...m.tags].join(' ').toLowerCase();
    if (!words.every((w) => text.includes(w))) return false;
  }
  if (f.user && m.owner !== f.user) return false;
  if (f.tag && !m.tags.includes(f.tag)) return false;
  if (f.status && m.online !== (f.status === 'online')) return false;
  if (f.routes === 'any' && m.advertised.length + m.approved.length === 0) return false;
  if (f.routes === 'pending' && !(m.advertised.some((r) => !m.approved.includes(r)) || (m.exit.advertised && !m.exit.approved))) return false;
  if (f.exit && !m.exit.advertised && !m.exit.approved) return false;
  if (f.expiry && expiryState(m, now) !== f.expiry) return false;
  return true;
}

/** lastSeenText: "Online", or when an offline machine was last seen. */
export function seenText(m: Pick<Machine, 'online' | 'lastSeen'>, when: (iso: string | null) => string): string {
  if (m.online) return 'Online';
  return m.lastSeen ? `Offline, last seen ${when(m.lastSeen)}` : 'Offline, never seen';
}

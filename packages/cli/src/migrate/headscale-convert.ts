import { isIPv4, isIPv6 } from 'node:net';
import {
  hashSecret, isBcryptHash, parseIP, parsePrefix, prefixContains,
  type ApiKey, type Node, type PolicyRecord, type PreAuthKey, type RegisterMethod, type StorageDump, type User,
} from '@headway/core/ports';
import type { HeadscaleSnapshot, Row } from './headscale-db.js';

/*
 * convertHeadscale turns the rows of a headscale database into Headway records (a
 * StorageDump that storage.restore writes in one transaction), keeping ids, keys,
 * addresses, names and key hashes, so devices and keys keep working. Every record
 * that cannot be carried over is reported with the reason and left out; records
 * that can be carried over with a change (a name already taken, say) are reported
 * as warnings. Pure: the command prints the report and decides whether to write.
 */

export type RecordKind = 'user' | 'node' | 'pre-auth key' | 'API key' | 'policy';

/** ReportLine is one record of the import: what it is and, when left out or changed, why. */
export interface ReportLine {
  kind: RecordKind;
  /** id is the headscale id (null for the policy). */
  id: number | null;
  /** what names the record for a person: `alice`, `laptop (100.64.0.1)`, `prefix abc...`. */
  what: string;
  /** reason says why it is left out (skipped) or what changed (warnings). */
  reason?: string;
}

export interface ImportReport {
  imported: ReportLine[];
  skipped: ReportLine[];
  warnings: ReportLine[];
}

export interface ConvertOptions {
  /** prefixes are Headway's address prefixes: an imported address outside them is warned about. */
  prefixes?: { v4: string; v6: string };
  /** now stands in for missing creation times. */
  now?: Date;
}

const ZERO_YEAR = 1;
const MACHINE_KEY = /^mkey:[0-9a-f]{64}$/;
const NODE_KEY = /^nodekey:[0-9a-f]{64}$/;
const DISCO_KEY = /^discokey:[0-9a-f]{64}$/;
const PLAIN_AUTH_KEY = /^[0-9a-f]{48}$/;
const REGISTER_METHODS: ReadonlySet<string> = new Set(['authkey', 'cli', 'api', 'debug', 'oidc']);

/** dnsLabel makes a node name from a hostname when headscale kept none (it always does since 0.23). */
function dnsLabel(hostname: string): string {
  const label = hostname.trim().split('.')[0]!.toLowerCase().replace(/[^a-z0-9-]+/g, '-').replace(/^-+/, '').slice(0, 63).replace(/-+$/, '');
  return label || 'node';
}

/** ImportProblem: a record cannot be imported; the message is the reason the report shows. */
class ImportProblem extends Error {}

/**
 * headscaleTime reads a headscale time column: a Date (PostgreSQL), or the text gorm's
 * SQLite driver writes (`2025-01-02 15:04:05.123456789+00:00`), or epoch numbers. Go's zero
 * time (year 1), which headscale before 0.29 wrote for "no expiry", reads as null.
 */
export function headscaleTime(value: unknown, field: string): Date | null {
  if (value === null || value === undefined || value === '') return null;
  let d: Date;
  if (value instanceof Date) d = value;
  else if (typeof value === 'number' || typeof value === 'bigint') d = new Date(Number(value) < 1e11 ? Number(value) * 1000 : Number(value));
  else if (typeof value === 'string') {
    const m = /^(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d+))?\s*(Z|[+-]\d\d:?\d\d)?(?:\s.*)?$/.exec(value.trim());
    if (!m) throw new ImportProblem(`${field} ${JSON.stringify(value)} is not a time`);
    if (Number(m[1]) === ZERO_YEAR) return null;
    const ms = (m[7] ?? '').padEnd(3, '0').slice(0, 3);
    const zone = !m[8] || m[8] === 'Z' ? 'Z' : m[8].includes(':') ? m[8] : `${m[8].slice(0, 3)}:${m[8].slice(3)}`;
    d = new Date(`${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6]}.${ms}${zone}`);
  } else throw new ImportProblem(`${field} ${JSON.stringify(value)} is not a time`);
  if (Number.isNaN(d.getTime())) throw new ImportProblem(`${field} ${JSON.stringify(value)} is not a time`);
  if (d.getUTCFullYear() <= ZERO_YEAR) return null;
  return d;
}

function text(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (Buffer.isBuffer(value)) return value.toString('utf8');
  return String(value);
}

function flag(value: unknown): boolean {
  if (typeof value === 'string') return value === '1' || value.toLowerCase() === 'true' || value === 't';
  return Boolean(Number(value) || value === true);
}

function int(value: unknown): number | null {
  if (value === null || value === undefined || value === '') return null;
  const n = Number(value);
  return Number.isSafeInteger(n) && n > 0 ? n : null;
}

/** jsonValue parses a JSON text column; empty, NULL and `null` read as null. */
function jsonValue(value: unknown, field: string): unknown {
  const s = text(value).trim();
  if (s === '' || s === 'null') return null;
  try {
    return JSON.parse(s);
  } catch {
    throw new ImportProblem(`${field} is not valid JSON (${s.slice(0, 40)})`);
  }
}

function stringList(value: unknown, field: string): string[] {
  const v = jsonValue(value, field);
  if (v === null) return [];
  if (!Array.isArray(v) || v.some((s) => typeof s !== 'string')) throw new ImportProblem(`${field} is not a list of strings`);
  return [...new Set(v as string[])];
}

/** newestPolicy is the policy headscale serves in database mode: its newest live row. */
function newestPolicy(rows: Row[]): Row | undefined {
  return rows.filter((r) => !r.deleted_at && text(r.data).trim() !== '').at(-1);
}

/** convertHeadscale builds the Headway records and the report (see the file comment). */
export function convertHeadscale(snap: HeadscaleSnapshot, opts: ConvertOptions = {}): { dump: StorageDump; report: ImportReport } {
  const now = opts.now ?? new Date();
  const report: ImportReport = { imported: [], skipped: [], warnings: [] };
  const skip = (kind: RecordKind, id: number | null, what: string, reason: string) => report.skipped.push({ kind, id, what, reason });
  const warn = (kind: RecordKind, id: number | null, what: string, reason: string) => report.warnings.push({ kind, id, what, reason });

  // ---- users ----
  const users: User[] = [];
  const userNames = new Set<string>();
  for (const r of snap.users) {
    const id = int(r.id);
    const name = text(r.name).trim();
    const what = name || `(no name)`;
    if (id === null) { skip('user', null, what, `its id ${JSON.stringify(r.id)} is not a positive whole number`); continue; }
    if (r.deleted_at) { skip('user', id, what, 'deleted in headscale'); continue; }
    try {
      let imported = name || (text(r.email).split('@')[0] ?? '') || `user-${id}`;
      if (!name) warn('user', id, what, `has no name; imported as ${imported}`);
      if (userNames.has(imported.toLowerCase())) {
        const taken = imported;
        imported = `${imported}-${id}`;
        warn('user', id, what, `the name ${taken} is taken by another user (names are compared without case in Headway); imported as ${imported}`);
      }
      const providerId = text(r.provider_identifier).trim() || null;
      users.push({
        id, name: imported, displayName: text(r.display_name), email: text(r.email),
        provider: providerId ? (text(r.provider).trim() || 'oidc') : '', providerId,
        profilePicUrl: text(r.profile_pic_url), groups: [],
        createdAt: headscaleTime(r.created_at, 'created_at') ?? now,
      });
      userNames.add(imported.toLowerCase());
      report.imported.push({ kind: 'user', id, what: imported === name ? name : `${name || '(no name)'} as ${imported}` });
    } catch (err) {
      if (!(err instanceof ImportProblem)) throw err;
      skip('user', id, what, err.message);
    }
  }
  const userIds = new Set(users.map((u) => u.id));
  const userLabel = (id: number) => `user ${id}`;

  // ---- pre-auth keys ----
  const preAuthKeys: PreAuthKey[] = [];
  const authPrefixes = new Set<string>();
  const ephemeralKeys = new Set<number>();
  for (const r of snap.preAuthKeys) {
    const id = int(r.id);
    const prefixText = text(r.prefix).trim();
    const plain = text(r.key).trim();
    const what = prefixText ? `hskey-auth-${prefixText}-***` : plain ? `${plain.slice(0, 12)}…` : '(no key)';
    if (id === null) { skip('pre-auth key', null, what, `its id ${JSON.stringify(r.id)} is not a positive whole number`); continue; }
    if (flag(r.ephemeral)) ephemeralKeys.add(id);
    try {
      const tags = stringList(r.tags, 'tags');
      let userId = int(r.user_id);
      if (userId !== null && !userIds.has(userId)) {
        if (!tags.length) throw new ImportProblem(`its ${userLabel(userId)} does not exist (or was not imported)`);
        warn('pre-auth key', id, what, `its ${userLabel(userId)} does not exist; imported as a tag-only key (${tags.join(', ')})`);
        userId = null;
      }
      if (userId === null && !tags.length) throw new ImportProblem('it belongs to no user and carries no tags (its user was deleted)');
      let prefix: string;
      let hash: string;
      if (prefixText && r.hash !== null && r.hash !== undefined && text(r.hash) !== '') {
        prefix = prefixText;
        hash = text(r.hash);
        if (!isBcryptHash(hash)) throw new ImportProblem('its hash is not a bcrypt hash');
      } else if (PLAIN_AUTH_KEY.test(plain)) {
        // Before 0.28 headscale kept the key itself; Headway keeps only a hash of it.
        prefix = plain.slice(0, 12);
        hash = hashSecret(plain.slice(12));
      } else throw new ImportProblem(plain ? 'its key is in a format this import does not know' : 'it has neither a key nor a prefix and hash');
      if (authPrefixes.has(prefix)) throw new ImportProblem(`another pre-auth key has the same prefix ${prefix}`);
      authPrefixes.add(prefix);
      preAuthKeys.push({
        id, userId, reusable: flag(r.reusable), ephemeral: flag(r.ephemeral), used: flag(r.used),
        expiration: headscaleTime(r.expiration, 'expiration'), tags, description: '', prefix, hash,
        createdAt: headscaleTime(r.created_at, 'created_at') ?? now,
      });
      report.imported.push({ kind: 'pre-auth key', id, what: `${what}${userId !== null ? ` of ${userLabel(userId)}` : ''}${tags.length ? ` tags ${tags.join(',')}` : ''}` });
    } catch (err) {
      if (!(err instanceof ImportProblem)) throw err;
      skip('pre-auth key', id, what, err.message);
    }
  }
  const authKeyIds = new Set(preAuthKeys.map((k) => k.id));

  // ---- nodes ----
  const v4 = opts.prefixes ? parsePrefix(opts.prefixes.v4) : undefined;
  const v6 = opts.prefixes ? parsePrefix(opts.prefixes.v6) : undefined;
  const nodes: Node[] = [];
  const seen = { machine: new Set<string>(), node: new Set<string>(), given: new Set<string>(), ip: new Set<string>() };
  for (const r of snap.nodes) {
    const id = int(r.id);
    const hostname = text(r.hostname);
    const given = text(r.given_name).trim();
    const what = `${given || hostname || '(no name)'}${r.ipv4 ? ` (${text(r.ipv4)})` : ''}`;
    if (id === null) { skip('node', null, what, `its id ${JSON.stringify(r.id)} is not a positive whole number`); continue; }
    if (r.deleted_at) { skip('node', id, what, 'deleted in headscale'); continue; }
    try {
      const machineKey = text(r.machine_key).trim();
      const nodeKey = text(r.node_key).trim();
      if (!MACHINE_KEY.test(machineKey)) throw new ImportProblem(`its machine key ${JSON.stringify(machineKey.slice(0, 20))} is not mkey:<64 hex digits>`);
      if (!NODE_KEY.test(nodeKey)) throw new ImportProblem(`its node key ${JSON.stringify(nodeKey.slice(0, 20))} is not nodekey:<64 hex digits>`);
      if (seen.machine.has(machineKey)) throw new ImportProblem('another node has the same machine key');
      if (seen.node.has(nodeKey)) throw new ImportProblem('another node has the same node key');
      const discoText = text(r.disco_key).trim();
      const discoKey = DISCO_KEY.test(discoText) ? discoText : '';
      const tags = stringList(r[snap.nodeTagsColumn], snap.nodeTagsColumn);
      let userId = int(r.user_id);
      if (userId !== null && !userIds.has(userId)) {
        if (!tags.length) throw new ImportProblem(`its ${userLabel(userId)} does not exist (or was not imported)`);
        warn('node', id, what, `its ${userLabel(userId)} does not exist; imported as owned by its tags (${tags.join(', ')})`);
        userId = null;
      }
      if (userId === null && !tags.length) throw new ImportProblem('it belongs to no user and carries no tags');
      const ipv4 = text(r.ipv4).trim() || null;
      const ipv6 = text(r.ipv6).trim() || null;
      if (ipv4 && !isIPv4(ipv4)) throw new ImportProblem(`its IPv4 address ${JSON.stringify(ipv4)} is not one`);
      if (ipv6 && !isIPv6(ipv6)) throw new ImportProblem(`its IPv6 address ${JSON.stringify(ipv6)} is not one`);
      for (const ip of [ipv4, ipv6]) if (ip && seen.ip.has(ip)) throw new ImportProblem(`another node has the address ${ip}`);
      const hostinfoValue = jsonValue(r.host_info, 'host_info');
      const hostinfo = hostinfoValue && typeof hostinfoValue === 'object' && !Array.isArray(hostinfoValue) ? hostinfoValue as Record<string, unknown> : null;
      const routable = hostinfo && Array.isArray(hostinfo.RoutableIPs) ? (hostinfo.RoutableIPs as unknown[]).filter((s): s is string => typeof s === 'string') : [];
      // Before 0.28 headscale kept --advertise-tags only in Hostinfo; 0.28 checks them against tagOwners
      // when it upgrades the database. The import does not guess: it says which tags are not applied.
      const requested = snap.minor < 28 && hostinfo && Array.isArray(hostinfo.RequestTags)
        ? (hostinfo.RequestTags as unknown[]).filter((s): s is string => typeof s === 'string' && !tags.includes(s)) : [];
      if (requested.length) warn('node', id, what, `advertises ${requested.join(', ')}, which headscale ${snap.version} kept only in Hostinfo; they are not applied (set them with headway nodes tag)`);
      let givenName = given || dnsLabel(hostname);
      if (seen.given.has(givenName.toLowerCase())) {
        const taken = givenName;
        const suffix = `-${id}`;
        givenName = givenName.slice(0, 63 - suffix.length) + suffix;
        warn('node', id, what, `the name ${taken} is taken by another node; imported as ${givenName}`);
      }
      const method = text(r.register_method).trim();
      const authKeyId = int(r.auth_key_id);
      if (v4 && ipv4 && !prefixContains(v4, parseIP(ipv4)!)) warn('node', id, what, `its address ${ipv4} is outside prefixes.v4 (${opts.prefixes!.v4}); set prefixes.v4 as headscale had it`);
      if (v6 && ipv6 && !prefixContains(v6, parseIP(ipv6)!)) warn('node', id, what, `its address ${ipv6} is outside prefixes.v6 (${opts.prefixes!.v6}); set prefixes.v6 as headscale had it`);
      const createdAt = headscaleTime(r.created_at, 'created_at') ?? now;
      nodes.push({
        id, machineKey, nodeKey, discoKey, hostname, givenName, userId, tags, ipv4, ipv6,
        endpoints: stringList(r.endpoints, 'endpoints'),
        hostinfo,
        availableRoutes: routable,
        approvedRoutes: stringList(r.approved_routes, 'approved_routes'),
        registerMethod: (REGISTER_METHODS.has(method) ? method : 'cli') as RegisterMethod,
        expiry: headscaleTime(r.expiry, 'expiry'),
        lastSeen: 'last_seen' in r ? headscaleTime(r.last_seen, 'last_seen') : null,
        // headscale derives ephemerality from the key the node registered with.
        ephemeral: authKeyId !== null && ephemeralKeys.has(authKeyId),
        authKeyId: authKeyId !== null && authKeyIds.has(authKeyId) ? authKeyId : null,
        createdAt,
        updatedAt: headscaleTime(r.updated_at, 'updated_at') ?? createdAt,
      });
      seen.machine.add(machineKey);
      seen.node.add(nodeKey);
      seen.given.add(givenName.toLowerCase());
      for (const ip of [ipv4, ipv6]) if (ip) seen.ip.add(ip);
      const owner = userId !== null ? users.find((u) => u.id === userId)!.name : `tags ${tags.join(',')}`;
      report.imported.push({ kind: 'node', id, what: `${givenName} ${[ipv4, ipv6].filter(Boolean).join(' ')} of ${owner}` });
    } catch (err) {
      if (!(err instanceof ImportProblem)) throw err;
      skip('node', id, what, err.message);
    }
  }

  // ---- API keys ----
  const apiKeys: ApiKey[] = [];
  const apiPrefixes = new Set<string>();
  for (const r of snap.apiKeys) {
    const id = int(r.id);
    const prefix = text(r.prefix).trim();
    const what = prefix.length === 12 ? `hskey-api-${prefix}-***` : `${prefix}.***`;
    if (id === null) { skip('API key', null, what, `its id ${JSON.stringify(r.id)} is not a positive whole number`); continue; }
    try {
      if (!prefix) throw new ImportProblem('it has no prefix');
      const hash = text(r.hash);
      if (!isBcryptHash(hash)) throw new ImportProblem('its hash is not a bcrypt hash');
      if (apiPrefixes.has(prefix)) throw new ImportProblem(`another API key has the same prefix ${prefix}`);
      apiPrefixes.add(prefix);
      apiKeys.push({
        id, prefix, hash, expiration: headscaleTime(r.expiration, 'expiration'), lastSeen: headscaleTime(r.last_seen, 'last_seen'),
        createdAt: headscaleTime(r.created_at, 'created_at') ?? now,
      });
      report.imported.push({ kind: 'API key', id, what });
    } catch (err) {
      if (!(err instanceof ImportProblem)) throw err;
      skip('API key', id, what, err.message);
    }
  }

  // ---- policy ----
  let policy: PolicyRecord | null = null;
  const row = newestPolicy(snap.policies);
  if (row) {
    try {
      policy = { text: text(row.data), updatedAt: headscaleTime(row.updated_at, 'updated_at') ?? headscaleTime(row.created_at, 'created_at') ?? now };
      report.imported.push({ kind: 'policy', id: int(row.id), what: `${Buffer.byteLength(policy.text)} bytes (policy.mode database)` });
    } catch (err) {
      if (!(err instanceof ImportProblem)) throw err;
      skip('policy', int(row.id), 'policy', err.message);
    }
  }

  return {
    dump: {
      kind: `headscale ${snap.version}`, schemaVersion: 0, users, preAuthKeys, nodes, apiKeys, pendingRegistrations: [], policy,
    },
    report,
  };
}

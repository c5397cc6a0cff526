import type { StorageCounts, StorageDump } from './ports/storage.js';
import { countDump } from './ports/storage.js';

/*
 * The JSON backup file of `headway db backup --format json` (the default for
 * PostgreSQL and MySQL): a header, then every record of every table as the domain
 * shapes the storage port uses, one record per line. It is database-neutral, so a
 * backup of any database restores into any other (the way to switch databases).
 * Key secrets are in it only as the hashes the database holds.
 */

/** BACKUP_FORMAT marks a Headway JSON backup; a file without it is refused as foreign. */
export const BACKUP_FORMAT = 'headway-backup';
/** BACKUP_FORMAT_VERSION is the layout version this code writes and the newest it reads. */
export const BACKUP_FORMAT_VERSION = 1;

/** BackupHeader is everything in a backup file but the records. */
export interface BackupHeader {
  format: typeof BACKUP_FORMAT;
  formatVersion: number;
  /** createdAt is when the snapshot was read (ISO 8601). */
  createdAt: string;
  /** source names the database family and schema version the records came from. */
  source: { kind: string; schemaVersion: number };
  /** counts are checked on reading: a file whose tables disagree with them is refused. */
  counts: StorageCounts;
}

/** BackupFormatError: the file is not a complete, readable Headway backup; the message says what is wrong. */
export class BackupFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BackupFormatError';
  }
}

/** TABLES lists the record arrays in the order a restore writes them (referenced rows first). */
const TABLES = ['users', 'preAuthKeys', 'nodes', 'apiKeys', 'pendingRegistrations', 'driveGrants', 'oauthClients'] as const;
/** OPTIONAL_TABLES may be missing from a file (a storage without drive grants or OAuth clients, or a backup from before they existed). */
const OPTIONAL_TABLES: ReadonlySet<string> = new Set(['driveGrants', 'oauthClients']);
type TableName = (typeof TABLES)[number];

type FieldType = 'int' | 'int?' | 'string' | 'string?' | 'bool' | 'date' | 'date?' | 'strings' | 'object?' | 'registerMethod' | 'driveEnd' | 'access' | 'dnsSettings';

/** FIELDS is the exact field list of each record kind; a record with more or fewer is refused. */
const FIELDS: Record<TableName | 'policy' | 'dnsSettings', Record<string, FieldType>> = {
  users: { id: 'int', name: 'string', displayName: 'string', email: 'string', profilePicUrl: 'string', provider: 'string', providerId: 'string?', groups: 'strings', createdAt: 'date' },
  preAuthKeys: {
    id: 'int', userId: 'int?', reusable: 'bool', ephemeral: 'bool', used: 'bool', expiration: 'date?',
    tags: 'strings', description: 'string', prefix: 'string', hash: 'string', createdAt: 'date',
  },
  nodes: {
    id: 'int', machineKey: 'string', nodeKey: 'string', discoKey: 'string', hostname: 'string', givenName: 'string',
    userId: 'int?', tags: 'strings', ipv4: 'string?', ipv6: 'string?', endpoints: 'strings', hostinfo: 'object?',
    availableRoutes: 'strings', approvedRoutes: 'strings', registerMethod: 'registerMethod', expiry: 'date?',
    lastSeen: 'date?', ephemeral: 'bool', authKeyId: 'int?', createdAt: 'date', updatedAt: 'date',
  },
  apiKeys: { id: 'int', prefix: 'string', hash: 'string', expiration: 'date?', lastSeen: 'date?', createdAt: 'date' },
  pendingRegistrations: {
    key: 'string', machineKey: 'string', nodeKey: 'string', hostinfo: 'object?', expiresAt: 'date', createdAt: 'date',
  },
  driveGrants: { id: 'int', src: 'driveEnd', dst: 'driveEnd', shares: 'strings', access: 'access', createdAt: 'date' },
  oauthClients: {
    id: 'int', clientId: 'string', hash: 'string', description: 'string', scopes: 'strings', tags: 'strings', createdAt: 'date', lastUsed: 'date?',
  },
  policy: { text: 'string', updatedAt: 'date' },
  dnsSettings: { settings: 'dnsSettings', updatedAt: 'date' },
};

/** ADDED_FIELDS came after the first backups: a record without one reads as this value. */
const ADDED_FIELDS: Partial<Record<TableName, Record<string, unknown>>> = { preAuthKeys: { description: '' } };

const REGISTER_METHODS = new Set(['authkey', 'cli', 'api', 'debug', 'oidc']);
const ISO_DATE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,3})?Z$/;

/** recordJson writes one record with dates as ISO strings and only the fields FIELDS lists (no `damaged`). */
function recordJson(record: object, fields: Record<string, FieldType>): string {
  const out: Record<string, unknown> = {};
  for (const name of Object.keys(fields)) {
    const v = (record as Record<string, unknown>)[name];
    out[name] = v instanceof Date ? v.toISOString() : v ?? null;
  }
  return JSON.stringify(out);
}

/**
 * encodeBackup renders a dump as the JSON backup text: the header fields first, then
 * one table per key with one record per line, so a large backup stays readable and
 * diffable. `now` is the snapshot time written in the header.
 */
export function encodeBackup(dump: StorageDump, now: Date = new Date()): string {
  const header: BackupHeader = {
    format: BACKUP_FORMAT,
    formatVersion: BACKUP_FORMAT_VERSION,
    createdAt: now.toISOString(),
    source: { kind: dump.kind, schemaVersion: dump.schemaVersion },
    counts: countDump(dump),
  };
  const lines = ['{'];
  for (const [k, v] of Object.entries(header)) lines.push(`  ${JSON.stringify(k)}: ${JSON.stringify(v)},`);
  lines.push(`  "policy": ${dump.policy ? recordJson(dump.policy, FIELDS.policy) : 'null'},`);
  if (dump.dnsSettings) lines.push(`  "dnsSettings": ${recordJson(dump.dnsSettings, FIELDS.dnsSettings)},`);
  lines.push('  "tables": {');
  TABLES.forEach((table, i) => {
    const rows = (dump[table] ?? []) as object[];
    const last = i === TABLES.length - 1;
    if (rows.length === 0) {
      lines.push(`    ${JSON.stringify(table)}: []${last ? '' : ','}`);
      return;
    }
    lines.push(`    ${JSON.stringify(table)}: [`);
    rows.forEach((r, j) => lines.push(`      ${recordJson(r, FIELDS[table])}${j === rows.length - 1 ? '' : ','}`));
    lines.push(`    ]${last ? '' : ','}`);
  });
  lines.push('  }', '}', '');
  return lines.join('\n');
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** readField checks one field against its type and returns the domain value (dates become Date). */
function readField(value: unknown, type: FieldType, where: string): unknown {
  const nullable = type.endsWith('?');
  if (nullable && value === null) return null;
  const bad = (expected: string) => new BackupFormatError(`${where}: expected ${expected}${nullable ? ' or null' : ''}, got ${JSON.stringify(value)?.slice(0, 60)}`);
  switch (type) {
    case 'int': case 'int?':
      if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1) throw bad('a positive whole number');
      return value;
    case 'string': case 'string?':
      if (typeof value !== 'string') throw bad('a string');
      return value;
    case 'bool':
      if (typeof value !== 'boolean') throw bad('true or false');
      return value;
    case 'date': case 'date?': {
      if (typeof value !== 'string' || !ISO_DATE.test(value) || Number.isNaN(Date.parse(value))) throw bad('an ISO 8601 UTC time');
      return new Date(value);
    }
    case 'strings':
      if (!Array.isArray(value) || value.some((s) => typeof s !== 'string')) throw bad('an array of strings');
      return value;
    case 'object?':
      if (!isObject(value)) throw bad('an object');
      return value;
    case 'registerMethod':
      if (typeof value !== 'string' || !REGISTER_METHODS.has(value)) throw bad(`one of ${[...REGISTER_METHODS].join(', ')}`);
      return value;
    case 'access':
      if (value !== 'ro' && value !== 'rw') throw bad('"ro" or "rw"');
      return value;
    case 'driveEnd': {
      // A grant end: a user or node by id, a group or tag by name (the drive port's DriveSource).
      if (!isObject(value)) throw bad('a grant end ({kind, id} or {kind, name})');
      const byId = value.kind === 'user' || value.kind === 'node';
      const byName = value.kind === 'group' || value.kind === 'tag';
      const keys = Object.keys(value).sort().join();
      if (byId && keys === 'id,kind' && typeof value.id === 'number' && Number.isSafeInteger(value.id) && value.id > 0) return value;
      if (byName && keys === 'kind,name' && typeof value.name === 'string' && value.name) return value;
      throw bad('a grant end ({kind: user|node, id} or {kind: group|tag, name})');
    }
    case 'dnsSettings': {
      // DNS settings of dns.mode: database: their shape here; addresses and names are checked when they are used.
      const strings = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === 'string');
      const ok = isObject(value) && Object.keys(value).sort().join() === 'magicDns,nameservers,overrideLocalDns,searchDomains,split'
        && strings(value.nameservers) && strings(value.searchDomains) && typeof value.magicDns === 'boolean'
        && typeof value.overrideLocalDns === 'boolean' && isObject(value.split) && Object.values(value.split).every(strings);
      if (!ok) throw bad('DNS settings ({nameservers, split, searchDomains, magicDns, overrideLocalDns})');
      return value;
    }
  }
}

function readRecord(raw: unknown, fields: Record<string, FieldType>, where: string): Record<string, unknown> {
  if (!isObject(raw)) throw new BackupFormatError(`${where}: expected an object`);
  const extra = Object.keys(raw).filter((k) => !(k in fields));
  if (extra.length) throw new BackupFormatError(`${where}: unknown field ${extra.map((k) => JSON.stringify(k)).join(', ')}`);
  const out: Record<string, unknown> = {};
  for (const [name, type] of Object.entries(fields)) {
    if (!(name in raw)) throw new BackupFormatError(`${where}: missing field "${name}"`);
    out[name] = readField(raw[name], type, `${where}.${name}`);
  }
  return out;
}

/**
 * leavesOpen tells whether JSON text ends inside a string or with an object or array still
 * open (brackets inside strings, escapes included, do not count): how a cut file ends.
 */
function leavesOpen(text: string): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: the next character is escaped
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) depth++;
    else if (c === 0x7d || c === 0x5d) depth--;
  }
  return inString || depth > 0;
}

/**
 * decodeBackup parses and checks a JSON backup, refusing with a BackupFormatError that
 * names what is wrong: not JSON or cut short (a truncated file), not a Headway backup,
 * a newer layout, a record with a missing, unknown or mistyped field, or tables that
 * disagree with the header's counts. `label` (the file name) starts every message.
 */
export function decodeBackup(text: string, label = 'backup'): { header: BackupHeader; dump: StorageDump } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    // JSON.parse words a cut file many ways, and a cut can fall just after a record's closing
    // brace, so the test is whether the text leaves an object or array open, not its last character.
    const trimmed = text.trimEnd();
    const cut = trimmed === '' ? 'it is empty'
      : trimmed.startsWith('{') && leavesOpen(trimmed) ? 'the JSON ends early (is the file truncated?)'
        : `it is not valid JSON (${(err as Error).message})`;
    throw new BackupFormatError(`${label} is not a readable Headway backup: ${cut}`);
  }
  if (!isObject(parsed) || parsed.format !== BACKUP_FORMAT) {
    throw new BackupFormatError(`${label} is not a Headway backup (no "format": "${BACKUP_FORMAT}" field)`);
  }
  const version = parsed.formatVersion;
  if (typeof version !== 'number' || !Number.isInteger(version) || version < 1) {
    throw new BackupFormatError(`${label}: formatVersion must be a positive whole number, got ${JSON.stringify(version)}`);
  }
  if (version > BACKUP_FORMAT_VERSION) {
    throw new BackupFormatError(`${label} has backup format version ${version}, newer than this Headway reads (${BACKUP_FORMAT_VERSION}); restore it with a newer Headway`);
  }
  const createdAt = readField(parsed.createdAt, 'date', `${label}: createdAt`) as Date;
  const source = parsed.source;
  if (!isObject(source) || typeof source.kind !== 'string' || typeof source.schemaVersion !== 'number'
    || !Number.isInteger(source.schemaVersion) || source.schemaVersion < 0) {
    throw new BackupFormatError(`${label}: source must be {"kind": string, "schemaVersion": whole number}`);
  }
  const tables = parsed.tables;
  if (!isObject(tables)) throw new BackupFormatError(`${label}: missing "tables"`);
  const unknownTables = Object.keys(tables).filter((k) => !(TABLES as readonly string[]).includes(k));
  if (unknownTables.length) throw new BackupFormatError(`${label}: unknown table ${unknownTables.map((k) => JSON.stringify(k)).join(', ')}`);
  const records = {} as Record<TableName, unknown[]>;
  for (const table of TABLES) {
    const rows = tables[table] === undefined && OPTIONAL_TABLES.has(table) ? [] : tables[table];
    if (!Array.isArray(rows)) throw new BackupFormatError(`${label}: tables.${table} must be an array`);
    const added = ADDED_FIELDS[table];
    records[table] = rows.map((r, i) => readRecord(added && isObject(r) ? { ...added, ...r } : r, FIELDS[table], `${label}: ${table}[${i}]`));
  }
  if (!('policy' in parsed)) throw new BackupFormatError(`${label}: missing "policy" (null when there is none)`);
  const policy = parsed.policy === null ? null : readRecord(parsed.policy, FIELDS.policy, `${label}: policy`);
  // dnsSettings came after the first backups, and is written only when settings are stored.
  const dnsSettings = parsed.dnsSettings === undefined || parsed.dnsSettings === null ? null : readRecord(parsed.dnsSettings, FIELDS.dnsSettings, `${label}: dnsSettings`);
  const dump = {
    kind: source.kind,
    schemaVersion: source.schemaVersion,
    ...records,
    policy,
    dnsSettings,
  } as unknown as StorageDump;
  const counts = countDump(dump);
  const claimed = parsed.counts;
  if (!isObject(claimed)) throw new BackupFormatError(`${label}: missing "counts"`);
  for (const [k, n] of Object.entries(counts)) {
    if (claimed[k] !== n) {
      throw new BackupFormatError(`${label}: the header counts ${JSON.stringify(claimed[k])} ${k} but the file holds ${n} (was it edited or cut?)`);
    }
  }
  return {
    header: { format: BACKUP_FORMAT, formatVersion: version, createdAt: createdAt.toISOString(), source: { kind: source.kind, schemaVersion: source.schemaVersion }, counts },
    dump,
  };
}

/** SQLITE_MAGIC starts every SQLite database file: how `headway db restore` tells a native backup from JSON. */
export const SQLITE_MAGIC = 'SQLite format 3\u0000';

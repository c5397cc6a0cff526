// The JSON backup format: what encodeBackup writes decodeBackup reads back exactly, and
// every way a file can be wrong is refused with a message naming the file and the fault.
import t, { type Test } from 'tap';
import { BACKUP_FORMAT_VERSION, BackupFormatError, decodeBackup, encodeBackup, type StorageDump } from '../src/ports/index.js';

const dump: StorageDump = {
  kind: 'postgres',
  schemaVersion: 1,
  users: [{ id: 3, name: 'alice', displayName: 'Alice Ü 🚀', email: 'a@example.com', profilePicUrl: 'https://example.com/a.png', provider: 'oidc', providerId: 'https://idp.example.com/a', groups: ['eng'], createdAt: new Date('2026-01-02T03:04:05.006Z') }],
  preAuthKeys: [{
    id: 7, userId: 3, reusable: false, ephemeral: true, used: true, expiration: null, tags: ['tag:a'], description: 'ci',
    prefix: 'hskey-auth-abc', hash: '$argon2id$v=19$hash', createdAt: new Date('2026-01-02T03:04:05.007Z'),
  }],
  nodes: [{
    id: 12, machineKey: `mkey:${'a'.repeat(64)}`, nodeKey: `nodekey:${'b'.repeat(64)}`, discoKey: `discokey:${'c'.repeat(64)}`,
    hostname: 'laptop', givenName: 'laptop', userId: 3, tags: [], ipv4: '100.64.0.1', ipv6: 'fd7a:115c:a1e0::1',
    endpoints: ['192.0.2.1:41641'], hostinfo: { OS: 'linux', quote: 'a"b\\c\n' }, availableRoutes: ['10.0.0.0/8'],
    approvedRoutes: [], registerMethod: 'authkey', expiry: new Date('2027-01-01T00:00:00.000Z'), lastSeen: null,
    ephemeral: false, authKeyId: 7, createdAt: new Date('2026-01-02T03:04:05.008Z'), updatedAt: new Date('2026-01-02T03:04:05.009Z'),
  }],
  apiKeys: [{ id: 1, prefix: 'hskey-api-xyz', hash: 'h', expiration: null, lastSeen: new Date('2026-03-01T00:00:00.000Z'), createdAt: new Date('2026-01-01T00:00:00.000Z') }],
  pendingRegistrations: [],
  driveGrants: [
    { id: 4, src: { kind: 'user', id: 3 }, dst: { kind: 'node', id: 12 }, shares: ['docs'], access: 'ro', createdAt: new Date('2026-01-06T00:00:00.000Z') },
    { id: 5, src: { kind: 'group', name: 'group:eng' }, dst: { kind: 'tag', name: 'tag:nas' }, shares: ['*'], access: 'rw', createdAt: new Date('2026-01-07T00:00:00.000Z') },
  ],
  oauthClients: [{
    id: 2, clientId: 'k3x9q2w7e1r5', hash: 'c'.repeat(64), description: 'terraform', scopes: ['auth_keys', 'devices:core:read'],
    tags: ['tag:ci'], createdAt: new Date('2026-01-08T00:00:00.000Z'), lastUsed: null,
  }],
  policy: { text: '// p\n{"acls": []}', updatedAt: new Date('2026-01-05T00:00:00.000Z') },
  dnsSettings: {
    settings: { nameservers: ['9.9.9.9', 'https://dns.example/dns-query'], split: { 'corp.example.com': ['10.0.0.53'] }, searchDomains: ['corp.example.com'], magicDns: true, overrideLocalDns: false },
    updatedAt: new Date('2026-01-09T00:00:00.000Z'),
  },
};

const refuses = (t: Test, text: string, pattern: RegExp, what: string) =>
  t.throws(() => decodeBackup(text, 'b.json'), { name: 'BackupFormatError', message: pattern }, what);

t.test('encode then decode gives back the same records', async (t) => {
  const text = encodeBackup(dump, new Date('2026-06-01T00:00:00.000Z'));
  const { header, dump: back } = decodeBackup(text, 'b.json');
  t.same(back, dump);
  t.same(header, {
    format: 'headway-backup', formatVersion: BACKUP_FORMAT_VERSION, createdAt: '2026-06-01T00:00:00.000Z',
    source: { kind: 'postgres', schemaVersion: 1 },
    counts: { users: 1, nodes: 1, preAuthKeys: 1, apiKeys: 1, pendingRegistrations: 0, policy: 1, driveGrants: 2, oauthClients: 1, dnsSettings: 1 },
  });
  t.ok(text.split('\n').some((l) => l.trim().startsWith('{"id":12,')), 'one record per line');
  const damaged = { ...dump, nodes: [{ ...dump.nodes[0]!, damaged: ['hostinfo'] }] };
  t.notMatch(encodeBackup(damaged), /damaged/, 'the reader-side `damaged` marker is not written');
});

t.test('a truncated, empty or foreign file is refused, naming the fault', async (t) => {
  const text = encodeBackup(dump);
  for (const cut of [0.1, 0.5, 0.95]) {
    refuses(t, text.slice(0, Math.floor(text.length * cut)), /^b\.json is not a readable Headway backup: the JSON ends early \(is the file truncated\?\)$/, `cut at ${cut}`);
  }
  // A cut can land anywhere, just after a record's closing brace or inside a string that holds brackets
  // and escaped quotes (the CI run that found this cut a real backup just after a '}').
  const closers = [...text.matchAll(/[}\]"\\]/g)].map((m) => m.index + 1).filter((i) => i < text.trimEnd().length);
  t.ok(closers.length > 20, `${closers.length} cut points after a closing brace, bracket, quote or backslash`);
  const wrong = closers.filter((i) => {
    try { decodeBackup(text.slice(0, i), 'b.json'); return true; } catch (err) { return !/the JSON ends early/.test((err as Error).message); }
  });
  t.same(wrong, [], 'every cut after a closing character is called truncated');
  refuses(t, `${text.trimEnd()}}`, /it is not valid JSON/, 'a stray closing brace is not called truncated');
  refuses(t, '', /it is empty/, 'empty');
  refuses(t, 'not json at all', /it is not valid JSON/, 'not JSON');
  refuses(t, JSON.stringify({ name: 'left-pad', version: '1.0.0' }), /^b\.json is not a Headway backup/, 'another JSON file');
  refuses(t, '[1,2,3]', /is not a Headway backup/, 'an array');
});

t.test('a newer layout, a mistyped field or edited tables are refused', async (t) => {
  const base = JSON.parse(encodeBackup(dump)) as Record<string, any>;
  const edit = (f: (b: Record<string, any>) => void) => { const b = structuredClone(base); f(b); return JSON.stringify(b); };
  refuses(t, edit((b) => { b.formatVersion = BACKUP_FORMAT_VERSION + 1; }), /newer than this Headway reads/, 'newer format');
  refuses(t, edit((b) => { b.tables.nodes[0].ipv4 = 42; }), /b\.json: nodes\[0\]\.ipv4: expected a string or null, got 42/, 'mistyped field');
  refuses(t, edit((b) => { b.tables.users[0].id = -1; }), /users\[0\]\.id: expected a positive whole number/, 'bad id');
  refuses(t, edit((b) => { b.tables.users[0].createdAt = 'yesterday'; }), /users\[0\]\.createdAt: expected an ISO 8601 UTC time/, 'bad date');
  refuses(t, edit((b) => { delete b.tables.apiKeys[0].hash; }), /apiKeys\[0\]: missing field "hash"/, 'missing field');
  refuses(t, edit((b) => { b.tables.users[0].password = 'x'; }), /users\[0\]: unknown field "password"/, 'unknown field');
  refuses(t, edit((b) => { b.tables.nodes[0].registerMethod = 'magic'; }), /registerMethod: expected one of authkey/, 'unknown register method');
  refuses(t, edit((b) => { b.tables.users.push({ ...b.tables.users[0], id: 4, name: 'bob' }); }), /header counts 1 users but the file holds 2/, 'a row added');
  refuses(t, edit((b) => { b.tables.widgets = []; }), /unknown table "widgets"/, 'unknown table');
  refuses(t, edit((b) => { delete b.policy; }), /missing "policy"/, 'no policy key');
  t.type(new BackupFormatError('x'), Error);
});

// The database drive adapter's Taildrive grants are part of the data a backup must carry.
t.test('drive grants travel in the backup; a file without them reads as none; a bad grant end is refused', async (t) => {
  const { driveGrants: _grants, ...withoutGrants } = dump;
  const text = encodeBackup(withoutGrants as StorageDump);
  const parsed = JSON.parse(text) as { tables: Record<string, unknown> };
  delete parsed.tables.driveGrants;
  t.same(decodeBackup(JSON.stringify(parsed), 'old.json').dump.driveGrants, [], 'a backup from before drive grants restores with none');
  const older = JSON.parse(encodeBackup(dump)) as { tables: Record<string, Array<Record<string, unknown>>>; counts: Record<string, unknown> };
  delete older.tables.oauthClients;
  delete older.counts.oauthClients;
  delete older.tables.preAuthKeys![0]!.description;
  const olderDump = decodeBackup(JSON.stringify(older), 'old.json').dump;
  t.same(olderDump.oauthClients, [], 'a backup from before OAuth clients restores with none');
  t.equal(olderDump.preAuthKeys[0]!.description, '', 'a pre-auth key from before descriptions reads with an empty one');
  const bad = JSON.parse(encodeBackup(dump)) as { tables: { driveGrants: Array<Record<string, unknown>> } };
  bad.tables.driveGrants[0]!.src = { kind: 'user', name: 'alice' };
  refuses(t, JSON.stringify(bad), /driveGrants\[0\]\.src: expected a grant end/, 'a user end must carry an id');
  bad.tables.driveGrants[0]!.src = { kind: 'user', id: 3 };
  bad.tables.driveGrants[0]!.access = 'write';
  refuses(t, JSON.stringify(bad), /driveGrants\[0\]\.access: expected "ro" or "rw"/, 'access is ro or rw');
});

// dns.mode: database keeps the DNS settings in the database: a backup carries them.
t.test('DNS settings travel in the backup; a file without them reads as none; a bad shape is refused', async (t) => {
  const { dnsSettings: _dns, ...without } = dump;
  const text = encodeBackup(without as StorageDump);
  t.notMatch(text, /dnsSettings/, 'nothing is written when none are stored');
  t.equal(decodeBackup(text, 'old.json').dump.dnsSettings, null, 'a backup without them restores with none');
  const bad = JSON.parse(encodeBackup(dump)) as { dnsSettings: { settings: Record<string, unknown> } };
  bad.dnsSettings.settings.nameservers = '9.9.9.9';
  refuses(t, JSON.stringify(bad), /dnsSettings\.settings: expected DNS settings/, 'nameservers must be a list');
  bad.dnsSettings.settings.nameservers = [];
  bad.dnsSettings.settings.extra = true;
  refuses(t, JSON.stringify(bad), /dnsSettings\.settings: expected DNS settings/, 'no unknown field');
  const counted = JSON.parse(encodeBackup(dump)) as { counts: Record<string, unknown> };
  counted.counts.dnsSettings = 0;
  refuses(t, JSON.stringify(counted), /header counts 0 dnsSettings but the file holds 1/, 'the header counts them');
});

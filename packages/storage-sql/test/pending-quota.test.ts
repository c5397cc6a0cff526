// Waiting interactive logins stay within their caps when they arrive all at once, on every database:
// State.createPending over the real adapters (SQLite always, PostgreSQL and MariaDB when their URLs are
// set). Checked in memory before the row is written, the quota would let concurrent logins all pass it
// (one machine x 200 would leave 200 rows).
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { HeadwayError, resolveConfig, silentLogger, State, type StoragePort } from '@headway/core';
import { freshDatabases } from './databases.js';

const databases = freshDatabases(t, 'pending', 10);

async function startState(storage: StoragePort, registration: Record<string, number>): Promise<State> {
  const { config, problems } = resolveConfig({ server_url: 'http://127.0.0.1:9', registration }, { env: {} });
  const bad = problems.filter((p) => p.level !== 'warn');
  if (bad.length) throw new Error(`test config invalid: ${bad.map((p) => `${p.key}: ${p.message}`).join('; ')}`);
  const state = new State(storage, config, silentLogger);
  await state.init();
  return state;
}

const key = (kind: string) => `${kind}:${randomBytes(32).toString('hex')}`;

interface Outcome { stored: number; refused: string[]; failed: string[] }

/** attempt runs the logins at once and sorts out what came of each. */
async function attempt(logins: Array<() => Promise<unknown>>): Promise<Outcome> {
  const results = await Promise.allSettled(logins.map((l) => l()));
  const out: Outcome = { stored: 0, refused: [], failed: [] };
  for (const r of results) {
    if (r.status === 'fulfilled') out.stored++;
    else if (r.reason instanceof HeadwayError && r.reason.code === 'rate_limited') out.refused.push(r.reason.message);
    else out.failed.push(String((r.reason as Error)?.message ?? r.reason));
  }
  return out;
}

async function rows(storage: StoragePort): Promise<number> {
  return (await storage.dump!()).pendingRegistrations.length;
}

for (const db of databases) {
  await t.test(db.name, async (t: Test) => {
    await t.test('one machine, 200 logins at once: one waiting login per node key, three per machine', (t) => db.fresh(async (open) => {
      const storage = await open();
      const state = await startState(storage, {});
      const machineKey = key('mkey');
      const nodeKey = key('nodekey');
      const same = await attempt(Array.from({ length: 200 }, () => () => state.pending.create({ machineKey, nodeKey, hostinfo: null, source: '192.0.2.1' })));
      t.same(same.failed, [], 'no login failed');
      t.equal(same.stored + same.refused.length, 200);
      const afterSame = await rows(storage);
      t.comment(`${db.name}: 200 concurrent logins of one machine and node key left ${afterSame} row(s)`);
      t.equal(afterSame, 1, 'one row: each login replaced the one before');
      const other = await attempt(Array.from({ length: 200 }, () => () => state.pending.create({ machineKey, nodeKey: key('nodekey'), hostinfo: null, source: '192.0.2.1' })));
      t.same(other.failed, [], 'no login failed');
      const afterOther = await rows(storage);
      t.comment(`${db.name}: 200 more with 200 node keys left ${afterOther} row(s)`);
      t.equal(afterOther, 3, 'three rows: the machine keeps its three newest');
      t.equal(state.pending.quota.size(), 3, 'memory agrees');
    }));

    await t.test('one address, 240 logins at once: max_pending_per_address (100) rows, 140 refused', (t) => db.fresh(async (open) => {
      const storage = await open();
      const state = await startState(storage, { max_pending_per_address: 100 });
      const out = await attempt(Array.from({ length: 240 }, () => () => state.pending.create({ machineKey: key('mkey'), nodeKey: key('nodekey'), hostinfo: null, source: '198.51.100.7' })));
      t.same(out.failed, [], 'no login failed otherwise');
      const n = await rows(storage);
      t.comment(`${db.name}: 240 concurrent logins from one address, cap 100: ${n} rows, ${out.refused.length} refused`);
      t.equal(n, 100, 'exactly the cap is stored');
      t.equal(out.stored, 100);
      t.equal(out.refused.length, 140, 'the rest are refused');
      t.ok(out.refused.every((m) => /^too many logins waiting for approval from 198\.51\.100\.7 \(registration\.max_pending_per_address 100\)/.test(m)), 'with the per-address message');
      t.equal(state.pending.quota.size('198.51.100.7'), 100, 'memory agrees');
    }));

    await t.test('12 addresses, 240 logins at once: max_pending (150) rows, 90 refused', (t) => db.fresh(async (open) => {
      const storage = await open();
      const state = await startState(storage, { max_pending: 150 });
      const out = await attempt(Array.from({ length: 240 }, (_, i) => () => state.pending.create({ machineKey: key('mkey'), nodeKey: key('nodekey'), hostinfo: null, source: `203.0.113.${i % 12}` })));
      t.same(out.failed, [], 'no login failed otherwise');
      const n = await rows(storage);
      t.comment(`${db.name}: 240 concurrent logins from 12 addresses, cap 150: ${n} rows, ${out.refused.length} refused`);
      t.equal(n, 150, 'exactly the cap is stored');
      t.equal(out.refused.length, 90, 'the rest are refused');
      t.ok(out.refused.every((m) => /^too many logins waiting for approval \(registration\.max_pending 150\)/.test(m)), 'with the server-wide message');
      t.equal(state.pending.quota.size(), 150, 'memory agrees');
    }));

    // Two SQLite connections in one process would block each other's synchronous driver; SQLite serves one server.
    await t.test('two servers on one database, 120 logins each at once from one address: the database holds the cap for both', { skip: db.name === 'sqlite' ? 'sqlite serves one server' : false }, (t) => db.fresh(async (open) => {
      const a = await startState(await open(), { max_pending_per_address: 100 });
      const b = await startState(await open(), { max_pending_per_address: 100 });
      a.cluster.clustered = true;
      b.cluster.clustered = true;
      const login = (s: State) => () => s.pending.create({ machineKey: key('mkey'), nodeKey: key('nodekey'), hostinfo: null, source: '192.0.2.55' });
      const out = await attempt([...Array.from({ length: 120 }, () => login(a)), ...Array.from({ length: 120 }, () => login(b))]);
      t.same(out.failed, [], 'no login failed otherwise');
      const n = await rows(a.storage);
      t.comment(`${db.name}: two servers, 240 concurrent logins from one address, cap 100: ${n} rows, ${out.refused.length} refused`);
      t.equal(n, 100, 'exactly the cap across both servers');
      t.equal(out.refused.length, 140);
    }));
  });
}

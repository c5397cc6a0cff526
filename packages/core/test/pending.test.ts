// PendingLogins over a real in-memory SQLite database: interactive logins waiting for
// approval, capped by the database in the write's own transaction.
import t from 'tap';
import { type HeadwayError } from '../src/index.js';
import { machineKey, nodeKey, startState } from '@headway/test-support';


// A count in memory taken before the write cannot see the logins still in flight, so logins arriving together
// would all pass it: the database decides, in the write's own transaction.
t.test('create: logins arriving at once stay within one per node key and registration.max_pending_per_address', async (t) => {
  const s = await startState(t, { registration: { max_pending_per_address: 100, max_pending: 150 } });
  const rows = async () => (await s.storage.dump!()).pendingRegistrations.length;
  const outcome = async (logins: Array<Promise<unknown>>) => {
    const settled = await Promise.allSettled(logins);
    const refused = settled.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason as HeadwayError);
    return { stored: settled.length - refused.length, refused };
  };
  const mkey = machineKey();
  const nkey = nodeKey();
  const same = await outcome(Array.from({ length: 200 }, () => s.state.pending.create({ machineKey: mkey, nodeKey: nkey, hostinfo: null, source: '192.0.2.1' })));
  t.equal(same.stored, 200, 'each of 200 logins of one machine and node key is taken, replacing the one before');
  t.equal(await rows(), 1, 'one row is left');
  t.equal(s.state.pending.quota.size(), 1, 'and memory counts one');

  const burst = await outcome(Array.from({ length: 240 }, () => s.state.pending.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: null, source: '198.51.100.7' })));
  t.equal(burst.stored, 100, '100 of 240 logins from one address are stored');
  t.equal(burst.refused.length, 140, 'the rest refused');
  t.ok(burst.refused.every((e) => e.code === 'rate_limited' && /^too many logins waiting for approval from 198\.51\.100\.7 \(registration\.max_pending_per_address 100\)/.test(e.message)),
    'each with the per-address 429 and its message');
  t.equal(await rows(), 101);

  // Rows this State never saw (another instance's, or written before a restart) count too: memory does not decide.
  const now = new Date();
  const elsewhere = { perMachine: 3, perSource: 1000, total: 1000 };
  for (let i = 0; i < 49; i++) {
    await s.storage.pendingRegistrations.putWithinQuota({
      key: `elsewhere${i}`, machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: null, createdAt: now, expiresAt: new Date(now.getTime() + 600_000),
    }, `203.0.113.${i % 7}`, elsewhere, now);
  }
  t.equal(s.state.pending.quota.size(), 101, 'memory knows none of the 49 written elsewhere');
  t.equal(await rows(), 150, 'the database holds max_pending');
  await t.rejects(s.state.pending.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: null, source: '192.0.2.200' }),
    { code: 'rate_limited', message: /^too many logins waiting for approval \(registration\.max_pending 150\)/ }, 'the next login is refused by the overall cap');
  t.equal(await rows(), 150, 'and nothing was written');
});


t.test('create refuses a Hostinfo over registration.max_hostinfo_bytes and stores nothing', async (t) => {
  const s = await startState(t, { registration: { max_hostinfo_bytes: 1024 } });
  await t.rejects(s.state.pending.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: { Hostname: 'x'.repeat(2000) } }),
    { code: 'payload_too_large', field: 'Hostinfo', message: /registration\.max_hostinfo_bytes/ });
  t.equal((await s.storage.dump!()).pendingRegistrations.length, 0);
  t.equal(s.state.pending.quota.size(), 0);
});

t.test('a machine keeps one login per node key, at most three; the quota finds the one it waits on', async (t) => {
  const s = await startState(t);
  const mk = machineKey();
  const keys = [nodeKey(), nodeKey(), nodeKey(), nodeKey()];
  const logins = [];
  for (const nk of keys) logins.push(await s.state.pending.create({ machineKey: mk, nodeKey: nk, hostinfo: null, source: '192.0.2.9' }));
  t.equal(s.state.pending.quota.size('192.0.2.9'), 3, 'the fourth replaced the oldest');
  t.notOk(await s.state.pending.get(logins[0]!.key), 'which is gone from the database');
  t.equal(s.state.pending.quota.keyOf(mk, keys[3]!), logins[3]!.key);
  const again = await s.state.pending.create({ machineKey: mk, nodeKey: keys[3]!, hostinfo: null, source: '192.0.2.9' });
  t.equal(s.state.pending.quota.keyOf(mk, keys[3]!), again.key, 'a new login for the same node key replaces its own');
  t.notOk(await s.state.pending.get(logins[3]!.key));
  t.equal(s.state.pending.quota.size(), 3);
});

t.test('get deletes and hides an expired login; deleteExpired sweeps them all', async (t) => {
  const s = await startState(t);
  const live = await s.state.pending.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: { Hostname: 'pc' } });
  t.same((await s.state.pending.get(live.key))?.hostinfo, { Hostname: 'pc' });
  const past = new Date(Date.now() - 1000);
  const put = (key: string) => s.storage.pendingRegistrations.putWithinQuota({
    key, machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: null, createdAt: new Date(past.getTime() - 60_000), expiresAt: past,
  }, 'elsewhere', { perMachine: 3, perSource: 100, total: 100 }, new Date(past.getTime() - 60_000));
  await put('old1');
  await put('old2');
  t.equal(await s.state.pending.get('old1'), undefined, 'an expired login is not returned');
  t.notOk(await s.storage.pendingRegistrations.get('old1'), 'and deleted');
  t.equal(await s.state.pending.deleteExpired(), 1, 'the sweep deletes the other');
  t.ok(await s.state.pending.get(live.key), 'and keeps the live one');
  await s.state.pending.delete(live.key);
  t.equal(await s.state.pending.get(live.key), undefined);
  t.equal(s.state.pending.quota.size(), 0, 'a deleted login is no longer counted');
});

t.test('clustered: the database alone decides, since other instances\' logins count there', async (t) => {
  const s = await startState(t, { registration: { max_pending_per_address: 1, max_pending: 100 } });
  await s.state.pending.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: null, source: '192.0.2.1' });
  // Memory counts a login the database no longer holds (another instance approved it).
  const [row] = (await s.storage.dump!()).pendingRegistrations;
  await s.storage.pendingRegistrations.delete(row!.key);
  await t.rejects(s.state.pending.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: null, source: '192.0.2.1' }),
    { code: 'rate_limited' }, 'alone, memory refuses first');
  s.state.cluster.clustered = true;
  const admitted = await s.state.pending.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostinfo: null, source: '192.0.2.1' });
  t.ok(await s.storage.pendingRegistrations.get(admitted.key), 'clustered, the database admits it');
});

// Route approval and the primary-route election commit together on every database:
// State, NetworkView, SessionHub, RouteService and HostinfoService run here over the
// real storage adapters (SQLite always, PostgreSQL and MariaDB when their URLs are
// set, mandatory in CI), wrapped to fail on purpose between two writes.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { createLogger, HostinfoService, hujsonEngine, Metrics, NetworkView, resolveConfig, RouteService, silentLogger, State, type Change, type Node, type StoragePort } from '@headway/core';
import { DerpMapSource, DnsConfigSource, Mapper, MapSession, SessionHub } from '@headway/control';
import { faultyStorage, freshDatabases } from './databases.js';

const databases = freshDatabases(t, 'routes', 4);

/** Kernel is the part of the server that approves routes, built as server/compose.ts builds it. */
interface Kernel {
  state: State;
  view: NetworkView;
  hub: SessionHub;
  routes: RouteService;
  hostinfo: HostinfoService;
  changes: Change[];
  /** primariesWhenPublished records, for each node-changed, the primary routes of every node at that moment. */
  primariesWhenPublished: Array<Record<number, string[]>>;
  logs: string[];
  /** setPolicy installs a policy as PolicyService does: compiled once, then published. */
  setPolicy(text: string): void;
}

const POLICY = JSON.stringify({
  acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }],
  autoApprovers: { routes: { '10.1.0.0/16': ['alice@'] } },
});

async function kernel(t: Test, storage: StoragePort, policyText?: string): Promise<Kernel> {
  const { config, problems } = resolveConfig({ server_url: 'http://127.0.0.1:9' }, { env: {} });
  if (problems.some((p) => p.level !== 'warn')) throw new Error('test config invalid');
  const logs: string[] = [];
  const logger = createLogger({ level: 'debug', write: (l) => logs.push(l) });
  const state = new State(storage, config, logger);
  await state.init();
  const view = new NetworkView(state, silentLogger);
  const dns = new DnsConfigSource(config.dns, [config.prefixes.v4, config.prefixes.v6].filter(Boolean), silentLogger, () => undefined);
  const derp = new DerpMapSource(config, silentLogger, () => undefined);
  const mapper = new Mapper(state, config, view, dns, derp);
  let compiled = policyText === undefined ? null : hujsonEngine.compile(policyText, state).policy;
  const hub = new SessionHub(state, mapper, silentLogger, new Metrics(state), () => compiled);
  const routes = new RouteService(state, view, hub, logger, () => compiled);
  const hostinfo = new HostinfoService(state, routes);
  hub.start();
  routes.start();
  t.teardown(() => { routes.stop(); hub.stop(); });
  const changes: Change[] = [];
  const primariesWhenPublished: Kernel['primariesWhenPublished'] = [];
  state.bus.subscribe((c) => {
    changes.push(c);
    if (c.type === 'node-changed') {
      primariesWhenPublished.push(Object.fromEntries(state.nodes.list().map((n) => [n.id, view.primaryRoutes(n.id)])));
    }
  });
  return {
    state, view, hub, routes, hostinfo, changes, primariesWhenPublished, logs,
    setPolicy(text: string) { compiled = hujsonEngine.compile(text, state).policy; state.bus.publish({ type: 'policy-changed' }); },
  };
}

const hex = () => randomBytes(32).toString('hex');

function router(state: State, userId: number, name: string, routes: string[]): Promise<Node> {
  return state.nodes.create({
    machineKey: `mkey:${hex()}`, nodeKey: `nodekey:${hex()}`, hostname: name, userId, registerMethod: 'authkey',
    availableRoutes: routes, hostinfo: { Hostname: name, RoutableIPs: routes },
  });
}

/** settle gives asynchronous follow-ups a moment before a check that nothing more happened. */
const settle = () => new Promise((res) => setTimeout(res, 50));

/** until waits for what a change sets off asynchronously (a guessed sleep is sometimes too short on a loaded machine). */
async function until(what: string, fn: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!fn()) {
    if (Date.now() > end) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((res) => setTimeout(res, 10));
  }
}

for (const db of databases) {
  await t.test(db.name, async (t: Test) => {
    await t.test('auto-approval of several routers is one transaction: a failure on the second router\'s write leaves neither approved', (t) => db.fresh(async (open) => {
      const real = await open();
      const f = faultyStorage(real);
      const k = await kernel(t, f.storage);
      const alice = await k.state.users.create({ name: 'alice' });
      const r1 = await router(k.state, alice.id, 'r1', ['10.1.0.0/24']);
      const r2 = await router(k.state, alice.id, 'r2', ['10.1.0.0/24']);
      await settle();
      k.changes.length = 0;
      f.calls.length = 0;
      f.failAt('nodes.update', 2);
      k.setPolicy(POLICY);
      await until('the auto-approval to fail', () => k.logs.some((l) => l.includes('auto-approval failed')));
      t.same(f.calls, ['nodes.update', 'nodes.update'], 'both routers were written in one transaction, the second write failed');
      for (const n of [r1, r2]) {
        t.same((await real.nodes.get(n.id))?.approvedRoutes, [], `${n.givenName}: nothing approved in the database (the first write rolled back)`);
        t.same(k.state.nodes.get(n.id)?.approvedRoutes, [], `${n.givenName}: nothing approved in memory`);
      }
      t.same(k.changes.filter((c) => c.type === 'node-changed'), [], 'nothing was published');
      t.ok(k.logs.some((l) => l.includes('auto-approval failed') && l.includes('injected failure')), 'the failure was logged');

      // The same change without the fault: both approved in one commit.
      f.calls.length = 0;
      await k.routes.autoApprove(k.state.nodes.list());
      t.same(f.calls, ['nodes.update', 'nodes.update'], 'one transaction for both');
      for (const n of [r1, r2]) t.same((await real.nodes.get(n.id))?.approvedRoutes, ['10.1.0.0/24'], `${n.givenName}: approved in the database`);
      t.equal(k.changes.filter((c) => c.type === 'node-changed').length, 2, 'each router published once, after the commit');
      t.same([k.routes.primaryRoutes(r1.id), k.routes.primaryRoutes(r2.id)], [['10.1.0.0/24'], []], 'one primary per route');
    }));

    await t.test('approve-routes whose write fails stores nothing, elects nothing and publishes nothing', (t) => db.fresh(async (open) => {
      const real = await open();
      const f = faultyStorage(real);
      const k = await kernel(t, f.storage);
      const alice = await k.state.users.create({ name: 'alice' });
      const r1 = await router(k.state, alice.id, 'r1', ['10.9.0.0/24']);
      await settle();
      k.changes.length = 0;
      k.primariesWhenPublished.length = 0;
      f.failAt('nodes.update', 1);
      await t.rejects(k.routes.approve(r1.id, ['10.9.0.0/24']), /injected failure in nodes\.update/);
      t.same((await real.nodes.get(r1.id))?.approvedRoutes, [], 'nothing stored');
      t.same(k.state.nodes.get(r1.id)?.approvedRoutes, [], 'memory unchanged');
      t.same(k.view.primaryRoutes(r1.id), [], 'no primary elected');
      t.same(k.changes, [], 'nothing published');

      const approved = await k.routes.approve(r1.id, ['10.9.0.0/24']);
      t.same(approved.approvedRoutes, ['10.9.0.0/24']);
      t.same((await real.nodes.get(r1.id))?.approvedRoutes, ['10.9.0.0/24'], 'stored');
      t.same(k.primariesWhenPublished.map((p) => p[r1.id]), [['10.9.0.0/24']], 'published once, with r1 already elected');
      await t.rejects(k.routes.approve(r1.id, ['not-a-route']), /routes/, 'a bad route is refused');
      t.same((await real.nodes.get(r1.id))?.approvedRoutes, ['10.9.0.0/24'], 'and changes nothing');
    }));

    await t.test('a Hostinfo update and the auto-approval of the routes it advertises are one write', (t) => db.fresh(async (open) => {
      const real = await open();
      const f = faultyStorage(real);
      const k = await kernel(t, f.storage, POLICY);
      const alice = await k.state.users.create({ name: 'alice' });
      const n = await router(k.state, alice.id, 'r1', []);
      await settle();
      k.primariesWhenPublished.length = 0;
      const report = { Hostinfo: { Hostname: 'r1', RoutableIPs: ['10.1.2.0/24', '10.2.0.0/24'] } } as Parameters<HostinfoService['update']>[1];
      k.changes.length = 0;
      f.failAt('nodes.update', 1);
      await t.rejects(k.hostinfo.update(k.state.nodes.require(n.id), report), /injected failure/);
      const stored = await real.nodes.get(n.id);
      t.same([stored?.availableRoutes, stored?.approvedRoutes], [[], []], 'neither the advertised routes nor their approval were stored');
      t.same(k.state.nodes.get(n.id)?.availableRoutes, [], 'memory unchanged');
      t.same(k.changes, [], 'nothing published');

      f.calls.length = 0;
      await k.hostinfo.update(k.state.nodes.require(n.id), report);
      const after = await real.nodes.get(n.id);
      t.same(after?.availableRoutes, ['10.1.2.0/24', '10.2.0.0/24'], 'advertised routes stored');
      t.same(after?.approvedRoutes, ['10.1.2.0/24'], 'the auto-approved one approved with them');
      t.same(f.calls, ['nodes.update'], 'in one write');
      await settle();
      t.equal(k.changes.filter((c) => c.type === 'node-changed').length, 1, 'published once (no follow-up approval write)');
      t.same(k.primariesWhenPublished[0]?.[n.id], ['10.1.2.0/24'], 'the primary was elected before it was published');
    }));

    await t.test('routes are approved against the policy in force while the SessionHub holds changes back', (t) => db.fresh(async (open) => {
      const storage = await open();
      const k = await kernel(t, storage);
      const alice = await k.state.users.create({ name: 'alice' });
      const r0 = await router(k.state, alice.id, 'r0', ['10.1.0.0/24']);
      const plain = [await router(k.state, alice.id, 'a', []), await router(k.state, alice.id, 'b', [])];
      for (const n of [r0, ...plain]) {
        k.hub.begin(new MapSession(n.id, 106, false, () => undefined, () => undefined), n, () => undefined);
      }
      k.hub.flushNow();
      await settle();
      // A flush under way in slices (one session a slice): the hub holds back every change until it ends, and its
      // view of the tailnet (and of the policy) stays as it began.
      await k.state.nodes.rename(plain[0]!.id, 'renamed');
      k.hub.flushInSlices(0);
      t.ok(k.hub.flushing, 'a flush is under way');
      k.setPolicy(POLICY);
      const r1 = await router(k.state, alice.id, 'r1', ['10.1.7.0/24']);
      await settle();
      t.same(k.state.nodes.get(r0.id)?.approvedRoutes, ['10.1.0.0/24'], 'the policy change approved the router that was there (the view had no policy yet)');
      t.same((await storage.nodes.get(r0.id))?.approvedRoutes, ['10.1.0.0/24'], 'and stored it');
      t.same(r1.approvedRoutes, ['10.1.7.0/24'], 'the router registering meanwhile was approved in its registration');
      t.notOk(k.logs.some((l) => l.includes('policy compile failed')), 'no node was compiled against a view that did not know it');
      while (k.hub.flushing) await new Promise((r) => setImmediate(r));
      t.same(k.view.primaryRoutes(r1.id), ['10.1.7.0/24'], 'once the flush ended, the view knows the new router as primary');
    }));

    await t.test('a registration stores the routes its policy auto-approves in the registration\'s transaction', (t) => db.fresh(async (open) => {
      const storage = await open();
      const k = await kernel(t, storage, POLICY);
      const alice = await k.state.users.create({ name: 'alice' });
      const n = await router(k.state, alice.id, 'r1', ['10.1.5.0/24', '10.3.0.0/24']);
      t.same(n.approvedRoutes, ['10.1.5.0/24'], 'approved on creation');
      t.same((await storage.nodes.get(n.id))?.approvedRoutes, ['10.1.5.0/24'], 'stored with the node');
      await settle();
      t.same(k.changes.map((c) => c.type).filter((x) => x.startsWith('node-')), ['node-added'], 'one change: no follow-up approval write');
    }));
  });
}

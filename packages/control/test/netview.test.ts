// NetworkView unit tests: visibility and filters with and without a policy,
// effective routes, and primary routers (one per route, online first, sticky),
// with a property test comparing the changed set updatePrimaries reports with
// a from-scratch diff of every node's primary routes.
import t from 'tap';
import { ALLOW_ALL } from '@headway/policy';
import { NetworkView, silentLogger, type NewNodeInput } from '@headway/core';
import { hujsonEngine } from '@headway/core';
import { compiled, POLICIES, ROUTES } from './fleet.js';
import { machineKey, nodeKey, Rng, seedsFromEnv, startState } from '@headway/test-support';

function input(hostname: string, userId: number | null, extra: Partial<NewNodeInput> = {}): NewNodeInput {
  return { machineKey: machineKey(), nodeKey: nodeKey(), hostname, userId, registerMethod: 'authkey', ...extra };
}

t.test('without a policy every node sees every other node and the filter allows all', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'alice' });
  const a = await s.state.nodes.create(input('a', u.id, { availableRoutes: ['10.1.0.0/24'] }));
  const b = await s.state.nodes.create(input('b', null, { tags: ['tag:x'] }));
  const view = new NetworkView(s.state, silentLogger);
  view.setPolicy(null);
  t.equal(view.hasPolicy, false);
  t.same(view.peersOf(a.id), [b.id]);
  t.same(view.peersOf(b.id), [a.id]);
  t.same(view.forNode(a.id).packetFilter, ALLOW_ALL);
  t.same(view.effectiveApproved(a), [], 'advertised but not approved');
  const approved = await s.state.nodes.approveRoutes(a.id, ['10.1.0.0/24', '10.9.0.0/24']);
  t.same(view.effectiveApproved(approved), ['10.1.0.0/24'], 'approved and advertised only');
  const c = await s.state.nodes.create(input('c', u.id));
  t.same(view.peersOf(a.id), [b.id], 'results are cached until invalidated');
  view.invalidate();
  t.same(view.peersOf(a.id), [b.id, c.id]);
});

t.test('with a policy, visibility, filters and auto-approved routes follow it', async (t) => {
  const s = await startState(t);
  const alice = await s.state.users.create({ name: 'alice', email: 'alice@example.com' });
  const bob = await s.state.users.create({ name: 'bob', email: 'bob@example.com' });
  const laptop = await s.state.nodes.create(input('laptop', alice.id));
  const web = await s.state.nodes.create(input('web', null, { tags: ['tag:web'], availableRoutes: ['10.1.0.0/24', '10.2.0.0/24'] }));
  const db = await s.state.nodes.create(input('db', null, { tags: ['tag:db'], availableRoutes: ['0.0.0.0/0', '::/0'] }));
  const phone = await s.state.nodes.create(input('phone', bob.id));
  const view = new NetworkView(s.state, silentLogger);
  view.setPolicy(compiled(POLICIES[2]));
  t.equal(view.hasPolicy, true);
  t.same(view.peersOf(laptop.id).sort(), [web.id, db.id], 'alice reaches tag:web, and tag:db as her exit node (autogroup:internet)');
  t.same(view.peersOf(web.id).sort(), [laptop.id, db.id].sort(), 'web is reached by alice and reaches db');
  t.same(view.peersOf(phone.id), [], 'bob is in no rule');
  t.same(view.forNode(phone.id).packetFilter, []);
  const dbFilter = view.forNode(db.id).packetFilter;
  const fromWeb = dbFilter.filter((r) => r.SrcIPs.includes(web.ipv4!));
  t.same(fromWeb.flatMap((r) => (r.DstPorts ?? []).map((p) => [p.IP, p.Ports.First, p.Ports.Last])),
    [[db.ipv4, 5432, 5432], [db.ipv6, 5432, 5432]], 'db accepts web on 5432 only');
  t.ok(dbFilter.some((r) => r.SrcIPs.includes(laptop.ipv4!)), 'and forwards alice to the internet');
  t.notOk(dbFilter.some((r) => r.SrcIPs.includes(phone.ipv4!)), 'bob gets nothing');
  t.same(view.effectiveApproved(web), ['10.1.0.0/24'], 'tag:web auto-approves 10.1.0.0/24, not 10.2.0.0/24');
  t.same(view.effectiveApproved(db).sort(), ['0.0.0.0/0', '::/0'], 'tag:db auto-approves exit routes');
  view.updatePrimaries();
  t.same(view.allowedIPs(db), [`${db.ipv4}/32`, `${db.ipv6}/128`, '0.0.0.0/0', '::/0'], 'an approved exit node carries both exit routes');
  t.same(view.primaryRoutes(db.id), [], 'exit routes have no primary');
  t.same(view.primaryRoutes(web.id), ['10.1.0.0/24']);
  t.same(view.allowedIPs(web), [`${web.ipv4}/32`, `${web.ipv6}/128`, '10.1.0.0/24']);

  view.setPolicy(null);
  t.same(view.effectiveApproved(web), [], 'without the policy nothing is auto-approved');
  t.same(view.peersOf(phone.id).length, 3);
});

t.test('auto-approvals follow the router, its owner and the users, without building the tailnet context', async (t) => {
  const s = await startState(t);
  const alice = await s.state.users.create({ name: 'alice' });
  const bob = await s.state.users.create({ name: 'bob' });
  let router = await s.state.nodes.create(input('router', bob.id, { availableRoutes: ['10.5.0.0/24', '10.6.0.0/24'] }));
  for (let k = 0; k < 20; k++) await s.state.nodes.create(input(`n${k}`, k % 2 ? alice.id : bob.id));
  const view = new NetworkView(s.state, silentLogger);
  view.setPolicy(compiled(`{
    "tagOwners": { "tag:r": ["alice@"] },
    "acls": [{ "action": "accept", "src": ["*"], "dst": ["*:*"] }],
    "autoApprovers": { "routes": { "10.5.0.0/16": ["alice@"], "10.6.0.0/24": ["tag:r"] } },
  }`));
  t.same(view.effectiveApproved(router), [], 'bob owns the router: alice@ approves nothing of his');
  view.updatePrimaries();
  t.same(view.primaryRoutes(router.id), []);

  // Users change: alice becomes carol and bob becomes alice. No invalidate() in between: the view sees the users moved.
  await s.state.users.rename(alice.id, 'carol');
  await s.state.users.rename(bob.id, 'alice');
  t.same(view.effectiveApproved(router), ['10.5.0.0/24'], 'the router\'s owner is now the alice@ the approver names');
  view.updatePrimaries();
  t.same(view.primaryRoutes(router.id), ['10.5.0.0/24']);

  // The router changes (a new object in State): tagged, it is no user's, and tag:r approves the other route.
  router = await s.state.nodes.setTags(router.id, ['tag:r']);
  t.same(view.effectiveApproved(router), ['10.6.0.0/24'], 'tag:r approves 10.6.0.0/24 and no user owns it any more');
  t.same(view.autoApproved({ ...router, approvedRoutes: ['10.5.0.0/24'] }), ['10.6.0.0/24'], 'autoApproved: the policy\'s part alone');
  view.updatePrimaries();
  t.same(view.primaryRoutes(router.id), ['10.6.0.0/24']);
  t.equal(view.contextBuilds, 0, 'approvals and the election never built a context of the whole tailnet');

  // They agree with a full compile of the router.
  t.same(view.forNode(router.id).approvedRoutes.filter((r) => router.availableRoutes.includes(r)), ['10.6.0.0/24']);
  view.setPolicy(null);
  t.same(view.effectiveApproved(router), [], 'without the policy nothing is auto-approved');
});

t.test('an exit node approved for one family only carries no exit route', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'alice' });
  const n = await s.state.nodes.create(input('exit', u.id, { availableRoutes: ['0.0.0.0/0'] }));
  const view = new NetworkView(s.state, silentLogger);
  view.setPolicy(null);
  const approved = await s.state.nodes.approveRoutes(n.id, ['0.0.0.0/0']);
  t.same(approved.approvedRoutes, ['0.0.0.0/0', '::/0'], 'approval covers both');
  view.invalidate();
  t.same(view.allowedIPs(approved), [`${n.ipv4}/32`, `${n.ipv6}/128`], 'but the node advertises only IPv4: no exit route');
});

t.test('primary routers and health: an unhealthy primary hands over to a healthy router, which keeps the route', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'alice' });
  const rs = [];
  for (const name of ['r1', 'r2', 'r3']) {
    const r = await s.state.nodes.create(input(name, u.id, { availableRoutes: ['10.1.0.0/24'] }));
    await s.state.nodes.approveRoutes(r.id, ['10.1.0.0/24']);
    rs.push(r);
  }
  const solo = await s.state.nodes.create(input('solo', u.id, { availableRoutes: ['10.9.0.0/24'] }));
  await s.state.nodes.approveRoutes(solo.id, ['10.9.0.0/24']);
  const [r1, r2, r3] = rs as [typeof solo, typeof solo, typeof solo];
  const view = new NetworkView(s.state, silentLogger);
  view.setPolicy(null);
  for (const n of [r1, r2, solo]) s.state.presence.sessionOpened(n.id);
  view.updatePrimaries();
  t.same(view.haRouters(), [r1.id, r2.id], 'HA routers: the online routers of a route two online routers serve (not solo, not offline r3)');
  t.same(view.primaryRoutes(r1.id), ['10.1.0.0/24']);
  t.equal(view.setHealth(new Map([[r1.id, true], [r2.id, true]])), false, 'healthy verdicts on healthy routers change nothing');
  t.equal(view.setHealth(new Map([[r1.id, false], [r2.id, true]])), true);
  t.same([...view.updatePrimaries()].sort(), [r1.id, r2.id], 'r1 unhealthy: r2 takes the route');
  t.same(view.primaryRoutes(r2.id), ['10.1.0.0/24']);
  t.same(view.haRouters(), [r1.id, r2.id], 'r1 is still probed (it is online)');
  t.equal(view.setHealth(new Map([[r1.id, true]])), true, 'r1 answers again');
  t.same([...view.updatePrimaries()], [], 'r2 keeps the route (no flapping)');
  view.setHealth(new Map([[r2.id, false], [r1.id, false]]));
  t.same([...view.updatePrimaries()], [], 'every online router unhealthy: the primary keeps the route');
  s.state.presence.sessionOpened(r3.id);
  t.same([...view.updatePrimaries()].sort(), [r2.id, r3.id], 'a healthy router comes online: it takes the route');
  await s.state.presence.sessionClosed(r1.id);
  t.equal(view.setHealth(new Map([[r1.id, false]])), true, 'a verdict against an offline router clears it instead');
  t.equal(view.isHealthy(r1.id), true);
});

t.test('primary routers: online first, sticky while online, failover when offline', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'alice' });
  const r1 = await s.state.nodes.create(input('r1', u.id, { availableRoutes: ['10.1.0.0/24'] }));
  const r2 = await s.state.nodes.create(input('r2', u.id, { availableRoutes: ['10.1.0.0/24'] }));
  await s.state.nodes.approveRoutes(r1.id, ['10.1.0.0/24']);
  await s.state.nodes.approveRoutes(r2.id, ['10.1.0.0/24']);
  const view = new NetworkView(s.state, silentLogger);
  view.setPolicy(null);
  t.same([...view.updatePrimaries()], [r1.id], 'nobody online: the first router, r1');
  s.state.presence.sessionOpened(r2.id);
  t.same([...view.updatePrimaries()].sort(), [r1.id, r2.id], 'r2 comes online: it takes over from offline r1');
  t.same(view.primaryRoutes(r2.id), ['10.1.0.0/24']);
  s.state.presence.sessionOpened(r1.id);
  t.same([...view.updatePrimaries()], [], 'r1 online again: r2 stays primary (no flapping)');
  await s.state.presence.sessionClosed(r2.id);
  t.same([...view.updatePrimaries()].sort(), [r1.id, r2.id], 'r2 offline: r1 takes over');
  t.same(view.primaryRoutes(r1.id), ['10.1.0.0/24']);
  t.same(view.primaryRoutes(r2.id), []);
  await s.state.presence.sessionClosed(r1.id);
  t.same([...view.updatePrimaries()], [], 'all offline: the last primary keeps the route');
  await s.state.nodes.delete(r1.id);
  view.invalidate();
  t.same([...view.updatePrimaries()].sort(), [r1.id, r2.id], 'the primary deleted: r2 again');
  t.same(view.primaryRoutes(r2.id), ['10.1.0.0/24']);
});

t.test('property: updatePrimaries reports exactly the nodes whose primary routes changed, and keeps the invariants', async (t) => {
  for (const seed of seedsFromEnv(5)) {
    const s = await startState(t);
    const u = await s.state.users.create({ name: 'alice', email: 'alice@example.com' });
    const rng = new Rng(seed);
    const view = new NetworkView(s.state, silentLogger);
    const policy = rng.pick([undefined, POLICIES[2]]);
    view.setPolicy(compiled(policy));
    let before = new Map<number, string[]>();
    const primaryOf = new Map<string, number>();
    const ops: string[] = [];
    let failure: string | undefined;
    for (let step = 0; step < 80 && !failure; step++) {
      const nodes = s.state.nodes.list();
      const roll = rng.int(nodes.length < 2 ? 2 : 7);
      const n = nodes.length ? rng.pick(nodes) : undefined;
      if (roll <= 1 || !n) {
        const tagged = rng.chance(0.4);
        const made = await s.state.nodes.create(input('r', tagged ? null : u.id, { tags: tagged ? ['tag:web'] : [], availableRoutes: rng.subset(ROUTES) }));
        ops.push(`join ${made.id}`);
      } else if (roll === 2) { await s.state.nodes.delete(n.id); ops.push(`delete ${n.id}`); }
      else if (roll === 3) { const r = rng.subset(ROUTES); await s.state.nodes.approveRoutes(n.id, r); ops.push(`approve ${n.id} ${r}`); }
      else if (roll === 4) { const r = rng.subset(ROUTES); await s.state.nodes.update(n.id, { availableRoutes: r }); ops.push(`advertise ${n.id} ${r}`); }
      else if (s.state.presence.isOnline(n.id)) { await s.state.presence.sessionClosed(n.id); ops.push(`offline ${n.id}`); }
      else { s.state.presence.sessionOpened(n.id); ops.push(`online ${n.id}`); }
      view.invalidate();
      const changed = view.updatePrimaries();
      const after = new Map<number, string[]>();
      for (const node of s.state.nodes.list()) after.set(node.id, view.primaryRoutes(node.id));
      const problems: string[] = [];
      // The changed set against a from-scratch diff.
      const diff = new Set<number>();
      for (const id of new Set([...before.keys(), ...after.keys()])) {
        if ((before.get(id) ?? []).join() !== (after.get(id) ?? []).join()) diff.add(id);
      }
      const reported = [...changed].sort((a, b) => a - b);
      if (reported.join() !== [...diff].sort((a, b) => a - b).join()) problems.push(`changed ${reported}, expected ${[...diff].sort((a, b) => a - b)}`);
      // One primary per route that has candidates, online when a candidate is, kept while it stays online.
      const candidates = new Map<string, number[]>();
      for (const node of s.state.nodes.list()) {
        for (const r of view.effectiveApproved(node)) if (r !== '0.0.0.0/0' && r !== '::/0') (candidates.get(r) ?? candidates.set(r, []).get(r)!).push(node.id);
      }
      for (const [route, ids] of candidates) {
        const holders = [...after].filter(([, rs]) => rs.includes(route)).map(([id]) => id);
        if (holders.length !== 1) { problems.push(`${route} has primaries ${holders}`); continue; }
        const p = holders[0]!;
        if (!ids.includes(p)) problems.push(`${route} primary ${p} is not a candidate`);
        if (!s.state.presence.isOnline(p) && ids.some((id) => s.state.presence.isOnline(id))) problems.push(`${route} primary ${p} offline while a candidate is online`);
        const prev = primaryOf.get(route);
        if (prev !== undefined && prev !== p && ids.includes(prev) && s.state.presence.isOnline(prev)) problems.push(`${route} moved from online ${prev} to ${p}`);
        primaryOf.set(route, p);
      }
      for (const [route] of primaryOf) if (!candidates.has(route)) primaryOf.delete(route);
      for (const [id, rs] of after) for (const r of rs) if (!candidates.has(r)) problems.push(`node ${id} is primary for ${r}, which nobody may route`);
      if (problems.length) failure = `seed ${seed} (replay: HEADWAY_TEST_SEED=${seed}), policy ${policy ? 'tags' : 'none'}, step ${step + 1}: ${problems.join('; ')}; ops ${ops.slice(-12).join(', ')}`;
      before = after;
    }
    if (failure) t.fail(failure);
    else t.pass(`seed ${seed}: 80 steps hold`);
  }
});

t.test('the view takes over the context the policy was checked with, only for that policy on the same tailnet', async (t) => {
  const s = await startState(t);
  const alice = await s.state.users.create({ name: 'alice', email: 'alice@example.com' });
  const bob = await s.state.users.create({ name: 'bob', email: 'bob@example.com' });
  await s.state.nodes.create(input('laptop', alice.id));
  await s.state.nodes.create(input('web', null, { tags: ['tag:web'], availableRoutes: ['10.1.0.0/24'] }));
  await s.state.nodes.create(input('db', null, { tags: ['tag:db'], availableRoutes: ['0.0.0.0/0', '::/0'] }));
  await s.state.nodes.create(input('phone', bob.id));
  const text = POLICIES[2]!;
  // What a view built from scratch compiles: the adopted context must give the same.
  const everything = (v: NetworkView) => s.state.nodes.list().map((n) => JSON.stringify({ ...v.forNode(n.id), peers: v.forNode(n.id).peers }));
  const fresh = () => { const v = new NetworkView(s.state, silentLogger); v.setPolicy(compiled(text)); return everything(v); };

  // PolicyService checks the text (warnings build a context of the whole tailnet), then installs the result.
  const checked = hujsonEngine.check!(text, s.state);
  const view = new NetworkView(s.state, silentLogger);
  view.setPolicy(checked.policy!);
  const got = everything(view);
  t.equal(view.contextsAdopted, 1, 'the checked context was taken over');
  t.equal(view.contextBuilds, 0, 'and none built');
  t.same(got, fresh(), 'every node compiles as in a view that built its own');

  // Once only: the next install of the same policy builds its own.
  view.setPolicy(checked.policy!);
  everything(view);
  t.equal(view.contextBuilds, 1, 'an offer is handed out once');

  // The tailnet changed between the check and the install: not taken.
  const again = hujsonEngine.check!(text, s.state);
  await s.state.nodes.create(input('tablet', alice.id));
  const later = new NetworkView(s.state, silentLogger);
  later.setPolicy(again.policy!);
  const now = everything(later);
  t.equal(later.contextsAdopted, 0, 'a device joined since the check: not taken');
  t.same(now, fresh(), 'and the view compiles the tailnet as it is');

  // Another policy object (even of the same text) does not take it.
  hujsonEngine.check!(text, s.state);
  const other = new NetworkView(s.state, silentLogger);
  other.setPolicy(compiled(text));
  everything(other);
  t.equal(other.contextsAdopted, 0, 'a different policy object builds its own');
});

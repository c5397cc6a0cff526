// The kernel as the composition root assembles it: one container builds every
// service once, the compiled policy has one owner (PolicyService parses each
// change once and everyone else uses that result), and API reads of routes come
// from the route service, with a real device advertising routes.
import t from 'tap';
import type { Policy } from '@headway/policy';
import { hujsonEngine, type NetworkView, type PolicyEngine } from '@headway/core';
import { TestDevice } from '@headway/testkit';
import { adminFetch, startTestServer, type TestServer } from '../src/server.js';

/** countingEngine is the real engine, counting every parse and keeping each compiled policy it returned. */
function countingEngine(): { engine: PolicyEngine; parses: () => number; compiled: Policy[] } {
  let parses = 0;
  const compiled: Policy[] = [];
  const engine: PolicyEngine = {
    compile(text, state) {
      parses++;
      const r = hujsonEngine.compile(text, state);
      compiled.push(r.policy);
      return r;
    },
    check(text, state) {
      parses++;
      const r = hujsonEngine.check!(text, state);
      if (r.policy) compiled.push(r.policy);
      return r;
    },
  };
  return { engine, parses: () => parses, compiled };
}

async function join(s: TestServer, hostname: string, key: string, routes?: string[]): Promise<TestDevice> {
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  await d.connect();
  const r = await d.register({ authKey: key, routes });
  if (r.Error) throw new Error(`register ${hostname}: ${r.Error}`);
  await d.startMap({ stream: true });
  return d;
}

async function until(what: string, ok: () => boolean, ms = 5000): Promise<void> {
  const start = Date.now();
  while (!ok()) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((res) => setTimeout(res, 25));
  }
}

const policy = (routes: string[]) => JSON.stringify({
  acls: [{ action: 'accept', src: ['*'], dst: ['*:*'] }],
  tagOwners: { 'tag:web': ['alice@'] },
  // tag:web too: once tagged, the router is owned by its tag, not by alice.
  autoApprovers: { routes: Object.fromEntries(routes.map((r) => [r, ['alice@', 'tag:web']])) },
});

t.test('policy parsed up to three times per change: PolicyService parses once and the view, auto-approval, tag checks and the API use its result', async (t) => {
  const counting = countingEngine();
  const s = await startTestServer({ policy: { mode: 'database' } }, { engine: counting.engine });
  t.teardown(() => s.stop());
  const view = s.container.resolve<NetworkView>('networkView');
  const alice = await s.state.users.create({ name: 'alice' });
  const apiKey = (await s.state.keys.createApiKey(null)).secret;
  const { secret } = await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
  const router = await join(s, 'router', secret, ['10.50.1.0/24', '10.60.0.0/24']);
  t.teardown(() => router.close());
  const id = s.state.nodes.byNodeKey(router.nodeKeyText)!.id;
  t.equal(counting.parses(), 0, 'no policy yet, nothing parsed');

  const put = await adminFetch(s, apiKey, 'PUT', '/api/v1/policy', { policy: policy(['10.50.0.0/16']) });
  t.equal(put.status, 200);
  await until('the auto-approval', () => s.state.nodes.get(id)!.approvedRoutes.includes('10.50.1.0/24'));
  t.equal(counting.parses(), 1, 'one parse for the change (set, map sessions, auto-approval)');
  t.equal(s.policy.compiled, counting.compiled[0], 'PolicyService holds the compiled result');
  t.equal(view.compiledPolicy, counting.compiled[0], 'the network view uses that same object');
  t.same(s.state.nodes.get(id)!.approvedRoutes, ['10.50.1.0/24'], 'auto-approval used it');

  const tagged = await adminFetch(s, apiKey, 'POST', `/api/v1/node/${id}/tags`, { tags: ['tag:web'] });
  t.equal(tagged.status, 200, 'a tag the policy defines is accepted');
  const refused = await adminFetch(s, apiKey, 'POST', `/api/v1/node/${id}/tags`, { tags: ['tag:nope'] });
  t.equal(refused.status, 400, 'a tag it does not define is refused');
  t.match(refused.json.detail, /tag:nope/);
  t.equal((await adminFetch(s, apiKey, 'POST', `/api/v1/node/${id}/tags`, { tags: [] })).status, 400, 'a tagged node keeps a tag');
  const nodes = await adminFetch(s, apiKey, 'GET', '/api/v1/node');
  t.equal(nodes.status, 200);
  t.equal(counting.parses(), 1, 'tag checks and node reads parse nothing');

  const checked = await adminFetch(s, apiKey, 'POST', '/api/v1/policy/check', { policy: policy(['10.60.0.0/16']) });
  t.equal(checked.status, 200);
  t.equal(counting.parses(), 2, 'a policy check parses its text once');
  t.equal(view.compiledPolicy, counting.compiled[0], 'and changes nothing in force');

  const second = await adminFetch(s, apiKey, 'PUT', '/api/v1/policy', { policy: policy(['10.50.0.0/16', '10.60.0.0/16']) });
  t.equal(second.status, 200);
  await until('the second auto-approval', () => s.state.nodes.get(id)!.approvedRoutes.includes('10.60.0.0/24'));
  t.equal(counting.parses(), 3, 'the second change: one more parse');
  t.equal(view.compiledPolicy, counting.compiled[2], 'the view holds the new compiled policy');
  t.equal(await s.policy.reload(), true);
  t.equal(counting.parses(), 3, 'a reload of unchanged text parses nothing');

  const bad = await adminFetch(s, apiKey, 'PUT', '/api/v1/policy', { policy: '{"acls": [' });
  t.equal(bad.status, 400, 'an invalid policy is refused');
  t.equal(counting.parses(), 4, 'after one parse');
  t.equal(view.compiledPolicy, counting.compiled[2], 'and the policy in force stays');
});

t.test('the composition root builds each service once; API reads of primary routes come from the route service', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const c = s.container;
  t.equal(c.resolve('state'), s.state);
  t.equal(c.resolve('policyService'), s.policy);
  t.equal(c.resolve('controlServer'), s.control);
  t.equal(c.resolve('sessionHub'), s.control.hub, 'the control server uses the container\'s session hub');
  t.equal(c.resolve('mapper'), s.control.mapper);
  t.equal(c.resolve('networkView'), s.control.mapper.view, 'one network view');
  t.equal(c.resolve('registrar'), s.registrar);
  t.equal(c.resolve('routeService'), s.routes);
  t.equal(c.resolve('relay'), s.relay);
  t.equal(c.resolve('derpMap'), s.derpMap);
  t.equal(c.resolve('metrics'), s.metrics);
  t.equal(c.resolve('storage'), s.storage);

  const alice = await s.state.users.create({ name: 'alice' });
  const apiKey = (await s.state.keys.createApiKey(null)).secret;
  const { secret } = await s.state.keys.createPreAuthKey({ userId: alice.id, reusable: true });
  const r1 = await join(s, 'r1', secret, ['10.9.0.0/24']);
  const r2 = await join(s, 'r2', secret, ['10.9.0.0/24']);
  t.teardown(() => { r1.close(); r2.close(); });
  const [id1, id2] = [r1, r2].map((d) => s.state.nodes.byNodeKey(d.nodeKeyText)!.id) as [number, number];
  for (const id of [id1, id2]) {
    const res = await adminFetch(s, apiKey, 'POST', `/api/v1/node/${id}/approve_routes`, { routes: ['10.9.0.0/24'] });
    t.equal(res.status, 200);
  }
  const list = await adminFetch(s, apiKey, 'GET', '/api/v1/node');
  const subnet = Object.fromEntries((list.json.nodes as Array<{ id: string | number; subnetRoutes: string[] }>).map((n) => [Number(n.id), n.subnetRoutes]));
  t.same([subnet[id1], subnet[id2]], [['10.9.0.0/24'], []], 'the first router is primary, the second a standby');
  t.same([s.routes.primaryRoutes(id1), s.routes.primaryRoutes(id2)], [['10.9.0.0/24'], []], 'as the route service says');
  await until('the standby\'s map to name the primary', () => (r2.netmap.peers.get(id1)?.PrimaryRoutes ?? []).includes('10.9.0.0/24'));
  t.same(r2.netmap.peers.get(id1)?.PrimaryRoutes, ['10.9.0.0/24'], 'the standby\'s map names the primary');
});

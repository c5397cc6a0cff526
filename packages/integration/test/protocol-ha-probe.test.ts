// HA subnet routers probed over the real protocol: virtual devices answer the server's PingRequests with HEAD
// /machine/ping-response as tailscaled does; one stops answering while its map stream stays open, and the route
// moves to the other router in every peer's netmap. The prober's rounds are driven by hand (the interval is an
// hour), so the test decides when a round's timeout has passed instead of waiting for it.
import t from 'tap';
import { TestDevice } from '@headway/testkit';
import { startTestServer, type TestServer } from '../src/server.js';
import { until } from '../src/until.js';

const ROUTE = '10.77.0.0/24';

async function join(s: TestServer, hostname: string, key: string, routes?: string[]): Promise<{ d: TestDevice; id: number }> {
  const d = new TestDevice({ serverUrl: s.urls.http, hostname });
  await d.connect();
  const r = await d.register({ authKey: key, routes });
  if (r.Error) throw new Error(`register ${hostname}: ${r.Error}`);
  await d.startMap({ stream: true });
  return { d, id: s.state.nodes.byNodeKey(d.nodeKeyText)!.id };
}

const primaryIn = (d: TestDevice, id: number) => (d.netmap.peers.get(id)?.PrimaryRoutes ?? []).includes(ROUTE);

t.test('a router that stays connected but stops answering pings loses its route to the other router', async (t) => {
  const s = await startTestServer({ node: { routes: { ha: { probe_interval: '1h', probe_timeout: '59m' } } } });
  t.teardown(() => s.stop());
  const prober = s.control.haProber!;
  t.ok(prober, 'probing is on');
  const user = await s.state.users.create({ name: 'alice' });
  const { secret } = await s.state.keys.createPreAuthKey({ userId: user.id, reusable: true });
  const r1 = await join(s, 'router-1', secret, [ROUTE]);
  const r2 = await join(s, 'router-2', secret, [ROUTE]);
  const laptop = await join(s, 'laptop', secret);
  t.teardown(() => Promise.all([r1.d.close(), r2.d.close(), laptop.d.close()]));
  await s.routes.approve(r1.id, [ROUTE]);
  await s.routes.approve(r2.id, [ROUTE]);
  await laptop.d.waitFor((nm) => primaryIn(laptop.d, r1.id) && nm.peers.has(r2.id), 5000);
  const r1Urls: string[] = [];
  r1.d.on('update', (msg: { PingRequest?: { URL: string } }) => { if (msg.PingRequest) r1Urls.push(msg.PingRequest.URL); });

  // Round 1: both answer; the round is decided as the last answer comes in, and nothing moves.
  prober.round();
  await until('both routers answer round 1', () => r1.d.pingAnswers.length === 1 && r2.d.pingAnswers.length === 1 && prober.outstanding === 0);
  t.same([r1.d.pingAnswers, r2.d.pingAnswers], [[200], [200]], 'HEAD /machine/ping-response answered 200');
  t.same(s.routes.primaryRoutes(r1.id), [ROUTE], 'answers keep the primary');
  t.match(r1Urls[0], new RegExp(`^${s.urls.http}/machine/ping-response\\?id=[\\w-]{16,}$`), 'the PingRequest URL is the server URL\'s answer path with an id');

  // Round 2: router-1 stays connected and is silent; the round's timeout passes.
  r1.d.answerPings = false;
  prober.round();
  await until('router-2 answers round 2 and router-1 got its ping', () => r2.d.pingAnswers.length === 2 && r1Urls.length === 2);
  t.equal(prober.outstanding, 1, 'router-1 has not answered');
  prober.decide();
  t.ok(s.state.presence.isOnline(r1.id), 'router-1 is still online');
  t.same(s.routes.primaryRoutes(r2.id), [ROUTE], 'the route moved to router-2');
  t.same(s.routes.primaryRoutes(r1.id), []);
  await laptop.d.waitFor(() => primaryIn(laptop.d, r2.id) && !primaryIn(laptop.d, r1.id), 5000);
  t.notOk(laptop.d.netmap.peers.get(r1.id)!.AllowedIPs!.includes(ROUTE), 'the peer routes the subnet to router-2 only');
  t.ok(laptop.d.netmap.peers.get(r2.id)!.AllowedIPs!.includes(ROUTE));

  // The late answer of the ended round, an unknown id, no id and the wrong method.
  const late = await fetch(r1Urls[1]!, { method: 'HEAD' });
  t.equal(late.status, 404, 'a late answer is 404');
  t.equal((await fetch(`${s.urls.http}/machine/ping-response?id=nope`, { method: 'HEAD' })).status, 404, 'an unknown id is 404');
  t.equal((await fetch(`${s.urls.http}/machine/ping-response`, { method: 'HEAD' })).status, 400, 'no id is 400');
  const get = await fetch(`${s.urls.http}/machine/ping-response?id=nope`);
  t.equal(get.status, 405, 'GET is 405, as headscale answers it');
  t.match(get.headers.get('allow'), /HEAD/);
  t.same(s.routes.primaryRoutes(r2.id), [ROUTE], 'none of them moved anything');

  // Round 3: router-1 answers again: healthy, but router-2 keeps the route.
  r1.d.answerPings = true;
  prober.round();
  await until('both answer round 3', () => prober.outstanding === 0 && r1.d.pingAnswers.length === 2);
  t.same(s.routes.primaryRoutes(r2.id), [ROUTE], 'the route stays with router-2');
  // router-2 leaves: the healthy router-1 takes the route back through the disconnect path.
  await r2.d.close();
  await laptop.d.waitFor(() => primaryIn(laptop.d, r1.id), 5000);
  t.pass('router-2 gone: router-1, healthy again, has the route');

  const metrics = await (await fetch(`${s.urls.metrics}/metrics`)).text();
  t.match(metrics, /headway_ha_probes_total\{result="sent"\} 6/);
  t.match(metrics, /headway_ha_probes_total\{result="answered"\} 5/);
  t.match(metrics, /headway_ha_probes_total\{result="missed"\} 1/);
});

t.test('probe_interval 0 turns probing off: no PingRequest, and answers are 404', async (t) => {
  const s = await startTestServer({ node: { routes: { ha: { probe_interval: 0 } } } });
  t.teardown(() => s.stop());
  t.equal(s.control.haProber, undefined);
  t.equal((await fetch(`${s.urls.http}/machine/ping-response?id=x`, { method: 'HEAD' })).status, 404);
});

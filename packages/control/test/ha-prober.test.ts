import t, { type Test } from 'tap';
import { silentLogger, type PingRequest } from '@headway/core';
import { HaProber } from '../src/ha-prober.js';
import { FakeClock } from './fake-clock.js';

/**
 * A tailnet of two routers of one route, modelled as the election sees it: sessions by node, the verdicts the
 * prober applies, and a primary that moves off an unhealthy router to a healthy one and stays there.
 */
function rig(t: Test, opts: { routers?: number[] } = {}) {
  const clock = new FakeClock();
  const routers = opts.routers ?? [1, 2];
  const sessions = new Map<number, object>(routers.map((id) => [id, { id }]));
  const sent: { node: number; target: object; ping: PingRequest }[] = [];
  const applied: Map<number, boolean>[] = [];
  const unhealthy = new Set<number>();
  let primary = routers[0]!;
  let n = 0;
  const prober = new HaProber({
    clock, logger: silentLogger, intervalMs: 10_000, timeoutMs: 5000,
    pingUrl: (id) => `http://hw.test/machine/ping-response?id=${id}`,
    routers: () => [...sessions.keys()],
    session: (id) => sessions.get(id),
    send: (target, ping) => sent.push({ node: (target as { id: number }).id, target, ping }),
    apply: (v) => {
      applied.push(new Map(v));
      for (const [id, ok] of v) { if (ok) unhealthy.delete(id); else unhealthy.add(id); }
      if (unhealthy.has(primary)) primary = [...sessions.keys()].find((id) => !unhealthy.has(id)) ?? primary;
    },
    newId: () => `p${++n}`,
  });
  const idOf = (ping: PingRequest) => new URL(ping.URL).searchParams.get('id')!;
  /** answerAll answers the round's pings of these nodes. */
  const answer = (nodes: number[], from = sent.length - sessions.size) => {
    for (const s of sent.slice(from)) if (nodes.includes(s.node)) t.ok(prober.answer(idOf(s.ping)), `node ${s.node} answer accepted`);
  };
  const verdicts = () => [...applied.at(-1) ?? []].sort((a, b) => a[0] - b[0]);
  return { verdicts, clock, sessions, sent, applied, prober, answer, idOf, primary: () => primary, unhealthy };
}

t.test('each round pings every HA router once, at the interval, on its own URL', async (t) => {
  const r = rig(t);
  r.prober.start();
  r.clock.advance(9_999);
  t.equal(r.sent.length, 0, 'nothing before the interval');
  r.clock.advance(1);
  t.same(r.sent.map((s) => s.node), [1, 2]);
  t.not(r.idOf(r.sent[0]!.ping), r.idOf(r.sent[1]!.ping), 'a unique id per ping');
  t.match(r.sent[0]!.ping.URL, /^http:\/\/hw\.test\/machine\/ping-response\?id=/);
  r.answer([1, 2]);
  r.clock.advance(10_000);
  t.equal(r.sent.length, 4, 'the next round');
  r.prober.stop();
  r.clock.advance(50_000);
  t.equal(r.sent.length, 4, 'stopped: no more rounds');
  t.equal(r.clock.pending, 0, 'no timer left');
});

t.test('answers in time keep the primary; each id is accepted once and only in its round', async (t) => {
  const r = rig(t);
  r.prober.start();
  for (let round = 0; round < 3; round++) {
    r.clock.advance(round ? 5_000 : 10_000); // to the round (the last one's timeout was 5 s after it)
    r.clock.advance(4_999);
    r.answer([1, 2]);
    r.clock.advance(1);
  }
  t.equal(r.primary(), 1);
  t.same(r.applied.map((v) => [...v]), [[[1, true], [2, true]], [[1, true], [2, true]], [[1, true], [2, true]]], 'every round: both healthy');
  const last = r.sent.at(-1)!;
  t.notOk(r.prober.answer(r.idOf(last.ping)), 'a replayed answer is refused');
  t.notOk(r.prober.answer('never-sent'), 'an unknown id is refused');
  t.notOk(r.prober.answer(''), 'an empty id is refused');
  t.same(r.prober.counts, { sent: 6, answered: 6, missed: 0, rounds: 3 });
});

t.test('a router silent past the timeout on a session probed before fails its route over; a late answer is refused', async (t) => {
  const r = rig(t);
  r.prober.start();
  r.clock.advance(10_000);
  r.answer([1, 2]);
  r.clock.advance(10_000);
  const round2 = r.sent.length - 2;
  r.answer([2], round2);
  r.clock.advance(4_999);
  t.equal(r.primary(), 1, 'still primary before the timeout');
  t.equal(r.applied.length, 1, 'no verdict before the timeout');
  r.clock.advance(1);
  t.same(r.verdicts(), [[1, false], [2, true]], 'node 1 unhealthy at the timeout');
  t.equal(r.primary(), 2, 'the route moved to the healthy router');
  t.notOk(r.prober.answer(r.idOf(r.sent[round2]!.ping)), 'the silent router\'s late answer for the ended round is refused');
  t.equal(r.prober.counts.missed, 1);
});

t.test('a router that answers again is healthy again and does not take its route back', async (t) => {
  const r = rig(t);
  r.prober.start();
  r.clock.advance(10_000); r.answer([1, 2]);
  r.clock.advance(10_000); r.answer([2]);
  r.clock.advance(5_000);
  t.equal(r.primary(), 2);
  t.ok(r.unhealthy.has(1));
  r.clock.advance(5_000); r.answer([1, 2]);
  t.same(r.verdicts(), [[1, true], [2, true]], 'all answered: the round is decided at once');
  t.notOk(r.unhealthy.has(1), 'node 1 healthy again');
  t.equal(r.primary(), 2, 'the route stays with the new primary');
});

t.test('silence is not held against a fresh session: a reconnect gets a round of grace and the round decides nothing', async (t) => {
  const r = rig(t);
  r.prober.start();
  r.clock.advance(10_000); r.answer([1, 2]);
  r.sessions.set(1, { id: 1 }); // node 1 reconnected: a new session
  r.clock.advance(10_000); r.answer([2]);
  r.clock.advance(5_000);
  t.equal(r.applied.length, 1, 'the round with a fresh silent session is not applied');
  t.equal(r.primary(), 1);
  r.clock.advance(5_000); r.answer([2]);
  r.clock.advance(5_000);
  t.same(r.verdicts(), [[1, false], [2, true]], 'silent again on the session probed before: unhealthy');
  t.equal(r.primary(), 2);
});

t.test('a router that reconnects or goes offline during the round is not judged', async (t) => {
  const r = rig(t);
  r.prober.start();
  r.clock.advance(10_000); r.answer([1, 2]);
  r.clock.advance(10_000); r.answer([2]);
  r.sessions.set(1, { id: 1 }); // reconnected before the timeout
  r.clock.advance(5_000);
  t.equal(r.applied.length, 1, 'reconnected mid-round: the round is dropped');
  r.clock.advance(5_000); r.answer([2]);
  r.sessions.delete(1); // offline before the timeout
  r.clock.advance(5_000);
  t.same(r.verdicts(), [[2, true]], 'offline: no verdict against it, the others still applied');
  t.equal(r.primary(), 1, 'left to the disconnect path');
});

t.test('with no HA routers nothing is sent and no verdict timer runs', async (t) => {
  const r = rig(t, { routers: [] });
  r.prober.start();
  r.clock.advance(30_000);
  t.equal(r.sent.length, 0);
  t.equal(r.prober.counts.rounds, 0);
  t.equal(r.clock.pending, 1, 'only the next round\'s timer');
});

t.test('a timeout not below the interval is refused', async (t) => {
  const base = { clock: new FakeClock(), logger: silentLogger, pingUrl: String, routers: () => [], session: () => undefined, send: () => undefined, apply: () => undefined };
  t.throws(() => new HaProber({ ...base, intervalMs: 5000, timeoutMs: 5000 }), /below the interval/);
  t.throws(() => new HaProber({ ...base, intervalMs: 5000, timeoutMs: 0 }), /above 0/);
});

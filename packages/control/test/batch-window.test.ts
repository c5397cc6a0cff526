// nextBatchWindow: how long the SessionHub collects changes before sending them. A quiet server sends a change
// after the short quiet window, changes right behind a flush wait the base window; a busy one (a join burst) doubles the window up to its cap, so many joins share one
// message per session instead of one message per join per session.
import t from 'tap';
import {
  BASE_WINDOW_MS, BURST_OVER_GAP_MS, FIRST_MAP_WAIT_PER_PREPARE_COST, LONE_FLUSH_CHANGES, LULL_MS, MAX_COST_WINDOW_MS, MAX_DOUBLED_WINDOW_MS,
  MAX_FIRST_MAP_WAIT_MS, QUIET_WINDOW_MS, WINDOW_PER_FLUSH_COST,
} from '../src/fanout-knobs.js';
import { firstMapWait, nextBatchWindow as windowFor } from '../src/batch-window.js';
import { Fleet } from './fleet.js';
import { FakeClock } from './fake-clock.js';
import { machineKey, nodeKey } from '@headway/test-support';

/** nextBatchWindow with its inputs in a row: the window in force, the load, and what the last flush and change were like. */
const nextBatchWindow = (current: number, busy: number, sinceFlushEndMs: number, lastFlushMs = 0, sinceChangeMs = 0,
  lastFlushChanges = Number.POSITIVE_INFINITY): number => windowFor({ current, busy, sinceFlushEndMs, lastFlushMs, sinceChangeMs, lastFlushChanges });

t.test('a change finding the hub quiet waits only the quiet window', async (t) => {
  t.ok(QUIET_WINDOW_MS < BASE_WINDOW_MS);
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 0.1, 30, 0, 30), QUIET_WINDOW_MS);
  t.equal(nextBatchWindow(MAX_DOUBLED_WINDOW_MS, 0.2, 500, 0, 500), QUIET_WINDOW_MS, 'load gone: back to the quiet window at once');
  t.equal(nextBatchWindow(QUIET_WINDOW_MS, 0.1, 2), BASE_WINDOW_MS, 'a change right behind a flush waits the base window');
  t.equal(nextBatchWindow(QUIET_WINDOW_MS, 0.1, 500, 0, 5), BASE_WINDOW_MS, 'and so does one right behind another change (a burst under way)');
  t.equal(nextBatchWindow(QUIET_WINDOW_MS, 0.1, 500, 0, BASE_WINDOW_MS), QUIET_WINDOW_MS);
  t.equal(nextBatchWindow(QUIET_WINDOW_MS, 0.95, 2), BASE_WINDOW_MS, 'and never less on a busy loop');
});

t.test('a busy event loop doubles the window up to the cap', async (t) => {
  const seen: number[] = [];
  let w = BASE_WINDOW_MS;
  for (let i = 0; i < 8; i++) { w = nextBatchWindow(w, 0.95, 2); seen.push(w); }
  t.same(seen.slice(0, 4), [40, 80, 160, 320]);
  t.ok(seen.every((x) => x <= MAX_DOUBLED_WINDOW_MS), `never above ${MAX_DOUBLED_WINDOW_MS} ms`);
  t.equal(seen.at(-1), MAX_DOUBLED_WINDOW_MS);
});

t.test('on a busy loop with changes back to back the window is at least WINDOW_PER_FLUSH_COST times the last flush, up to the cap', async (t) => {
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 0.95, 2, 100), WINDOW_PER_FLUSH_COST * 100, 'a 100 ms flush: fan-out takes at most a fifth of the time');
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 0.95, 2, 1), 2 * BASE_WINDOW_MS, 'a cheap flush: the window doubles as before');
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 0.95, 2, 10_000), MAX_COST_WINDOW_MS, 'never above its own cap');
  t.ok(MAX_COST_WINDOW_MS > MAX_DOUBLED_WINDOW_MS);
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 0.95, 2, 2000), WINDOW_PER_FLUSH_COST * 2000, 'a 2 s flush (10,000 sessions with a policy): still four times it, fan-out a fifth of the time');
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 0.95, 2, 500), WINDOW_PER_FLUSH_COST * 500, 'a 500 ms flush (thousands of sessions): past the doubling cap, fan-out still a fifth of the time');
  t.equal(nextBatchWindow(MAX_DOUBLED_WINDOW_MS, 0.95, 2, 10), MAX_DOUBLED_WINDOW_MS, 'doubling alone stops at its cap');
  t.equal(nextBatchWindow(4 * MAX_DOUBLED_WINDOW_MS, 0.95, 2, 10), MAX_DOUBLED_WINDOW_MS, 'a long window ends with the costly flushes that set it');
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 0.1, 2, 100), WINDOW_PER_FLUSH_COST * 100, 'the floor holds on a loop measured quiet too (contended by other processes)');
  t.equal(nextBatchWindow(160, 0.1, 2, 1), BASE_WINDOW_MS, 'a quiet loop does not double');
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 0.95, 500, 100, 500), QUIET_WINDOW_MS, 'a lone change after a quiet spell goes out after the quiet window');
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 0.95, 2, 100, BURST_OVER_GAP_MS), BASE_WINDOW_MS, 'right behind a costly flush but after a lull in changes: the base window, not the floor');
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 0.95, 2, 100, 30), WINDOW_PER_FLUSH_COST * 100, 'a gap of a few tens of ms in a burst keeps the floor');
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 1, 16, 30, 89, 1), BASE_WINDOW_MS, 'right behind the flush of a lone change (a rename after a policy change): the base window');
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 1, 16, 30, 89, LONE_FLUSH_CHANGES), BASE_WINDOW_MS, 'or of a change or two more');
  t.equal(nextBatchWindow(BASE_WINDOW_MS, 1, 16, 30, 89, LONE_FLUSH_CHANGES + 1), WINDOW_PER_FLUSH_COST * 30, 'behind a flush that carried a burst: the floor');
});

t.test('a change that did not queue up behind the previous flush waits the quiet window, however busy the loop', async (t) => {
  t.equal(nextBatchWindow(MAX_DOUBLED_WINDOW_MS, 1, 5000, 0, 5000), QUIET_WINDOW_MS);
  t.equal(nextBatchWindow(160, 1, BASE_WINDOW_MS, 0, BASE_WINDOW_MS), QUIET_WINDOW_MS, 'a base window after the flush ended: a lone change');
  t.equal(nextBatchWindow(160, 1, 3), 320, 'right behind a flush on a busy loop: longer');
});

// The busy measure must not span the previous flush itself: on a quiet server a change made right after the
// previous one was delivered (a script renaming nodes one after another) would count as "busy", and each would
// wait twice as long as the one before.
// The load meter here counts only a flush's own work as load (messages delivered to devices): nothing else runs,
// so a window measured correctly (collection only) is always quiet, whatever the machine's speed. With the old
// measure every interval held the previous flush's deliveries, and the window doubled.
/** threeConnected is a fleet of three nodes of one user, each with a live map session. */
async function threeConnected(t: Parameters<typeof Fleet.start>[0]) {
  const clock = new FakeClock();
  const f = await Fleet.start(t, undefined, { clock, loadMeter: clock.meter() });
  const [alice] = f.users();
  const nodes = [];
  for (let i = 0; i < 3; i++) {
    const n = await f.state.nodes.create({ machineKey: machineKey(), nodeKey: nodeKey(), hostname: `n${i}`, userId: alice!.id, registerMethod: 'authkey' });
    f.connect(n.id);
    nodes.push(n);
  }
  return { f, nodes, clock };
}

t.test('changes made one after another on a quiet server do not double the window', async (t) => {
  const { f, nodes, clock } = await threeConnected(t);
  const delivered = () => [...f.connected.values()].reduce((sum, c) => sum + c.client.messages, 0);
  let measured = 0;
  f.hub.scheduler.loadMeter = {
    mark: () => delivered(),
    since: (mark) => { measured++; return delivered() > (mark as number) ? 1 : 0.1; },
  };
  const viewer = f.connected.get(nodes[1]!.id)!.client;
  const windows: number[] = [];
  // A change right behind a flush waits at least WINDOW_PER_FLUSH_COST times that flush's cost (a cold first flush can take
  // several ms): that floor is the window expected here, never a doubling of the previous window.
  const floors: number[] = [];
  for (let i = 0; i < 6; i++) {
    const before = viewer.messages;
    const floor = Math.min(MAX_DOUBLED_WINDOW_MS, Math.max(BASE_WINDOW_MS, WINDOW_PER_FLUSH_COST * f.hub.lastFlushCost));
    await f.state.nodes.rename(nodes[0]!.id, `renamed-${i}`);
    windows.push(f.hub.batchWindow);
    floors.push(f.hub.batchWindow === QUIET_WINDOW_MS || f.hub.batchWindow === BASE_WINDOW_MS ? f.hub.batchWindow : floor);
    // The next rename is made the moment this one reaches the other device.
    while (viewer.messages === before) clock.advance(1);
  }
  t.ok(measured >= 5, `the hub measured the load of each sent batch (${measured})`);
  t.same(windows, floors, `every change waited the quiet or base window or the flush-cost floor, never a doubled one (${windows.join(', ')} ms)`);
});

t.test('new sessions wait for their first maps in proportion to what preparing the view last cost', async (t) => {
  t.equal(firstMapWait(0), BASE_WINDOW_MS, 'a cheap view (or none prepared yet): the base window');
  t.equal(firstMapWait(3), BASE_WINDOW_MS, 'a few milliseconds: still the base window');
  t.equal(firstMapWait(40), FIRST_MAP_WAIT_PER_PREPARE_COST * 40, 'a 40 ms preparation: first maps wait twice that, so it takes a third of the time');
  t.equal(firstMapWait(10_000), MAX_FIRST_MAP_WAIT_MS, 'never above the cap');
});

// A burst's last flush sets a long window (its cost times the per-flush factor); a trailing change starting a batch
// under it must not make a rename a moment later wait that whole window out.
t.test('a change after a lull sends a batch waiting a long window soon; changes back to back do not', async (t) => {
  const { f, nodes, clock } = await threeConnected(t);
  f.hub.flushNow();
  const viewer = f.connected.get(nodes[1]!.id)!.client;
  const hub = f.hub.scheduler.window;
  // As if a 400 ms flush of a burst's changes had just ended: the next change waits WINDOW_PER_FLUSH_COST times that, capped.
  const afterBurst = (): void => { hub.lastFlushMs = 400; hub.flushEnd = clock.now(); hub.lastFlushChanges = 50; };
  const long = Math.min(MAX_COST_WINDOW_MS, WINDOW_PER_FLUSH_COST * 400);

  afterBurst();
  await f.state.nodes.rename(nodes[2]!.id, 'trailing');
  t.equal(f.hub.batchWindow, long, 'the trailing change waits the long window');
  await f.state.nodes.rename(nodes[0]!.id, 'right-behind');
  t.equal(f.hub.hurried, 0, 'a change right behind it joins the batch as it is');
  t.equal(f.hub.batchWindow, long);
  f.hub.flushNow();

  afterBurst();
  const before = viewer.messages;
  const scheduled = clock.now();
  await f.state.nodes.rename(nodes[2]!.id, 'trailing-2');
  clock.advance(BURST_OVER_GAP_MS + 20);
  t.equal(viewer.messages, before, 'the trailing change is still waiting');
  await f.state.nodes.rename(nodes[0]!.id, 'after-a-lull');
  t.equal(f.hub.hurried, 1, 'a change after a lull hurries the batch');
  t.equal(f.hub.batchWindow, QUIET_WINDOW_MS, 'which now waits the quiet window');
  // Not a speed figure: the batch must go out before the window it was waiting would have ended.
  while (viewer.messages === before && clock.now() < scheduled + long) clock.advance(1);
  t.ok(viewer.messages > before && clock.now() < scheduled + long, 'the viewer got the batch before the long window would have ended');

  // The same lull on a loop busy all along (a gap in a join burst): the batch keeps its window.
  const meter = f.hub.scheduler.loadMeter;
  f.hub.scheduler.loadMeter = { mark: () => 0, since: () => 0.9 };
  afterBurst();
  await f.state.nodes.rename(nodes[2]!.id, 'trailing-3');
  clock.advance(BURST_OVER_GAP_MS + 20);
  await f.state.nodes.rename(nodes[0]!.id, 'in-a-burst');
  t.equal(f.hub.hurried, 1, 'a lull on a busy loop does not hurry the batch');
  t.equal(f.hub.batchWindow, long);
  f.hub.scheduler.loadMeter = meter;
  f.hub.flushNow();
});

// Regression: at the end of a join burst no change comes after the lull to hurry the batch, and the last joiners'
// peers learned of them only when the window the burst's flushes set ran out (5-10 s at 5,000-10,000 devices, bench).
t.test('a batch waiting a long window goes out after a lull with no change; changes coming closer than that keep it waiting', async (t) => {
  const { f, nodes, clock } = await threeConnected(t);
  f.hub.flushNow();
  const viewer = f.connected.get(nodes[1]!.id)!.client;
  const hub = f.hub.scheduler.window;
  // As if a 2 s flush of a burst's changes had just ended (10,000 devices): the next change waits WINDOW_PER_FLUSH_COST times that.
  hub.lastFlushMs = 2000; hub.flushEnd = clock.now(); hub.lastFlushChanges = 50;
  const long = Math.min(MAX_COST_WINDOW_MS, WINDOW_PER_FLUSH_COST * 2000);
  const before = viewer.messages;
  const scheduled = clock.now();
  await f.state.nodes.rename(nodes[2]!.id, 'trailing-0');
  t.equal(f.hub.batchWindow, long, 'the trailing change waits the long window');
  // More changes, each well within LULL_MS of the one before, on a busy loop (a gap of BURST_OVER_GAP_MS or more on an
  // idle one hurries the batch, tested above): the burst goes on, the batch keeps waiting.
  const meter = f.hub.scheduler.loadMeter;
  let busy = true;
  f.hub.scheduler.loadMeter = { mark: () => 0, since: () => (busy ? 0.9 : 0.1) };
  t.teardown(() => { f.hub.scheduler.loadMeter = meter; });
  let last = clock.now();
  for (let i = 1; i <= 3; i++) {
    clock.advance(LULL_MS / 2);
    await f.state.nodes.rename(nodes[2]!.id, `trailing-${i}`);
    last = clock.now();
  }
  t.equal(viewer.messages, before, 'changes coming closer than the lull apart kept the batch waiting');
  t.equal(f.hub.lulled, 0);
  // No change for longer than a lull, but on a loop busy all along (held up, not idle): still waiting.
  clock.advance(LULL_MS * 1.6);
  t.equal(viewer.messages, before, 'a gap in changes on a busy loop is not a lull');
  t.equal(f.hub.lulled, 0);
  // Then the loop goes idle, still with no change: the batch goes out within about a lull.
  busy = false;
  last = clock.now();
  while (viewer.messages === before && clock.now() < scheduled + long) clock.advance(5);
  const at = clock.now();
  t.ok(viewer.messages > before, 'the viewer got the batch');
  t.ok(at >= last, 'not while the loop was busy');
  t.ok(at < scheduled + long, 'before the long window would have ended');
  t.equal(f.hub.lulled, 1, 'sent early once, for the lull');
  t.equal(f.hub.hurried, 0, 'no change came to hurry it');
  f.hub.scheduler.loadMeter = meter;
  const { registry } = (f.hub as unknown as { metrics: { registry: import('prom-client').Registry } }).metrics;
  const metrics = await registry.getSingleMetric('headway_map_batches_early_total')!.get();
  t.equal(metrics.values.find((v) => v.labels.reason === 'lull')?.value, 1, 'counted on /metrics');
  // A short window (a quiet server) never waits for a lull: nothing is armed.
  await f.state.nodes.rename(nodes[0]!.id, 'quiet');
  t.ok(f.hub.batchWindow <= LULL_MS, `a change on a quiet server waits ${f.hub.batchWindow} ms`);
  f.hub.flushNow();
  t.equal(f.hub.lulled, 1);
});

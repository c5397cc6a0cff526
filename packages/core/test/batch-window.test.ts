// nextBatchWindow: how long the SessionHub collects changes before sending them. A quiet server sends a change
// after the base window; a busy one (a join burst) doubles the window up to its cap, so many joins share one
// message per session instead of one message per join per session.
import t from 'tap';
import { BATCH_WINDOW_MS, FLUSH_SHARE, MAX_BATCH_WINDOW_MS, MAX_OPEN_WAIT_MS, OPEN_SHARE, nextBatchWindow, openWait } from '../src/control/sessions.js';
import { Fleet } from './fleet.js';
import { machineKey, nodeKey } from './harness.js';

t.test('a quiet event loop keeps the base window', async (t) => {
  t.equal(nextBatchWindow(BATCH_WINDOW_MS, 0.1, 30), BATCH_WINDOW_MS);
  t.equal(nextBatchWindow(MAX_BATCH_WINDOW_MS, 0.2, 30), BATCH_WINDOW_MS, 'load gone: back to the base window at once');
});

t.test('a busy event loop doubles the window up to the cap', async (t) => {
  const seen: number[] = [];
  let w = BATCH_WINDOW_MS;
  for (let i = 0; i < 8; i++) { w = nextBatchWindow(w, 0.95, 2); seen.push(w); }
  t.same(seen.slice(0, 4), [40, 80, 160, 320]);
  t.ok(seen.every((x) => x <= MAX_BATCH_WINDOW_MS), `never above ${MAX_BATCH_WINDOW_MS} ms`);
  t.equal(seen.at(-1), MAX_BATCH_WINDOW_MS);
});

t.test('on a busy loop with changes back to back the window is at least FLUSH_SHARE times the last flush, up to the cap', async (t) => {
  t.equal(nextBatchWindow(BATCH_WINDOW_MS, 0.95, 2, 100), FLUSH_SHARE * 100, 'a 100 ms flush: fan-out takes at most a fifth of the time');
  t.equal(nextBatchWindow(BATCH_WINDOW_MS, 0.95, 2, 1), 2 * BATCH_WINDOW_MS, 'a cheap flush: the window doubles as before');
  t.equal(nextBatchWindow(BATCH_WINDOW_MS, 0.95, 2, 10_000), MAX_BATCH_WINDOW_MS, 'never above the cap');
  t.equal(nextBatchWindow(BATCH_WINDOW_MS, 0.1, 2, 100), FLUSH_SHARE * 100, 'the floor holds on a loop measured quiet too (contended by other processes)');
  t.equal(nextBatchWindow(160, 0.1, 2, 1), BATCH_WINDOW_MS, 'a quiet loop does not double');
  t.equal(nextBatchWindow(BATCH_WINDOW_MS, 0.95, 500, 100), BATCH_WINDOW_MS, 'a lone change after a quiet spell goes out after the base window');
});

t.test('a change that did not queue up behind the previous flush starts from the base window, however busy the loop', async (t) => {
  t.equal(nextBatchWindow(MAX_BATCH_WINDOW_MS, 1, 5000), BATCH_WINDOW_MS);
  t.equal(nextBatchWindow(160, 1, BATCH_WINDOW_MS), BATCH_WINDOW_MS, 'a base window after the flush ended: a lone change');
  t.equal(nextBatchWindow(160, 1, 3), 320, 'right behind a flush on a busy loop: longer');
});

// Regression: the busy measure spanned the previous flush itself, so on a quiet server a change made right after
// the previous one was delivered (a script renaming nodes one after another) counted as "busy" and each waited
// twice as long as the one before (bench, 30 devices: rename p50 30, 46, 88, 170, 327 ms).
// The load meter here counts only a flush's own work as load (messages delivered to devices): nothing else runs,
// so a window measured correctly (collection only) is always quiet, whatever the machine's speed. With the old
// measure every interval held the previous flush's deliveries, and the window doubled.
t.test('changes made one after another on a quiet server do not double the window', async (t) => {
  const f = await Fleet.start(t);
  const [alice] = f.users();
  const nodes = [];
  for (let i = 0; i < 3; i++) {
    const n = await f.state.createNode({ machineKey: machineKey(), nodeKey: nodeKey(), hostname: `n${i}`, userId: alice!.id, registerMethod: 'authkey' });
    f.connect(n.id);
    nodes.push(n);
  }
  const delivered = () => [...f.connected.values()].reduce((sum, c) => sum + c.client.messages, 0);
  let measured = 0;
  f.hub.loadMeter = {
    mark: () => delivered(),
    since: (mark) => { measured++; return delivered() > (mark as number) ? 1 : 0.1; },
  };
  const viewer = f.connected.get(nodes[1]!.id)!.client;
  const windows: number[] = [];
  // A change right behind a flush waits at least FLUSH_SHARE times that flush's cost (a cold first flush can take
  // several ms): that floor is the window expected here, never a doubling of the previous window.
  const floors: number[] = [];
  for (let i = 0; i < 6; i++) {
    const before = viewer.messages;
    const floor = Math.min(MAX_BATCH_WINDOW_MS, Math.max(BATCH_WINDOW_MS, FLUSH_SHARE * f.hub.lastFlushCost));
    await f.state.renameNode(nodes[0]!.id, `renamed-${i}`);
    windows.push(f.hub.batchWindow);
    floors.push(f.hub.batchWindow === BATCH_WINDOW_MS ? BATCH_WINDOW_MS : floor);
    // The next rename is made the moment this one reaches the other device.
    while (viewer.messages === before) await new Promise((r) => setTimeout(r, 1));
  }
  t.ok(measured >= 5, `the hub measured the load of each sent batch (${measured})`);
  t.same(windows, floors, `every change waited the base window or the flush-cost floor, never a doubled one (${windows.join(', ')} ms)`);
});

t.test('new sessions wait for their first maps in proportion to what preparing the view last cost', async (t) => {
  t.equal(openWait(0), BATCH_WINDOW_MS, 'a cheap view (or none prepared yet): the base window');
  t.equal(openWait(3), BATCH_WINDOW_MS, 'a few milliseconds: still the base window');
  t.equal(openWait(40), OPEN_SHARE * 40, 'a 40 ms preparation: first maps wait twice that, so it takes a third of the time');
  t.equal(openWait(10_000), MAX_OPEN_WAIT_MS, 'never above the cap');
});

// FanoutScheduler on a FakeClock: when batches go out (the window of a lone change, of a burst, early after a lull
// or a gap), how a flush or a round of first maps is cut into slices, and what happens to changes and timers that
// come while one runs. The work is a stub: "sessions" that note when they were reached and spend the time told.
import t from 'tap';
import { Metrics, silentLogger, type State } from '@headway/core';
import { FanoutScheduler, SlicedJob, type FanoutWork } from '../src/scheduler.js';
import {
  BASE_WINDOW_MS, BURST_OVER_GAP_MS, LULL_MS, MAX_DOUBLED_WINDOW_MS, QUIET_WINDOW_MS, SLICE_MS, WINDOW_PER_FLUSH_COST,
} from '../src/fanout-knobs.js';
import { firstMapWait } from '../src/batch-window.js';
import { FakeClock } from './fake-clock.js';

interface Sent { at: number; changes: string[]; reached: Array<{ id: number; at: number }> }

/** StubWork is a hub of `sessions` sessions: a flush reaches each, spending perSessionMs on each one. */
class StubWork implements FanoutWork<string> {
  pending: string[] = [];
  flushes: Sent[] = [];
  waiting: number[] = [];
  opened: Array<{ id: number; at: number }> = [];
  perSessionMs = 0;
  perFirstMapMs = 0;
  prepareMs = 0;
  /** during and duringOpen run at a flush's or a round's session of that id (a change arriving meanwhile, say). */
  during = new Map<number, () => void>();
  duringOpen = new Map<number, () => void>();
  scheduler!: FanoutScheduler<string>;

  constructor(readonly clock: FakeClock, readonly sessions = [1, 2, 3, 4, 5, 6, 7, 8]) {}

  apply(change: string): void {
    this.pending.push(change);
    this.scheduler.changeQueued();
  }

  takeBatch(): SlicedJob<number> | undefined {
    if (!this.pending.length) return undefined;
    const sent: Sent = { at: this.clock.now(), changes: this.pending, reached: [] };
    this.pending = [];
    this.flushes.push(sent);
    return new SlicedJob(this.sessions, (id) => {
      this.clock.spend(this.perSessionMs);
      sent.reached.push({ id, at: this.clock.now() });
      this.during.get(id)?.();
    });
  }

  batchSent(): void {}

  takeFirstMaps(): SlicedJob<number> | undefined {
    if (!this.waiting.length) return undefined;
    const waiting = this.waiting;
    this.waiting = [];
    return new SlicedJob(waiting, (id) => {
      this.clock.spend(this.perFirstMapMs);
      this.opened.push({ id, at: this.clock.now() });
      this.duringOpen.get(id)?.();
    });
  }

  firstMapsWaiting(): boolean { return this.waiting.length > 0; }
  prepareCostMs(): number { return this.prepareMs; }
}

function setup(sessions?: number[]) {
  const clock = new FakeClock();
  const work = new StubWork(clock, sessions);
  const metrics = new Metrics({} as State);
  const scheduler = new FanoutScheduler(work, { clock, loadMeter: clock.meter(), metrics, logger: silentLogger });
  work.scheduler = scheduler;
  return { clock, work, scheduler, metrics };
}

t.test('a lone change goes out after the quiet window; a change right behind a lone change\'s flush waits the base window', async (t) => {
  const { clock, work, scheduler } = setup();
  scheduler.admit('rename');
  t.equal(scheduler.window.ms, QUIET_WINDOW_MS);
  clock.advance(QUIET_WINDOW_MS - 1);
  t.equal(work.flushes.length, 0, 'not before its window ends');
  clock.advance(1);
  t.same(work.flushes.map((f) => [f.at, f.changes]), [[QUIET_WINDOW_MS, ['rename']]], 'sent when it ends, to every session');
  t.equal(work.flushes[0]!.reached.length, work.sessions.length);
  scheduler.admit('tag');
  t.equal(scheduler.window.ms, BASE_WINDOW_MS, 'right behind a flush, after a change a few ms before');
  clock.advance(BASE_WINDOW_MS);
  t.equal(work.flushes.length, 2);
  clock.advance(1000);
  scheduler.admit('much later');
  t.equal(scheduler.window.ms, QUIET_WINDOW_MS, 'a change long after everything else: quiet again');
  scheduler.stop();
});

t.test('changes back to back on a busy loop double the window up to its cap; a costly flush sets a floor', async (t) => {
  const { clock, work, scheduler } = setup();
  const windows: number[] = [];
  for (let i = 0; i < 9; i++) {
    // A burst: several changes at once, then more every 50 ms, the loop busy all along (the joins producing them).
    for (const c of ['a', 'b', 'c', 'd']) scheduler.admit(`${c}${i}`);
    const w = scheduler.window.ms;
    windows.push(w);
    for (let spent = 0; spent < w;) {
      const step = Math.min(50, w - spent);
      clock.spend(step);
      spent += step;
      if (spent < w) scheduler.admit(`more${i}`);
    }
    clock.advance(0);
  }
  t.same(windows, [QUIET_WINDOW_MS, 20, 40, 80, 160, 320, 640, 1280, MAX_DOUBLED_WINDOW_MS]);
  t.equal(work.flushes.length, 9, 'one flush per batch, each with all the changes of its window');
  t.equal(scheduler.hurried + scheduler.lulled, 0, 'none sent early: the changes came back to back on a busy loop');

  // A flush costing 80 ms (8 sessions, 10 ms each): the next batch of a burst waits WINDOW_PER_FLUSH_COST times that.
  const costly = setup();
  costly.work.perSessionMs = 10;
  for (const c of ['a', 'b', 'c', 'd']) costly.scheduler.admit(c);
  costly.clock.advance(QUIET_WINDOW_MS);
  t.equal(costly.scheduler.window.lastFlushMs, 80, 'the flush cost its sessions\' time');
  costly.scheduler.admit('e');
  t.equal(costly.scheduler.window.ms, WINDOW_PER_FLUSH_COST * 80, 'the loop was idle, but the flush was costly');
  scheduler.stop();
  costly.scheduler.stop();
});

/**
 * afterCostlyBurst: a burst's flush of 400 ms (8 sessions, 50 ms each) just ended, and a trailing change that came
 * during it, held back until its end, started a batch right behind it.
 */
function afterCostlyBurst() {
  const s = setup();
  s.work.perSessionMs = 50;
  s.work.during.set(8, () => s.scheduler.admit('trailing'));
  for (const c of ['a', 'b', 'c', 'd']) s.scheduler.admit(c);
  s.clock.advance(QUIET_WINDOW_MS);
  s.work.perSessionMs = 0;
  s.work.during.clear();
  return { ...s, long: WINDOW_PER_FLUSH_COST * 400, opened: s.clock.now() };
}

t.test('a batch waiting a long window goes out after a lull with the loop idle, not while the loop is busy', async (t) => {
  const { clock, work, scheduler, long, opened, metrics } = afterCostlyBurst();
  t.equal(scheduler.window.ms, long, 'the trailing change waits the long window');
  clock.advance(LULL_MS - 1);
  t.equal(work.flushes.length, 1, 'no lull yet');
  clock.advance(1);
  t.equal(scheduler.lulled, 1, 'a lull: nothing came for LULL_MS, the loop idle');
  t.equal(scheduler.window.ms, QUIET_WINDOW_MS);
  clock.advance(QUIET_WINDOW_MS);
  t.same(work.flushes.map((f) => f.at), [QUIET_WINDOW_MS, opened + LULL_MS + QUIET_WINDOW_MS], 'sent a quiet window after the lull');
  const early = await metrics.registry.getSingleMetric('headway_map_batches_early_total')!.get();
  t.equal(early.values.find((v) => v.labels.reason === 'lull')?.value, 1, 'counted on /metrics');

  const busy = afterCostlyBurst();
  busy.clock.spend(LULL_MS);
  busy.clock.advance(0);
  t.equal(busy.scheduler.lulled, 0, 'no change for LULL_MS, but the loop busy all along: held up, not a lull');
  busy.clock.advance(LULL_MS);
  t.equal(busy.scheduler.lulled, 1, 'then idle for LULL_MS: a lull');
  scheduler.stop();
  busy.scheduler.stop();
});

t.test('a change after a gap hurries a batch waiting a long window; changes back to back and gaps on a busy loop do not', async (t) => {
  const { clock, work, scheduler, long } = afterCostlyBurst();
  scheduler.admit('right behind');
  t.equal(scheduler.hurried, 0);
  t.equal(scheduler.window.ms, long);
  clock.advance(BURST_OVER_GAP_MS);
  scheduler.admit('after a gap');
  t.equal(scheduler.hurried, 1, 'the burst is over');
  t.equal(scheduler.window.ms, QUIET_WINDOW_MS);
  const at = clock.now();
  clock.advance(QUIET_WINDOW_MS);
  t.same(work.flushes.at(-1)!.changes, ['trailing', 'right behind', 'after a gap'], 'one batch for all three');
  t.equal(work.flushes.at(-1)!.at, at + QUIET_WINDOW_MS);

  const busy = afterCostlyBurst();
  busy.clock.spend(BURST_OVER_GAP_MS);
  busy.scheduler.admit('a gap in a burst');
  t.equal(busy.scheduler.hurried, 0, 'the loop was busy since the batch began: the burst goes on');
  t.equal(busy.scheduler.window.ms, busy.long);
  scheduler.stop();
  busy.scheduler.stop();
});

t.test('a flush goes out in slices of about SLICE_MS; changes coming meanwhile wait for its end', async (t) => {
  const { clock, work, scheduler } = setup();
  work.perSessionMs = 5;
  work.during.set(3, () => scheduler.admit('mid-flush'));
  scheduler.admit('a');
  scheduler.admit('b');
  scheduler.flushInSlices();
  const perSlice = SLICE_MS / work.perSessionMs;
  t.equal(work.flushes[0]!.reached.length, perSlice, `the first slice reached ${perSlice} sessions`);
  t.ok(scheduler.busy, 'the rest waits for the next turn of the loop');
  t.same(work.pending, [], 'the change that came mid-flush is held back');
  clock.turn();
  t.equal(work.flushes[0]!.reached.length, 2 * perSlice, 'the next turn, the next slice');
  t.notOk(scheduler.busy, 'every session reached');
  t.same(work.flushes[0]!.changes, ['a', 'b'], 'the flush kept its own batch');
  t.same(work.pending, ['mid-flush'], 'the held change went into the next batch when the flush ended');
  t.equal(scheduler.window.ms, BASE_WINDOW_MS, 'right behind a flush of a lone change or two: the base window');
  t.equal(scheduler.window.lastFlushMs, work.sessions.length * work.perSessionMs, 'the flush cost its slices\' time');
  clock.advance(BASE_WINDOW_MS);
  t.same(work.flushes.map((f) => f.changes), [['a', 'b'], ['mid-flush']]);
  scheduler.stop();
});

t.test('first maps wait in proportion to the view\'s preparation; a batch falling due during their round goes out right after it', async (t) => {
  const { clock, work, scheduler } = setup();
  work.prepareMs = 40;
  // A burst's flush of 80 ms, and a join during it: its batch waits WINDOW_PER_FLUSH_COST times that.
  work.perSessionMs = 10;
  work.during.set(8, () => scheduler.admit('join'));
  for (const c of ['a', 'b', 'c', 'd']) scheduler.admit(c);
  clock.advance(QUIET_WINDOW_MS);
  work.perSessionMs = 0;
  t.equal(scheduler.window.ms, WINDOW_PER_FLUSH_COST * 80);
  const batchDue = clock.now() + scheduler.window.ms;
  // The joiners wait for their first maps.
  work.waiting.push(11, 12, 13, 14, 15, 16, 17, 18);
  scheduler.waitForFirstMaps();
  t.ok(scheduler.timerPending);
  clock.advance(firstMapWait(40) - 1);
  t.equal(work.opened.length, 0, 'not before firstMapWait');
  // Each first map costs 50 ms: a round of one map a slice, 400 ms, past the batch's window. A change and a new
  // session come during the round.
  work.perFirstMapMs = 50;
  work.duringOpen.set(13, () => {
    scheduler.admit('during the round');
    work.waiting.push(19);
    scheduler.waitForFirstMaps();
  });
  clock.advance(1);
  t.notOk(scheduler.busy, 'the round ran to its end, slice after slice');
  t.same(work.opened.map((o) => o.id).slice(0, 8), [11, 12, 13, 14, 15, 16, 17, 18], 'the round opened the sessions waiting when it began');
  const roundEnd = work.opened[7]!.at;
  t.equal(roundEnd - work.opened[0]!.at, 7 * 50, 'one a slice');
  t.ok(roundEnd > batchDue, 'the batch fell due during the round');
  t.same(work.flushes.slice(1).map((f) => [f.at, f.changes]), [[roundEnd, ['join', 'during the round']]],
    'and went out as the round ended, with the change the round held back');
  t.same(work.opened.map((o) => o.id).slice(8), [19], 'after the flush, the session that came to wait during the round');
  scheduler.stop();
});

t.test('flushNow finishes a round and a flush under way at once, and leaves no timer', async (t) => {
  const { clock, work, scheduler } = setup();
  work.perFirstMapMs = 30;
  work.waiting.push(21, 22, 23);
  scheduler.openInSlices();
  t.ok(scheduler.busy, 'a round under way');
  scheduler.admit('x');
  scheduler.flushNow();
  t.notOk(scheduler.busy);
  t.same(work.opened.map((o) => o.id), [21, 22, 23], 'the round finished');
  t.same(work.flushes.map((f) => f.changes), [['x']], 'the held change applied and sent');
  t.equal(clock.pending, 0, 'no timer left');

  work.perSessionMs = 10;
  scheduler.admit('y');
  scheduler.flushInSlices();
  t.ok(scheduler.busy, 'a flush under way');
  scheduler.flushNow();
  t.notOk(scheduler.busy);
  t.equal(work.flushes.at(-1)!.reached.length, work.sessions.length, 'every session reached');
  t.equal(clock.pending, 0);
  scheduler.stop();
});

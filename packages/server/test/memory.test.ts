import t from 'tap';
import { Counter, Histogram, Registry } from 'prom-client';
import { PerformanceObserver, constants } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { createLogger } from '@headway/core';
import { MemoryTrimmer, type TrimClock } from '../src/index.js';
import { heapHeadroomWarning } from '../src/memory.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

function metrics() {
  const registry = new Registry();
  return {
    memoryTrimSeconds: new Histogram({ name: 'trim_seconds', help: 'h', registers: [registry] }),
    memoryTrimmedBytes: new Counter({ name: 'trimmed_bytes', help: 'h', registers: [registry] }),
  };
}

/** FakeClock is a TrimClock whose time moves only when the test advances it. */
class FakeClock implements TrimClock {
  private time = 0;
  private nextId = 1;
  readonly timers = new Map<number, { at: number; fn: () => void }>();
  private armed: Array<() => void> = [];

  now(): number { return this.time; }
  setTimeout(fn: () => void, ms: number): number {
    const id = this.nextId++;
    this.timers.set(id, { at: this.time + ms, fn });
    for (const resolve of this.armed.splice(0)) resolve();
    return id;
  }
  clearTimeout(handle: unknown): void { this.timers.delete(handle as number); }

  /** whenArmed resolves once a timer is pending (the trimmer reacts to a collection on a later turn). */
  whenArmed(): Promise<void> {
    return this.timers.size ? Promise.resolve() : keepingAlive(new Promise((resolve) => this.armed.push(resolve)));
  }

  /** advance moves time forward by `ms`, firing every timer due on the way at its own time. */
  advance(ms: number): void {
    const end = this.time + ms;
    for (;;) {
      const due = [...this.timers].filter(([, x]) => x.at <= end).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      this.timers.delete(due[0]);
      this.time = due[1].at;
      due[1].fn();
    }
    this.time = end;
  }

  /** fireEarly runs the pending timer now, without moving time: a real timer may fire a little before its time. */
  fireEarly(): void {
    const [id, timer] = [...this.timers][0]!;
    this.timers.delete(id);
    timer.fn();
  }
}

/**
 * keepingAlive keeps the event loop turning until `p` settles: Node reports collections to observers from an
 * unref'd callback run as the loop turns, so a test awaiting only that report would end (or idle) first. It bounds
 * no time.
 */
function keepingAlive<T>(p: Promise<T>): Promise<T> {
  const handle = setInterval(() => undefined, 5);
  return p.finally(() => clearInterval(handle));
}

/** nextMajorCollection resolves once the process's next major collection has been reported to observers. */
function nextMajorCollection(): Promise<void> {
  return keepingAlive(new Promise((resolve) => {
    const observer = new PerformanceObserver((list) => {
      if (!list.getEntries().some((e) => (e as { detail?: { kind?: number } }).detail?.kind === constants.NODE_PERFORMANCE_GC_MAJOR)) return;
      observer.disconnect();
      resolve();
    });
    observer.observe({ entryTypes: ['gc'] });
  }));
}

t.test('a major collection leads to one trim, and trims keep the minimum interval', async (t) => {
  const clock = new FakeClock();
  const trims: number[] = [];
  const m = metrics();
  const trimmer = new MemoryTrimmer({
    trim: () => { trims.push(clock.now()); return true; },
    logger: createLogger({ level: 'error', write: () => undefined }), metrics: m, delayMs: 20, minIntervalMs: 600, clock,
  });
  t.teardown(() => trimmer.stop());

  gc();
  gc();
  await clock.whenArmed();
  t.equal(clock.timers.size, 1, 'two collections in a row arrange one trim');
  clock.advance(19);
  t.equal(trims.length, 0, 'not before the delay');
  clock.advance(1);
  t.same(trims, [20], 'the trim runs once the delay is over');
  t.equal((await m.memoryTrimSeconds.get()).values.find((v) => v.metricName === 'trim_seconds_count')?.value, 1, 'the trim is timed');

  // Within the interval a collection arranges the next trim for when the interval is over, not before.
  clock.advance(80);
  gc();
  await clock.whenArmed();
  clock.advance(400);
  t.equal(trims.length, 1, 'no second trim inside the interval');
  clock.advance(120);
  t.same(trims, [20, 620], 'the collection inside the interval is trimmed as the interval ends');

  // A timer that fires before its time waits on rather than trimming early.
  trimmer.schedule();
  clock.advance(100);
  clock.fireEarly();
  t.equal(trims.length, 2, 'a timer fired early does not trim inside the interval');
  t.equal(clock.timers.size, 1, 'it waits on for the rest');
  clock.advance(500);
  t.same(trims, [20, 620, 1220], 'and trims when the interval is over');

  trimmer.schedule();
  trimmer.stop();
  t.equal(clock.timers.size, 0, 'stopping cancels the pending trim');
  const collected = nextMajorCollection();
  gc();
  await collected;
  // The observer above was told of the collection; a trimmer still observing would have been told on the same turn.
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(clock.timers.size, 0, 'a stopped trimmer does not react to collections');
  clock.advance(10_000);
  t.equal(trims.length, 3, 'and trims no more');
});

t.test('trimNow reports what the trim gave back', async (t) => {
  const m = metrics();
  const trimmer = new MemoryTrimmer({ trim: () => false, logger: createLogger({ level: 'error', write: () => undefined }), metrics: m });
  t.teardown(() => trimmer.stop());
  const released = trimmer.trimNow();
  t.ok(released >= 0, 'a byte count');
  t.equal((await m.memoryTrimmedBytes.get()).values[0]?.value, released, 'counted');
});

t.test('the heap limit is checked against the stored tailnet at start', async (t) => {
  const MiB = 2 ** 20;
  t.equal(heapHeadroomWarning(1000, 40 * MiB, 1024 * MiB), undefined, '1,000 nodes fit a 1 GiB heap with room for bursts');
  t.equal(heapHeadroomWarning(0, 40 * MiB, 128 * MiB), undefined, 'an empty tailnet fits a small heap');
  const tight = heapHeadroomWarning(20_000, 300 * MiB, 1024 * MiB);
  t.match(tight, /limit is 1024 MiB; with its 20000 nodes connected the server holds about 925 MiB live/);
  t.match(tight, /raise memory\.heap_limit_mb \(to 2816 or more\)/, 'names the key and a limit with room');
  t.equal(heapHeadroomWarning(15_000, 40 * MiB, 1024 * MiB), undefined, '15,000 nodes: just twice what they hold live');
  t.ok(heapHeadroomWarning(16_000, 40 * MiB, 1024 * MiB), '16,000: less than twice');
});

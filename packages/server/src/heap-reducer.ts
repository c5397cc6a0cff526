import { performance } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Logger, Metrics } from '@headway/core';
import { eventLoopMeter } from '@headway/control';

/** REDUCE_CHECK_MS: how often the event loop's utilization and the heap's size are read. */
export const REDUCE_CHECK_MS = 1_000;
/** REDUCE_QUIET_CHECKS: readings in a row below REDUCE_QUIET_UTILIZATION before a reduction (a burst's tail of late joins and retries is over). */
export const REDUCE_QUIET_CHECKS = 5;
/** REDUCE_QUIET_UTILIZATION: the event loop busy less than this share of the time is quiet. */
export const REDUCE_QUIET_UTILIZATION = 0.05;
/** REDUCE_MIN_GROWTH_BYTES: the heap must have grown this much since the last reduction for one to pay for its pause. */
export const REDUCE_MIN_GROWTH_BYTES = 32 * 2 ** 20;

export interface HeapReducerOptions {
  /** collect runs a full, memory-reducing collection (compacting, giving emptied pages back to the system). */
  collect: () => void;
  /** heapCommitted is the heap's committed size (process.memoryUsage().heapTotal). */
  heapCommitted: () => number;
  /** utilization is the event loop's busy share (0-1) since the previous call. */
  utilization: () => number;
  logger: Logger;
  metrics?: Pick<Metrics, 'heapReductions'>;
  /** interval: the timers to check on (tests drive check() themselves and pass none). */
  interval?: { set(fn: () => void, ms: number): unknown; clear(handle: unknown): void } | null;
}

/**
 * HeapReducer gives a burst's heap back once the server is quiet again. A burst of joins, a restart's reconnects or
 * a large policy change grows V8's heap by garbage; V8 keeps the emptied pages for reuse and gives them back only
 * in memory-reducing collections of its own, which wait for an allocation rate a server holding thousands of
 * sessions (keepalives, presence) seldom has. So the server's resident set stayed at the burst's peak. When the
 * event loop has been quiet for REDUCE_QUIET_CHECKS readings and the heap has grown REDUCE_MIN_GROWTH_BYTES since the
 * last reduction, one such collection runs (a pause of some tens of ms per 100 MiB of heap, at a quiet moment);
 * the MemoryTrimmer then gives the C heap's free pages back after it.
 */
export class HeapReducer {
  private baseline: number;
  private quiet = 0;
  private readonly timer: unknown;

  constructor(private readonly opts: HeapReducerOptions) {
    // Start-up's own garbage (modules compiled, the tailnet loaded) counts as the first burst.
    this.baseline = 0;
    const interval = opts.interval === undefined ? realInterval : opts.interval;
    this.timer = interval?.set(() => this.check(), REDUCE_CHECK_MS);
  }

  /** check reads the loop and the heap once; true when it ran a reduction. */
  check(): boolean {
    this.quiet = this.opts.utilization() < REDUCE_QUIET_UTILIZATION ? this.quiet + 1 : 0;
    const committed = this.opts.heapCommitted();
    // V8 shrank the heap on its own: growth counts from there.
    if (committed < this.baseline) this.baseline = committed;
    if (this.quiet < REDUCE_QUIET_CHECKS || committed - this.baseline < REDUCE_MIN_GROWTH_BYTES) return false;
    const t0 = performance.now();
    this.opts.collect();
    const after = this.opts.heapCommitted();
    this.opts.metrics?.heapReductions.inc();
    this.opts.logger.debug('gave a burst\'s heap back', { from_mib: Math.round(committed / 2 ** 20), to_mib: Math.round(after / 2 ** 20), ms: Math.round(performance.now() - t0) });
    this.baseline = after;
    this.quiet = 0;
    return true;
  }

  stop(): void {
    const interval = this.opts.interval === undefined ? realInterval : this.opts.interval;
    interval?.clear(this.timer);
  }
}

const realInterval = {
  // The timer must not keep an otherwise finished process alive.
  set: (fn: () => void, ms: number) => setInterval(fn, ms).unref(),
  clear: (handle: unknown) => clearInterval(handle as NodeJS.Timeout),
};

type GcFunction = (opts: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;

/**
 * memoryReducingGc is V8's collection for low memory: full, compacting, emptied pages given back. V8 hands it out
 * through its gc extension only, which this process turns on for itself (a fresh context's `gc`; nothing else sees it).
 */
export function memoryReducingGc(): () => void {
  let gc = (globalThis as { gc?: GcFunction }).gc;
  if (!gc) {
    setFlagsFromString('--expose-gc');
    gc = runInNewContext('gc') as GcFunction;
  }
  const collect = gc;
  return () => collect({ type: 'major', execution: 'sync', flavor: 'last-resort' });
}

/** startHeapReducer runs a HeapReducer on this process's heap and event loop. */
export function startHeapReducer(logger: Logger, metrics: Metrics): HeapReducer {
  // The scheduler's meter of how busy the loop was, read from one check to the next.
  let mark = eventLoopMeter.mark();
  return new HeapReducer({
    collect: memoryReducingGc(),
    heapCommitted: () => process.memoryUsage().heapTotal,
    utilization: () => {
      const busy = eventLoopMeter.since(mark);
      mark = eventLoopMeter.mark();
      return busy;
    },
    logger, metrics,
  });
}

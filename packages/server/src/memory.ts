import { constants, PerformanceObserver } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';
import type { Logger } from '@headway/core';
import type { Metrics } from '@headway/core';

/** A trim waits this long after the collection that prompted it, so a run of collections leads to one trim. */
export const TRIM_DELAY_MS = 1_000;
/** At most one trim in this long: under steady load the pages given back would only be faulted in again. */
export const TRIM_MIN_INTERVAL_MS = 10_000;

export interface MemoryTrimOptions {
  /** Gives the C heap's free pages back to the system (glibc malloc_trim); true when some were released. */
  trim: () => boolean;
  logger: Logger;
  metrics: Pick<Metrics, 'memoryTrimSeconds' | 'memoryTrimmedBytes'>;
  /** delayMs and minIntervalMs replace TRIM_DELAY_MS and TRIM_MIN_INTERVAL_MS (tests). */
  delayMs?: number;
  minIntervalMs?: number;
  /** clock replaces performance.now and (unref'd) setTimeout: tests drive the trimmer on a clock of their own. */
  clock?: TrimClock;
}

/** TrimClock is the time the trimmer reads and the timers it sets. */
export interface TrimClock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realClock: TrimClock = {
  now: () => performance.now(),
  // The timer must not keep an otherwise finished process alive.
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/**
 * MemoryTrimmer gives the C heap's free pages back to the system after garbage collections, at most every
 * TRIM_MIN_INTERVAL_MS. A burst of joins allocates and frees tens of MiB of short-lived C memory (HTTP/2
 * output copies, Noise frames, compressed maps) between allocations that live as long as their session; glibc
 * returns freed memory on its own only from the top of a heap, so without a trim an idle server keeps the
 * burst's high-water mark resident.
 * Short-lived buffers are freed when V8 collects their objects, so a collection is the moment to look.
 */
export class MemoryTrimmer {
  private readonly observer: PerformanceObserver;
  private readonly clock: TrimClock;
  private timer?: unknown;
  private last = -Infinity;

  constructor(private readonly opts: MemoryTrimOptions) {
    this.clock = opts.clock ?? realClock;
    this.observer = new PerformanceObserver((list) => {
      if (list.getEntries().some((e) => ((e as { detail?: { kind?: number } }).detail)?.kind === constants.NODE_PERFORMANCE_GC_MAJOR)) this.schedule();
    });
    this.observer.observe({ entryTypes: ['gc'] });
  }

  /** schedule arranges one trim TRIM_DELAY_MS from now, or once TRIM_MIN_INTERVAL_MS has passed since the last. */
  schedule(): void {
    if (this.timer) return;
    this.arm(Math.max(this.opts.delayMs ?? TRIM_DELAY_MS, this.untilAllowed()));
  }

  /** arm sets the timer; a timer counts from the event loop's cached clock and may fire early: it waits on then. */
  private arm(delay: number): void {
    this.timer = this.clock.setTimeout(() => {
      const wait = this.untilAllowed();
      if (wait > 0) { this.arm(wait); return; }
      this.timer = undefined;
      this.trimNow();
    }, delay);
  }

  private untilAllowed(): number {
    return this.last + (this.opts.minIntervalMs ?? TRIM_MIN_INTERVAL_MS) - this.clock.now();
  }

  /** trimNow trims at once and returns the bytes of resident memory given back. */
  trimNow(): number {
    const rss = process.memoryUsage.rss();
    const end = this.opts.metrics.memoryTrimSeconds.startTimer();
    this.opts.trim();
    end();
    this.last = this.clock.now();
    const released = Math.max(0, rss - process.memoryUsage.rss());
    this.opts.metrics.memoryTrimmedBytes.inc(released);
    if (released >= 1 << 20) this.opts.logger.debug('gave free memory back to the system', { mib: Math.round(released / 104857.6) / 10 });
    return released;
  }

  stop(): void {
    this.observer.disconnect();
    if (this.timer !== undefined) this.clock.clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** SESSION_HEAP_BYTES: the live JavaScript heap one connected device takes (about 23-30 KiB measured; docs/performance.md). */
export const SESSION_HEAP_BYTES = 32 * 1024;

/**
 * heapHeadroomWarning says when the heap's limit leaves less than twice what the stored tailnet needs live with every
 * node connected (bursts of joins and changes hold more for a while): the server would stop with V8's out-of-memory
 * error at the next large burst. `heapUsed` is the heap in use now, with the tailnet loaded and no session yet.
 */
export function heapHeadroomWarning(nodes: number, heapUsed: number, heapLimit: number): string | undefined {
  const need = heapUsed + nodes * SESSION_HEAP_BYTES;
  if (need * 2 <= heapLimit) return undefined;
  const mib = (b: number) => Math.round(b / 2 ** 20);
  return `the JavaScript heap's limit is ${mib(heapLimit)} MiB; with its ${nodes} nodes connected the server holds about ${mib(need)} MiB live and more in bursts: ` +
    `raise memory.heap_limit_mb (to ${Math.ceil((need * 3) / 2 ** 20 / 256) * 256} or more)`;
}

/** warnHeapHeadroom logs heapHeadroomWarning for this process, once the tailnet is loaded. */
export function warnHeapHeadroom(logger: Logger, nodes: number): void {
  const warning = heapHeadroomWarning(nodes, process.memoryUsage().heapUsed, getHeapStatistics().heap_size_limit);
  if (warning) logger.warn(warning);
}

/**
 * startMemoryTrimmer loads @headway/memtrim (an optional dependency with a small C addon) and starts a trimmer,
 * or says once why there is none: not built, not installed, or not glibc at debug level; a build that failed at
 * install, with its reason, as a warning (the operator can fix it: a compiler, Node's headers).
 */
export async function startMemoryTrimmer(logger: Logger, metrics: Metrics): Promise<MemoryTrimmer | undefined> {
  let loaded: { trim(): boolean } | { unavailable: string; buildFailed?: boolean };
  try {
    loaded = (await import('@headway/memtrim')).loadMemoryTrim();
  } catch (err) {
    loaded = { unavailable: `@headway/memtrim is not installed (${(err as Error).message})` };
  }
  if ('unavailable' in loaded) {
    logger[loaded.buildFailed ? 'warn' : 'debug']('free C memory stays with the process', { reason: loaded.unavailable });
    return undefined;
  }
  return new MemoryTrimmer({ trim: loaded.trim, logger, metrics });
}

import { performance, type EventLoopUtilization } from 'node:perf_hooks';

/** Timer is a pending Clock.setTimeout, to clear or unref. */
export type Timer = { readonly __timer: unique symbol } | NodeJS.Timeout;

/**
 * Clock is what the map fan-out asks of time: the scheduler's windows and slices and the sessions' keep-alives go
 * through one, so tests run them on a clock they move by hand (test/fake-clock.ts) and assert what happens, not
 * how long it took.
 */
export interface Clock {
  /** now is a monotonic time in milliseconds. */
  now(): number;
  /** setTimeout calls fn(arg) after ms; passing the argument spares a closure per timer. */
  setTimeout<A = undefined>(fn: (arg: A) => void, ms: number, arg?: A): Timer;
  clearTimeout(timer: Timer | undefined): void;
  /** unref lets the process exit while the timer is pending. */
  unref(timer: Timer): void;
  /** setImmediate calls fn once the event loop has run what is waiting (the gap between two slices of work). */
  setImmediate(fn: () => void): void;
}

/** systemClock is the process's own: performance.now and Node's timers. */
export const systemClock: Clock = {
  now: () => performance.now(),
  setTimeout: <A>(fn: (arg: A) => void, ms: number, arg?: A) => setTimeout(fn, ms, arg as A),
  clearTimeout: (timer) => clearTimeout(timer as NodeJS.Timeout | undefined),
  unref: (timer) => { (timer as NodeJS.Timeout).unref(); },
  setImmediate: (fn) => { setImmediate(fn); },
};

/**
 * LoadMeter measures how busy the process was between a mark and now, as a fraction (0 idle, 1 saturated): the
 * scheduler tells a burst (a busy loop) from a lull with it.
 */
export interface LoadMeter {
  mark(): unknown;
  since(mark: unknown): number;
}

/** eventLoopMeter is the default LoadMeter: the event loop's utilization (perf_hooks). */
export const eventLoopMeter: LoadMeter = {
  mark: () => performance.eventLoopUtilization(),
  since: (mark) => performance.eventLoopUtilization(mark as EventLoopUtilization).utilization,
};

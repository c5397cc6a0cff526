// A Clock and LoadMeter the test moves by hand: timers fire only when advance() passes their time, slices of work
// take only the time spend() says. Tests then assert what the fan-out does and in what order, never how long it took.
import type { Clock, LoadMeter, Timer } from '../src/clock.js';

interface Pending { at: number; id: number; fn: (arg: unknown) => void; arg: unknown }

export class FakeClock implements Clock {
  private t = 0;
  /** busyMs: time spent working (spend), which meter() reads as load. */
  private busyMs = 0;
  private ids = 0;
  private readonly timers = new Map<number, Pending>();
  private immediates: Array<() => void> = [];
  /** unrefed: timers that would not keep a real process alive. */
  readonly unrefed = new Set<number>();

  now(): number { return this.t; }

  setTimeout<A = undefined>(fn: (arg: A) => void, ms: number, arg?: A): Timer {
    const id = ++this.ids;
    // Node runs a timer of less than 1 ms after 1 ms.
    this.timers.set(id, { at: this.t + Math.max(1, ms), id, fn: fn as (arg: unknown) => void, arg });
    return id as unknown as Timer;
  }

  clearTimeout(timer: Timer | undefined): void {
    if (timer !== undefined) this.timers.delete(timer as unknown as number);
  }

  unref(timer: Timer): void { this.unrefed.add(timer as unknown as number); }

  setImmediate(fn: () => void): void { this.immediates.push(fn); }

  /** pending is how many timers wait. */
  get pending(): number { return this.timers.size; }

  /** spend: ms pass while the event loop works (the load meter counts them as busy); no timer fires meanwhile. */
  spend(ms: number): void {
    this.t += ms;
    this.busyMs += ms;
  }

  /**
   * turn is one turn of the event loop at the current time, as Node runs it: the timers due by now fire in order,
   * then the immediates queued before this turn's check phase (one queued meanwhile waits for the next turn, so a
   * timer falling due during a slice of work fires between that slice and the next).
   */
  turn(): void {
    for (let next = this.due(this.t); next; next = this.due(this.t)) {
      this.timers.delete(next.id);
      next.fn(next.arg);
    }
    const queue = this.immediates;
    this.immediates = [];
    for (const fn of queue) fn();
  }

  /** advance lets ms pass: turn after turn, time moving on to each timer due by then while nothing else is queued. */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      this.turn();
      if (this.immediates.length) continue;
      const next = this.due(end);
      if (!next) break;
      this.t = Math.max(this.t, next.at);
    }
    this.t = Math.max(this.t, end);
  }

  /** due is the first timer due by `at` (by time, then by when it was set). */
  private due(at: number): Pending | undefined {
    let next: Pending | undefined;
    for (const p of this.timers.values()) if (p.at <= at && (!next || p.at < next.at || (p.at === next.at && p.id < next.id))) next = p;
    return next;
  }

  /** meter is a LoadMeter on this clock: the share of the time since a mark spent working (spend). */
  meter(): LoadMeter {
    return {
      mark: () => ({ t: this.t, busy: this.busyMs }),
      since: (mark) => {
        const m = mark as { t: number; busy: number };
        const elapsed = this.t - m.t;
        return elapsed > 0 ? Math.min(1, (this.busyMs - m.busy) / elapsed) : 0;
      },
    };
  }
}

import type { LoadMeter } from './clock.js';
import {
  BASE_WINDOW_MS, BUSY_UTILIZATION, FIRST_MAP_WAIT_PER_PREPARE_COST, LONE_FLUSH_CHANGES, MAX_COST_WINDOW_MS, MAX_DOUBLED_WINDOW_MS,
  MAX_FIRST_MAP_WAIT_MS, BURST_OVER_GAP_MS, QUIET_WINDOW_MS, WINDOW_PER_FLUSH_COST,
} from './fanout-knobs.js';

/** WindowInputs is what the window of a batch starting now is chosen from. */
export interface WindowInputs {
  /** current: the window in force (the last batch's). */
  current: number;
  /** busy: the event loop's utilization while the last sent batch was collected (its own flush not counted). */
  busy: number;
  /** sinceFlushEndMs: how long ago the last flush that sent something ended. */
  sinceFlushEndMs: number;
  /** lastFlushMs: what that flush cost (its own sending time). */
  lastFlushMs: number;
  /** sinceChangeMs: how long after the change before it this one came. */
  sinceChangeMs: number;
  /** lastFlushChanges: how many changes that flush carried. */
  lastFlushChanges: number;
}

/**
 * nextBatchWindow picks the window of a batch starting with a change now.
 * - A change that did not queue up behind a flush (the last one ended BASE_WINDOW_MS or more ago) is no burst's:
 *   it waits QUIET_WINDOW_MS when it also came BASE_WINDOW_MS or more after the change before it (a lone rename),
 *   else BASE_WINDOW_MS (the next change of a burst is right behind it).
 * - Right behind a flush, but after a gap in changes (BURST_OVER_GAP_MS) or behind the flush of a lone change or
 *   two (LONE_FLUSH_CHANGES): no burst either, BASE_WINDOW_MS.
 * - Otherwise a burst goes on: the window doubles when the loop was busy (BUSY_UTILIZATION) while the last batch was
 *   collected, up to MAX_DOUBLED_WINDOW_MS, and is at least WINDOW_PER_FLUSH_COST times the last flush's cost, up
 *   to MAX_COST_WINDOW_MS, so that more changes share each message and fanning out leaves most of the server to
 *   the work producing them. That floor does not ask for a busy loop: one contended by other processes measures
 *   quiet while the flushes it pays for are costly all the same.
 */
export function nextBatchWindow(w: WindowInputs): number {
  if (w.sinceFlushEndMs >= BASE_WINDOW_MS) return w.sinceChangeMs >= BASE_WINDOW_MS ? QUIET_WINDOW_MS : BASE_WINDOW_MS;
  if (w.sinceChangeMs >= BURST_OVER_GAP_MS || w.lastFlushChanges <= LONE_FLUSH_CHANGES) return BASE_WINDOW_MS;
  const doubled = w.busy >= BUSY_UTILIZATION ? w.current * 2 : BASE_WINDOW_MS;
  const byCost = Math.min(MAX_COST_WINDOW_MS, WINDOW_PER_FLUSH_COST * w.lastFlushMs);
  return Math.max(Math.min(MAX_DOUBLED_WINDOW_MS, Math.max(BASE_WINDOW_MS, doubled)), byCost);
}

/**
 * firstMapWait is how long new sessions wait for their first maps, while a batch is pending and the policy's view
 * is stale, when preparing the view last took prepareMs: long enough for many joiners to share one preparation,
 * never as long as a burst's batch window.
 */
export function firstMapWait(prepareMs: number): number {
  return Math.min(MAX_FIRST_MAP_WAIT_MS, Math.max(BASE_WINDOW_MS, FIRST_MAP_WAIT_PER_PREPARE_COST * prepareMs));
}

/**
 * BatchWindow is the batch window in force and what the next one is chosen from: the pending batch (when it began,
 * how many changes it holds, the loop's load meanwhile) and the last flush that sent something.
 */
export class BatchWindow {
  /** ms is the window the pending batch waits (or the last one waited). */
  ms = BASE_WINDOW_MS;
  /** flushEnd, lastFlushMs and lastFlushChanges: when the last flush that sent something ended, its cost and its changes. */
  flushEnd = Number.NEGATIVE_INFINITY;
  lastFlushMs = 0;
  lastFlushChanges = Number.POSITIVE_INFINITY;
  /** busy: the loop's utilization while the last sent batch was collected. */
  private busy = 0;
  private lastChangeAt = Number.NEGATIVE_INFINITY;
  /** changes counts the changes since the last flush began; openedAt and loadMark are the pending batch's start. */
  private changes = 0;
  private openedAt = 0;
  private loadMark?: unknown;

  /** changeArrived counts a change made at `now` and answers how long after the one before it came. */
  changeArrived(now: number): number {
    const since = now - this.lastChangeAt;
    this.lastChangeAt = now;
    this.changes++;
    return since;
  }

  /** heldChangesArrive: changes held back behind a flush come back to back with what held them (a burst goes on). */
  heldChangesArrive(now: number): void { this.lastChangeAt = now; }

  /** sinceLastChange is how long ago the last change came. */
  sinceLastChange(now: number): number { return now - this.lastChangeAt; }

  /** open starts a batch with a change that came sinceChangeMs after the one before: it picks and answers the window. */
  open(now: number, sinceChangeMs: number, meter: LoadMeter): number {
    this.ms = nextBatchWindow({
      current: this.ms, busy: this.busy, sinceFlushEndMs: now - this.flushEnd, lastFlushMs: this.lastFlushMs, sinceChangeMs,
      lastFlushChanges: this.lastFlushChanges,
    });
    this.loadMark = meter.mark();
    this.openedAt = now;
    return this.ms;
  }

  /** idleSinceOpen: the loop was mostly idle since the pending batch began (the burst that set its window is over). */
  idleSinceOpen(meter: LoadMeter): boolean {
    return this.loadMark !== undefined && meter.since(this.loadMark) < BUSY_UTILIZATION;
  }

  /** dueIn is how long the pending batch still waits. */
  dueIn(now: number): number { return this.openedAt + this.ms - now; }

  /** hurry cuts the pending batch's window to the quiet one, counted from now. */
  hurry(): void { this.ms = QUIET_WINDOW_MS; }

  /** flushBegins records, for the next window, the load while this batch was collected and how many changes it carries. */
  flushBegins(meter: LoadMeter): void {
    this.busy = this.loadMark !== undefined ? meter.since(this.loadMark) : 0;
    this.lastFlushChanges = this.changes;
    this.changes = 0;
  }

  /** flushEnded records when the flush ended and what it cost. */
  flushEnded(now: number, costMs: number): void {
    this.flushEnd = now;
    this.lastFlushMs = costMs;
  }
}

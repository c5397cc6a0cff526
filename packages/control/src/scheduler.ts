import type { Logger, Metrics } from '@headway/core';
import { BatchWindow, firstMapWait } from './batch-window.js';
import type { Clock, LoadMeter, Timer } from './clock.js';
import { BURST_OVER_GAP_MS, BUSY_UTILIZATION, LULL_MS, QUIET_WINDOW_MS, SLICE_MS } from './fanout-knobs.js';

/** Job is work the scheduler runs in slices (a SlicedJob). */
export interface Job {
  /** run works for about sliceMs; true once the job is done. */
  run(sliceMs: number, clock: Clock): boolean;
  /** busyMs is the time its slices took, all told. */
  readonly busyMs: number;
}

/**
 * SlicedJob is one step per item (a session to send a batch's message, or one waiting for its first map), run in
 * slices of about sliceMs of work, so that the event loop serves handshakes and requests between them.
 */
export class SlicedJob<T> implements Job {
  private next = 0;
  /** busyMs is the time its slices took, all told. */
  busyMs = 0;

  constructor(private readonly items: readonly T[], private readonly step: (item: T) => void) {}

  /** run takes steps for about sliceMs; true once every item has had its step. */
  run(sliceMs: number, clock: Clock): boolean {
    const started = clock.now();
    try {
      while (this.next < this.items.length) {
        this.step(this.items[this.next++]!);
        if (clock.now() - started >= sliceMs) break;
      }
    } finally {
      this.busyMs += clock.now() - started;
    }
    return this.next >= this.items.length;
  }
}

/** JobKind: a flush sends a batch of changes to every session; a round sends waiting sessions their first maps. */
export type JobKind = 'flush' | 'first-maps';

/** FanoutWork is what the scheduler runs; the SessionHub provides it. */
export interface FanoutWork<C> {
  /** apply puts a change into the pending batch (never while a job runs: the scheduler holds changes back then). */
  apply(change: C): void;
  /** takeBatch takes the pending batch as a job of one step per session; undefined when nothing is pending. */
  takeBatch(): Job | undefined;
  /** batchSent: every session has had its step of the batch. */
  batchSent(): void;
  /** takeFirstMaps takes the sessions waiting for a first map as a job; undefined when none waits. */
  takeFirstMaps(): Job | undefined;
  /** firstMapsWaiting: some session waits for its first map. */
  firstMapsWaiting(): boolean;
  /** prepareCostMs is what preparing the policy's view last cost (first maps wait in proportion, see firstMapWait). */
  prepareCostMs(): number;
}

/** SchedulerOptions are the scheduler's surroundings: time, load, and where it reports. */
export interface SchedulerOptions {
  clock: Clock;
  loadMeter: LoadMeter;
  metrics: Metrics;
  logger: Logger;
}

/**
 * FanoutScheduler decides when the map fan-out runs: it owns the batch window and every timer of the fan-out (the
 * batch's, the lull watch's, the first maps'), runs one job at a time in slices, and holds changes back while a
 * job runs, so that a whole flush or round of first maps shares one view of the tailnet.
 */
export class FanoutScheduler<C> {
  readonly window = new BatchWindow();
  /** loadMeter is replaceable (tests drive the window with a meter of their own). */
  loadMeter: LoadMeter;
  /** hurried and lulled count batches sent early after a gap in changes (BURST_OVER_GAP_MS) or a lull (LULL_MS). */
  hurried = 0;
  lulled = 0;
  private readonly clock: Clock;
  private readonly metrics: Metrics;
  private readonly logger: Logger;
  private batchTimer?: Timer;
  private lullTimer?: Timer;
  private lullMark?: unknown;
  private firstMapTimer?: Timer;
  private job?: { readonly kind: JobKind; readonly run: Job };
  /** batchDue: the batch timer fired while a job ran. */
  private batchDue = false;
  private held: C[] = [];

  constructor(private readonly work: FanoutWork<C>, o: SchedulerOptions) {
    this.clock = o.clock;
    this.loadMeter = o.loadMeter;
    this.metrics = o.metrics;
    this.logger = o.logger;
  }

  /** busy: a flush or a round of first maps is under way (in slices). */
  get busy(): boolean { return this.job !== undefined; }
  /** timerPending: a batch or the waiting first maps are due on a timer. */
  get timerPending(): boolean { return this.batchTimer !== undefined || this.firstMapTimer !== undefined; }
  get roundUnderWay(): boolean { return this.job?.kind === 'first-maps'; }

  /** admit applies a change now, or holds it back until the job under way ends. */
  admit(change: C): void {
    if (this.busy) this.held.push(change);
    else this.work.apply(change);
  }

  /** changeQueued: the pending batch took a change. The first starts the batch's window; a later one may end a burst. */
  changeQueued(): void {
    const now = this.clock.now();
    const sinceChange = this.window.changeArrived(now);
    if (this.batchTimer) {
      if (sinceChange >= BURST_OVER_GAP_MS && this.window.idleSinceOpen(this.loadMeter) && this.sendSoon('change', now)) this.hurried++;
      return;
    }
    const ms = this.window.open(now, sinceChange, this.loadMeter);
    this.metrics.mapBatchWindow.set(ms / 1000);
    this.batchTimer = this.clock.setTimeout(this.onBatchTimer, ms);
    if (ms > LULL_MS) this.armLull(LULL_MS);
  }

  /** flushNow sends whatever is pending at once, with the round of first maps under way if any (shutdown, tests). */
  flushNow(): void {
    this.finish('first-maps');
    this.clearBatchTimer();
    this.clearFirstMapTimer();
    this.flush();
  }

  /** flushInSlices sends what is pending as the batch timer does, in slices of about sliceMs (tests: 0, one session a slice). */
  flushInSlices(sliceMs = SLICE_MS): void {
    this.clearBatchTimer();
    this.flush(sliceMs);
  }

  /** sendPendingNow sends the pending batch at once, leaving the sessions that wait for first maps waiting. */
  sendPendingNow(): void { this.sendBatch(); }

  /** waitForFirstMaps: a session now waits for its first map; a round under way starts the wait when it ends. */
  waitForFirstMaps(): void {
    if (!this.roundUnderWay) this.armFirstMaps();
  }

  /** openInSlices sends the waiting sessions their first maps, in slices, unless a job is under way (its end does). */
  openInSlices(sliceMs = SLICE_MS): void {
    this.clearFirstMapTimer();
    if (!this.busy) this.openWaiting(sliceMs);
  }

  /** openWaitingNow sends the waiting sessions their first maps at once, leaving the batch pending (tests). */
  openWaitingNow(): void {
    this.clearFirstMapTimer();
    this.finish('first-maps');
    // A flush under way opens them when it ends, with the changes it held back applied.
    if (this.job?.kind === 'flush') return;
    this.openWaiting();
  }

  stop(): void {
    this.job = undefined;
    this.held = [];
    this.clearBatchTimer();
    this.clock.clearTimeout(this.lullTimer);
    this.lullTimer = undefined;
    this.clearFirstMapTimer();
  }

  private readonly onBatchTimer = (): void => {
    this.batchTimer = undefined;
    if (this.busy) { this.batchDue = true; return; }
    try {
      this.flush(SLICE_MS);
    } catch (err) {
      this.logger.error('failed to send a batch of changes to map sessions', { error: (err as Error).message });
    }
  };

  /** armLull watches for a lull in changes under a long window (see LULL_MS). */
  private armLull(ms: number): void {
    this.clock.clearTimeout(this.lullTimer);
    this.lullMark = this.loadMeter.mark();
    this.lullTimer = this.clock.setTimeout(this.onLull, ms);
  }

  private readonly onLull = (): void => {
    this.lullTimer = undefined;
    if (!this.batchTimer) return; // sent already, or due when the job under way ends
    const now = this.clock.now();
    const quiet = this.window.sinceLastChange(now);
    // While a job runs, changes are held back: no lull can be told.
    if (this.busy || quiet < LULL_MS) { this.armLull(this.busy ? LULL_MS : LULL_MS - quiet); return; }
    // No change, but the loop busy all along: held up (a long first map, a collection), not idle.
    if (this.loadMeter.since(this.lullMark) >= BUSY_UTILIZATION) { this.armLull(LULL_MS); return; }
    if (this.sendSoon('lull', now)) this.lulled++;
  };

  /** sendSoon sends the pending batch after QUIET_WINDOW_MS instead of the rest of its window; false when due by then anyway. */
  private sendSoon(reason: 'change' | 'lull', now: number): boolean {
    if (this.window.dueIn(now) <= QUIET_WINDOW_MS) return false;
    this.clearBatchTimer();
    this.window.hurry();
    this.batchTimer = this.clock.setTimeout(this.onBatchTimer, QUIET_WINDOW_MS);
    this.metrics.mapBatchesEarly.inc({ reason });
    return true;
  }

  /** flush sends the pending batch, then (when no flush is left under way) the sessions waiting for first maps. */
  private flush(sliceMs?: number): void {
    try {
      this.sendBatch(sliceMs);
    } finally {
      if (this.job?.kind !== 'flush') this.openWaiting(sliceMs);
    }
  }

  /** sendBatch finishes a flush under way, then starts one of the pending batch (in slices with sliceMs). */
  private sendBatch(sliceMs?: number): void {
    this.finish('flush');
    const run = this.work.takeBatch();
    if (!run) return;
    this.window.flushBegins(this.loadMeter);
    this.start('flush', run, sliceMs);
  }

  private openWaiting(sliceMs?: number): void {
    const run = this.work.takeFirstMaps();
    if (run) this.start('first-maps', run, sliceMs);
  }

  private armFirstMaps(): void {
    this.firstMapTimer ??= this.clock.setTimeout(() => this.openInSlices(), firstMapWait(this.work.prepareCostMs()));
  }

  /** start runs a job: at once without sliceMs, else its first slice now and the rest between turns of the loop. */
  private start(kind: JobKind, run: Job, sliceMs?: number): void {
    // One job at a time: a flush asked for during a round (tests only) comes after it.
    if (kind === 'flush') this.finish('first-maps');
    const job = { kind, run };
    this.job = job;
    if (sliceMs === undefined) this.finish(kind);
    else this.proceed(job, sliceMs);
  }

  /** proceed runs the job's next slice; after its last, it ends the job (a flush then opens the waiting sessions). */
  private proceed(job: NonNullable<FanoutScheduler<C>['job']>, sliceMs: number): void {
    if (this.job !== job) return;
    try {
      if (!job.run.run(sliceMs, this.clock)) {
        this.clock.setImmediate(() => this.proceed(job, sliceMs));
        return;
      }
    } catch (err) {
      const what = job.kind === 'flush' ? 'a batch of changes to map sessions' : 'new map sessions their first maps';
      this.logger.error(`failed to send ${what}`, { error: (err as Error).message });
    }
    this.job = undefined;
    this.ended(job);
    if (job.kind === 'flush') this.openWaiting(sliceMs);
  }

  /** finish runs what is left of the job under way, when it is of this kind, at once. */
  private finish(kind: JobKind): void {
    const job = this.job;
    if (job?.kind !== kind) return;
    this.job = undefined;
    try {
      job.run.run(Number.POSITIVE_INFINITY, this.clock);
    } finally {
      this.ended(job);
    }
  }

  /**
   * ended applies the changes held back during a job. After a flush it records the flush's cost, and a batch that
   * came due meanwhile starts its window; after a round such a batch goes out at once (a window those changes
   * started would add a batch), else sessions that came to wait during the round start their wait.
   */
  private ended(job: { readonly kind: JobKind; readonly run: Job }): void {
    if (job.kind === 'flush') {
      this.work.batchSent();
      this.window.flushEnded(this.clock.now(), job.run.busyMs);
      this.metrics.mapBatches.observe(job.run.busyMs / 1000);
    }
    this.releaseHeld();
    if (job.kind === 'flush') {
      if (this.batchDue) { this.batchDue = false; this.changeQueued(); }
    } else if (this.batchDue) {
      this.batchDue = false;
      this.flushInSlices();
    } else if (this.work.firstMapsWaiting()) this.armFirstMaps();
  }

  private releaseHeld(): void {
    const held = this.held;
    this.held = [];
    if (held.length) this.window.heldChangesArrive(this.clock.now());
    for (const c of held) this.work.apply(c);
  }

  private clearBatchTimer(): void {
    this.clock.clearTimeout(this.batchTimer);
    this.batchTimer = undefined;
  }

  private clearFirstMapTimer(): void {
    this.clock.clearTimeout(this.firstMapTimer);
    this.firstMapTimer = undefined;
  }
}

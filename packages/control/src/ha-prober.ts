import { randomBytes } from 'node:crypto';
import type { Logger, PingRequest } from '@headway/core';
import type { Clock, Timer } from './clock.js';

/**
 * ProbeTarget is a router's map session as the prober sees it: any object that stays the same for as long as the
 * session lasts (a reconnect makes a new one), so a verdict can tell a new session from the one it probed.
 */
export type ProbeTarget = object;

/** HaProberDeps is what the prober asks of the fan-out; SessionHub provides it, tests provide their own. */
export interface HaProberDeps {
  clock: Clock;
  logger: Logger;
  /** intervalMs: how often a round of pings goes out (node.routes.ha.probe_interval). */
  intervalMs: number;
  /** timeoutMs: how long a round waits for its answers (node.routes.ha.probe_timeout, less than intervalMs). */
  timeoutMs: number;
  /** pingUrl is the URL a client calls to answer the ping with this id. */
  pingUrl(id: string): string;
  /** routers are the online routers of the subnet routes two or more online routers serve. */
  routers(): Iterable<number>;
  /** session is the router's current map session, undefined when it has none. */
  session(nodeId: number): ProbeTarget | undefined;
  /** send puts the PingRequest on the session's map stream. */
  send(target: ProbeTarget, ping: PingRequest): void;
  /** apply records the round's verdicts (node id → answered) and moves routes off the routers that did not. */
  apply(verdicts: ReadonlyMap<number, boolean>): void;
  /** count is told of every ping sent, answered and missed (the metrics counter). */
  count?(result: 'sent' | 'answered' | 'missed'): void;
  /** newId makes the unguessable id of one ping (default: 16 random bytes, base64url). */
  newId?: () => string;
}

interface Probe { nodeId: number; target: ProbeTarget; stable: boolean; answered: boolean }

/** ProbeCounts are the prober's running totals since start (headway_ha_probes_total counts the same through count). */
export interface ProbeCounts { sent: number; answered: number; missed: number; rounds: number }

/**
 * HaProber asks every router of a highly available subnet route (one that two or more online routers serve) to
 * answer a PingRequest every intervalMs, and after timeoutMs tells the election which answered: a router that did
 * not is unhealthy, and its routes move to a healthy online router; one that answers again is healthy again (it
 * does not take its routes back: the new primary keeps them while it stays online and healthy).
 *
 * Silence counts only against a session that was already probed in the round before, so a router that just
 * reconnected has a full round to apply its new netmap; a round in which a silent router was given that grace, or
 * reconnected before its timeout, decides nothing, so the election never acts on half the picture. A round costs
 * O(HA routers).
 */
export class HaProber {
  private readonly pending = new Map<string, Probe>();
  private unanswered = 0;
  /** lastTarget: the session each router was probed on in the previous round. */
  private lastTarget = new Map<number, ProbeTarget>();
  private roundTimer?: Timer;
  private verdictTimer?: Timer;
  private running = false;
  readonly counts: ProbeCounts = { sent: 0, answered: 0, missed: 0, rounds: 0 };
  private readonly newId: () => string;

  constructor(private readonly d: HaProberDeps) {
    if (!(d.timeoutMs > 0 && d.timeoutMs < d.intervalMs)) throw new Error(`probe timeout ${d.timeoutMs} ms must be above 0 and below the interval ${d.intervalMs} ms`);
    this.newId = d.newId ?? (() => randomBytes(16).toString('base64url'));
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.schedule();
  }

  stop(): void {
    this.running = false;
    this.d.clock.clearTimeout(this.roundTimer);
    this.d.clock.clearTimeout(this.verdictTimer);
    this.roundTimer = this.verdictTimer = undefined;
    this.pending.clear();
    this.unanswered = 0;
  }

  /** outstanding is how many pings of the current round wait for an answer. */
  get outstanding(): number { return this.unanswered; }

  /**
   * answer records a client's answer to the ping with this id. It is true once per ping sent in the round under
   * way; an unknown id, one already answered and one whose round ended are false (the caller answers 404).
   */
  answer(id: string): boolean {
    const p = this.pending.get(id);
    if (!p || p.answered) return false;
    p.answered = true;
    this.unanswered--;
    this.counts.answered++;
    this.d.count?.('answered');
    if (this.unanswered === 0) this.decide();
    return true;
  }

  /** round sends one round of pings now (the timer calls it every intervalMs; tests may call it). */
  round(): void {
    if (this.pending.size) this.decide();
    const seen = new Map<number, ProbeTarget>();
    for (const nodeId of this.d.routers()) {
      const target = this.d.session(nodeId);
      if (!target) continue;
      seen.set(nodeId, target);
      const id = this.newId();
      this.pending.set(id, { nodeId, target, stable: this.lastTarget.get(nodeId) === target, answered: false });
      this.unanswered++;
      this.d.send(target, { URL: this.d.pingUrl(id) });
      this.counts.sent++;
      this.d.count?.('sent');
    }
    this.lastTarget = seen;
    if (!this.pending.size) return;
    this.counts.rounds++;
    this.d.clock.clearTimeout(this.verdictTimer);
    this.verdictTimer = this.d.clock.setTimeout(decideDue, this.d.timeoutMs, this);
    this.d.clock.unref(this.verdictTimer);
  }

  /** decide ends the round: every ping answered, or its timeout passed. */
  decide(): void {
    this.d.clock.clearTimeout(this.verdictTimer);
    this.verdictTimer = undefined;
    const verdicts = new Map<number, boolean>();
    let deferred = false;
    for (const p of this.pending.values()) {
      if (p.answered) { verdicts.set(p.nodeId, true); continue; }
      this.counts.missed++;
      this.d.count?.('missed');
      const now = this.d.session(p.nodeId);
      if (!now) continue; // offline: the election already left it out
      if (now !== p.target || !p.stable) { deferred = true; continue; }
      if (verdicts.get(p.nodeId) !== true) verdicts.set(p.nodeId, false);
    }
    this.pending.clear();
    this.unanswered = 0;
    if (deferred || !verdicts.size) return;
    const silent = [...verdicts].filter(([, ok]) => !ok).map(([id]) => id);
    if (silent.length) this.d.logger.warn('HA subnet routers did not answer a ping; their routes move to healthy routers', { nodes: silent, timeout_ms: this.d.timeoutMs });
    this.d.apply(verdicts);
  }

  private schedule(): void {
    if (!this.running) return;
    this.roundTimer = this.d.clock.setTimeout(roundDue, this.d.intervalMs, this);
    this.d.clock.unref(this.roundTimer);
  }

  /** tick: the interval passed; a round goes out and the next is scheduled. */
  tick(): void {
    this.roundTimer = undefined;
    if (!this.running) return;
    try {
      this.round();
    } catch (err) {
      this.d.logger.error('HA route probe round failed', { error: (err as Error).message });
    }
    this.schedule();
  }
}

const roundDue = (p: HaProber): void => p.tick();
const decideDue = (p: HaProber): void => p.decide();

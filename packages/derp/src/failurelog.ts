/** FailureLogger is the slice of a logger HandshakeFailureLog writes to. */
export interface FailureLogger {
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
}

export interface HandshakeFailureLogOptions {
  /** intervalMs is how long one (address, reason) pair stays quiet after it was logged (default 60 s). */
  intervalMs?: number;
  /** maxLinesPerInterval caps lines across all addresses per interval, against a scan from many addresses (default 20). */
  maxLinesPerInterval?: number;
  /** maxTracked bounds the remembered pairs (default 1024). */
  maxTracked?: number;
  now?: () => number;
  /** message is each line's message, the reason going in its fields (default: the relay's handshake failure). */
  message?: string;
}

interface Entry {
  quietUntil: number;
  suppressed: number;
}

/** HandshakeFailure is one refused or broken relay connection attempt. */
export interface HandshakeFailure {
  /** remote is the client's address as the socket reports it (IP, optionally with port in `address`). */
  remote: string | undefined;
  /** reason says what went wrong in words an operator can act on. */
  reason: string;
  level?: 'info' | 'warn';
  fields?: Record<string, unknown>;
}

/**
 * HandshakeFailureLog writes one line per client address and reason per
 * interval, saying how many repeats it held back, because tailscaled redials a
 * failing relay every few seconds and would otherwise bury the log (or, when
 * nothing is logged at all, leave the operator with no clue on the server).
 */
export class HandshakeFailureLog {
  private readonly intervalMs: number;
  private readonly maxLines: number;
  private readonly maxTracked: number;
  private readonly now: () => number;
  private readonly message: string;
  private readonly entries = new Map<string, Entry>();
  private windowStart = -Infinity;
  private linesInWindow = 0;
  private droppedInWindow = 0;

  constructor(private readonly logger: FailureLogger, options: HandshakeFailureLogOptions = {}) {
    this.intervalMs = options.intervalMs ?? 60_000;
    this.maxLines = options.maxLinesPerInterval ?? 20;
    this.maxTracked = options.maxTracked ?? 1024;
    this.now = options.now ?? Date.now;
    this.message = options.message ?? 'derp: relay connection failed its handshake';
  }

  /** report logs the failure unless the same address and reason were logged within the interval; true if it wrote a line. */
  report(failure: HandshakeFailure): boolean {
    const now = this.now();
    const ip = hostOf(failure.remote);
    const key = `${ip}\u0000${failure.reason}`;
    const entry = this.entries.get(key);
    if (entry && now < entry.quietUntil) {
      entry.suppressed++;
      return false;
    }
    if (now - this.windowStart >= this.intervalMs) {
      this.windowStart = now;
      this.linesInWindow = 0;
    }
    if (this.linesInWindow >= this.maxLines) {
      this.droppedInWindow++;
      return false;
    }
    this.linesInWindow++;
    const fields: Record<string, unknown> = { remote: failure.remote ?? 'unknown', reason: failure.reason, ...failure.fields };
    if (entry?.suppressed) fields.repeats_not_logged = entry.suppressed;
    if (this.droppedInWindow) {
      fields.other_failures_not_logged = this.droppedInWindow;
      this.droppedInWindow = 0;
    }
    if (failure.level === 'warn') this.logger.warn(this.message, fields);
    else this.logger.info(this.message, fields);
    this.entries.delete(key);
    this.entries.set(key, { quietUntil: now + this.intervalMs, suppressed: 0 });
    if (this.entries.size > this.maxTracked) this.prune(now);
    return true;
  }

  /** prune forgets pairs whose quiet time is over, then the oldest, so memory stays bounded. */
  private prune(now: number): void {
    for (const [k, e] of this.entries) if (e.quietUntil <= now) this.entries.delete(k);
    for (const k of this.entries.keys()) {
      if (this.entries.size <= this.maxTracked) break;
      this.entries.delete(k);
    }
  }
}

/** hostOf strips a port so one client redialing from new ports counts as one address. */
function hostOf(remote: string | undefined): string {
  if (!remote) return '';
  const v6 = /^\[([^\]]+)\]:\d+$/.exec(remote);
  if (v6) return v6[1]!;
  const v4 = /^([^:]+):\d+$/.exec(remote);
  return v4 ? v4[1]! : remote;
}

import type { AuditEntry, AuditQuery, AuditRepository } from './ports/storage.js';
import type { Logger } from './log.js';
import { safeErrorText } from './errors.js';

/** AuditRecord is what a caller records: the log adds the id and the time. */
export type AuditRecord = Omit<AuditEntry, 'id' | 'at'>;

/** MEMORY_ENTRIES: without a storage that keeps the log, the latest this many entries are kept in memory. */
const MEMORY_ENTRIES = 1000;
/** PRUNE_EVERY_MS: how often entries older than audit.retention are deleted. */
const PRUNE_EVERY_MS = 60 * 60_000;

/**
 * AuditLog records every administrative change (the API layers call `record` after a change succeeded) and answers
 * what was recorded, newest first. It keeps the log in the storage's audit repository; a storage without one (the
 * memory adapter, a third-party adapter) gets the latest entries kept in memory. Recording never fails the change
 * it describes: a write that fails is logged.
 */
export class AuditLog {
  private readonly memory: AuditEntry[] = [];
  private nextId = 1;
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly repo: AuditRepository | undefined,
    private readonly logger: Logger,
    private readonly retentionMs: number,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** persistent says whether the log outlives the process. */
  get persistent(): boolean { return this.repo !== undefined; }

  async record(entry: AuditRecord): Promise<void> {
    const at = this.now();
    if (!this.repo) {
      this.memory.push({ id: this.nextId++, at, ...entry });
      if (this.memory.length > MEMORY_ENTRIES) this.memory.shift();
      return;
    }
    try {
      await this.repo.append({ at, ...entry });
    } catch (err) {
      this.logger.error('audit log: the change succeeded but could not be recorded', { actor: entry.actor, action: entry.action, error: safeErrorText(err) });
    }
  }

  list(query: AuditQuery): Promise<AuditEntry[]> {
    if (this.repo) return this.repo.list(query);
    const hits = this.memory.filter((e) => (query.before === undefined || e.id < query.before)
      && (query.actor === undefined || e.actor === query.actor) && (query.action === undefined || e.action === query.action));
    return Promise.resolve(hits.reverse().slice(0, query.limit));
  }

  /** prune deletes entries older than the retention (0 keeps all); returns how many went. */
  async prune(): Promise<number> {
    if (!this.retentionMs) return 0;
    const before = new Date(this.now().getTime() - this.retentionMs);
    if (!this.repo) {
      const keep = this.memory.filter((e) => e.at >= before);
      const gone = this.memory.length - keep.length;
      this.memory.splice(0, this.memory.length, ...keep);
      return gone;
    }
    return this.repo.prune(before);
  }

  /** start prunes hourly; `mayRun` lets one instance of a cluster do it. */
  start(mayRun: () => boolean = () => true): void {
    if (!this.retentionMs || this.timer) return;
    this.timer = setInterval(() => {
      if (!mayRun()) return;
      this.prune().then((n) => { if (n) this.logger.info('audit log pruned', { entries: n }); },
        (err: unknown) => this.logger.warn('audit log: pruning failed', { error: safeErrorText(err) }));
    }, PRUNE_EVERY_MS);
    this.timer.unref();
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

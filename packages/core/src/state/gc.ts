import type { HeadwayConfig } from '../config/schema.js';
import type { Logger } from '../log.js';
import type { State } from './state.js';

/**
 * NodeGc removes what nobody else would: ephemeral nodes left offline for
 * node.ephemeral.inactivity_timeout, and interactive logins that expired while
 * waiting (every registration.gc_interval). It follows online state from the
 * ChangeBus (State publishes a node going on- and offline), so the control
 * protocol does not need to know about it.
 */
export class NodeGc {
  private readonly ephemeralTimers = new Map<number, NodeJS.Timeout>();
  private pendingTimer?: NodeJS.Timeout;
  private unsubscribe?: () => void;

  /**
   * mayRun says whether this instance runs the jobs now (a cluster: only the holder
   * of the jobs lease deletes; every instance keeps the timers, so a takeover finds them).
   */
  mayRun: () => boolean = () => true;

  constructor(private readonly state: State, private readonly config: HeadwayConfig, private readonly logger: Logger) {}

  start(): void {
    this.unsubscribe = this.state.bus.subscribe((c) => {
      if (c.type === 'node-removed') this.cancel(c.nodeId);
      if (c.type === 'node-patch' && c.patch.online === true) this.cancel(c.nodeId);
      if (c.type === 'node-patch' && c.patch.online === false) {
        const n = this.state.nodes.get(c.nodeId);
        if (n?.ephemeral && !this.state.presence.isOnline(n.id)) this.scheduleEphemeral(n.id);
      }
    });
    for (const n of this.state.nodes.list()) if (n.ephemeral) this.scheduleEphemeral(n.id);
    this.startPendingGc();
  }

  /** startPendingGc deletes expired interactive logins periodically (nothing else removes abandoned ones). */
  private startPendingGc(): void {
    const every = this.config.registration.gc_interval;
    if (!every) return;
    const sweep = () => {
      if (!this.mayRun()) return;
      this.state.pending.deleteExpired().catch((err: Error) => this.logger.warn('pending registration cleanup failed', { error: err.message }));
    };
    sweep();
    this.pendingTimer = setInterval(sweep, every);
    this.pendingTimer.unref();
  }

  private cancel(id: number): void {
    clearTimeout(this.ephemeralTimers.get(id));
    this.ephemeralTimers.delete(id);
  }

  private scheduleEphemeral(id: number): void {
    const timeout = this.config.node.ephemeral.inactivity_timeout;
    clearTimeout(this.ephemeralTimers.get(id));
    const t = setTimeout(() => {
      this.ephemeralTimers.delete(id);
      const n = this.state.nodes.get(id);
      if (n?.ephemeral && !this.state.presence.isOnline(id) && !this.mayRun()) {
        // Another instance runs the jobs; look again later in case this one takes over.
        this.scheduleEphemeral(id);
        return;
      }
      if (n?.ephemeral && !this.state.presence.isOnline(id)) {
        this.logger.info('deleting inactive ephemeral node', { node: id, name: n.givenName });
        void this.state.nodes.delete(id).catch(() => undefined);
      }
    }, timeout);
    t.unref();
    this.ephemeralTimers.set(id, t);
  }

  stop(): void {
    this.unsubscribe?.();
    clearInterval(this.pendingTimer);
    for (const t of this.ephemeralTimers.values()) clearTimeout(t);
    this.ephemeralTimers.clear();
  }
}

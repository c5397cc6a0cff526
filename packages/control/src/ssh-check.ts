import { randomBytes } from 'node:crypto';
import { HeadwayError, ownedByTags, type HeadwayConfig, type Logger, type Node, type State } from '@headway/core';
import { sshCheckPeriodMs, type SSHAction, type SSHRule } from '@headway/policy';
import { systemClock, type Clock, type Timer } from './clock.js';

/** SSH_ACTION_PATH is where a device's SSH server asks what to do with a connection a `check` rule holds. */
export const SSH_ACTION_PATH = /^\/machine\/ssh\/action\/(\d{1,15})\/to\/(\d{1,15})$/;
/** CHECK_ID_PREFIX starts every check's auth ID, telling it from an interactive login's. */
const CHECK_ID_PREFIX = 'sshcheck-';
const CHECK_ID = /^sshcheck-[A-Za-z0-9_-]{32}$/;
/** MAX_WAITING bounds the checks waiting at once, server-wide on this instance (each needs a device's SSH connection to create). */
const MAX_WAITING = 10_000;
/** MAX_REMEMBERED bounds the (source, destination) approvals kept for checkPeriod; the oldest go first. */
const MAX_REMEMBERED = 100_000;
/** ALLOW lets an approved session forward agents and ports, as an `accept` rule does. */
const ALLOW = { allowAgentForwarding: true, allowLocalPortForwarding: true, allowRemotePortForwarding: true } as const;

/** Verdict is how a check ended: approved, or refused with the sentence the person connecting is shown. */
export type Verdict = { accept: true; by: string } | { accept: false; reason: string };

/** SshCheck is one held connection: which device connects to which, as whom, and until when it may wait. */
export interface SshCheck {
  id: string;
  src: number;
  dst: number;
  localUser: string;
  /** expiresAt is on the clock's time line (monotonic milliseconds). */
  expiresAt: number;
  verdict?: Verdict;
}

interface Entry extends SshCheck {
  waiters: Set<(v: Verdict) => void>;
  timer: Timer;
  /** delivered: the device was told the verdict; the ID lets no second connection in. */
  delivered: boolean;
}

/** ActionAnswer is the reply to /machine/ssh/action: 200 with an SSHAction, or an error status with a line of text. */
export type ActionAnswer = { status: 200; action: SSHAction } | { status: number; text: string };

export interface SshChecksOptions {
  state: State;
  config: HeadwayConfig;
  logger: Logger;
  /** checkPeriodOf is the checkPeriod (ms, 0 for "always") of the first `check` rule of dst's SSH policy naming src; undefined when none does. */
  checkPeriodOf(src: Node, dst: Node): number | undefined;
  clock?: Clock;
}

/**
 * SshChecks runs SSH `check` mode. A device whose SSH policy holds a connection asks
 * `GET /machine/ssh/action/<src>/to/<dst>` over its Noise session; with no approval of
 * that pair within the rule's checkPeriod it gets a HoldAndDelegate to the same path
 * with an auth_id, and a message with the check's URL (`/auth/<id>`) that the SSH
 * client prints. The device's follow-up is held until the owner of the source device
 * signs in again (identity provider) or an administrator approves or rejects the ID
 * (`headway auth approve|reject`), or until registration.pending_expiry; it is then
 * answered accept or reject. Checks and approvals live in this instance's memory:
 * the held request is on this instance's Noise connection, and a restart ends it.
 */
export class SshChecks {
  private readonly checks = new Map<string, Entry>();
  /** approvals: when each (src, dst) pair was last approved, on the clock's time line; oldest first. */
  private readonly approvals = new Map<string, number>();
  private readonly clock: Clock;

  constructor(private readonly o: SshChecksOptions) {
    this.clock = o.clock ?? systemClock;
  }

  /** owns says whether an auth ID names an SSH check (rather than an interactive login). */
  owns(id: string): boolean { return id.startsWith(CHECK_ID_PREFIX); }

  /** get is a check not yet told to its device, or undefined. */
  get(id: string): SshCheck | undefined {
    const e = this.checks.get(id);
    return e && !e.delivered ? e : undefined;
  }

  /** expiresAt is when a check stops waiting, as a wall-clock time (for its page). */
  expiresAt(c: SshCheck): Date { return new Date(Date.now() + Math.max(0, c.expiresAt - this.clock.now())); }

  /** authUrl is the page the person connecting opens. */
  authUrl(id: string): string { return `${this.o.config.server_url}/auth/${id}`; }

  /**
   * action answers the device's request. `url` is its path and query; `machineKey` the Noise session's.
   * A follow-up waits for the verdict; it resolves undefined when `signal` aborts (the device went away).
   */
  async action(url: string, machineKey: string, signal: AbortSignal): Promise<ActionAnswer | undefined> {
    const q = url.indexOf('?');
    const m = SSH_ACTION_PATH.exec(q < 0 ? url : url.slice(0, q));
    if (!m) return { status: 400, text: 'expected /machine/ssh/action/<src node id>/to/<dst node id>' };
    const params = new URLSearchParams(q < 0 ? '' : url.slice(q + 1));
    const srcId = Number(m[1]), dstId = Number(m[2]);
    const { nodes } = this.o.state;
    const dst = nodes.get(dstId);
    if (!dst) return { status: 404, text: `destination node ${dstId} not found` };
    // Only the destination device asks about connections to itself: another machine's session could otherwise approve or probe pairs.
    if (dst.machineKey !== machineKey) return { status: 401, text: `this machine is not node ${dstId}` };
    const src = nodes.get(srcId);
    const period = src ? this.o.checkPeriodOf(src, dst) : undefined;
    const authId = params.get('auth_id');
    if (authId === null) return this.first(srcId, dst, period, params.get('local_user') ?? '');
    if (!CHECK_ID.test(authId)) return { status: 400, text: 'auth_id: expected the ID of an SSH check' };
    const e = this.checks.get(authId);
    if (!e || e.delivered) {
      // Gone (expired, answered, or lost with a restart): a check still due starts anew rather than leave the client polling a dead ID.
      return period === undefined ? this.refusal(srcId, dstId) : this.delegate(srcId, dst, params.get('local_user') ?? '');
    }
    if (e.src !== srcId || e.dst !== dstId) return { status: 401, text: 'auth_id belongs to another source and destination' };
    const verdict = e.verdict ?? await this.wait(e, signal);
    if (!verdict) return undefined;
    e.delivered = true;
    if (!verdict.accept) return { status: 200, action: { reject: true, message: `# SSH check refused: ${verdict.reason}\n` } };
    if (period !== undefined) this.remember(srcId, dstId);
    return { status: 200, action: { accept: true, ...ALLOW } };
  }

  /** first answers a connection's first request: accepted within checkPeriod of an approval, held otherwise. */
  private first(srcId: number, dst: Node, period: number | undefined, localUser: string): ActionAnswer {
    if (period === undefined) return this.refusal(srcId, dst.id);
    const at = this.approvals.get(pairKey(srcId, dst.id));
    if (period > 0 && at !== undefined && this.clock.now() - at < period) {
      this.o.logger.debug('SSH check: approved within the check period', { src: srcId, dst: dst.id });
      return { status: 200, action: { accept: true, ...ALLOW } };
    }
    return this.delegate(srcId, dst, localUser);
  }

  private refusal(srcId: number, dstId: number): ActionAnswer {
    return { status: 200, action: { reject: true, message: `# SSH check refused: no check rule of the SSH policy covers node ${srcId} to node ${dstId}\n` } };
  }

  /** delegate holds the connection: a new check, and the URL the client polls for its verdict. */
  private delegate(srcId: number, dst: Node, localUser: string): ActionAnswer {
    if (this.checks.size >= MAX_WAITING) return { status: 503, text: 'too many SSH checks are waiting; try again later' };
    const id = CHECK_ID_PREFIX + randomBytes(24).toString('base64url');
    const ttl = this.o.config.registration.pending_expiry;
    const e: Entry = {
      id, src: srcId, dst: dst.id, localUser: localUser.slice(0, 64), expiresAt: this.clock.now() + ttl,
      waiters: new Set(), delivered: false,
      timer: this.clock.setTimeout(() => this.expire(id), ttl),
    };
    this.clock.unref(e.timer);
    this.checks.set(id, e);
    const hold = `${this.o.config.server_url}/machine/ssh/action/$SRC_NODE_ID/to/$DST_NODE_ID?local_user=$LOCAL_USER&auth_id=${id}`;
    this.o.logger.info('SSH check: waiting for approval', { src: srcId, dst: dst.id, local_user: e.localUser });
    return {
      status: 200,
      action: {
        holdAndDelegate: hold,
        message: `# Headway SSH requires an additional check.\n# To authenticate, visit: ${this.authUrl(id)}\n`,
      },
    };
  }

  private wait(e: Entry, signal: AbortSignal): Promise<Verdict | undefined> {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve(undefined);
      const done = (v: Verdict) => { signal.removeEventListener('abort', gone); resolve(v); };
      const gone = () => { e.waiters.delete(done); resolve(undefined); };
      e.waiters.add(done);
      signal.addEventListener('abort', gone, { once: true });
    });
  }

  /** approve lets the held connection in (an administrator: `headway auth approve`). */
  approve(id: string, by = 'an administrator'): SshCheck {
    return this.settle(id, { accept: true, by });
  }

  /**
   * approveAs lets the connection in for a person the identity provider verified: only the owner of the source
   * device may (a tagged device has no owner, so its checks need an administrator). Others get a 403.
   */
  approveAs(id: string, user: { id: number; name: string }): SshCheck {
    this.checkOwner(id, user);
    return this.settle(id, { accept: true, by: user.name });
  }

  /** checkOwner throws unless `user` may approve the check (approveAs), changing nothing. */
  checkOwner(id: string, user: { id: number; name: string }): SshCheck {
    const e = this.pending(id);
    const src = this.o.state.nodes.get(e.src);
    if (!src) throw new HeadwayError('not_found', `the source device (node ${e.src}) no longer exists`);
    if (ownedByTags(src)) throw new HeadwayError('forbidden', `the source device ${src.givenName} is tagged and has no owner to sign in; an administrator approves it with headway auth approve`);
    if (src.userId !== user.id) {
      const owner = this.o.state.users.get(src.userId!)?.name ?? `user ${src.userId}`;
      throw new HeadwayError('forbidden', `only ${owner}, the owner of ${src.givenName}, can approve this SSH connection; you are signed in as ${user.name}`);
    }
    return e;
  }

  /** reject refuses the held connection (`headway auth reject`). */
  reject(id: string, reason = 'an administrator rejected it'): SshCheck {
    return this.settle(id, { accept: false, reason });
  }

  private pending(id: string): Entry {
    const e = this.checks.get(id);
    if (!e || e.delivered) throw new HeadwayError('not_found', 'no SSH check waits with this auth ID (it expired or was answered)');
    if (e.verdict) throw new HeadwayError('conflict', `this SSH check was already ${e.verdict.accept ? 'approved' : 'rejected'}`);
    return e;
  }

  private settle(id: string, verdict: Verdict): SshCheck {
    const e = this.pending(id);
    e.verdict = verdict;
    this.o.logger.info(verdict.accept ? 'SSH check approved' : 'SSH check rejected', {
      src: e.src, dst: e.dst, local_user: e.localUser, ...(verdict.accept ? { by: verdict.by } : { reason: verdict.reason }),
    });
    for (const w of [...e.waiters]) w(verdict);
    e.waiters.clear();
    return e;
  }

  private expire(id: string): void {
    const e = this.checks.get(id);
    if (!e) return;
    this.checks.delete(id);
    if (e.verdict) return;
    const verdict: Verdict = { accept: false, reason: `nobody approved it within ${waitText(this.o.config.registration.pending_expiry)}` };
    for (const w of [...e.waiters]) w(verdict);
  }

  /** remember records an approval of (src, dst); the oldest approvals make room past MAX_REMEMBERED. */
  private remember(src: number, dst: number): void {
    const key = pairKey(src, dst);
    this.approvals.delete(key);
    this.approvals.set(key, this.clock.now());
    while (this.approvals.size > MAX_REMEMBERED) this.approvals.delete(this.approvals.keys().next().value!);
  }

  /** close refuses every waiting check (shutdown): the devices are told at once rather than left to time out. */
  close(): void {
    for (const e of this.checks.values()) {
      this.clock.clearTimeout(e.timer);
      for (const w of [...e.waiters]) w({ accept: false, reason: 'the server is shutting down' });
    }
    this.checks.clear();
  }
}

/**
 * checkPeriodIn finds, in a destination's compiled SSH policy, the first `check` rule naming one of the source's
 * addresses, and gives its checkPeriod in milliseconds; undefined when no check rule covers the source.
 */
export function checkPeriodIn(policy: { rules: SSHRule[] } | null, src: Pick<Node, 'ipv4' | 'ipv6'>): number | undefined {
  const ips = [src.ipv4, src.ipv6].filter((ip): ip is string => Boolean(ip));
  for (const rule of policy?.rules ?? []) {
    const period = sshCheckPeriodMs(rule.action);
    if (period !== undefined && rule.principals.some((p) => ips.includes(p.nodeIP))) return period;
  }
  return undefined;
}

/** waitText says how long a check waited, in the largest whole unit ("15 minutes", "25 seconds"). */
function waitText(ms: number): string {
  for (const [unit, n] of [['hour', 3_600_000], ['minute', 60_000], ['second', 1000]] as const) {
    if (ms >= n && ms % n === 0) return `${ms / n} ${unit}${ms === n ? '' : 's'}`;
  }
  return `${ms} ms`;
}

function pairKey(src: number, dst: number): string { return `${src}>${dst}`; }

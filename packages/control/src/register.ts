import type { HeadwayConfig } from '@headway/core';
import { ownerIdentity, type Node, type PreAuthKey, type User } from '@headway/core';
import { HeadwayError } from '@headway/core';
import type { Logger } from '@headway/core';
import { routesFromHostinfo } from '@headway/core';
import type { State } from '@headway/core';
import { isZeroTime, type Hostinfo, type RegisterRequest, type RegisterResponse } from '@headway/core';

export { routesFromHostinfo };

const ZERO_NODE_KEY = 'nodekey:' + '0'.repeat(64);

/** REJECTED is the register Error a device gets when an administrator rejects its login (`tailscale up` prints it). */
export const REJECTED = 'login rejected by the administrator';

/** Verdict ends a held follow-up: the approved node's id, a rejection, or undefined (expired or cancelled: hand out a new AuthURL). */
type Verdict = number | 'rejected' | undefined;


/**
 * Registrar answers /machine/register the way a stock client expects: failures go
 * in the response's Error field (HTTP 200), and interactive logins get an AuthURL
 * whose follow-up request is held open until an administrator approves it.
 */
/** CLUSTER_PENDING_POLL_MS is how often a held follow-up checks whether another cluster instance settled its login. */
const CLUSTER_PENDING_POLL_MS = 2000;

export class Registrar {
  private readonly waiters = new Map<string, Set<(verdict: Verdict) => void>>();
  /** rejected remembers rejected logins' keys until they would have expired (bounded; see remember). */
  private readonly rejected = new Map<string, number>();
  /** approved remembers approved logins' keys and nodes until they would have expired, for the register page. */
  private readonly approved = new Map<string, { until: number; nodeId: number }>();

  private remember<V>(map: Map<string, V>, key: string, value: V, until: (v: V) => number): void {
    if (map.size >= 1024) {
      const now = Date.now();
      for (const [k, v] of map) if (until(v) <= now || map.size >= 1024) map.delete(k);
    }
    map.set(key, value);
  }

  /**
   * settled says how this instance settled a login whose link is no longer pending: the node it approved, or a
   * rejection (undefined: unknown, expired, or settled by another instance). The register page tells a person
   * who reloads it after approving that it worked, instead of calling the link expired.
   */
  settled(key: string): { approved: Node } | 'rejected' | undefined {
    const now = Date.now();
    if ((this.rejected.get(key) ?? 0) > now) return 'rejected';
    const a = this.approved.get(key);
    const node = a && a.until > now ? this.state.nodes.get(a.nodeId) : undefined;
    return node ? { approved: node } : undefined;
  }

  /** sourceOf names the source address of a machine's session, for the per-address pending-login quota. */
  sourceOf: (machineKey: string) => string | undefined = () => undefined;

  constructor(private readonly state: State, private readonly config: HeadwayConfig, private readonly logger: Logger) {}

  /** waiting says whether a device's follow-up for the login `key` is held open here. */
  waiting(key: string): boolean { return this.waiters.has(key); }

  private authUrl(key: string): string { return `${this.config.server_url}/register/${key}`; }

  private defaultExpiry(tagged: boolean): Date | null {
    return this.config.node.expiry > 0 && !tagged ? new Date(Date.now() + this.config.node.expiry) : null;
  }

  private authorized(node: Node): RegisterResponse {
    const user: User | undefined = node.userId !== null ? this.state.users.get(node.userId) : undefined;
    const o = ownerIdentity(node, user);
    return {
      User: { ID: o.id, DisplayName: o.displayName, ProfilePicURL: o.profilePicUrl ?? '', Created: (user?.createdAt ?? node.createdAt).toISOString() },
      Login: { ID: o.id, Provider: '', LoginName: o.loginName, DisplayName: o.displayName, ProfilePicURL: o.profilePicUrl ?? '' },
      NodeKeyExpired: Boolean(node.expiry && node.expiry.getTime() <= Date.now()),
      MachineAuthorized: true,
      AuthURL: '',
      Error: '',
    };
  }

  private fail(error: string): RegisterResponse {
    return { NodeKeyExpired: false, MachineAuthorized: false, AuthURL: '', Error: error };
  }

  /**
   * handle answers one register request. `req` has passed RegisterRequestSchema
   * (ControlServer.handle checks it), so its fields have the types they claim.
   */
  async handle(req: RegisterRequest, machineKey: string, signal: AbortSignal): Promise<RegisterResponse> {
    const nodeKey = req.NodeKey;
    // In a cluster the machine may have registered through another instance a moment ago.
    if (this.state.cluster.clustered && !this.state.nodes.byMachineKey(machineKey)) await this.state.cluster.findStoredMachine(machineKey);
    const byKey = this.state.nodes.byNodeKey(nodeKey);
    if (byKey && byKey.machineKey !== machineKey) {
      this.logger.warn('register refused: node key belongs to another machine', { node: byKey.id });
      return this.fail('node key is registered to another machine');
    }
    const expiry = this.requestedExpiry(req.Expiry);

    // 1. Logout: an expiry in the past.
    if (expiry && expiry.getTime() <= Date.now()) {
      const node = byKey ?? this.state.nodes.byMachineKey(machineKey);
      // A machine with no node (deleted) is already logged out: say so, or `tailscale logout` fails.
      if (!node) return { NodeKeyExpired: true, MachineAuthorized: false, AuthURL: '', Error: '' };
      if (node.machineKey !== machineKey) return this.fail('node not found');
      if (node.ephemeral) {
        await this.state.nodes.delete(node.id);
        return { NodeKeyExpired: true, MachineAuthorized: false, AuthURL: '', Error: '' };
      }
      const expired = await this.state.nodes.expire(node.id, new Date());
      return { ...this.authorized(expired), NodeKeyExpired: true };
    }

    // 2. Follow-up of an interactive login: wait for the administrator.
    if (req.Followup) return this.followup(req, machineKey, signal);

    const authKey = req.Auth?.AuthKey?.trim();
    // 3. Known node, no new credentials: the tailscaled-restart path.
    if (!authKey) {
      if (byKey) {
        if (byKey.expiry && byKey.expiry.getTime() <= Date.now()) return { NodeKeyExpired: true, MachineAuthorized: false, AuthURL: '', Error: '' };
        await this.refresh(byKey, req);
        return this.authorized(this.state.nodes.require(byKey.id));
      }
      // Seamless key renewal: the old node key and machine key identify the node.
      const old = req.OldNodeKey && req.OldNodeKey !== ZERO_NODE_KEY ? this.state.nodes.byNodeKey(req.OldNodeKey) : undefined;
      if (old && old.machineKey === machineKey && !(old.expiry && old.expiry.getTime() <= Date.now())) {
        const updated = await this.state.nodes.update(old.id, { nodeKey }, 'silent');
        this.state.nodes.publishPatch(old.id, { nodeKey });
        return this.authorized(updated);
      }
      return this.interactive(req, machineKey);
    }

    // 4. Pre-auth key.
    return this.withAuthKey(req, machineKey, authKey, expiry);
  }

  /**
   * requestedExpiry reads the client's Expiry. node.expiry is a ceiling the client
   * cannot raise: a later time is capped to now + node.expiry (a shorter one is kept,
   * and a past one is a logout). Without a configured expiry the request stands.
   */
  private requestedExpiry(text: string | undefined): Date | undefined {
    if (isZeroTime(text)) return undefined;
    const asked = new Date(text!);
    const now = Date.now();
    const ceiling = this.config.node.expiry;
    if (ceiling > 0 && asked.getTime() > now + ceiling) return new Date(now + ceiling);
    return asked;
  }

  private async withAuthKey(req: RegisterRequest, machineKey: string, authKey: string, expiry: Date | undefined): Promise<RegisterResponse> {
    const existing = this.state.nodes.byMachineKey(machineKey);
    // The key is only checked here; a single-use key is spent in the transaction
    // that writes the node, so a registration that fails leaves it unspent.
    let key: PreAuthKey, spend: boolean;
    try {
      ({ key, spend } = await this.state.keys.checkPreAuthKey(authKey, existing?.authKeyId));
    } catch (err) {
      if (err instanceof HeadwayError) return this.fail(err.message);
      throw err;
    }
    const writes = spend ? { spendKeyId: key.id } : {};
    const tagged = key.tags.length > 0;
    const nodeExpiry = expiry ?? this.defaultExpiry(tagged);
    const hostinfo = (req.Hostinfo ?? {}) as Record<string, unknown>;
    const routes = routesFromHostinfo(req.Hostinfo);
    try {
      if (existing) {
        const updated = await this.state.nodes.reRegister(existing.id, {
          nodeKey: req.NodeKey!, hostinfo, hostname: req.Hostinfo?.Hostname || existing.hostname,
          userId: key.userId ?? existing.userId, tags: tagged ? key.tags : existing.tags, expiry: nodeExpiry,
          availableRoutes: routes, authKeyId: key.id, registerMethod: 'authkey',
        }, writes);
        return this.authorized(updated);
      }
      const node = await this.state.nodes.create({
        machineKey, nodeKey: req.NodeKey!, hostname: req.Hostinfo?.Hostname || 'node', userId: key.userId,
        tags: key.tags, hostinfo, availableRoutes: routes, registerMethod: 'authkey', expiry: nodeExpiry,
        ephemeral: key.ephemeral, authKeyId: key.id,
      }, writes);
      this.logger.info('node registered', { node: node.id, name: node.givenName, method: 'authkey', key_prefix: key.prefix });
      return this.authorized(node);
    } catch (err) {
      // A refused registration (key spent meanwhile, no free address, machine key taken) wrote nothing.
      if (err instanceof HeadwayError) {
        this.logger.warn('register refused', { reason: err.message, key_prefix: key.prefix });
        return this.fail(err.message);
      }
      throw err;
    }
  }

  private async interactive(req: RegisterRequest, machineKey: string): Promise<RegisterResponse> {
    // The same machine asking again with the same node key gets the login it is already waiting on:
    // tailscaled re-sends register from an earlier attempt (a retry after a rejection, a second
    // `tailscale up`), and replacing the login would kill the auth ID the person is about to approve.
    const current = this.state.pending.quota.keyOf(machineKey, req.NodeKey ?? '');
    const waiting = current ? await this.state.pending.get(current) : undefined;
    if (current && waiting?.machineKey === machineKey && waiting.nodeKey === req.NodeKey) {
      return { NodeKeyExpired: false, MachineAuthorized: false, AuthURL: this.authUrl(current), Error: '' };
    }
    let reg;
    try {
      reg = await this.state.pending.create({
        machineKey, nodeKey: req.NodeKey!, hostinfo: (req.Hostinfo ?? null) as Record<string, unknown> | null, source: this.sourceOf(machineKey),
      });
    } catch (err) {
      if (err instanceof HeadwayError) return this.fail(err.message);
      throw err;
    }
    return { NodeKeyExpired: false, MachineAuthorized: false, AuthURL: this.authUrl(reg.key), Error: '' };
  }

  private async followup(req: RegisterRequest, machineKey: string, signal: AbortSignal): Promise<RegisterResponse> {
    const m = /\/register\/([A-Za-z0-9_-]+)$/.exec(req.Followup ?? '');
    const key = m?.[1];
    // tailscaled retries the follow-up of a rejected login; it gets the rejection again rather than a
    // new login (which it would print in the middle of the person's next `tailscale up`).
    if (key && this.settled(key) === 'rejected') return this.fail(REJECTED);
    const pending = key ? await this.state.pending.get(key) : undefined;
    if (!key || !pending || pending.machineKey !== machineKey) {
      // The login may have been completed while no follow-up was open (the device was stopped, or its
      // connection cut, when the administrator approved it): its node key is this machine's node now,
      // and it gets the answer the held follow-up would have had, not a new login.
      const registered = await this.state.cluster.findStoredNode(req.NodeKey ?? '');
      if (registered && registered.machineKey === machineKey) {
        if (registered.expiry && registered.expiry.getTime() <= Date.now()) return { NodeKeyExpired: true, MachineAuthorized: false, AuthURL: '', Error: '' };
        return this.authorized(registered);
      }
      // Unknown or expired: the login the machine waits on now (a stale follow-up of a rejected or
      // replaced login must not replace it), else a fresh URL (the dead URL again would make the client back off).
      return this.interactive(req, machineKey);
    }
    const verdict = await new Promise<Verdict>((resolve) => {
      const set = this.waiters.get(key) ?? this.waiters.set(key, new Set()).get(key)!;
      const done = (v: Verdict) => { set.delete(done); if (!set.size) this.waiters.delete(key); clearTimeout(timer); clearInterval(poll); unsubscribe(); resolve(v); };
      set.add(done);
      // An approval on another cluster instance (`auth approve` there, or the login callback landing there)
      // reaches this one as the node's arrival with the waiting node key.
      const unsubscribe = this.state.bus.subscribe((c) => {
        if ((c.type === 'node-added' || c.type === 'node-changed') && c.node.nodeKey === pending.nodeKey && c.node.machineKey === machineKey) done(c.node.id);
      });
      // A rejection on another instance only deletes the pending row: look for that now and then.
      const poll = this.state.cluster.clustered ? setInterval(() => { void this.settledElsewhere(key, pending.nodeKey, machineKey).then((v) => { if (v !== undefined) done(v); }, () => undefined); }, CLUSTER_PENDING_POLL_MS) : undefined;
      poll?.unref();
      const timer = setTimeout(() => done(undefined), Math.max(0, pending.expiresAt.getTime() - Date.now()));
      timer.unref();
      // A client gone while the pending row was read never fires 'abort' again: answer it now.
      if (signal.aborted) done(undefined);
      else signal.addEventListener('abort', () => done(undefined), { once: true });
    });
    if (signal.aborted) return this.fail('request cancelled');
    if (verdict === 'rejected') return this.fail(REJECTED);
    if (verdict === undefined) return this.interactive(req, machineKey);
    const node = this.state.nodes.get(verdict);
    return node ? this.authorized(node) : this.fail('node not found');
  }

  /**
   * settledElsewhere says how another cluster instance settled a pending login: the
   * node it registered, 'rejected' when the row is gone without one, or undefined
   * while it still waits.
   */
  private async settledElsewhere(key: string, nodeKey: string, machineKey: string): Promise<Verdict> {
    if (await this.state.storage.pendingRegistrations.get(key)) return undefined;
    const node = await this.state.cluster.findStoredNode(nodeKey);
    return node && node.machineKey === machineKey ? node.id : 'rejected';
  }

  /**
   * approve registers (or re-registers) the machine behind a pending AuthURL, then
   * releases the client's held follow-up request. With a user, the node is (re)assigned
   * to that user (`auth register`, a tagged device that advertises no tags is untagged and
   * becomes that user's; one that advertises tags stays tagged); without one (`auth approve`),
   * only a machine Headway already knows can be approved, and it keeps its owner (user or
   * tags), because a new device must not join without someone deciding who owns it.
   */
  async approve(key: string, userId?: number, how: { field?: string; method?: 'cli' | 'oidc'; expiry?: Date } = {}): Promise<number> {
    const field = how.field ?? 'key';
    const method = how.method ?? 'cli';
    const pending = await this.state.pending.get(key);
    if (!pending) throw new HeadwayError('not_found', `no pending login with auth ID ${key}: it expired or was already approved or rejected; run tailscale up again on the device for a new one`, field);
    const hostinfo = pending.hostinfo as Hostinfo | null;
    const existing = this.state.nodes.byMachineKey(pending.machineKey);
    const named = userId !== undefined;
    if (userId === undefined) {
      if (!existing) {
        throw new HeadwayError('conflict', `the login with auth ID ${key} is from a new device, which needs an owner: run headway auth register --auth-id ${key} --user USERNAME`, field);
      }
      userId = existing.userId ?? undefined;
    }
    // Deleting the pending row shares the node's transaction: of two approvals one wins,
    // and a failed one leaves the registration pending for another try.
    const writes = { pendingKey: key };
    let node: Node;
    if (existing) {
      // A tagged device logging in as a user without advertising tags becomes that user's (headscale 0.29's re-auth).
      const untag = existing.tags.length > 0 && named && !(hostinfo?.RequestTags?.length);
      const tagged = existing.tags.length > 0 && !untag;
      node = await this.state.nodes.reRegister(existing.id, {
        nodeKey: pending.nodeKey, userId: userId ?? existing.userId, hostinfo: pending.hostinfo, expiry: how.expiry ?? this.defaultExpiry(tagged),
        availableRoutes: routesFromHostinfo(hostinfo ?? undefined), registerMethod: method, ...(untag ? { tags: [] } : {}),
      }, writes);
    } else {
      node = await this.state.nodes.create({
        machineKey: pending.machineKey, nodeKey: pending.nodeKey, hostname: hostinfo?.Hostname || 'node', userId: userId!,
        hostinfo: pending.hostinfo, availableRoutes: routesFromHostinfo(hostinfo ?? undefined), registerMethod: method,
        expiry: how.expiry ?? this.defaultExpiry(false),
      }, writes);
    }
    this.logger.info('node registered', { node: node.id, name: node.givenName, method });
    this.remember(this.approved, key, { until: pending.expiresAt.getTime(), nodeId: node.id }, (v) => v.until);
    for (const w of [...(this.waiters.get(key) ?? [])]) w(node.id);
    return node.id;
  }

  /**
   * reject refuses a pending login (`auth reject`): its row is deleted, so the AuthURL
   * stops working, and the device's held follow-up is answered with an error that
   * `tailscale up` prints. A device that logs in again gets a new AuthURL.
   */
  async reject(key: string, field = 'key'): Promise<void> {
    const pending = await this.state.pending.get(key);
    if (!pending) throw new HeadwayError('not_found', `no pending login with auth ID ${key}: it expired or was already approved or rejected`, field);
    await this.state.pending.delete(key);
    this.remember(this.rejected, key, pending.expiresAt.getTime(), (t) => t);
    this.logger.info('interactive login rejected', { machine: pending.machineKey.slice(0, 13) });
    for (const w of [...(this.waiters.get(key) ?? [])]) w('rejected');
  }

  /** refresh stores what a returning device reports (hostname, routes) without a new login. */
  private async refresh(node: Node, req: RegisterRequest): Promise<void> {
    if (!req.Hostinfo) return;
    const routes = routesFromHostinfo(req.Hostinfo);
    if (JSON.stringify(routes) !== JSON.stringify(node.availableRoutes) || (req.Hostinfo.Hostname && req.Hostinfo.Hostname !== node.hostname)) {
      await this.state.nodes.update(node.id, { hostinfo: req.Hostinfo as Record<string, unknown>, hostname: req.Hostinfo.Hostname || node.hostname, availableRoutes: routes });
    }
  }
}

import type { Knex } from 'knex';
import type {
  ClusterAnnouncement, ClusterFollowHandlers, ClusterFollower, ClusterMessage, ClusterPort, InstanceRecord, Logger,
} from '@headway/core/ports';
import type { SqlDialect } from './repositories.js';

/** CHANNEL is the PostgreSQL NOTIFY channel announcements travel on. */
const CHANNEL = 'headway_cluster';
/** NOTIFY_LIMIT keeps a payload under PostgreSQL's 8000-byte NOTIFY limit. */
const NOTIFY_LIMIT = 7900;
/** IDS_PER_MESSAGE splits a long id list so each announcement stays small. */
const IDS_PER_MESSAGE = 500;
/** GAP_WAIT_MS is how long a missing change-log id is waited for (an insert not yet visible) before it is passed over. */
const GAP_WAIT_MS = 5000;
/** PRUNE_EVERY_MS is how often a MySQL follower deletes change-log rows older than the retention. */
const PRUNE_EVERY_MS = 60_000;
/** RECONNECT_MS bounds the back-off between attempts to reach a lost database. */
const RECONNECT_MS = [250, 500, 1000, 2000, 5000];

export interface ClusterOptions {
  /** pollIntervalMs is how often MySQL/MariaDB followers read the change log. */
  pollIntervalMs?: number;
  /** retentionMs is how long change-log rows live (MySQL/MariaDB). */
  retentionMs?: number;
  logger?: Logger;
}

interface InstanceRow {
  id: string; address: string; noise_public_key: string; started_at: Date | string; heartbeat: Date | string; sessions: number | string;
}

const asDate = (v: Date | string): Date => (v instanceof Date ? v : new Date(v));
const instanceFromRow = (r: InstanceRow): InstanceRecord => ({
  id: r.id, address: r.address, noisePublicKey: r.noise_public_key,
  startedAt: asDate(r.started_at), heartbeat: asDate(r.heartbeat), sessions: Number(r.sessions),
});

/** split breaks an announcement naming many ids into several, each small enough for one NOTIFY. */
function split(a: ClusterAnnouncement): ClusterAnnouncement[] {
  if ((a.kind === 'nodes' || a.kind === 'users') && a.ids.length > IDS_PER_MESSAGE) {
    const out: ClusterAnnouncement[] = [];
    for (let i = 0; i < a.ids.length; i += IDS_PER_MESSAGE) out.push({ kind: a.kind, ids: a.ids.slice(i, i + IDS_PER_MESSAGE) });
    return out;
  }
  return [a];
}

/** parseMessage reads one payload; a malformed one (another version, a stray NOTIFY) is dropped. */
function parseMessage(text: string): ClusterMessage | undefined {
  try {
    const m = JSON.parse(text) as ClusterMessage;
    return m && typeof m === 'object' && typeof m.origin === 'string' && typeof m.kind === 'string' ? m : undefined;
  } catch {
    return undefined;
  }
}

/**
 * createClusterPort implements ClusterPort for PostgreSQL (announcements by NOTIFY
 * on a connection of its own, outside the pool) and MySQL/MariaDB (a change-log
 * table each follower reads by increasing id). Registry, leases and sessions are
 * plain rows on both.
 */
export function createClusterPort(knex: Knex, dialect: Exclude<SqlDialect, 'sqlite'>, opts: ClusterOptions = {}): ClusterPort {
  const pollMs = opts.pollIntervalMs ?? 200;
  const retentionMs = opts.retentionMs ?? 10 * 60_000;
  const logger = opts.logger;

  const writeInstance = async (i: { id: string; address: string; noisePublicKey: string; startedAt: Date; sessions: number }, now: Date) => {
    const updated = await knex('instances').where({ id: i.id })
      .update({ address: i.address, noise_public_key: i.noisePublicKey, heartbeat: now, sessions: i.sessions });
    if (updated) return false;
    {
      await knex('instances').insert({
        id: i.id, address: i.address, noise_public_key: i.noisePublicKey, started_at: i.startedAt, heartbeat: now, sessions: i.sessions,
      }).onConflict('id').merge(['heartbeat', 'sessions', 'address']);
    }
    return true;
  };

  return {
    async join(instance, liveSince) {
      const now = new Date();
      await writeInstance({ ...instance, startedAt: now, sessions: 0 }, now);
      const rows: InstanceRow[] = await knex('instances').where('heartbeat', '>=', liveSince).whereNot({ id: instance.id });
      return rows.map(instanceFromRow);
    },
    heartbeat(instance) {
      return writeInstance(instance, new Date());
    },
    async leave(id) {
      await knex.transaction(async (trx) => {
        await trx('cluster_sessions').where({ instance_id: id }).delete();
        await trx('instances').where({ id }).delete();
      });
    },
    async instances() {
      const rows: InstanceRow[] = await knex('instances').orderBy('started_at').orderBy('id');
      return rows.map(instanceFromRow);
    },
    async prune(deadBefore) {
      return knex.transaction(async (trx) => {
        const dead = (await trx('instances').where('heartbeat', '<', deadBefore).select('id') as Array<{ id: string }>).map((r) => r.id);
        if (dead.length) {
          await trx('cluster_sessions').whereIn('instance_id', dead).delete();
          await trx('instances').whereIn('id', dead).delete();
        }
        // Session rows of an instance that vanished without its row (pruned mid-write).
        await trx('cluster_sessions').whereNotIn('instance_id', trx('instances').select('id')).delete();
        return dead;
      });
    },
    async announce(origin, a) {
      for (const part of split(a)) {
        let payload = JSON.stringify({ ...part, origin });
        if (dialect === 'postgres') {
          // A patch too large for one NOTIFY becomes "reload this node".
          if (Buffer.byteLength(payload) > NOTIFY_LIMIT && part.kind === 'node-patch') payload = JSON.stringify({ kind: 'nodes', ids: [part.id], origin });
          await knex.raw('select pg_notify(?, ?)', [CHANNEL, payload]);
        } else {
          await knex('cluster_changes').insert({ origin, payload, created_at: new Date() });
        }
      }
    },
    follow(handlers) {
      return dialect === 'postgres' ? followNotify(knex, handlers, logger) : followLog(knex, handlers, pollMs, retentionMs);
    },
    async acquireLease(name, holder, ttlMs) {
      const now = new Date();
      const expires = new Date(now.getTime() + ttlMs);
      const renewed = await knex('cluster_leases').where({ name })
        .andWhere((q) => { void q.where({ holder }).orWhere('expires_at', '<', now); })
        .update({ holder, expires_at: expires });
      if (renewed) return true;
      await knex('cluster_leases').insert({ name, holder, expires_at: expires }).onConflict('name').ignore();
      const row = await knex('cluster_leases').where({ name }).first() as { holder: string } | undefined;
      return row?.holder === holder;
    },
    async releaseLease(name, holder) {
      await knex('cluster_leases').where({ name, holder }).delete();
    },
    async leaseHolder(name) {
      // Held while its time has not run out: acquireLease hands over a lease once expires_at < now.
      const row = await knex('cluster_leases').where({ name }).andWhere('expires_at', '>=', new Date()).first('holder') as { holder: string } | undefined;
      return row?.holder;
    },
    async getValue(name) {
      const row = await knex('cluster_values').where({ name }).first('value') as { value: string } | undefined;
      return row?.value;
    },
    async setValue(name, value) {
      if (value === undefined) await knex('cluster_values').where({ name }).delete();
      else await knex('cluster_values').insert({ name, value, updated_at: new Date() }).onConflict('name').merge(['value', 'updated_at']);
    },
    async setSession(instanceId, nodeId, online, since) {
      if (online) await knex('cluster_sessions').insert({ instance_id: instanceId, node_id: nodeId, since: since ?? new Date() }).onConflict(['instance_id', 'node_id']).ignore();
      else await knex('cluster_sessions').where({ instance_id: instanceId, node_id: nodeId }).delete();
    },
    async sessions() {
      const rows = await knex('cluster_sessions').select('instance_id', 'node_id', 'since') as Array<{ instance_id: string; node_id: number | string; since: Date | string }>;
      return rows.map((r) => ({ instanceId: r.instance_id, nodeId: Number(r.node_id), since: asDate(r.since) }));
    },
  };
}

interface PgClient {
  connect(): Promise<void>;
  query(sql: string): Promise<unknown>;
  end(): Promise<void>;
  on(event: 'notification', fn: (msg: { channel: string; payload?: string }) => void): void;
  on(event: 'error' | 'end', fn: (err?: Error) => void): void;
  removeAllListeners(): void;
}

/**
 * followNotify LISTENs on a connection of its own (built from knex's own driver and
 * settings, so this package needs no pg import and the pool loses no connection).
 * When that connection drops it reconnects with back-off and reports a gap: NOTIFY
 * keeps nothing for a listener that was away.
 */
async function followNotify(knex: Knex, handlers: ClusterFollowHandlers, logger?: Logger): Promise<ClusterFollower> {
  const client = knex.client as { driver: { Client: new (settings: unknown) => PgClient }; connectionSettings: unknown };
  let closed = false;
  let current: PgClient | undefined;
  let retry: NodeJS.Timeout | undefined;
  let attempt = 0;

  const open = async (): Promise<PgClient> => {
    const c = new client.driver.Client(client.connectionSettings);
    c.on('notification', (msg) => {
      if (msg.channel !== CHANNEL || !msg.payload) return;
      const m = parseMessage(msg.payload);
      if (m) handlers.message(m);
    });
    c.on('error', (err) => lost(c, err ?? new Error('connection error')));
    c.on('end', () => lost(c, new Error('connection closed')));
    try {
      await c.connect();
      await c.query(`LISTEN ${CHANNEL}`);
    } catch (err) {
      c.removeAllListeners();
      void c.end().catch(() => undefined);
      throw err;
    }
    return c;
  };

  const lost = (c: PgClient, err: Error) => {
    if (closed || c !== current) return;
    current = undefined;
    c.removeAllListeners();
    void c.end().catch(() => undefined);
    handlers.error(err);
    schedule();
  };

  const schedule = () => {
    if (closed || retry) return;
    const delay = RECONNECT_MS[Math.min(attempt++, RECONNECT_MS.length - 1)]!;
    retry = setTimeout(() => {
      retry = undefined;
      open().then((c) => {
        if (closed) { void c.end().catch(() => undefined); return; }
        current = c;
        attempt = 0;
        logger?.info('cluster change feed reconnected');
        handlers.gap();
      }, (err: Error) => { handlers.error(err); schedule(); });
    }, delay);
    retry.unref();
  };

  current = await open();
  return {
    async close() {
      closed = true;
      clearTimeout(retry);
      const c = current;
      current = undefined;
      if (c) {
        c.removeAllListeners();
        c.on('error', () => undefined);
        await c.end().catch(() => undefined);
      }
    },
  };
}

/**
 * followLog reads `cluster_changes` by increasing id every `pollMs`. Ids are handed
 * out before commit, so a lower id may become visible after a higher one: rows are
 * delivered as they appear, and the cursor only moves past a missing id once
 * GAP_WAIT_MS has passed (a rolled-back insert leaves a hole for good). Receivers
 * reload what an announcement names, so a late one applied after a newer one is harmless.
 */
async function followLog(knex: Knex, handlers: ClusterFollowHandlers, pollMs: number, retentionMs: number): Promise<ClusterFollower> {
  const top = await knex('cluster_changes').max({ id: 'id' }).first() as { id: number | string | null } | undefined;
  let cursor = Number(top?.id ?? 0);
  const delivered = new Set<number>();
  let gapSince: number | undefined;
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  let failing = false;
  let lastPrune = 0;
  let running: Promise<void> = Promise.resolve();

  const poll = async () => {
    const rows = await knex('cluster_changes').where('id', '>', cursor).orderBy('id').limit(1000)
      .select('id', 'payload') as Array<{ id: number | string; payload: string }>;
    for (const r of rows) {
      const id = Number(r.id);
      if (delivered.has(id)) continue;
      delivered.add(id);
      const m = parseMessage(r.payload);
      if (m) handlers.message(m);
    }
    while (delivered.has(cursor + 1)) delivered.delete(++cursor);
    if (delivered.size) {
      gapSince ??= Date.now();
      if (Date.now() - gapSince >= GAP_WAIT_MS) {
        cursor = Math.min(...delivered) - 1;
        while (delivered.has(cursor + 1)) delivered.delete(++cursor);
        gapSince = delivered.size ? Date.now() : undefined;
      }
    } else {
      gapSince = undefined;
    }
    if (Date.now() - lastPrune >= PRUNE_EVERY_MS) {
      lastPrune = Date.now();
      await knex('cluster_changes').where('created_at', '<', new Date(Date.now() - retentionMs)).delete();
      const oldest = await knex('cluster_changes').min({ id: 'id' }).first() as { id: number | string | null } | undefined;
      // Rows this follower never read were pruned (it was away longer than the retention).
      if (oldest?.id !== null && oldest?.id !== undefined && Number(oldest.id) > cursor + 1 && cursor > 0 && !delivered.has(Number(oldest.id))) {
        handlers.gap();
      }
    }
  };

  const tick = () => {
    if (closed) return;
    running = poll().then(() => {
      if (failing) {
        failing = false;
        handlers.gap();
      }
    }, (err: Error) => {
      failing = true;
      handlers.error(err);
    }).finally(() => {
      if (!closed) {
        timer = setTimeout(tick, failing ? RECONNECT_MS[2]! : pollMs);
        timer.unref();
      }
    });
  };
  timer = setTimeout(tick, pollMs);
  timer.unref();
  return {
    async close() {
      closed = true;
      clearTimeout(timer);
      await running;
    },
  };
}

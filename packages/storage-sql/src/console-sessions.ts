import type { ConsoleSessionRepository, ConsoleSessionRow } from '@headway/core/ports';
import { writableDate, type Executor } from './repositories.js';
import { toDate, type Row } from './rows.js';

const VIA: ReadonlySet<string> = new Set<ConsoleSessionRow['via']>(['link', 'oidc']);

function sessionFromRow(r: Row): ConsoleSessionRow {
  const via = String(r.via);
  if (!VIA.has(via)) throw new TypeError(`console_sessions.via: unknown sign-in method ${JSON.stringify(via)}`);
  return {
    id: String(r.id), admin: String(r.admin), via: via as ConsoleSessionRow['via'], csrf: String(r.csrf),
    createdAt: toDate(r.created_at, 'console_sessions.created_at'), lastSeenAt: toDate(r.last_seen_at, 'console_sessions.last_seen_at'),
  };
}

/**
 * consoleSessionRepository keeps the admin console's sessions and one-time sign-in links (schema 0011). A link is
 * spent by one guarded UPDATE, so of two requests racing with the same token exactly one changes the row and signs in.
 */
export function consoleSessionRepository(db: Executor): ConsoleSessionRepository {
  return {
    async create(row) {
      await db('console_sessions').insert({
        id: row.id, admin: row.admin, via: row.via, csrf: row.csrf,
        created_at: writableDate(row.createdAt, 'createdAt'), last_seen_at: writableDate(row.lastSeenAt, 'lastSeenAt'),
      });
    },
    async get(id) {
      const row = (await db('console_sessions').where({ id }).first()) as Row | undefined;
      return row ? sessionFromRow(row) : undefined;
    },
    async touch(id, at) {
      const when = writableDate(at, 'at');
      await db('console_sessions').where({ id }).andWhere('last_seen_at', '<', when).update({ last_seen_at: when });
    },
    async delete(id) {
      return (await db('console_sessions').where({ id }).delete()) > 0;
    },
    async deleteIdle(idleBefore, createdBefore) {
      return db('console_sessions')
        .where('last_seen_at', '<', writableDate(idleBefore, 'idleBefore'))
        .orWhere('created_at', '<', writableDate(createdBefore, 'createdBefore'))
        .delete();
    },
    async createLink(hash, admin, expiresAt) {
      await db('console_links').insert({ hash, admin, expires_at: writableDate(expiresAt, 'expiresAt'), spent_at: null });
    },
    async spendLink(hash, now) {
      const at = writableDate(now, 'now');
      const changed = await db('console_links').where({ hash }).whereNull('spent_at').andWhere('expires_at', '>', at).update({ spent_at: at });
      if (changed !== 1) return undefined;
      const row = (await db('console_links').where({ hash }).first('admin')) as Row | undefined;
      return row ? String(row.admin) : undefined;
    },
    async deleteExpiredLinks(now) {
      return db('console_links').where('expires_at', '<', writableDate(now, 'now')).delete();
    },
  };
}

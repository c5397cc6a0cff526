import type { AuditEntry, AuditRepository } from '@headway/core/ports';
import { insertId, type Executor, type SqlDialect } from './repositories.js';
import { toDate, type Row } from './rows.js';

/** Column widths of audit_log (migration 0010): longer values are cut, never refused, so a change is always recorded. */
const WIDTH = { actor: 255, action: 128, target: 1024, remote: 255 } as const;

const cut = (value: string, width: number) => (value.length <= width ? value : `${value.slice(0, width - 1)}…`);

function entryFromRow(r: Row): AuditEntry {
  return { id: Number(r.id), at: toDate(r.at, 'audit_log.at'), actor: String(r.actor), action: String(r.action), target: String(r.target), remote: String(r.remote) };
}

/** auditRepository keeps the audit log (schema 0010); list reads newest first by id. */
export function auditRepository(db: Executor, dialect: SqlDialect): AuditRepository {
  return {
    async append(entry) {
      const row = {
        at: entry.at, actor: cut(entry.actor, WIDTH.actor), action: cut(entry.action, WIDTH.action),
        target: cut(entry.target, WIDTH.target), remote: cut(entry.remote, WIDTH.remote),
      };
      const id = await insertId(db, dialect, 'audit_log', row);
      return { id, ...row };
    },
    async list(query) {
      const q = db('audit_log').orderBy('id', 'desc').limit(query.limit);
      if (query.before !== undefined) q.where('id', '<', query.before);
      if (query.actor !== undefined) q.where({ actor: query.actor });
      if (query.action !== undefined) q.where({ action: query.action });
      return (await q).map(entryFromRow);
    },
    async prune(before) {
      return db('audit_log').where('at', '<', before).delete();
    },
  };
}

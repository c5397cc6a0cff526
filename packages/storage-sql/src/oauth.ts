import type { OAuthClientRepository } from '@headway/core/ports';
import { guarded, insertId, runTransaction, writableDate, type Executor, type SqlDialect } from './repositories.js';
import { oauthClientFromRow, oauthTokenFromRow, stringArrayText } from './rows.js';

/** oauthClientRepository keeps /api/v2's OAuth clients and their access tokens (schema 0008); lists come back in id order. */
export function oauthClientRepository(db: Executor, dialect: SqlDialect): OAuthClientRepository {
  const byId = async (id: number) => {
    const row = await db('oauth_clients').where({ id }).first();
    return row ? oauthClientFromRow(row) : undefined;
  };
  return {
    async list() {
      return (await db('oauth_clients').orderBy('id')).map(oauthClientFromRow);
    },
    get: byId,
    async getByClientId(clientId) {
      const row = await db('oauth_clients').where({ client_id: clientId }).first();
      return row ? oauthClientFromRow(row) : undefined;
    },
    async create(client) {
      const id = await guarded('oauth_clients', () => insertId(db, dialect, 'oauth_clients', {
        client_id: client.clientId, hash: client.hash, description: client.description,
        scopes: stringArrayText(client.scopes, 'oauth_clients.scopes'), tags: stringArrayText(client.tags, 'oauth_clients.tags'),
        created_at: new Date(), last_used: null,
      }));
      return (await byId(id))!;
    },
    async update(id, patch) {
      const changed = await db('oauth_clients').where({ id }).update({
        description: patch.description, scopes: stringArrayText(patch.scopes, 'oauth_clients.scopes'), tags: stringArrayText(patch.tags, 'oauth_clients.tags'),
      });
      return changed > 0 ? byId(id) : undefined;
    },
    async setLastUsed(id, at) {
      return (await db('oauth_clients').where({ id }).update({ last_used: writableDate(at, 'lastUsed') })) > 0;
    },
    async delete(id) {
      return runTransaction(db, dialect, async (trx) => {
        await trx('oauth_tokens').where({ client_id: id }).delete();
        return (await trx('oauth_clients').where({ id }).delete()) > 0;
      });
    },
    async createToken(token) {
      const id = await guarded('oauth_tokens', () => insertId(db, dialect, 'oauth_tokens', {
        prefix: token.prefix, hash: token.hash, client_id: token.client, scopes: stringArrayText(token.scopes, 'oauth_tokens.scopes'),
        expires_at: writableDate(token.expiresAt, 'expiresAt'), created_at: new Date(),
      }), 'client_id');
      return oauthTokenFromRow((await db('oauth_tokens').where({ id }).first())!);
    },
    async getToken(prefix) {
      const row = await db('oauth_tokens').where({ prefix }).first();
      return row ? oauthTokenFromRow(row) : undefined;
    },
    async deleteExpiredTokens(now) {
      return db('oauth_tokens').where('expires_at', '<=', writableDate(now, 'now')).delete();
    },
  };
}

import type { Test } from 'tap';
import { StorageConflictError, type StoragePort } from '@headway/core/ports';

/**
 * oauthClientContract checks the OAuth client repository: clients and tokens round-trip with
 * their lists and dates, client ids and token prefixes are unique, a token needs its client,
 * deleting a client takes its tokens, and the expiry sweep removes exactly the expired tokens.
 * Pre-auth keys (same schema step) keep a description. It leaves one client with one token behind, so the dump-and-restore check that runs after it
 * carries an OAuth client through a backup (and a replacing restore clears the token first).
 */
export async function oauthClientContract(t: Test, storage: StoragePort, unique: (label: string) => string): Promise<void> {
  const described = await storage.preAuthKeys.create({ userId: null, reusable: false, ephemeral: false, expiration: null, tags: ['tag:ci'], description: 'CI runner Ü', prefix: unique('desc'), hash: 'h' });
  t.equal(described.description, 'CI runner Ü', 'a pre-auth key keeps its description');
  const plain = await storage.preAuthKeys.create({ userId: null, reusable: false, ephemeral: false, expiration: null, tags: ['tag:ci'], prefix: unique('desc'), hash: 'h' });
  t.equal(plain.description, '', 'and has an empty one without');
  await storage.preAuthKeys.delete(described.id);
  await storage.preAuthKeys.delete(plain.id);
  const repo = storage.oauthClients;
  if (!repo) {
    t.comment('this adapter keeps no OAuth clients: /api/v2 takes API keys only');
    return;
  }
  const clientId = unique('oc');
  const client = await repo.create({ clientId, hash: 'client-hash', description: 'CI Ü', scopes: ['auth_keys', 'devices:core:read'], tags: ['tag:ci', 'tag:k8s'] });
  t.match(client, { clientId, hash: 'client-hash', description: 'CI Ü', scopes: ['auth_keys', 'devices:core:read'], tags: ['tag:ci', 'tag:k8s'], lastUsed: null });
  t.type(client.id, 'number');
  t.same(await repo.get(client.id), client);
  t.same(await repo.getByClientId(clientId), client);
  t.equal(await repo.getByClientId(unique('none')), undefined);
  t.ok((await repo.list()).some((c) => c.id === client.id));
  await t.rejects(repo.create({ clientId, hash: 'h2', description: '', scopes: ['all'], tags: [] }),
    { name: 'StorageConflictError', field: 'client_id' }, 'a second client with the same client id conflicts on client_id');

  const updated = await repo.update(client.id, { description: 'operator Ü', scopes: ['devices:core:read'], tags: ['tag:k8s'] });
  t.same(updated, { ...client, description: 'operator Ü', scopes: ['devices:core:read'], tags: ['tag:k8s'] }, 'update replaces description, scopes and tags, nothing else');
  t.same(await repo.get(client.id), updated, 'as stored');
  t.equal(await repo.update(999_999, { description: '', scopes: ['dns'], tags: [] }), undefined, 'updating a missing client finds none');

  const used = new Date('2026-04-05T06:07:08.009Z');
  t.equal(await repo.setLastUsed(client.id, used), true);
  t.equal((await repo.get(client.id))?.lastUsed?.toISOString(), used.toISOString());
  t.equal(await repo.setLastUsed(999_999, used), false);

  const expiresAt = new Date('2026-04-05T07:07:08.009Z');
  const token = await repo.createToken({ prefix: unique('tok'), hash: 'token-hash', client: client.id, scopes: ['auth_keys'], expiresAt });
  t.match(token, { hash: 'token-hash', client: client.id, scopes: ['auth_keys'] });
  t.equal(token.expiresAt.toISOString(), expiresAt.toISOString(), 'expiresAt keeps its milliseconds');
  t.same(await repo.getToken(token.prefix), token);
  await t.rejects(repo.createToken({ prefix: token.prefix, hash: 'x', client: client.id, scopes: [], expiresAt }),
    { name: 'StorageConflictError', field: 'prefix' }, 'token prefixes are unique');
  await t.rejects(repo.createToken({ prefix: unique('tok'), hash: 'x', client: 999_999, scopes: [], expiresAt }),
    StorageConflictError, 'a token of a missing client is refused');

  const later = await repo.createToken({ prefix: unique('tok'), hash: 'h', client: client.id, scopes: [], expiresAt: new Date(expiresAt.getTime() + 1) });
  t.equal(await repo.deleteExpiredTokens(new Date(expiresAt.getTime() - 1)), 0, 'nothing has expired a millisecond before');
  t.ok(await repo.deleteExpiredTokens(expiresAt) >= 1, 'a token expiring at `now` is swept');
  t.equal(await repo.getToken(token.prefix), undefined);
  t.ok(await repo.getToken(later.prefix), 'the token expiring a millisecond later stays');

  const other = await repo.create({ clientId: unique('oc'), hash: 'h', description: '', scopes: ['dns:read'], tags: [] });
  const otherToken = await repo.createToken({ prefix: unique('tok'), hash: 'h', client: other.id, scopes: ['dns:read'], expiresAt: new Date('2099-01-01T00:00:00Z') });
  t.equal(await repo.delete(other.id), true);
  t.equal(await repo.get(other.id), undefined);
  t.equal(await repo.getToken(otherToken.prefix), undefined, "deleting a client deletes its tokens");
  t.equal(await repo.delete(other.id), false);
  t.ok(await repo.getToken(later.prefix), "another client's token stays");

  const dump = await storage.dump?.();
  if (dump) t.same(dump.oauthClients?.find((c) => c.id === client.id), await repo.get(client.id), 'a dump carries OAuth clients, hash included');
}

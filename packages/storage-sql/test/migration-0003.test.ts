import t from 'tap';
import knexFactory from 'knex';
import { createRepositories, MIGRATIONS, runMigrations } from '../src/index.js';

// 0003_user_identity on a database holding users written before it: they become
// local users (no provider, NULL provider_id, no groups) and keep everything else.
t.test('0003_user_identity: users from before read as local users and can be linked', async (t) => {
  const knex = knexFactory({ client: 'better-sqlite3', connection: { filename: ':memory:' }, useNullAsDefault: true });
  t.teardown(() => knex.destroy());
  await runMigrations(knex, MIGRATIONS.slice(0, 1));
  t.notOk(await knex.schema.hasColumn('users', 'provider_id'), 'before: no provider columns');
  await knex('users').insert([
    { name: 'alice', display_name: 'Alice', email: 'alice@example.com', created_at: new Date('2026-01-01T00:00:00Z') },
    { name: 'bob', display_name: '', email: '', created_at: new Date('2026-01-02T00:00:00Z') },
  ]);
  await runMigrations(knex, MIGRATIONS);
  const repos = createRepositories(knex, 'sqlite');
  const users = await repos.users.list();
  t.match(users, [
    { name: 'alice', displayName: 'Alice', email: 'alice@example.com', provider: '', providerId: null, profilePicUrl: '', groups: [] },
    { name: 'bob', provider: '', providerId: null, groups: [] },
  ]);
  t.equal(users[0]!.createdAt.toISOString(), '2026-01-01T00:00:00.000Z');
  const linked = await repos.users.update(users[0]!.id, { provider: 'oidc', providerId: 'https://idp.example.com/alice' });
  t.equal(linked?.providerId, 'https://idp.example.com/alice');
  await t.rejects(repos.users.update(users[1]!.id, { providerId: 'https://idp.example.com/alice' }), { name: 'StorageConflictError', field: 'provider_id' });
});

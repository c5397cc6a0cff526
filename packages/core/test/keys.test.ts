// KeyStore over a real in-memory SQLite database: pre-auth keys and API keys are shown
// once, stored as hashes, and checked against the database on every use.
import t from 'tap';
import { HeadwayError } from '../src/index.js';
import { startState } from '@headway/test-support';

const code = (c: string) => ({ constructor: HeadwayError, code: c });

t.test('pre-auth keys: single-use spent once, reusable, expired, wrong secret', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'jack' });
  await t.rejects(s.state.keys.createPreAuthKey({ userId: 9999 }), code('not_found'));
  await t.rejects(s.state.keys.createPreAuthKey({ userId: null }), { code: 'invalid_field', field: 'user' }, 'a key without a user needs tags');
  await t.rejects(s.state.keys.createPreAuthKey({ userId: u.id, tags: ['bad'] }), { code: 'invalid_field', field: 'aclTags' });
  await t.rejects(s.state.keys.createPreAuthKey({ userId: u.id, expiration: new Date(Date.now() - 1) }), { code: 'invalid_field', field: 'expiration' });
  t.same(await s.state.keys.listPreAuthKeys(), [], 'refusals store nothing');

  const single = await s.state.keys.createPreAuthKey({ userId: u.id });
  t.notMatch(JSON.stringify(single.key), single.secret.slice(-20), 'the stored key holds no secret');
  const first = await s.state.keys.checkPreAuthKey(single.secret);
  t.equal(first.spend, true, 'a single-use key must be spent');
  await s.state.keys.authenticatePreAuthKey(single.secret, { spend: true });
  await t.rejects(s.state.keys.authenticatePreAuthKey(single.secret, { spend: true }), { code: 'unauthorized', message: 'authkey already used' });
  t.same(await s.state.keys.checkPreAuthKey(single.secret, single.key.id), { key: { ...single.key, used: true }, spend: false },
    'the machine that spent it may present it again without spending');

  const reusable = await s.state.keys.createPreAuthKey({ userId: u.id, reusable: true });
  for (let i = 0; i < 3; i++) {
    const k = await s.state.keys.authenticatePreAuthKey(reusable.secret, { spend: true });
    t.equal(k.used, false, `reusable use ${i + 1} never spends`);
  }

  const tagged = await s.state.keys.createPreAuthKey({ userId: null, tags: ['tag:b', 'tag:a', 'tag:b'] });
  t.same(tagged.key.tags, ['tag:a', 'tag:b']);

  const soon = await s.state.keys.createPreAuthKey({ userId: u.id, reusable: true });
  const expired = await s.state.keys.expirePreAuthKey(soon.key.id);
  t.ok(expired.expiration && expired.expiration.getTime() <= Date.now());
  await t.rejects(s.state.keys.checkPreAuthKey(soon.secret), { code: 'unauthorized', message: 'authkey expired' });

  await t.rejects(s.state.keys.checkPreAuthKey(reusable.secret.slice(0, -1) + (reusable.secret.endsWith('a') ? 'b' : 'a')), { message: 'invalid authkey' });
  await t.rejects(s.state.keys.checkPreAuthKey('garbage'), { message: 'invalid authkey' });
  await s.state.keys.deletePreAuthKey(reusable.key.id);
  await t.rejects(s.state.keys.checkPreAuthKey(reusable.secret), { message: 'invalid authkey' }, 'a deleted key is unknown');
  await t.rejects(s.state.keys.deletePreAuthKey(reusable.key.id), code('not_found'));
  await t.rejects(s.state.keys.expirePreAuthKey(9999), code('not_found'));
});

t.test('API keys: shown once, expire, delete, wrong secret refused', async (t) => {
  const s = await startState(t);
  await t.rejects(s.state.keys.createApiKey(new Date(Date.now() - 1)), { code: 'invalid_field', field: 'expiration' });
  const { key, secret } = await s.state.keys.createApiKey(null);
  t.notMatch(JSON.stringify(await s.state.keys.listApiKeys()), secret.slice(-20), 'the secret is not stored');
  const ok = await s.state.keys.authenticateApiKey(secret);
  t.equal(ok?.id, key.id);
  t.ok((await s.storage.apiKeys.get(key.id))?.lastSeen, 'lastSeen written on first use');
  t.equal(await s.state.keys.authenticateApiKey(secret.slice(0, -2) + 'zz'), undefined, 'wrong secret');
  t.equal(await s.state.keys.authenticateApiKey('hwkey-auth-nope'), undefined, 'wrong kind');
  t.equal((await s.state.keys.findApiKey({ prefix: key.prefix })).id, key.id);
  await s.state.keys.expireApiKey({ id: key.id });
  t.equal(await s.state.keys.authenticateApiKey(secret), undefined, 'an expired key is refused');
  await s.state.keys.deleteApiKey({ prefix: key.prefix });
  await t.rejects(s.state.keys.findApiKey({ id: key.id }), code('not_found'));
  t.same(await s.state.keys.listApiKeys(), []);
});

t.test('pre-auth keys: listed per user, tags only without a user, a spent key stays spent', async (t) => {
  const s = await startState(t);
  const u = await s.state.users.create({ name: 'lou' });
  const v = await s.state.users.create({ name: 'max' });
  const mine = await s.state.keys.createPreAuthKey({ userId: u.id, ephemeral: true, tags: ['tag:ci'] });
  await s.state.keys.createPreAuthKey({ userId: v.id });
  t.same((await s.state.keys.listPreAuthKeys({ userId: u.id })).map((k) => k.id), [mine.key.id]);
  t.equal((await s.state.keys.listPreAuthKeys()).length, 2);
  t.same([mine.key.ephemeral, mine.key.reusable, mine.key.tags], [true, false, ['tag:ci']]);
  const spent = await s.state.keys.authenticatePreAuthKey(mine.secret, { spend: true });
  t.equal(spent.id, mine.key.id);
  t.equal((await s.storage.preAuthKeys.get(mine.key.id))?.used, true, 'spent in the database');
  const again = await s.state.keys.authenticatePreAuthKey(mine.secret, { spend: false, spentBy: mine.key.id });
  t.equal(again.id, mine.key.id, 'the machine it was spent on may check it again');
  await t.rejects(s.state.keys.authenticatePreAuthKey(mine.secret, { spend: false }), { message: 'authkey already used' }, 'another may not');
});

t.test('API keys: lastSeen is written at most once a minute', async (t) => {
  const s = await startState(t);
  const { key, secret } = await s.state.keys.createApiKey(new Date(Date.now() + 3_600_000));
  await s.state.keys.authenticateApiKey(secret);
  const first = (await s.storage.apiKeys.get(key.id))?.lastSeen;
  t.ok(first, 'written on first use');
  await s.state.keys.authenticateApiKey(secret);
  t.equal((await s.storage.apiKeys.get(key.id))?.lastSeen?.getTime(), first!.getTime(), 'not again within the minute');
  const aMinuteAgo = new Date(Date.now() - 61_000);
  await s.storage.apiKeys.update(key.id, { lastSeen: aMinuteAgo });
  await s.state.keys.authenticateApiKey(secret);
  t.ok((await s.storage.apiKeys.get(key.id))!.lastSeen!.getTime() >= aMinuteAgo.getTime() + 60_000, 'but once the minute has passed');
  t.equal((await s.state.keys.findApiKey({ prefix: `hwkey-api-${key.prefix}` })).id, key.id, 'found by its shown prefix too');
  await t.rejects(s.state.keys.expireApiKey({ id: 9999 }), code('not_found'));
  await t.rejects(s.state.keys.deleteApiKey({ prefix: 'nope' }), code('not_found'));
});

// Keys imported from headscale (`headway migrate from-headscale`) keep working as headscale
// showed them: bcrypt-hashed `hskey-api-`/`hskey-auth-` keys and `<7>.<32>` API keys, and the
// plain-text pre-auth keys of headscale before 0.28 (imported as prefix + SHA-256 hash).
import { randomBytes } from 'node:crypto';
import t from 'tap';
import bcrypt from 'bcryptjs';
import { hashSecret, isBcryptHash, issueSecret, parseSecret, verifySecret } from '../src/index.js';
import { preAuthKeyView } from '@headway/api';
import { startState } from '@headway/test-support';

const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
const b64url = (n: number) => Array.from(randomBytes(n), (b) => B64URL[b % 64]).join('');
/** goBcrypt hashes as headscale does (Go's bcrypt, cost 10, which writes the `$2a$` form). */
const goBcrypt = (secret: string) => bcrypt.hashSync(secret, 10).replace(/^\$2b\$/, '$2a$');

t.test('parseSecret reads headscale key shapes, each with its scheme', async (t) => {
  const prefix = 'Ab-_cd0123Ef';
  const secret = b64url(64);
  t.same(parseSecret('api', `hskey-api-${prefix}-${secret}`), { prefix, secret, scheme: 'headscale' });
  t.same(parseSecret('auth', `hskey-auth-${prefix}-${secret}`), { prefix, secret, scheme: 'headscale' });
  t.equal(parseSecret('auth', `hskey-api-${prefix}-${secret}`), undefined, 'an API key is not a pre-auth key');
  t.equal(parseSecret('api', `hskey-api-${prefix}-${secret.slice(1)}`), undefined, 'a short secret is refused');
  const legacy = `${b64url(7)}.${b64url(32)}`;
  t.same(parseSecret('api', legacy), { prefix: legacy.slice(0, 7), secret: legacy.slice(8), scheme: 'headscale' });
  t.equal(parseSecret('auth', legacy), undefined);
  const plain = randomBytes(24).toString('hex');
  t.same(parseSecret('auth', plain), { prefix: plain.slice(0, 12), secret: plain.slice(12), scheme: 'headscale-plain' });
  t.equal(parseSecret('api', plain), undefined, 'plain-text keys were only ever pre-auth keys');
  const own = issueSecret('api');
  t.equal(parseSecret('api', own.full)?.scheme, 'headway');
});

t.test('verifySecret: each key shape matches only its kind of hash', async (t) => {
  const secret = b64url(64);
  const hash = goBcrypt(secret);
  t.ok(isBcryptHash(hash));
  t.ok(await verifySecret({ prefix: 'p', secret, scheme: 'headscale' }, hash), 'the right secret');
  t.ok(await verifySecret({ prefix: 'p', secret, scheme: 'headscale' }, hash), 'again (remembered)');
  t.notOk(await verifySecret({ prefix: 'p', secret: secret.replace(/^./, (c) => (c === 'A' ? 'B' : 'A')), scheme: 'headscale' }, hash), 'a wrong secret');
  t.notOk(await verifySecret({ prefix: 'p', secret, scheme: 'headway' }, hash), 'a Headway-shaped key never matches a bcrypt hash');
  t.notOk(await verifySecret({ prefix: 'p', secret, scheme: 'headscale' }, hashSecret(secret)), 'a headscale-shaped key never matches a SHA-256 hash');
});

t.test('imported headscale API and pre-auth keys authenticate; wrong ones do not', async (t) => {
  const s = await startState(t);
  const alice = await s.state.users.create({ name: 'alice' });

  const apiPrefix = 'Xy-_0123abcD';
  const apiSecret = b64url(64);
  await s.storage.apiKeys.create({ prefix: apiPrefix, hash: goBcrypt(apiSecret), expiration: null });
  const ok = await s.state.keys.authenticateApiKey(`hskey-api-${apiPrefix}-${apiSecret}`);
  t.equal(ok?.prefix, apiPrefix, 'a headscale 0.28+ API key');
  t.equal(await s.state.keys.authenticateApiKey(`hskey-api-${apiPrefix}-${b64url(64)}`), undefined, 'with a wrong secret it is refused');
  t.equal(await s.state.keys.authenticateApiKey(`hwkey-api-${'a'.repeat(12)}-${b64url(43)}`), undefined);

  const legacyPrefix = b64url(7);
  const legacySecret = b64url(32);
  await s.storage.apiKeys.create({ prefix: legacyPrefix, hash: goBcrypt(legacySecret), expiration: null });
  t.equal((await s.state.keys.authenticateApiKey(`${legacyPrefix}.${legacySecret}`))?.prefix, legacyPrefix, 'a pre-0.28 `prefix.secret` API key');
  const expiredPrefix = b64url(12);
  const expiredSecret = b64url(64);
  await s.storage.apiKeys.create({ prefix: expiredPrefix, hash: goBcrypt(expiredSecret), expiration: new Date(Date.now() - 1000) });
  t.equal(await s.state.keys.authenticateApiKey(`hskey-api-${expiredPrefix}-${expiredSecret}`), undefined, 'an expired imported key is refused');

  const authPrefix = b64url(12);
  const authSecret = b64url(64);
  const reusable = await s.storage.preAuthKeys.create({ userId: alice.id, reusable: true, ephemeral: false, expiration: null, tags: [], prefix: authPrefix, hash: goBcrypt(authSecret) });
  const checked = await s.state.keys.checkPreAuthKey(`hskey-auth-${authPrefix}-${authSecret}`);
  t.equal(checked.key.id, reusable.id, 'a headscale 0.28+ pre-auth key');
  await t.rejects(s.state.keys.checkPreAuthKey(`hskey-auth-${authPrefix}-${b64url(64)}`), { message: 'invalid authkey' });
  t.equal(preAuthKeyView(reusable, s.state).key, `hskey-auth-${authPrefix}-***`, 'listed as headscale showed it');

  const plain = randomBytes(24).toString('hex');
  const single = await s.storage.preAuthKeys.create({ userId: alice.id, reusable: false, ephemeral: false, expiration: null, tags: [], prefix: plain.slice(0, 12), hash: hashSecret(plain.slice(12)) });
  t.same(await s.state.keys.checkPreAuthKey(plain), { key: single, spend: true }, 'a pre-0.28 plain-text pre-auth key, as imported');
  await t.rejects(s.state.keys.checkPreAuthKey(plain.slice(0, 12) + randomBytes(18).toString('hex')), { message: 'invalid authkey' });
});

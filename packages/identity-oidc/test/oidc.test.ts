import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { resolveConfig, silentLogger } from '@headway/core/ports';
import descriptor, { checkAllowed, OidcIdentity, providerIdOf, readClientSecret } from '../src/index.js';

const base = { allowed_domains: [] as string[], allowed_groups: [] as string[], allowed_users: [] as string[], email_verified_required: true };
const alice = { email: 'alice@example.com', emailVerified: true, groups: ['engineering'] };

t.test('checkAllowed applies headscale\'s allow-lists in its order', async (t) => {
  t.equal(checkAllowed(base, alice), undefined, 'no lists: everyone');
  t.equal(checkAllowed({ ...base, allowed_domains: ['Example.com'] }, alice), undefined, 'domains compare without case');
  t.match(checkAllowed({ ...base, allowed_domains: ['example.org'] }, alice), /Accounts of example\.com may not/);
  t.match(checkAllowed({ ...base, allowed_domains: ['example.org'] }, { ...alice, email: '' }), /without an e-mail address/);
  t.equal(checkAllowed({ ...base, allowed_users: ['ALICE@example.com'] }, alice), undefined);
  t.match(checkAllowed({ ...base, allowed_users: ['bob@example.com'] }, alice), /alice@example\.com may not/);
  t.equal(checkAllowed({ ...base, allowed_groups: ['sales', 'engineering'] }, alice), undefined, 'one matching group is enough');
  t.match(checkAllowed({ ...base, allowed_groups: ['sales'] }, alice), /not in a group/);
  t.match(checkAllowed({ ...base, allowed_groups: ['sales'], allowed_domains: ['example.org'] }, alice), /not in a group/, 'groups are checked first');
  const unverified = { ...alice, emailVerified: false };
  t.match(checkAllowed({ ...base, allowed_domains: ['example.com'] }, unverified), /is not verified/, 'an unverified address is not trusted for e-mail lists');
  t.equal(checkAllowed({ ...base, allowed_domains: ['example.com'], email_verified_required: false }, unverified), undefined, 'unless verification is not required');
  t.equal(checkAllowed({ ...base, allowed_groups: ['engineering'] }, unverified), undefined, 'groups alone do not need a verified address');
});

t.test('providerIdOf joins issuer and subject like headscale (no doubled slash)', async (t) => {
  t.equal(providerIdOf('https://idp.example.com/', '/abc'), 'https://idp.example.com/abc');
  t.equal(providerIdOf('https://idp.example.com/realms/x', 'abc'), 'https://idp.example.com/realms/x/abc');
});

t.test('the client secret comes from client_secret or client_secret_path, never both', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'hw-oidc-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'secret'), '  s3cret-from-file\n');
  const { config } = resolveConfig({ oidc: { issuer: 'https://idp.example.com', client_id: 'c', client_secret_path: join(dir, 'secret') } });
  t.equal(readClientSecret(config.oidc), 's3cret-from-file', 'read and trimmed');
  t.throws(() => readClientSecret({ ...config.oidc, client_secret_path: join(dir, 'missing') }), /oidc\.client_secret_path .*missing: ENOENT/);
  t.equal(readClientSecret({ ...config.oidc, client_secret: 'inline' }), 'inline');
});

t.test('the descriptor serves the identity port with headscale\'s callback path', async (t) => {
  t.equal(descriptor.port, 'identity');
  t.equal(descriptor.id, 'oidc');
  const { config } = resolveConfig({ server_url: 'https://hw.example.com', oidc: { issuer: 'https://idp.example.com', client_id: 'c', client_secret: 's' } });
  const id = new OidcIdentity(config.oidc, config.server_url, silentLogger);
  t.equal(id.callbackPath, '/oidc/callback');
  t.equal(id.provider, 'oidc');
  t.equal(id.providerIdFor('sub-1'), 'https://idp.example.com/sub-1');
  const refused = await id.complete({ url: new URL('https://hw.example.com/oidc/callback?code=x&state=forged'), method: 'GET', cookies: {} });
  t.match(refused, { ok: false, status: 400, reason: /unknown or has expired/ }, 'a state this server never issued is refused before any request to the provider');
});

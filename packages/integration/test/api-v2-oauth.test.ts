// OAuth clients of /api/v2: created and deleted over /api/v1, the client-credentials token endpoint as
// golang.org/x/oauth2 calls it (both ways it sends the client), scopes that limit a token, expiry on an
// injected clock, and revocation that stops a client's tokens at once, on SQLite, PostgreSQL and MariaDB.
import t, { type Test } from 'tap';
import { adminFetch, serverDatabases, startTestServer, type TestServer } from '../src/server.js';

const form = (fields: Record<string, string>) => new URLSearchParams(fields).toString();
/** basic writes the client as x/oauth2 does in its first try: each part form-escaped, then base64. */
const basic = (id: string, secret: string) => `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString('base64')}`;

async function token(s: TestServer, fields: Record<string, string>, authorization?: string) {
  const res = await fetch(`${s.urls.http}/api/v2/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...(authorization ? { authorization } : {}) },
    body: form(fields),
  });
  return { status: res.status, json: await res.json() as Record<string, any>, headers: res.headers };
}

const v2 = (s: TestServer, bearer: string, path: string) => fetch(s.urls.http + path, { headers: { authorization: `Bearer ${bearer}` } });

async function tokenFlow(t: Test, s: TestServer) {
  const { secret: apiKey } = await s.state.keys.createApiKey(null);
  const created = await adminFetch(s, apiKey, 'POST', '/api/v1/oauthclient', { scopes: ['auth_keys', 'devices:core:read', 'users:read'], tags: ['tag:ci'], description: 'ci' });
  t.equal(created.status, 200, JSON.stringify(created.json));
  const { oauthClient, secret } = created.json as { oauthClient: { id: string }; secret: string };
  t.match(oauthClient, { id: /^[a-z0-9]{12}$/, description: 'ci', scopes: ['auth_keys', 'devices:core:read', 'users:read'], tags: ['tag:ci'], lastUsed: null });
  t.match(secret, new RegExp(`^hwkey-client-${oauthClient.id}-`), "the secret carries the client's id");
  const listed = await adminFetch(s, apiKey, 'GET', '/api/v1/oauthclient');
  t.same(listed.json.oauthClients.map((c: { id: string }) => c.id), [oauthClient.id]);
  t.notMatch(JSON.stringify(listed.json), secret.slice(-20), 'the list never shows the secret');

  // x/oauth2 tries basic auth first, then the client in the form.
  const viaBasic = await token(s, { grant_type: 'client_credentials' }, basic(oauthClient.id, secret));
  t.equal(viaBasic.status, 200, JSON.stringify(viaBasic.json));
  t.match(viaBasic.json, { access_token: /^hwkey-token-/, token_type: 'Bearer', expires_in: 3600, scope: 'auth_keys devices:core:read users:read' });
  t.equal(viaBasic.headers.get('cache-control'), 'no-store');
  const viaForm = await token(s, { grant_type: 'client_credentials', client_id: oauthClient.id, client_secret: secret, scope: 'devices:core:read' });
  t.equal(viaForm.status, 200);
  t.equal(viaForm.json.scope, 'devices:core:read', 'the token has the scopes asked for');
  t.not(viaForm.json.access_token, viaBasic.json.access_token);

  const full = viaBasic.json.access_token as string;
  const narrow = viaForm.json.access_token as string;
  t.equal((await v2(s, full, '/api/v2/tailnet/-/users')).status, 200, 'a token with users:read reads users');
  const refused = await v2(s, narrow, '/api/v2/tailnet/-/users');
  t.equal(refused.status, 403, 'a token without users:read may not');
  t.match(await refused.json(), { message: /users:read/ });
  t.ok((await adminFetch(s, apiKey, 'GET', '/api/v1/oauthclient')).json.oauthClients[0].lastUsed, 'issuing a token records the client as used');

  // Refusals, in RFC 6749's shape.
  const wrong = await token(s, { grant_type: 'client_credentials' }, basic(oauthClient.id, `${secret.slice(0, -4)}AAAA`));
  t.equal(wrong.status, 401);
  t.match(wrong.json, { error: 'invalid_client', error_description: String });
  t.equal(wrong.headers.get('www-authenticate'), 'Basic realm="headway"');
  t.equal((await token(s, { grant_type: 'client_credentials', client_id: 'nosuchclient', client_secret: secret })).json.error, 'invalid_client', 'a secret with another client id');
  t.equal((await token(s, { grant_type: 'client_credentials' })).json.error, 'invalid_client', 'no credentials');
  const badScope = await token(s, { grant_type: 'client_credentials', scope: 'dns:read auth_keys' }, basic(oauthClient.id, secret));
  t.equal(badScope.status, 400);
  t.match(badScope.json, { error: 'invalid_scope', error_description: /dns:read/ });
  t.match((await token(s, { grant_type: 'client_credentials', scope: 'nonsense' }, basic(oauthClient.id, secret))).json, { error: 'invalid_scope', error_description: /nonsense/ });
  t.match((await token(s, { grant_type: 'password' }, basic(oauthClient.id, secret))).json, { error: 'unsupported_grant_type' });
  t.match((await token(s, {}, basic(oauthClient.id, secret))).json, { error: 'invalid_request' });

  // Expiry, on the server's clock: valid to the last millisecond of its hour, refused after.
  const start = Date.now();
  s.state.oauth.now = () => new Date(start);
  const timed = (await token(s, { grant_type: 'client_credentials' }, basic(oauthClient.id, secret))).json.access_token as string;
  s.state.oauth.now = () => new Date(start + 3600_000 - 1);
  t.equal((await v2(s, timed, '/api/v2/tailnet/-/users')).status, 200, 'valid a millisecond before the hour ends');
  s.state.oauth.now = () => new Date(start + 3600_000);
  t.equal((await v2(s, timed, '/api/v2/tailnet/-/users')).status, 401, 'refused once the hour is over');
  s.state.oauth.now = () => new Date();

  // Deleting the client stops its tokens at once.
  t.equal((await adminFetch(s, apiKey, 'DELETE', `/api/v1/oauthclient/${oauthClient.id}`)).status, 200);
  t.equal((await v2(s, full, '/api/v2/tailnet/-/users')).status, 401, "a deleted client's token is refused");
  t.equal((await token(s, { grant_type: 'client_credentials' }, basic(oauthClient.id, secret))).status, 401, 'and it gets no new one');
  t.equal((await adminFetch(s, apiKey, 'DELETE', `/api/v1/oauthclient/${oauthClient.id}`)).status, 404);

  const logs = s.logs.join('\n');
  for (const secretText of [secret, full, narrow]) t.notOk(logs.includes(secretText.slice(-30)), 'no secret or token in the log');
}

t.test('OAuth clients and the token endpoint (SQLite)', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  await tokenFlow(t, s);
});

t.test('OAuth clients and the token endpoint (PostgreSQL, MariaDB)', async (t) => {
  for (const db of serverDatabases(t, 'the OAuth token flow')) {
    await t.test(db.name, (t) => db.run(async (database) => {
      const s = await startTestServer({ database });
      try { await tokenFlow(t, s); } finally { await s.stop(); }
    }));
  }
});

t.test('a bad OAuth client is refused with the reason, and nothing is created', async (t) => {
  const s = await startTestServer({ policy: { mode: 'database' } });
  t.teardown(() => s.stop());
  const { secret: apiKey } = await s.state.keys.createApiKey(null);
  const cases: Array<[string, unknown, RegExp]> = [
    ['unknown scope', { scopes: ['devices:core', 'everything'] }, /scopes: unknown scope "everything"/],
    ['no scope', { scopes: [] }, /scopes: at least one scope/],
    ['auth_keys without tags', { scopes: ['auth_keys'] }, /tags: scope auth_keys needs at least one tag/],
    ['devices (legacy name of devices:core) without tags', { scopes: ['devices'] }, /tags: scope devices:core needs at least one tag/],
    ['a tag that is not a tag', { scopes: ['auth_keys'], tags: ['ci'] }, /tags: expected tag:<name>/],
    ['scopes not a list', { scopes: 'auth_keys' }, /scopes/],
    ['description too long', { scopes: ['dns:read'], description: 'x'.repeat(256) }, /description: at most 255/],
  ];
  for (const [label, body, message] of cases) {
    const res = await adminFetch(s, apiKey, 'POST', '/api/v1/oauthclient', body);
    t.equal(res.status, 400, label);
    t.match(res.json.message, message, label);
  }
  const policy = await adminFetch(s, apiKey, 'PUT', '/api/v1/policy', { policy: JSON.stringify({ tagOwners: { 'tag:ci': [] }, acls: [] }) });
  t.equal(policy.status, 200, JSON.stringify(policy.json));
  const undefinedTag = await adminFetch(s, apiKey, 'POST', '/api/v1/oauthclient', { scopes: ['auth_keys'], tags: ['tag:ci', 'tag:other'] });
  t.equal(undefinedTag.status, 400);
  t.match(undefinedTag.json.message, /tag:other not defined in the policy's tagOwners/);
  t.same((await adminFetch(s, apiKey, 'GET', '/api/v1/oauthclient')).json.oauthClients, [], 'no refused client was stored');
  const ok = await adminFetch(s, apiKey, 'POST', '/api/v1/oauthclient', { scopes: ['all:read'] });
  t.equal(ok.status, 200, 'a read-only client needs no tags');
  t.equal((await adminFetch(s, apiKey, 'DELETE', '/api/v1/oauthclient/nosuchclient')).status, 404);
});

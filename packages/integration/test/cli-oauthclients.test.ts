// `headway oauthclients` against a real server: create prints the secret once (text and -o json), the
// secret gets a token, list never shows it, delete stops the client's tokens, bad input is refused.
import t from 'tap';
import { startTestServer } from '../src/server.js';
import { runHeadway } from '../src/cli.js';

t.test('headway oauthclients create, list, delete', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const local = { HEADWAY_UNIX_SOCKET: s.urls.socket! };
  const headway = (...args: string[]) => runHeadway(local, args);

  const text = await headway('oauthclients', 'create', '--scope', 'auth_keys,devices:core', '--tag', 'tag:k8s', '--description', 'operator');
  t.equal(text.code, 0, text.stderr);
  const [, id, secret] = /^Client ID:\s+(\S+)\nClient secret:\s+(\S+)\n/.exec(text.stdout) ?? [];
  t.match(id, /^[a-z0-9]{12}$/, text.stdout);
  t.match(secret, new RegExp(`^hwkey-client-${id}-[A-Za-z0-9_-]{43}$`));

  const json = await headway('oauthclients', 'create', '-s', 'all:read', '-o', 'json');
  t.equal(json.code, 0, json.stderr);
  const made = JSON.parse(json.stdout) as Record<string, unknown>;
  t.match(made, { id: /^[a-z0-9]{12}$/, scopes: ['all:read'], tags: [], description: '', secret: /^hwkey-client-/, last_used: null });

  const res = await fetch(`${s.urls.http}/api/v2/oauth/token`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_id: id!, client_secret: secret! }),
  });
  t.equal(res.status, 200, 'the printed secret gets a token');
  const { access_token: token } = await res.json() as { access_token: string };

  const listed = await headway('oauthclients', 'list', '-o', 'json');
  t.equal(listed.code, 0, listed.stderr);
  t.same((JSON.parse(listed.stdout) as Array<{ id: string }>).map((c) => c.id).sort(), [id, made.id].sort());
  t.notOk(listed.stdout.includes(secret!.slice(-43)), 'the list never shows a secret');
  const table = await headway('oauthclient', 'ls');
  t.match(table.stdout, /ID\s+Description\s+Scopes\s+Tags/);
  t.match(table.stdout, new RegExp(`${id}\\s+operator\\s+auth_keys, devices:core\\s+tag:k8s`));

  const del = await headway('oauthclients', 'delete', '--id', id!);
  t.equal(del.code, 0, del.stderr);
  t.equal(del.stdout, 'OAuth client deleted\n');
  const after = await fetch(`${s.urls.http}/api/v2/tailnet/-/users`, { headers: { authorization: `Bearer ${token}` } });
  t.equal(after.status, 401, "the deleted client's token stops working");
  const again = await headway('oauthclients', 'delete', id!);
  t.equal(again.code, 1);
  t.match(again.stderr, /OAuth client .* not found/);

  const noScope = await headway('oauthclients', 'create', '--tag', 'tag:x');
  t.equal(noScope.code, 2, noScope.stderr);
  t.match(noScope.stderr, /--scope/);
  const noTag = await headway('oauthclients', 'create', '--scope', 'auth_keys');
  t.equal(noTag.code, 1);
  t.match(noTag.stderr, /tags: scope auth_keys needs at least one tag/);
  const noId = await headway('oauthclients', 'delete');
  t.equal(noId.code, 2);
  t.equal((await s.state.oauth.list()).length, 1, 'only the all:read client is left');
});

/**
 * `headway console link` against the real server: over the admin socket it prints a one-time URL that signs in (as
 * this account's user name, or as --as names); aimed at a remote server (cli.address) it refuses with a clear error and exit
 * code 2.
 */
import { userInfo } from 'node:os';
import t from 'tap';
import { runHeadway, runHeadwayOn } from '../src/cli.js';
import { rawRequest } from '../src/console-http.js';
import { startTestServer } from '../src/server.js';

t.setTimeout(120_000);

/** redeem signs in with a printed URL as the page's form does; answers who the session is. */
async function redeem(url: string): Promise<{ status: number; admin?: string }> {
  const u = new URL(url);
  const signin = await rawRequest(u.toString());
  const post = await rawRequest(new URL('/admin/signin', u).toString(), {
    method: 'POST', body: new URLSearchParams({ token: u.searchParams.get('token') ?? '' }).toString(),
    headers: { 'content-type': 'application/x-www-form-urlencoded', 'sec-fetch-site': 'same-origin' },
  });
  if (signin.status !== 200 || post.status !== 303) return { status: post.status };
  const cookie = [post.headers['set-cookie'] ?? []].flat()[0]!.split(';')[0]!;
  const session = await rawRequest(new URL('/admin/session', u).toString(), { headers: { cookie } });
  return { status: session.status, admin: (JSON.parse(session.text) as { admin: string }).admin };
}

t.test('console link over the socket prints a URL that signs in once', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const plain = await runHeadwayOn(s, ['console', 'link']);
  t.equal(plain.code, 0, plain.stderr);
  const url = /^(https?:\/\/\S+)$/m.exec(plain.stdout)?.[1];
  t.ok(url?.startsWith(`${s.urls.http}/admin/signin?token=`), `a sign-in URL on the server: ${plain.stdout.split('\n')[0]}`);
  t.match(plain.stdout, /works once, until/, 'it says how long it works');
  t.same(await redeem(url!), { status: 200, admin: userInfo().username }, 'it signs in as this account');
  t.equal((await redeem(url!)).status, 401, 'and only once');

  const named = await runHeadwayOn(s, ['console', 'link', '--as', 'alice', '-o', 'json']);
  t.equal(named.code, 0, named.stderr);
  const json = JSON.parse(named.stdout) as { url: string; expiresAt: string };
  t.ok(Date.parse(json.expiresAt) > 0, 'the JSON names when it expires');
  t.same(await redeem(json.url), { status: 200, admin: 'alice' }, '--as names the administrator');

  const bad = await runHeadwayOn(s, ['console', 'link', '--as', 'no spaces allowed']);
  t.not(bad.code, 0, 'a name the audit log cannot carry is refused');
  t.match(bad.stderr, /admin: expected the name the sign-in is recorded under/);
});

t.test('console link aimed at a remote server refuses: links are made on the host only', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.stop());
  const r = await runHeadway({ HEADWAY_CLI_ADDRESS: s.urls.http, HEADWAY_CLI_API_KEY: 'hwkey-api-0123456789ab-secret' }, ['console', 'link']);
  t.equal(r.code, 2, 'cli.address set: exit code 2');
  t.match(r.stderr, /console link needs the admin socket \(unix_socket\): run it on the server's host, without cli\.address \(HEADWAY_CLI_ADDRESS\)/);
  t.equal(r.stdout, '', 'nothing printed');
  const flag = await runHeadway({}, ['console', 'link', '--address', s.urls.http]);
  t.equal(flag.code, 2, '--address on the command line: exit code 2');
  t.match(flag.stderr, /unknown flags?: --address/);
});

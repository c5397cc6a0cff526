/**
 * Interactive login through a real OpenID Connect provider (oidc-provider, its own
 * process on loopback) against the real server: the browser side end to end with a
 * waiting device login (the real-client run is interop-oidc.test.ts). Covers the
 * allow-lists, PKCE, tampered state and nonce, an ID token signed by an unknown key,
 * users link, and that no secret reaches the trace-level log.
 */
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { Browser, confirm, describePage, signIn } from '@headway/oidc-test-provider';
import { runHeadwayOn } from '../src/cli.js';
import { CLIENT_SECRET, startOidcSetup, type OidcSetup } from '../src/oidc.js';
import { freePort } from '../src/ports.js';
import { startTestServer } from '../src/server.js';

const hex = () => randomBytes(32).toString('hex');

/** waitingLogin stores a device's interactive login, as `tailscale up` without a key does, and returns its AuthURL. */
async function waitingLogin(s: OidcSetup, hostname = 'laptop'): Promise<{ authUrl: string; machineKey: string }> {
  const machineKey = `mkey:${hex()}`;
  const reg = await s.server.state.pending.create({ machineKey, nodeKey: `nodekey:${hex()}`, hostinfo: { Hostname: hostname }, source: '127.0.0.1' });
  return { authUrl: `${s.serverUrl}/register/${reg.key}`, machineKey };
}

async function setup(t: Test, oidc: Record<string, unknown> = {}, provider: Record<string, unknown> = {}): Promise<OidcSetup> {
  const s = await startOidcSetup(oidc, provider);
  t.teardown(async () => { await s.server.stop(); await s.provider.stop(); });
  return s;
}

t.test('a person signs in at the provider and confirms: the device is registered to their user, PKCE on', async (t) => {
  const s = await setup(t, { pkce: { enabled: true, method: 'S256' } }, { pkceRequired: true });
  const { authUrl, machineKey } = await waitingLogin(s, 'alice-laptop');
  const browser = new Browser();
  let authorize: URL | undefined;
  const result = await signIn(authUrl, 'alice', 'alice-pw', {
    browser,
    rewrite: (next) => { if (next.pathname === '/auth' && !authorize) authorize = next; return next; },
  });
  t.ok(authorize, 'redirected to the provider\'s authorization endpoint');
  t.equal(authorize?.searchParams.get('code_challenge_method'), 'S256', 'PKCE S256 challenge sent');
  t.match(authorize?.searchParams.get('code_challenge') ?? '', /^[A-Za-z0-9_-]{43}$/, 'a code challenge');
  t.ok(authorize?.searchParams.get('nonce') && authorize?.searchParams.get('state'), 'state and nonce sent');
  t.equal(authorize?.searchParams.get('redirect_uri'), `${s.serverUrl}/oidc/callback`);
  t.equal(result.page.status, 200, `confirmation page: ${describePage(result.page)}`);
  t.match(result.page.body, /Log in alice-laptop\?/);
  t.equal(s.server.state.nodes.byMachineKey(machineKey), undefined, 'nothing registered before the person confirms');

  const done = await confirm(result);
  t.equal(done.status, 200, describePage(done));
  t.match(done.body, /alice-laptop<\/strong> is logged in as <strong>alice</);
  const node = s.server.state.nodes.byMachineKey(machineKey);
  t.ok(node, 'node registered');
  t.equal(node?.registerMethod, 'oidc');
  const user = s.server.state.users.get(node!.userId!);
  t.same(user && {
    name: user.name, email: user.email, displayName: user.displayName, provider: user.provider,
    providerId: user.providerId, profilePicUrl: user.profilePicUrl, groups: user.groups,
  }, {
    name: 'alice', email: 'alice@example.com', displayName: 'Alice Liddell', provider: 'oidc',
    providerId: `${s.provider.issuer}/alice-sub`, profilePicUrl: 'https://pictures.example.com/alice.png', groups: ['admins', 'engineering'],
  }, 'user created from the claims, keyed by issuer and subject');

  const again = await confirm(result);
  t.equal(again.status, 403, 'a confirmation is single use');

  // A second device of the same person lands on the same user (found by iss + sub), through the provider's session.
  const second = await waitingLogin(s, 'alice-phone');
  const r2 = await signIn(second.authUrl, 'alice', 'alice-pw', { browser });
  const d2 = await confirm(r2);
  t.equal(d2.status, 200, describePage(d2));
  t.equal(s.server.state.nodes.byMachineKey(second.machineKey)?.userId, user!.id, 'same user for the same identity');
  t.equal(s.server.state.users.list().length, 1, 'no second user');

  const list = await runHeadwayOn(s.server, ['users', 'list', '-o', 'json']);
  t.equal(list.code, 0, list.stderr);
  const shown = (JSON.parse(list.stdout) as Array<Record<string, unknown>>).find((u) => u.name === 'alice');
  t.match(shown, { provider: 'oidc', provider_id: `${s.provider.issuer}/alice-sub`, email: 'alice@example.com', display_name: 'Alice Liddell' }, 'users list -o json shows the identity like headscale');

  // Secrets never reach the log, even at trace level: client secret, codes, state, tokens (JWTs).
  const log = s.server.logs.join('\n');
  const codes = browser.visited.map((u) => new URL(u)).filter((u) => u.pathname === '/oidc/callback').flatMap((u) => [u.searchParams.get('code'), u.searchParams.get('state')]);
  t.ok(codes.length >= 2, 'callbacks seen');
  for (const secret of [CLIENT_SECRET, ...codes.filter((c): c is string => Boolean(c))]) t.notOk(log.includes(secret), `log does not contain ${secret.slice(0, 4)}...`);
  t.notMatch(log, /eyJ[A-Za-z0-9_-]{8,}\.eyJ/, 'no JWT in the log');
  t.notOk(log.includes(authUrl.split('/').pop()!), 'the login key is not logged');
  t.match(log, /TRC /, 'the log ran at trace level');
});

t.test('allow-lists refuse the wrong person with a page saying why, and register nothing', async (t) => {
  const cases: Array<{ name: string; oidc: Record<string, unknown>; login: string; reason: RegExp }> = [
    { name: 'allowed_domains', oidc: { allowed_domains: ['example.com'] }, login: 'bob', reason: /Accounts of other\.org may not log devices in/ },
    { name: 'allowed_users', oidc: { allowed_users: ['alice@example.com'] }, login: 'bob', reason: /bob@other\.org may not log devices in/ },
    { name: 'allowed_groups', oidc: { allowed_groups: ['engineering'] }, login: 'bob', reason: /not in a group that may log devices in/ },
    { name: 'email_verified_required', oidc: { allowed_domains: ['example.com'] }, login: 'carol', reason: /carol@example\.com is not verified/ },
  ];
  for (const c of cases) {
    await t.test(c.name, async (t) => {
      const own = await startOidcSetup(c.oidc);
      t.teardown(async () => { await own.server.stop(); await own.provider.stop(); });
      const { authUrl, machineKey } = await waitingLogin(own);
      const { page } = await signIn(authUrl, c.login, `${c.login}-pw`);
      t.equal(page.status, 403);
      t.match(page.body, /Login refused/);
      t.match(page.body, c.reason);
      t.equal(own.server.state.nodes.byMachineKey(machineKey), undefined, 'no node');
      t.equal(own.server.state.users.list().length, 0, 'no user');
      t.match(own.server.logs.join('\n'), /WRN login refused provider=oidc reason=/, 'the refusal is logged');
    });
  }
  // allowed_groups lets a member in.
  const member = await startOidcSetup({ allowed_groups: ['engineering'] });
  t.teardown(async () => { await member.server.stop(); await member.provider.stop(); });
  const w = await waitingLogin(member);
  const done = await confirm(await signIn(w.authUrl, 'alice', 'alice-pw'));
  t.equal(done.status, 200, 'a member of an allowed group is let in');
});

t.test('a tampered state or nonce is refused and registers nothing', async (t) => {
  const s = await setup(t);
  await t.test('state changed on the way back', async (t) => {
    const { authUrl, machineKey } = await waitingLogin(s);
    const { page } = await signIn(authUrl, 'alice', 'alice-pw', {
      // The first character is always replaced by a different one (setting 'x' would leave a state
      // that already begins with 'x' unchanged).
      rewrite: (next) => {
        if (next.pathname === '/oidc/callback') {
          const state = next.searchParams.get('state')!;
          next.searchParams.set('state', (state[0] === 'x' ? 'y' : 'x') + state.slice(1));
        }
        return next;
      },
    });
    t.equal(page.status, 400);
    t.match(page.body, /unknown or has expired/);
    t.equal(s.server.state.nodes.byMachineKey(machineKey), undefined);
  });
  await t.test('the callback opened in another browser (no state cookie)', async (t) => {
    const { authUrl, machineKey } = await waitingLogin(s);
    let callback: string | undefined;
    await signIn(authUrl, 'alice', 'alice-pw', {
      rewrite: (next) => { if (next.pathname === '/oidc/callback') { callback = next.href; return new URL('/health', next); } return next; },
    });
    t.ok(callback, 'callback URL captured');
    const page = await new Browser().follow(callback!);
    t.equal(page.status, 403);
    t.match(page.body, /started in another browser/);
    t.equal(s.server.state.nodes.byMachineKey(machineKey), undefined);
  });
  await t.test('nonce changed on the way to the provider', async (t) => {
    const { authUrl, machineKey } = await waitingLogin(s);
    const { page } = await signIn(authUrl, 'alice', 'alice-pw', {
      rewrite: (next) => { if (next.pathname === '/auth' && next.searchParams.has('nonce')) next.searchParams.set('nonce', 'tampered-nonce-value'); return next; },
    });
    t.equal(page.status, 403);
    t.match(page.body, /could not be verified/);
    t.equal(s.server.state.nodes.byMachineKey(machineKey), undefined);
    const line = s.server.logs.find((l) => l.includes('identity provider answer not accepted')) ?? '';
    t.match(line, /nonce/i, `the log names the nonce: ${line}`);
  });
});

t.test('an ID token signed by a key the provider does not publish is refused', async (t) => {
  const s = await setup(t, {}, { rogueSigningKey: true });
  const { authUrl, machineKey } = await waitingLogin(s);
  const { page } = await signIn(authUrl, 'alice', 'alice-pw');
  t.equal(page.status, 403, describePage(page));
  t.match(page.body, /could not be verified/);
  t.equal(s.server.state.nodes.byMachineKey(machineKey), undefined);
  t.equal(s.server.state.users.list().length, 0, 'no user');
});

t.test('users link: a local user linked to a subject receives that person\'s logins', async (t) => {
  const s = await setup(t);
  const dave = await s.server.state.users.create({ name: 'dave' });
  const linked = await runHeadwayOn(s.server, ['users', 'link', '--identifier', String(dave.id), '--subject', 'dave-sub', '-o', 'json']);
  t.equal(linked.code, 0, linked.stderr);
  t.match(JSON.parse(linked.stdout), { name: 'dave', provider: 'oidc', provider_id: `${s.provider.issuer}/dave-sub` });
  const other = await s.server.state.users.create({ name: 'erin' });
  const taken = await runHeadwayOn(s.server, ['users', 'link', '--identifier', String(other.id), '--subject', 'dave-sub']);
  t.not(taken.code, 0, 'one identity links to one user');
  t.match(taken.stderr, /already linked to user dave/);

  const { authUrl, machineKey } = await waitingLogin(s);
  const done = await confirm(await signIn(authUrl, 'dave', 'dave-pw'));
  t.equal(done.status, 200, describePage(done));
  t.equal(s.server.state.nodes.byMachineKey(machineKey)?.userId, dave.id, 'the login landed on the linked user');
  t.equal(s.server.state.users.get(dave.id)?.email, 'dave@example.com', 'profile refreshed from the provider');
  t.equal(s.server.state.users.list().length, 2, 'no new user');
});

t.test('the AuthURL of an unknown login shows a page, not a redirect', async (t) => {
  const s = await setup(t);
  const page = await new Browser().request(`${s.serverUrl}/register/unknown-login-key`);
  t.equal(page.status, 404);
  t.match(page.body, /unknown or has expired/);
  const forged = await new Browser().request(`${s.serverUrl}/login/confirm`, { form: { token: 'forged' } });
  t.equal(forged.status, 403, 'a forged confirmation is refused');
});

t.test('oidc.use_expiry_from_token: the node expires with the ID token', async (t) => {
  const s = await setup(t, { use_expiry_from_token: true });
  const { authUrl, machineKey } = await waitingLogin(s);
  const before = Date.now();
  const done = await confirm(await signIn(authUrl, 'alice', 'alice-pw'));
  t.equal(done.status, 200, describePage(done));
  const expiry = s.server.state.nodes.byMachineKey(machineKey)?.expiry;
  t.ok(expiry, 'the node has an expiry');
  // oidc-provider issues ID tokens valid for an hour by default.
  t.ok(expiry!.getTime() > before && expiry!.getTime() <= Date.now() + 3600_000 + 5000, `expiry ${expiry?.toISOString()} is the token's`);
  t.comment(`node expiry - login time: ${Math.round((expiry!.getTime() - before) / 1000)} s`);
});

t.test('oidc.only_start_if_oidc_is_available: an unreachable provider stops start-up, or only warns when false', async (t) => {
  const port = await freePort();
  const oidc = { issuer: `http://127.0.0.1:${port}`, client_id: 'headway', client_secret: CLIENT_SECRET };
  await t.rejects(startTestServer({ oidc }), /oidc\.issuer http:\/\/127\.0\.0\.1:\d+: the provider cannot be reached.*only_start_if_oidc_is_available: false/);
  const server = await startTestServer({ oidc: { ...oidc, only_start_if_oidc_is_available: false } });
  t.teardown(() => server.stop());
  t.match(server.logs.join('\n'), /WRN oidc\.issuer .* the provider cannot be reached/);
  const reg = await server.state.pending.create({ machineKey: `mkey:${hex()}`, nodeKey: `nodekey:${hex()}`, hostinfo: null, source: '127.0.0.1' });
  const page = await new Browser().request(`${server.urls.http}/register/${reg.key}`);
  t.equal(page.status, 502, 'a login while the provider is down gets a page saying so');
  t.match(page.body, /identity provider cannot be reached/);
  t.notOk(server.logs.join('\n').includes(CLIENT_SECRET), 'the client secret is not logged');
});

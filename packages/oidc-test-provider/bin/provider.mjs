#!/usr/bin/env node
// A real OpenID Connect provider (oidc-provider, OpenID Certified) for tests, run as
// its own process on 127.0.0.1 with a port picked by the system. Its configuration
// comes as JSON in OIDC_TEST_PROVIDER_CONFIG: { clients: [{client_id, client_secret,
// redirect_uris}], accounts: [{login, password, sub, claims}], pkceRequired, rogueSigningKey }.
// It prints one JSON line {"issuer": "http://127.0.0.1:<port>"} to stdout when ready.
// Logins go through a plain HTML form (login + password) checked against the static
// accounts; consent is granted automatically for the static clients.
// rogueSigningKey: ID tokens are signed with a key the published JWKS does not hold.
import http from 'node:http';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import Provider from 'oidc-provider';

const cfg = JSON.parse(process.env.OIDC_TEST_PROVIDER_CONFIG ?? '{}');
const accounts = new Map((cfg.accounts ?? []).map((a) => [a.login, a]));
const bySub = new Map((cfg.accounts ?? []).map((a) => [a.sub, a]));

function signingKey(kid) {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid, alg: 'RS256', use: 'sig' };
}
const published = signingKey('published-' + randomBytes(4).toString('hex'));
const rogue = cfg.rogueSigningKey ? signingKey('rogue-' + randomBytes(4).toString('hex')) : undefined;
const publicJwk = ({ kty, n, e, kid, alg, use }) => ({ kty, n, e, kid, alg, use });

const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const CLAIMS = ['email', 'email_verified', 'name', 'preferred_username', 'picture', 'groups'];
const provider = new Provider(issuer, {
  clients: (cfg.clients ?? []).map((c) => ({
    client_id: c.client_id, client_secret: c.client_secret, redirect_uris: c.redirect_uris,
    grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'client_secret_basic',
  })),
  jwks: { keys: [rogue ?? published] },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name', 'preferred_username', 'picture', 'groups'], groups: ['groups'] },
  scopes: ['openid', 'email', 'profile', 'groups'],
  features: { devInteractions: { enabled: false } },
  pkce: { required: () => Boolean(cfg.pkceRequired) },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  async findAccount(_ctx, sub) {
    const a = bySub.get(sub);
    if (!a) return undefined;
    return { accountId: sub, claims: async () => ({ sub, ...(a.claims ?? {}) }) };
  },
  // First-party test clients: every requested scope and claim is granted without a consent page.
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) {
      const found = await ctx.oidc.provider.Grant.find(grantId);
      if (found) return found;
    }
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile groups');
    grant.addOIDCClaims(CLAIMS);
    await grant.save();
    return grant;
  },
});
provider.on('server_error', (_ctx, err) => process.stderr.write(`provider server_error: ${err.stack}\n`));

const escape = (s) => String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const loginForm = (uid, error) => `<!doctype html><title>Test provider login</title>
<h1>Sign in</h1>${error ? `<p class="error">${escape(error)}</p>` : ''}
<form method="post" action="/interaction/${escape(uid)}/login">
<input name="login" autocomplete="username"><input name="password" type="password"><button type="submit">Sign in</button>
</form>`;

async function readForm(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

const callback = provider.callback();
server.on('request', async (req, res) => {
  try {
    const url = new URL(req.url, issuer);
    if (url.pathname === '/jwks' && rogue) {
      // The published key set lacks the key ID tokens are signed with.
      res.writeHead(200, { 'content-type': 'application/jwk-set+json' });
      res.end(JSON.stringify({ keys: [publicJwk(published)] }));
      return;
    }
    const m = /^\/interaction\/([\w-]+)(\/login)?$/.exec(url.pathname);
    if (!m) return callback(req, res);
    const details = await provider.interactionDetails(req, res);
    if (details.prompt.name !== 'login') {
      await provider.interactionFinished(req, res, {}, { mergeWithLastSubmission: true });
      return;
    }
    if (!m[2]) {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(loginForm(details.uid));
      return;
    }
    const form = await readForm(req);
    const account = accounts.get(form.get('login') ?? '');
    if (!account || account.password !== form.get('password')) {
      res.writeHead(401, { 'content-type': 'text/html; charset=utf-8' });
      res.end(loginForm(details.uid, 'wrong login or password'));
      return;
    }
    await provider.interactionFinished(req, res, { login: { accountId: account.sub } }, { mergeWithLastSubmission: false });
  } catch (err) {
    process.stderr.write(`interaction failed: ${err.stack}\n`);
    if (!res.headersSent) res.writeHead(500);
    res.end('interaction failed\n');
  }
});

process.stdout.write(JSON.stringify({ issuer }) + '\n');
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);

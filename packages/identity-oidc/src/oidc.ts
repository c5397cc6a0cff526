import { readFileSync } from 'node:fs';
import * as client from 'openid-client';
import type {
  BrowserRequest, IdentityPort, LoginOutcome, LoginStart, Logger, OidcConfig, VerifiedIdentity,
} from '@headway/core/ports';

/** CALLBACK_PATH is headscale's: providers already configured for it keep working. */
export const CALLBACK_PATH = '/oidc/callback';
const STATE_COOKIE = 'headway_oidc_state';
/** LOGIN_TTL_MS bounds how long a person may spend at the provider (headscale: 15 minutes). */
const LOGIN_TTL_MS = 15 * 60_000;
/**
 * MAX_LOGINS bounds the logins started and not yet returned: anyone can open an
 * AuthURL, so the oldest are dropped rather than letting the map grow.
 */
const MAX_LOGINS = 1024;

interface StartedLogin { loginKey: string; nonce: string; verifier?: string; expiresAt: number }

/** Claims are the ID token and userinfo claims Headway reads. */
interface Claims {
  iss?: unknown; sub?: unknown; email?: unknown; email_verified?: unknown; preferred_username?: unknown;
  name?: unknown; picture?: unknown; groups?: unknown; exp?: unknown;
}

/** readClientSecret returns oidc.client_secret or the trimmed content of oidc.client_secret_path. */
export function readClientSecret(config: OidcConfig): string {
  if (config.client_secret) return config.client_secret;
  try {
    return readFileSync(config.client_secret_path, 'utf8').trim();
  } catch (err) {
    throw new Error(`oidc.client_secret_path ${config.client_secret_path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

const text = (v: unknown): string => (typeof v === 'string' ? v : '');
/** truthy reads email_verified, which some providers send as the string "true". */
const truthy = (v: unknown): boolean => v === true || v === 'true' || v === 1;
const stringList = (v: unknown): string[] => (Array.isArray(v) ? v.filter((g): g is string => typeof g === 'string') : typeof v === 'string' && v ? [v] : []);

/** providerIdOf joins issuer and subject as headscale does (`<iss>/<sub>`, no doubled slash). */
export function providerIdOf(issuer: string, subject: string): string {
  return `${issuer.replace(/\/+$/, '')}/${subject.replace(/^\/+/, '')}`;
}

/**
 * checkAllowed applies oidc.allowed_groups, then allowed_domains and allowed_users,
 * which trust the e-mail address only when it is verified or verification is not
 * required (as headscale's doOIDCAuthorization). Returns the refusal for the person,
 * or undefined when allowed.
 */
export function checkAllowed(config: Pick<OidcConfig, 'allowed_domains' | 'allowed_groups' | 'allowed_users' | 'email_verified_required'>, who: { email: string; emailVerified: boolean; groups: string[] }): string | undefined {
  if (config.allowed_groups.length && !config.allowed_groups.some((g) => who.groups.includes(g))) {
    return 'Your account is not in a group that may log devices in to this network.';
  }
  const emailTests = config.allowed_domains.length > 0 || config.allowed_users.length > 0;
  if (emailTests && config.email_verified_required && !who.emailVerified) {
    return `Your e-mail address${who.email ? ` ${who.email}` : ''} is not verified by the identity provider, so it cannot be checked against who may log in.`;
  }
  const at = who.email.lastIndexOf('@');
  const domain = at >= 0 ? who.email.slice(at + 1).toLowerCase() : '';
  if (config.allowed_domains.length && !config.allowed_domains.some((d) => d.toLowerCase() === domain)) {
    return `Accounts ${domain ? `of ${domain}` : 'without an e-mail address'} may not log devices in to this network.`;
  }
  if (config.allowed_users.length && !config.allowed_users.some((u) => u.toLowerCase() === who.email.toLowerCase())) {
    return `${who.email || 'Your account'} may not log devices in to this network.`;
  }
  return undefined;
}

/**
 * OidcIdentity is the identity port over OpenID Connect with openid-client (panva,
 * OpenID Certified): discovery, the authorization code flow with state, nonce and
 * optional PKCE, and ID token validation (signature against the provider's JWKS,
 * refetched when a new key id appears; issuer, audience, expiry, nonce). State is
 * bound to the browser by a cookie and kept server-side with the nonce and PKCE
 * verifier, single use. No secret (client secret, code, tokens) is ever logged.
 */
export class OidcIdentity implements IdentityPort {
  readonly provider = 'oidc';
  readonly callbackPath = CALLBACK_PATH;
  private configuration?: Promise<client.Configuration>;
  private readonly started = new Map<string, StartedLogin>();
  private readonly secret: string;
  private readonly redirectUri: string;

  constructor(private readonly config: OidcConfig, serverUrl: string, private readonly logger: Logger) {
    this.secret = readClientSecret(config);
    this.redirectUri = serverUrl.replace(/\/+$/, '') + CALLBACK_PATH;
  }

  /** init discovers the provider; with only_start_if_oidc_is_available off, a failure is retried at the next login. */
  async init(): Promise<void> {
    try {
      await this.discover();
      this.logger.info('identity provider discovered', { issuer: this.config.issuer, pkce: this.config.pkce.enabled ? this.config.pkce.method : 'off' });
    } catch (err) {
      const why = `oidc.issuer ${this.config.issuer}: the provider cannot be reached or its discovery document is invalid: ${(err as Error).message}`;
      if (this.config.only_start_if_oidc_is_available) throw new Error(`${why} (set oidc.only_start_if_oidc_is_available: false to start anyway)`);
      this.logger.warn(`${why}; logins are retried against it`);
    }
  }

  private discover(): Promise<client.Configuration> {
    if (!this.configuration) {
      const issuer = new URL(this.config.issuer);
      const secret = this.secret;
      // client_secret_basic unless the provider says it does not take it (the spec's default).
      const auth: client.ClientAuth = (as, c, body, headers) => {
        const methods = as.token_endpoint_auth_methods_supported;
        const pick = Array.isArray(methods) && !methods.includes('client_secret_basic') && methods.includes('client_secret_post')
          ? client.ClientSecretPost(secret) : client.ClientSecretBasic(secret);
        return pick(as, c, body, headers);
      };
      const execute = [client.enableNonRepudiationChecks, ...(issuer.protocol === 'http:' ? [client.allowInsecureRequests] : [])];
      this.configuration = client.discovery(issuer, this.config.client_id, undefined, auth, { execute });
      this.configuration.catch(() => { this.configuration = undefined; });
    }
    return this.configuration;
  }

  providerIdFor(subject: string): string {
    return providerIdOf(this.config.issuer, subject);
  }

  async begin(loginKey: string, _req: BrowserRequest): Promise<LoginStart> {
    const configuration = await this.discover();
    const state = client.randomState();
    const nonce = client.randomNonce();
    const params: Record<string, string> = { ...this.config.extra_params, redirect_uri: this.redirectUri, scope: this.config.scope.join(' '), state, nonce };
    const login: StartedLogin = { loginKey, nonce, expiresAt: Date.now() + LOGIN_TTL_MS };
    if (this.config.pkce.enabled) {
      login.verifier = client.randomPKCECodeVerifier();
      params.code_challenge_method = this.config.pkce.method;
      params.code_challenge = this.config.pkce.method === 'S256' ? await client.calculatePKCECodeChallenge(login.verifier) : login.verifier;
    }
    this.prune();
    while (this.started.size >= MAX_LOGINS) this.started.delete(this.started.keys().next().value!);
    this.started.set(state, login);
    return {
      location: client.buildAuthorizationUrl(configuration, params).href,
      cookies: [{ name: STATE_COOKIE, value: state, maxAgeMs: LOGIN_TTL_MS, path: CALLBACK_PATH }],
    };
  }

  async complete(req: BrowserRequest): Promise<LoginOutcome> {
    const clear = [{ name: STATE_COOKIE, value: '', maxAgeMs: 0, path: CALLBACK_PATH }];
    const state = req.url.searchParams.get('state') ?? '';
    const providerError = req.url.searchParams.get('error');
    const login = state ? this.started.get(state) : undefined;
    if (!state || !login || login.expiresAt <= Date.now()) {
      return { ok: false, status: 400, reason: 'This login is unknown or has expired: run tailscale up on the device again for a new link.', cookies: clear };
    }
    if (req.cookies[STATE_COOKIE] !== state) {
      return { ok: false, status: 403, reason: 'This login was started in another browser: open the link from the device in this browser.', loginKey: login.loginKey };
    }
    this.started.delete(state);
    if (providerError) {
      const description = text(req.url.searchParams.get('error_description')).slice(0, 200);
      return { ok: false, status: 403, reason: `The identity provider refused the login: ${providerError}${description ? ` (${description})` : ''}.`, loginKey: login.loginKey, cookies: clear };
    }
    const configuration = await this.discover();
    let tokens: Awaited<ReturnType<typeof client.authorizationCodeGrant>>;
    try {
      tokens = await client.authorizationCodeGrant(configuration, req.url, {
        expectedState: state, expectedNonce: login.nonce, pkceCodeVerifier: login.verifier, idTokenExpected: true,
      });
    } catch (err) {
      // The error names what failed (signature, nonce, audience, the provider's error code); it never quotes a token or code.
      // openid-client wraps oauth4webapi's error, whose cause names the failing claim (never its value).
      let claim: unknown;
      for (let e: unknown = err, i = 0; e && typeof e === 'object' && i < 4 && claim === undefined; e = (e as { cause?: unknown }).cause, i++) {
        claim = (e as { claim?: unknown }).claim;
      }
      this.logger.warn('identity provider answer not accepted', {
        issuer: this.config.issuer, error: `${(err as Error).name}: ${(err as Error).message}`.slice(0, 300), ...(typeof claim === 'string' ? { claim } : {}),
      });
      return { ok: false, status: 403, reason: 'The identity provider\'s answer could not be verified, so you were not logged in.', loginKey: login.loginKey, cookies: clear };
    }
    const idClaims = (tokens.claims() ?? {}) as Claims;
    const claims: Claims = { ...idClaims };
    try {
      // Userinfo holds what some providers leave out of the ID token (groups, picture); the ID token's subject must match.
      const info = await client.fetchUserInfo(configuration, tokens.access_token, text(idClaims.sub)) as Claims;
      for (const k of ['email', 'email_verified', 'preferred_username', 'name', 'picture'] as const) if (info[k] !== undefined && info[k] !== '') claims[k] = info[k];
      if (info.groups !== undefined) claims.groups = info.groups;
    } catch (err) {
      this.logger.debug('userinfo not read; using the ID token\'s claims', { error: (err as Error).message.slice(0, 200) });
    }
    const email = text(claims.email);
    const emailVerified = truthy(claims.email_verified);
    const groups = stringList(claims.groups);
    const providerId = providerIdOf(text(idClaims.iss) || this.config.issuer, text(idClaims.sub));
    const refused = checkAllowed(this.config, { email, emailVerified, groups });
    if (refused) return { ok: false, status: 403, reason: refused, loginKey: login.loginKey, who: `${providerId}${email ? ` <${email}>` : ''}`, cookies: clear };
    const trustEmail = emailVerified || !this.config.email_verified_required;
    const identity: VerifiedIdentity = {
      provider: this.provider, providerId,
      email: trustEmail ? email : '',
      username: text(claims.preferred_username),
      displayName: text(claims.name),
      profilePicUrl: text(claims.picture),
      groups,
    };
    const exp = typeof idClaims.exp === 'number' ? new Date(idClaims.exp * 1000) : undefined;
    return { ok: true, loginKey: login.loginKey, identity, nodeExpiry: this.config.use_expiry_from_token ? exp : undefined, cookies: clear };
  }

  private prune(): void {
    const now = Date.now();
    for (const [k, v] of this.started) if (v.expiresAt <= now) this.started.delete(k);
  }

  close(): void {
    this.started.clear();
  }
}

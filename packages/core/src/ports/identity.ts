import { assertPort } from './assert.js';

/**
 * The identity (login) port: how a person proves who they are when a device logs
 * in interactively (`tailscale up` without a key). The kernel owns the device side
 * (the AuthURL, the held `/machine/register` follow-up, users, nodes); an adapter
 * owns the browser side with its provider. The default adapter,
 * `@headway/identity-oidc`, speaks OpenID Connect and is loaded when `oidc.issuer`
 * is set; a plugin (`plugins: [{ package, port: identity }]`) may bring another
 * login method instead. Adapters never see the database: they return a verified
 * identity, and the kernel finds or creates its user and registers the node.
 */

/** BrowserRequest is what an adapter may read of a browser's request. */
export interface BrowserRequest {
  /** url is the request's full URL as the browser sent it (path and query). */
  url: URL;
  method: string;
  /** cookies sent with the request, by name. */
  cookies: Record<string, string>;
}

/** BrowserCookie is a cookie an adapter sets to tie the browser's return to its start (HttpOnly, SameSite=Lax). */
export interface BrowserCookie {
  name: string;
  value: string;
  /** maxAgeMs: 0 deletes the cookie. */
  maxAgeMs: number;
  /** path limits the cookie to the adapter's callback path (default `/`). */
  path?: string;
}

/** LoginStart sends the browser to the provider. */
export interface LoginStart {
  /** location is where the browser goes next (the provider's authorization endpoint). */
  location: string;
  cookies: BrowserCookie[];
}

/**
 * VerifiedIdentity is a person the provider vouched for. `providerId` is the stable
 * key users are found by (OIDC: `<iss>/<sub>`); the rest is profile, refreshed at
 * every login. `email` is empty when the provider did not verify it and the
 * configuration requires verification.
 */
export interface VerifiedIdentity {
  /** provider names the login method, e.g. `oidc`; shown as the user's `provider`. */
  provider: string;
  providerId: string;
  email: string;
  /** username is the provider's preferred user name, if any (a candidate for the user's name). */
  username: string;
  displayName: string;
  profilePicUrl: string;
  groups: string[];
}

/** LoginRejection: the provider or the configuration refused the person; `reason` is shown to them and logged. */
export interface LoginRejection {
  ok: false;
  /** status is the HTTP status of the page shown (400 bad request, 403 not allowed, 410 expired, 502 provider failed). */
  status: number;
  /** reason is one sentence for the person, never a secret. */
  reason: string;
  /** loginKey is the device's login when the adapter could tell which it was. */
  loginKey?: string;
  /** identity is who was refused, when known (for the log). */
  who?: string;
  cookies?: BrowserCookie[];
}

/** LoginSuccess: the person is verified for the device's login `loginKey`. */
export interface LoginSuccess {
  ok: true;
  loginKey: string;
  identity: VerifiedIdentity;
  /** nodeExpiry overrides node.expiry for the node (OIDC: the ID token's expiry, when oidc.use_expiry_from_token). */
  nodeExpiry?: Date;
  cookies?: BrowserCookie[];
}

export type LoginOutcome = LoginSuccess | LoginRejection;

export interface IdentityPort {
  /** provider names the method (`oidc`); stored as the user's provider. */
  readonly provider: string;
  /** callbackPath is the path under server_url where the provider returns the browser (`/oidc/callback`). */
  readonly callbackPath: string;
  /** init reaches the provider (discovery) before the server serves; throwing stops start-up. */
  init?(): Promise<void>;
  /** begin starts a person's login for the device's waiting login `loginKey`. */
  begin(loginKey: string, req: BrowserRequest): Promise<LoginStart>;
  /** complete checks the browser's return from the provider and says who it is, or why not. */
  complete(req: BrowserRequest): Promise<LoginOutcome>;
  /** providerIdFor turns a bare subject into a providerId (for `headway users link --subject`). */
  providerIdFor?(subject: string): string;
  close?(): Promise<void> | void;
}

export const IDENTITY = 'identity';

export function assertIdentityPort(value: unknown, adapter: string): asserts value is IdentityPort {
  assertPort(value, adapter, 'identity', ['begin', 'complete']);
  const v = value as { provider?: unknown; callbackPath?: unknown };
  if (typeof v.provider !== 'string' || !v.provider || typeof v.callbackPath !== 'string' || !v.callbackPath.startsWith('/')) {
    throw new Error(`adapter ${adapter} does not implement the identity port: provider must be a name and callbackPath a path starting with /`);
  }
}

import { randomBytes, timingSafeEqual } from 'node:crypto';
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { HeadwayConfig } from '@headway/core';
import { HeadwayError, browserCookieLines, readBrowserRequest } from '@headway/core';
import type { Logger } from '@headway/core';
import type { BrowserCookie, BrowserRequest, IdentityPort, LoginOutcome } from '@headway/core';
import type { State } from '@headway/core';
import type { Registrar } from './register.js';
import { confirmLoginPage, FORM_PAGE_HEADERS, loginDonePage, loginRefusedPage, PAGE_HEADERS } from './pages.js';
import type { SshChecks } from './ssh-check.js';
import { sshCheckConfirmPage, sshCheckDonePage, sshCheckGonePage, sshCheckRefusedPage, sshCheckView } from './ssh-check-pages.js';

/** CONFIRM_PATH receives the person's confirmation that the device may join as them. */
export const CONFIRM_PATH = '/login/confirm';
const CONFIRM_COOKIE = 'headway_login_confirm';
/** CONFIRM_TTL_MS bounds how long a signed-in person may take to confirm. */
const CONFIRM_TTL_MS = 10 * 60_000;
/** MAX_CONFIRMATIONS bounds the waiting confirmations kept in memory (each needs a provider login to create). */
const MAX_CONFIRMATIONS = 4096;
const FORM_LIMIT = 4096;
const LOGIN_KEY = /^[A-Za-z0-9_-]{1,64}$/;

/** Confirmation is a verified person's pending confirmation of a device login, or of an SSH check (`check`). */
interface Confirmation { loginKey: string; userId: number; expiry?: Date; expiresAt: number; check?: boolean }

/** LoginHandoff takes the provider's return for the logins it began itself (the admin console's sign-in). */
export interface LoginHandoff {
  owns(loginKey: string): boolean;
  finish(ctx: Context, outcome: LoginOutcome): Promise<void>;
}

/**
 * LoginFlow serves the browser side of an interactive login through the identity
 * port: the AuthURL (`/register/<key>`) sends the person to the provider, the
 * provider's callback yields a verified identity (or a refusal, shown and logged),
 * the person confirms on a page of ours, and only then is the node registered and
 * the device's held `/machine/register` follow-up answered. The confirmation step
 * keeps a link alone from registering a device: a provider that signs people in
 * silently would otherwise let anyone who sends a victim an AuthURL have the
 * victim's identity approve the sender's device.
 */
export class LoginFlow {
  private readonly confirmations = new Map<string, Confirmation>();
  private readonly secureCookies: boolean;

  constructor(private readonly o: {
    identity: IdentityPort; state: State; registrar: Registrar; config: HeadwayConfig; logger: Logger; sshChecks?: SshChecks; handoff?: LoginHandoff;
  }) {
    this.secureCookies = o.config.server_url.startsWith('https:');
  }

  /** routes mounts the login pages; mount them before the control routes so /register/:key is ours. */
  routes(router: Router): void {
    router.get('/register/:key', (ctx) => this.start(ctx));
    router.get('/auth/:id', (ctx) => this.startCheck(ctx));
    router.get(this.o.identity.callbackPath, (ctx) => this.callback(ctx));
    router.post(CONFIRM_PATH, (ctx) => this.confirm(ctx));
  }

  private browserRequest(ctx: Context): BrowserRequest {
    return readBrowserRequest({ originalUrl: ctx.originalUrl, method: ctx.method, cookieHeader: ctx.get('cookie') || '' }, this.o.config.server_url);
  }

  private setCookies(ctx: Context, cookies: BrowserCookie[] | undefined): void {
    if (cookies?.length) ctx.append('Set-Cookie', browserCookieLines(cookies, this.secureCookies));
  }

  /** refuse shows why a login (or, with `check`, an SSH check's sign-in) was refused, and logs it. */
  private refuse(ctx: Context, status: number, reason: string, log: Record<string, unknown> = {}, check = false): void {
    this.o.logger.warn(check ? 'SSH check sign-in refused' : 'login refused', { provider: this.o.identity.provider, reason, ...log });
    ctx.status = status;
    ctx.type = 'text/html; charset=utf-8';
    ctx.set(PAGE_HEADERS);
    ctx.body = check ? sshCheckRefusedPage(reason) : loginRefusedPage(reason);
  }

  private isCheck(key: string | undefined): boolean { return key !== undefined && (this.o.sshChecks?.owns(key) ?? false); }

  /** html answers a page; only the confirmation, whose form posts back here, passes FORM_PAGE_HEADERS. */
  private html(ctx: Context, body: string, headers: Readonly<Record<string, string>> = PAGE_HEADERS): void {
    ctx.status = 200;
    ctx.type = 'text/html; charset=utf-8';
    ctx.set(headers);
    ctx.body = body;
  }

  /** start answers the AuthURL: a known waiting login goes to the provider. */
  private async start(ctx: Context): Promise<void> {
    const key = String(ctx.params.key);
    const pending = LOGIN_KEY.test(key) ? await this.o.state.pending.get(key) : undefined;
    if (!pending) return this.refuse(ctx, 404, 'This login link is unknown or has expired.');
    let begun;
    try {
      begun = await this.o.identity.begin(key, this.browserRequest(ctx));
    } catch (err) {
      return this.refuse(ctx, 502, 'The identity provider cannot be reached; try again in a moment.', { error: errorText(err) });
    }
    this.setCookies(ctx, begun.cookies);
    ctx.set('Cache-Control', 'no-store');
    ctx.redirect(begun.location);
  }

  /** startCheck answers an SSH check's link: a waiting check sends the person to the provider to sign in again. */
  private async startCheck(ctx: Context): Promise<void> {
    const id = String(ctx.params.id);
    const check = this.o.sshChecks?.get(id);
    if (!check) {
      ctx.status = LOGIN_KEY.test(id) ? 404 : 400;
      ctx.type = 'text/html; charset=utf-8';
      ctx.set(PAGE_HEADERS);
      ctx.body = sshCheckGonePage();
      return;
    }
    let begun;
    try {
      begun = await this.o.identity.begin(id, this.browserRequest(ctx));
    } catch (err) {
      return this.refuse(ctx, 502, 'The identity provider cannot be reached; try again in a moment.', { error: errorText(err) }, true);
    }
    this.setCookies(ctx, begun.cookies);
    ctx.set('Cache-Control', 'no-store');
    ctx.redirect(begun.location);
  }

  /**
   * checkVerified asks the person the provider verified for an SSH check to allow the connection: only an
   * existing user who owns the source device gets the confirmation; anyone else is refused (403).
   */
  private checkVerified(ctx: Context, id: string, providerId: string): void {
    const checks = this.o.sshChecks!;
    const user = this.o.state.users.byProviderId(providerId);
    if (!user) return this.refuse(ctx, 403, 'You signed in as someone who is not a user of this network, so you cannot approve this SSH connection.', { who: providerId }, true);
    let check;
    try {
      check = checks.checkOwner(id, user);
    } catch (err) {
      if (err instanceof HeadwayError && err.status < 500) return this.refuse(ctx, err.status === 404 ? 410 : err.status, err.message, { who: providerId }, true);
      throw err;
    }
    this.prune();
    if (this.confirmations.size >= MAX_CONFIRMATIONS) return this.refuse(ctx, 503, 'Too many sign-ins are waiting for confirmation; try again in a few minutes.', {}, true);
    const token = randomBytes(32).toString('base64url');
    const expiresAt = Math.min(Date.now() + CONFIRM_TTL_MS, checks.expiresAt(check).getTime());
    this.confirmations.set(token, { loginKey: id, userId: user.id, expiresAt, check: true });
    this.setCookies(ctx, [{ name: CONFIRM_COOKIE, value: token, maxAgeMs: CONFIRM_TTL_MS, path: CONFIRM_PATH }]);
    this.html(ctx, sshCheckConfirmPage({ view: sshCheckView(this.o.state, check), user: user.name, token, action: CONFIRM_PATH, expiresAt: new Date(expiresAt) }), FORM_PAGE_HEADERS);
  }

  /** confirmCheck approves the SSH check the owner confirmed. */
  private confirmCheck(ctx: Context, entry: Confirmation): void {
    const user = this.o.state.users.get(entry.userId);
    let check;
    try {
      if (!user) throw new HeadwayError('not_found', 'your user no longer exists');
      check = this.o.sshChecks!.approveAs(entry.loginKey, user);
    } catch (err) {
      if (err instanceof HeadwayError && err.status < 500) return this.refuse(ctx, err.status === 404 ? 410 : err.status, err.message, {}, true);
      throw err;
    }
    this.html(ctx, sshCheckDonePage({ view: sshCheckView(this.o.state, check), user: user.name }));
  }

  /** callback checks the provider's answer and asks the verified person to confirm. */
  private async callback(ctx: Context): Promise<void> {
    let outcome;
    try {
      outcome = await this.o.identity.complete(this.browserRequest(ctx));
    } catch (err) {
      return this.refuse(ctx, 502, 'The identity provider could not confirm who you are; try again.', { error: errorText(err) });
    }
    this.setCookies(ctx, outcome.cookies);
    if (outcome.loginKey !== undefined && this.o.handoff?.owns(outcome.loginKey)) return this.o.handoff.finish(ctx, outcome);
    if (!outcome.ok) return this.refuse(ctx, outcome.status, outcome.reason, outcome.who ? { who: outcome.who } : {}, this.isCheck(outcome.loginKey));
    if (this.isCheck(outcome.loginKey)) return this.checkVerified(ctx, outcome.loginKey, outcome.identity.providerId);
    const pending = await this.o.state.pending.get(outcome.loginKey);
    if (!pending) return this.refuse(ctx, 410, 'This login has expired: run tailscale up on the device again for a new link.', { who: outcome.identity.providerId });
    let user;
    try {
      user = await this.o.state.users.login(outcome.identity);
    } catch (err) {
      if (err instanceof HeadwayError && err.status < 500) return this.refuse(ctx, err.status, err.message, { who: outcome.identity.providerId });
      throw err;
    }
    this.prune();
    if (this.confirmations.size >= MAX_CONFIRMATIONS) return this.refuse(ctx, 503, 'Too many logins are waiting for confirmation; try again in a few minutes.');
    const token = randomBytes(32).toString('base64url');
    const expiresAt = Math.min(Date.now() + CONFIRM_TTL_MS, pending.expiresAt.getTime());
    this.confirmations.set(token, { loginKey: outcome.loginKey, userId: user.id, expiry: outcome.nodeExpiry, expiresAt });
    this.setCookies(ctx, [{ name: CONFIRM_COOKIE, value: token, maxAgeMs: CONFIRM_TTL_MS, path: CONFIRM_PATH }]);
    this.o.logger.info('login verified, waiting for confirmation', { provider: this.o.identity.provider, user: user.name, user_id: user.id });
    this.html(ctx, confirmLoginPage({
      hostname: hostnameOf(pending.hostinfo), user: user.name, email: user.email, token, action: CONFIRM_PATH, expiresAt: new Date(expiresAt),
    }), FORM_PAGE_HEADERS);
  }

  /** confirm registers the node once the person confirmed in the same browser that signed in. */
  private async confirm(ctx: Context): Promise<void> {
    const form = await readForm(ctx);
    const token = form?.get('token') ?? '';
    const cookie = this.browserRequest(ctx).cookies[CONFIRM_COOKIE] ?? '';
    const entry = token ? this.confirmations.get(token) : undefined;
    if (!entry || !sameText(token, cookie) || entry.expiresAt <= Date.now()) {
      return this.refuse(ctx, 403, 'This confirmation is unknown, expired, or from another browser: run tailscale up on the device again.');
    }
    this.confirmations.delete(token);
    this.setCookies(ctx, [{ name: CONFIRM_COOKIE, value: '', maxAgeMs: 0, path: CONFIRM_PATH }]);
    if (entry.check) return this.confirmCheck(ctx, entry);
    const pending = await this.o.state.pending.get(entry.loginKey);
    const user = this.o.state.users.get(entry.userId);
    if (!pending || !user) return this.refuse(ctx, 410, 'This login has expired: run tailscale up on the device again for a new link.');
    let nodeId: number;
    try {
      nodeId = await this.o.registrar.approve(entry.loginKey, user.id, { method: 'oidc', expiry: entry.expiry });
    } catch (err) {
      if (err instanceof HeadwayError && err.status < 500) return this.refuse(ctx, err.status === 404 ? 410 : err.status, err.message);
      throw err;
    }
    const node = this.o.state.nodes.get(nodeId);
    this.o.logger.info('device logged in through the identity provider', { provider: this.o.identity.provider, user: user.name, node: nodeId });
    this.html(ctx, loginDonePage({ hostname: hostnameOf(pending.hostinfo), user: user.name, node: node?.givenName ?? String(nodeId) }));
  }

  private prune(): void {
    const now = Date.now();
    for (const [k, v] of this.confirmations) if (v.expiresAt <= now) this.confirmations.delete(k);
  }
}

function hostnameOf(hostinfo: Record<string, unknown> | null): string {
  const h = hostinfo?.Hostname;
  return typeof h === 'string' && h ? h.slice(0, 63) : 'a device';
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a), y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** errorText is an error's message for the log, cut short (provider errors never carry codes or tokens). */
function errorText(err: unknown): string {
  return (err instanceof Error ? `${err.name}: ${err.message}` : String(err)).slice(0, 300);
}

/** readForm reads a small urlencoded form body; undefined when it is not one or too large. */
async function readForm(ctx: Context): Promise<URLSearchParams | undefined> {
  if (!ctx.is('application/x-www-form-urlencoded')) return undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of ctx.req) {
    size += (c as Buffer).length;
    if (size > FORM_LIMIT) return undefined;
    chunks.push(c as Buffer);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

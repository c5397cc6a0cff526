import { randomBytes } from 'node:crypto';
import type Router from '@koa/router';
import type { Context } from 'koa';
import { browserCookieLines, readBrowserRequest, type ConsoleSessions, type HeadwayConfig, type Logger } from '@headway/core';
import type { IdentityPort, LoginOutcome, VerifiedIdentity } from '@headway/core/ports';
import { escapeHtml } from './routes.js';
import { sessionCookie } from './auth.js';

/** OIDC_START_PATH begins an administrator's sign-in at the identity provider. */
export const OIDC_START_PATH = '/admin/oidc/start';
/** KEY_PREFIX marks the console's logins: a colon never appears in a device's login key or an SSH check's id. */
const KEY_PREFIX = 'console:';
/** PENDING_TTL_MS bounds how long an administrator may spend at the provider (as a device login may). */
const PENDING_TTL_MS = 15 * 60_000;
/** MAX_PENDING bounds the console logins begun and not yet returned (anyone may open the start page). */
const MAX_PENDING = 1024;

/** AdminLists are admin.allowed_users, admin.allowed_groups and admin.allowed_domains. */
export interface AdminLists { users: string[]; groups: string[]; domains: string[] }

/** adminListsOf reads the lists from the configuration; undefined when none is set (no one signs in through oidc). */
export function adminListsOf(config: HeadwayConfig): AdminLists | undefined {
  const lists = { users: config.admin.allowed_users, groups: config.admin.allowed_groups, domains: config.admin.allowed_domains };
  return lists.users.length || lists.groups.length || lists.domains.length ? lists : undefined;
}

/**
 * adminRefusal says why a verified person may not administer, or undefined when one list admits them: their e-mail
 * address is in allowed_users, its domain in allowed_domains, or one of their groups in allowed_groups. The e-mail
 * address counts only as the identity port hands it over, which is empty when the provider did not verify it and
 * oidc.email_verified_required says it must.
 */
export function adminRefusal(lists: AdminLists, who: Pick<VerifiedIdentity, 'email' | 'groups'>): string | undefined {
  const email = who.email.toLowerCase();
  const domain = email.includes('@') ? email.slice(email.lastIndexOf('@') + 1) : '';
  if (email && lists.users.some((u) => u.toLowerCase() === email)) return undefined;
  if (domain && lists.domains.some((d) => d.toLowerCase() === domain)) return undefined;
  if (lists.groups.some((g) => who.groups.includes(g))) return undefined;
  return `${who.email || 'Your account (its e-mail address is not verified)'} may not administer this server: `
    + 'ask an administrator to add you to admin.allowed_users, admin.allowed_groups or admin.allowed_domains.';
}

/** ConsoleRender is how mountConsole lets this file answer with its pages. */
export interface ConsoleRender {
  /** signin shows the sign-in page, with `message` as an error. */
  signin(ctx: Context, status: number, message?: string): void;
  /** page shows `body` (HTML) in the sign-in page's frame. */
  page(ctx: Context, status: number, body: string): void;
}

/**
 * ConsoleOidc signs administrators in to the console through the server's identity provider. The login begins under a
 * console-only key and returns through the provider callback devices use (/oidc/callback), so nothing new is
 * registered at the provider; LoginFlow hands the outcome of a key this class owns to `finish`, which checks the
 * admin.* lists and opens a session.
 */
export class ConsoleOidc {
  readonly startPath = OIDC_START_PATH;
  readonly label: string;
  private readonly pending = new Map<string, number>();
  private render?: ConsoleRender;

  constructor(private readonly o: {
    identity: IdentityPort; sessions: ConsoleSessions; config: HeadwayConfig; logger: Logger; lists: AdminLists; secure: boolean;
  }) {
    let host = '';
    try { host = new URL(o.config.oidc.issuer).host; } catch { /* a plugin's provider has no issuer URL */ }
    this.label = host || o.identity.provider;
  }

  /** attach mounts the start page; mountConsole calls it with its page renderers. */
  attach(router: Router, render: ConsoleRender): void {
    this.render = render;
    router.get(OIDC_START_PATH, (ctx) => this.start(ctx));
  }

  /** owns says whether a provider return belongs to a console sign-in. */
  owns(loginKey: string): boolean {
    return this.pending.has(loginKey);
  }

  private async start(ctx: Context): Promise<void> {
    this.prune();
    while (this.pending.size >= MAX_PENDING) this.pending.delete(this.pending.keys().next().value!);
    const key = `${KEY_PREFIX}${randomBytes(18).toString('base64url')}`;
    let begun;
    try {
      begun = await this.o.identity.begin(key, readBrowserRequest({ originalUrl: ctx.originalUrl, method: ctx.method, cookieHeader: ctx.get('cookie') || '' }, this.o.config.server_url));
    } catch (err) {
      this.o.logger.warn('console sign-in: the identity provider cannot be reached', { error: String((err as Error).message).slice(0, 200) });
      return this.render!.signin(ctx, 502, 'The identity provider cannot be reached; try again in a moment.');
    }
    this.pending.set(key, Date.now() + PENDING_TTL_MS);
    if (begun.cookies.length) ctx.append('set-cookie', browserCookieLines(begun.cookies, this.o.secure));
    ctx.set('cache-control', 'no-store');
    ctx.redirect(begun.location);
  }

  /**
   * finish answers the provider's return for a console login: a refusal by the provider or by the admin lists shows
   * the sign-in page with the reason (no session); an administrator gets a session cookie and a page that moves on to
   * the console. That last step is a same-origin navigation of its own: the browser withholds a SameSite=Strict cookie
   * from a redirect that continues the provider's cross-site one.
   */
  async finish(ctx: Context, outcome: LoginOutcome): Promise<void> {
    const render = this.render!;
    if (outcome.loginKey) this.pending.delete(outcome.loginKey);
    if (!outcome.ok) {
      this.o.logger.warn('console sign-in refused', { via: 'oidc', reason: outcome.reason, ...(outcome.who ? { who: outcome.who } : {}) });
      return render.signin(ctx, outcome.status, outcome.reason);
    }
    const who = outcome.identity;
    const refused = adminRefusal(this.o.lists, who);
    if (refused) {
      this.o.logger.warn('console sign-in refused', { via: 'oidc', who: who.email || who.providerId, reason: 'not on the admin lists' });
      return render.signin(ctx, 403, refused);
    }
    const admin = who.email || who.providerId;
    const opened = await this.o.sessions.open(admin, 'oidc');
    this.o.logger.info('console sign-in', { admin, via: 'oidc', remote: ctx.req.socket.remoteAddress });
    ctx.append('set-cookie', sessionCookie(this.o.secure, opened.cookie, Math.ceil(this.o.sessions.limits.maxAgeMs / 1000)));
    render.page(ctx, 200, '<meta http-equiv="refresh" content="0; url=/admin/">'
      + `<p role="status">Signed in as ${escapeHtml(admin)}. <a href="/admin/">Continue to the console</a></p>`);
  }

  private prune(): void {
    const now = Date.now();
    for (const [k, until] of this.pending) if (until <= now) this.pending.delete(k);
  }
}


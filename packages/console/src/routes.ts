import type Router from '@koa/router';
import type { Context } from 'koa';
import { ConsoleSessions, type ChangeBus, type HeadwayConfig, type Logger } from '@headway/core';
import { loadAssets, type ConsoleAssets } from './assets.js';
import { authenticateConsole, readCookie, sameOrigin, sessionCookie } from './auth.js';
import { mountConsoleEvents } from './events.js';
import type { ConsoleRender } from './oidc.js';

/**
 * CSP: scripts, styles and connections from this server only; nothing inline, no eval, no frames, forms posting
 * only here. The bundle needs nothing more (scripts/bundle.mjs emits one module script and one style sheet).
 */
export const CONSOLE_CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
  + "form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/** CONSOLE_HEADERS go on every console answer. */
const CONSOLE_HEADERS: Record<string, string> = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'same-origin',
  'cross-origin-opener-policy': 'same-origin',
};

export interface ConsoleOptions {
  config: HeadwayConfig;
  sessions: ConsoleSessions;
  logger: Logger;
  /** assets: the bundle (tests may give their own); default: this package's dist/web. */
  assets?: ConsoleAssets;
  /** oidc: the provider sign-in's routes (/admin/oidc/...), mounted when admins may sign in through it (ConsoleOidc). */
  oidc?: { label: string; startPath: string; attach?(router: Router, render: ConsoleRender): void };
  /** bus: the state's change bus, streamed to the pages as server-sent events at /admin/events (live machine state). */
  bus?: ChangeBus;
}

/** escapeHtml makes text safe inside an element or a double-quoted attribute. */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** isSecure: the console is reached over https (the cookie is then Secure and __Host- prefixed). */
export function isSecure(config: HeadwayConfig): boolean {
  return config.server_url.startsWith('https:');
}

/**
 * mountConsole serves the admin console on the main listener: the pages under /admin (only to a signed-in
 * administrator; the sign-in page to anyone), sign-in by a one-time link, sign-out, and /admin/session, which tells
 * the pages who is signed in and the CSRF token their changes carry. The pages' data comes from /api/v1 and /api/v2,
 * which accept the session cookie (authenticateConsole); there is no second path to storage.
 */
export function mountConsole(router: Router, opts: ConsoleOptions): void {
  const { config, sessions, logger } = opts;
  const secure = isSecure(config);
  if (opts.bus) mountConsoleEvents(router, { bus: opts.bus, sessions, secure, logger });
  let assets = opts.assets ?? loadAssets();
  const page = (ctx: Context, status: number, html: string) => {
    ctx.status = status;
    ctx.type = 'text/html; charset=utf-8';
    ctx.set(CONSOLE_HEADERS);
    ctx.set('cache-control', 'no-store');
    ctx.body = html;
  };
  const unbuilt = (ctx: Context) => {
    assets ??= loadAssets();
    if (assets) return false;
    ctx.status = 503;
    ctx.type = 'text/plain; charset=utf-8';
    ctx.body = 'the admin console was not built: run `npm run build` (it bundles packages/console/web)\n';
    return true;
  };
  const signinPage = (ctx: Context, status: number, message?: string) => {
    if (unbuilt(ctx)) return;
    const token = typeof ctx.query.token === 'string' ? ctx.query.token : '';
    const parts: string[] = [];
    if (message) parts.push(`<p class="alert error" role="alert">${escapeHtml(message)}</p>`);
    if (token) {
      parts.push('<form method="post" action="/admin/signin">'
        + `<input type="hidden" name="token" value="${escapeHtml(token)}">`
        + '<button type="submit" class="primary">Sign in with this link</button></form>'
        + '<p>The link works once, for a few minutes.</p>');
    } else {
      parts.push('<p>Run <code>headway console link</code> on the server\'s host for a one-time sign-in link.</p>');
    }
    if (opts.oidc) parts.push(`<p><a href="${escapeHtml(opts.oidc.startPath)}">Sign in with ${escapeHtml(opts.oidc.label)}</a></p>`);
    page(ctx, status, assets!.signin.replace('{{body}}', parts.join('\n')));
  };

  opts.oidc?.attach?.(router, { signin: signinPage, page: (ctx, status, body) => { if (!unbuilt(ctx)) page(ctx, status, assets!.signin.replace('{{body}}', body)); } });
  // The router is not strict about a trailing slash: one route serves both, /admin redirecting.
  router.get('/admin/', async (ctx) => {
    if (ctx.path === '/admin') { ctx.status = 301; ctx.redirect('/admin/'); return; }
    if (unbuilt(ctx)) return;
    const auth = await authenticateConsole(ctx, sessions, secure);
    if (!auth || 'status' in auth) { ctx.status = 303; ctx.redirect('/admin/signin'); return; }
    page(ctx, 200, assets!.index);
  });
  router.get('/admin/assets/:file', (ctx) => {
    if (unbuilt(ctx)) return;
    const file = assets!.files.get(ctx.params.file ?? '');
    if (!file) { ctx.status = 404; ctx.body = 'not found\n'; return; }
    ctx.set(CONSOLE_HEADERS);
    // Names carry their content's hash: a new bundle has new names.
    ctx.set('cache-control', 'public, max-age=31536000, immutable');
    ctx.type = file.type;
    ctx.body = file.body;
  });
  router.get('/admin/signin', (ctx) => signinPage(ctx, 200));
  router.post('/admin/signin', async (ctx) => {
    if (!sameOrigin(ctx, config.server_url)) return signinPage(ctx, 403, 'This sign-in came from another site and was refused.');
    const form = await readForm(ctx);
    const opened = await sessions.redeemLink(form.get('token') ?? '');
    if (!opened) return signinPage(ctx, 401, 'This sign-in link is not valid: it was used already, it expired, or it was mistyped. Make a new one with `headway console link`.');
    logger.info('console sign-in', { admin: opened.session.admin, via: 'link', remote: ctx.req.socket.remoteAddress });
    ctx.set('set-cookie', sessionCookie(secure, opened.cookie, Math.ceil(sessions.limits.maxAgeMs / 1000)));
    ctx.status = 303;
    ctx.redirect('/admin/');
  });
  router.post('/admin/signout', async (ctx) => {
    const cookie = readCookie(ctx, secure);
    const session = await sessions.check(cookie);
    const form = await readForm(ctx);
    const presented = ctx.get('x-csrf-token') || form.get('csrf') || undefined;
    if (!session || !sameOrigin(ctx, config.server_url) || !ConsoleSessions.csrfMatches(session, presented)) {
      ctx.status = 403;
      ctx.type = 'text/plain; charset=utf-8';
      ctx.body = 'sign-out refused: no session, or the request did not come from the console\n';
      return;
    }
    await sessions.close(cookie!);
    ctx.set('set-cookie', sessionCookie(secure, '', 0));
    ctx.status = 303;
    ctx.redirect('/admin/signin');
  });
  router.get('/admin/session', async (ctx) => {
    ctx.set(CONSOLE_HEADERS);
    ctx.set('cache-control', 'no-store');
    const auth = await authenticateConsole(ctx, sessions, secure);
    if (!auth || 'status' in auth) {
      ctx.status = 401;
      ctx.body = { code: 'unauthorized', message: 'not signed in to the console' };
      return;
    }
    const s = auth.session;
    ctx.body = { admin: s.admin, via: s.via, csrf: s.csrf, expiresAt: s.expiresAt.toISOString() };
  });
}

/** ADMIN_NAME: what a link's administrator may be called (it appears in the audit log as console:<name>). */
const ADMIN_NAME = /^[A-Za-z0-9._@+-]{1,64}$/;

/** FORM_LIMIT: a sign-in or sign-out form carries one token, a link request one name; anything longer is not ours. */
const FORM_LIMIT = 4096;

/** readSmall reads a body of content type `type` of at most FORM_LIMIT bytes; undefined for another type or a longer body. */
async function readSmall(ctx: Context, type: string): Promise<string | undefined> {
  if (!ctx.is(type)) return undefined;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req) {
    size += (chunk as Buffer).length;
    if (size > FORM_LIMIT) return undefined;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** readJsonObject reads a small JSON object body (empty for none or any other body). */
async function readJsonObject(ctx: Context): Promise<Record<string, unknown>> {
  const text = await readSmall(ctx, 'application/json');
  if (text === undefined) return {};
  try {
    const v: unknown = JSON.parse(text);
    return v && typeof v === 'object' && !Array.isArray(v) ? v as Record<string, unknown> : {};
  } catch {
    return {};
  }
}

/** readForm reads a small urlencoded form body (empty for any other body). */
async function readForm(ctx: Context): Promise<URLSearchParams> {
  return new URLSearchParams(await readSmall(ctx, 'application/x-www-form-urlencoded') ?? '');
}

/**
 * mountConsoleLinks serves, on the admin socket only (trusted by its file permissions), the one-time sign-in links
 * `headway console link` prints: POST /api/v1/console/link answers the URL, shown once.
 */
export function mountConsoleLinks(router: Router, sessions: ConsoleSessions, serverUrl: string): void {
  router.post('/api/v1/console/link', async (ctx) => {
    const body = await readJsonObject(ctx);
    const admin = typeof body.admin === 'string' ? body.admin.trim() : '';
    if (!ADMIN_NAME.test(admin)) {
      ctx.status = 400;
      ctx.type = 'application/problem+json';
      ctx.body = { status: 400, code: 'invalid_field', field: 'admin', message: 'admin: expected the name the sign-in is recorded under (1-64 letters, digits, . _ @ + -)' };
      return;
    }
    const link = await sessions.createLink(admin);
    const url = new URL('/admin/signin', serverUrl);
    url.searchParams.set('token', link.token);
    ctx.body = { url: url.toString(), expiresAt: link.expiresAt.toISOString() };
  });
}

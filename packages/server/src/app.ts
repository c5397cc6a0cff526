import Router from '@koa/router';
import Koa, { type Context } from 'koa';
import type { Logger } from '@headway/core';
import { corsMiddleware, credential, problem, problemMiddleware, recordRoute, setActor } from '@headway/api';
import { mountApiDocs } from '@headway/api';
import { openApiDocument } from '@headway/api';
import { ROUTES, mountV2, type ApiDeps } from '@headway/api';
import type { ConsoleSessions, Metrics } from '@headway/core';
import { mountConsole, mountConsoleLinks, type ConsoleOidc } from '@headway/console';
import { INSTANCE_HEADER } from './reach.js';
import { homePage, PAGE_HEADERS } from '@headway/control';

export interface AppOptions {
  deps: ApiDeps;
  logger: Logger;
  metrics: Metrics;
  /** trusted: requests arrive over the local unix socket (file permissions are the auth). */
  trusted: boolean;
  /** clientAddress names a request's client for the request log (trusted_proxies); default: the TCP peer. */
  clientAddress?: (req: Context['req']) => string | undefined;
  /** healthDetails adds components to /health's body (`details`, as application/health+json names them): the TLS certificate's expiry. */
  healthDetails?: () => Record<string, unknown[]>;
  /** extra mounts routes served outside /api/v1 (control protocol, register page, DERP helpers). */
  extra?: (router: Router) => void;
  /** console: the admin console's sessions (admin.enabled); on the main listener its pages, on the socket its sign-in links. */
  console?: ConsoleSessions;
  /** consoleOidc: administrators may also sign in to the console through the identity provider. */
  consoleOidc?: ConsoleOidc;
}

/**
 * createApp builds the koa application for one listener. Every /api/v1 route
 * needs a valid API key unless the listener is trusted; the check runs before
 * any handler or body parsing.
 */
export function createApp(opts: AppOptions): Koa {
  const { deps, logger, metrics } = opts;
  const app = new Koa({ proxy: false });
  app.silent = true;
  /** clientOf names a request's client as the request log and the audit log record it. */
  const clientOf = (ctx: Context) => (opts.clientAddress ? opts.clientAddress(ctx.req) : ctx.req.socket.remoteAddress);
  app.use(async (ctx, next) => {
    const end = metrics.httpDuration.startTimer();
    try {
      await next();
    } finally {
      const route = (ctx as Context & { _matchedRoute?: string })._matchedRoute ?? 'unmatched';
      metrics.httpRequests.inc({ method: ctx.method, route: String(route), status: String(ctx.status) });
      const seconds = end({ method: ctx.method, route: String(route) });
      // The route pattern, not the path: paths such as /register/:key carry one-time keys.
      logger.trace('http request', { method: ctx.method, route: String(route), status: ctx.status, ms: Math.round(seconds * 1000), remote: clientOf(ctx) });
    }
  });
  // Before the problem middleware, so a listed origin's page can read error answers too.
  app.use(corsMiddleware(deps.config.api?.cors?.allowed_origins ?? []));
  app.use(problemMiddleware(logger));

  const router = new Router();
  const authenticate = async (ctx: Context, next: () => Promise<unknown>) => {
    if (opts.trusted) { setActor(ctx, 'socket'); return next(); }
    const header = ctx.get('authorization');
    if (!header && deps.consoleAuth) {
      const console = await deps.consoleAuth(ctx);
      if (console && 'status' in console) return problem(ctx, console.status, console.code, console.message);
      if (console) { setActor(ctx, console.actor); return next(); }
    }
    const m = /^Bearer\s+(\S+)$/i.exec(header);
    if (!m) return problem(ctx, 401, 'unauthorized', header ? 'malformed Authorization header; expected Bearer <API key>' : 'missing API key (Authorization: Bearer <API key>)');
    const key = await deps.state.keys.authenticateApiKey(m[1]!);
    if (!key) return problem(ctx, 401, 'unauthorized', 'invalid, expired or revoked API key');
    setActor(ctx, `apikey:${key.prefix}`);
    return next();
  };

  router.get('/', (ctx) => {
    ctx.type = 'text/html; charset=utf-8';
    ctx.set(PAGE_HEADERS);
    ctx.body = homePage(deps.config.server_url);
  });
  router.get('/health', async (ctx) => {
    const ok = await deps.health();
    ctx.status = ok ? 200 : 500;
    ctx.type = 'application/health+json';
    if (deps.instanceId) ctx.set(INSTANCE_HEADER, deps.instanceId);
    const details = opts.healthDetails?.();
    ctx.body = details ? { status: ok ? 'pass' : 'fail', details } : { status: ok ? 'pass' : 'fail' };
  });
  // /v1/metrics on the main listener reveals counts of users, nodes and keys, so it takes an API key unless
  // metrics.require_api_key opens it (headscale has no such path; its metrics live on metrics_listen_addr only).
  const metricsConf = deps.config.metrics ?? { public_endpoint: true, require_api_key: true };
  if (opts.trusted || metricsConf.public_endpoint) {
    const guard = metricsConf.require_api_key ? [authenticate] : [];
    router.get('/v1/metrics', ...guard, async (ctx) => {
      ctx.type = metrics.registry.contentType;
      ctx.body = await metrics.exposition();
    });
  }
  const serverUrl = deps.config.server_url;
  mountApiDocs(router, { document: (api) => openApiDocument({ serverUrl, api }), serverUrl });

  // Over the admin socket there is no client address to record.
  const remoteOf = (ctx: Context) => (opts.trusted ? '' : clientOf(ctx));
  for (const route of ROUTES) {
    const method = route.method.toLowerCase() as 'get' | 'post' | 'put' | 'delete';
    router[method](route.path, authenticate, async (ctx) => {
      const body = await route.handler(ctx, deps);
      ctx.body = body;
      await recordRoute(deps, ctx, route, body, remoteOf(ctx));
    });
  }
  mountV2(router, deps, opts.trusted, remoteOf);
  if (opts.console && opts.trusted) mountConsoleLinks(router, opts.console, deps.config.server_url);
  else if (opts.console) mountConsole(router, { config: deps.config, sessions: opts.console, logger, bus: deps.state.bus, oidc: opts.consoleOidc });
  opts.extra?.(router);

  app.use(router.routes());
  // No router.allowedMethods(): it answered unknown methods (TRACE, PROPFIND) 501 over
  // a 404 body. Here the status and the body always agree.
  app.use(async (ctx) => {
    if (ctx.status === 404 && ctx.body === undefined) {
      if (ctx.path.startsWith('/api/')) {
        // Unknown API paths answer 401 to the unauthenticated, so the route table is not probeable.
        if (!opts.trusted && !credential(ctx.get('authorization'))) return problem(ctx, 401, 'unauthorized', 'missing API key (Authorization: Bearer <API key>)');
      }
      const allowed = allowedMethods(router, ctx.path);
      if (allowed.length && (ctx.method === 'OPTIONS' || !allowed.includes(ctx.method))) {
        ctx.set('Allow', allowed.join(', '));
        if (ctx.method === 'OPTIONS') { ctx.status = 204; return; }
        return problem(ctx, 405, 'method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}; allowed: ${allowed.join(', ')}`);
      }
      if (ctx.path.startsWith('/api/')) return problem(ctx, 404, 'route_not_found', `no route ${ctx.method} ${ctx.path}`);
      ctx.status = 404;
      ctx.body = 'not found (this is a Headway server: / says how devices join; the API is documented at /api/v1/docs)\n';
    }
  });
  return app;
}

/** allowedMethods lists the methods some route serves on `path` (empty: no route has the path). */
function allowedMethods(router: Router, path: string): string[] {
  const set = new Set<string>();
  for (const layer of router.match(path, 'GET').path) for (const m of layer.methods) set.add(m);
  if (set.size) set.add('OPTIONS');
  return [...set];
}

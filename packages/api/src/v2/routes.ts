import type Router from '@koa/router';
import type { Context } from 'koa';
import type { ApiDeps, Route } from '../route.js';
import { actorOf, authenticateV2, requireScope } from './auth.js';
import { recordRoute, setActor } from '../audit.js';
import { USER_ROUTES } from './users.js';
import { DEVICE_ROUTES } from './devices.js';
import { SETTINGS_ROUTES } from './settings.js';
import { UNSUPPORTED_ROUTES } from './unsupported.js';
import { OAUTH_ROUTES } from './oauth.js';
import { KEY_ROUTES } from './keys.js';
import { POLICY_ROUTES } from './policy.js';
import { DNS_ROUTES } from './dns.js';

/*
 * /api/v2: Tailscale's public API, as its official clients (Go client, Terraform provider,
 * Kubernetes operator) call it. Every route runs on the same services as /api/v1 and gRPC;
 * this layer only translates shapes. Each area's routes live in its own module.
 */

/** V2_ROUTES is /api/v2's route table. */
export const V2_ROUTES: Route[] = [
  ...USER_ROUTES,
  ...DEVICE_ROUTES,
  ...SETTINGS_ROUTES,
  ...UNSUPPORTED_ROUTES,
  ...OAUTH_ROUTES,
  ...KEY_ROUTES,
  ...POLICY_ROUTES,
  ...DNS_ROUTES,
];

/**
 * mountV2 registers V2_ROUTES: each authenticates (API key or OAuth token) and checks the route's scope first;
 * a change that succeeded is recorded in the audit log with `remote(ctx)` as where it came from.
 */
export function mountV2(router: Router, deps: ApiDeps, trusted: boolean, remote: (ctx: Context) => string | undefined): void {
  for (const r of V2_ROUTES) {
    const method = r.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch' | 'delete';
    router[method](r.path, async (ctx: Context) => {
      if (r.scope !== 'public') {
        const principal = await authenticateV2(ctx, deps, trusted);
        if (!r.scope) throw new Error(`route ${r.method} ${r.path} declares no scope`);
        requireScope(principal, r.scope);
        ctx.state.principal = principal;
        setActor(ctx, actorOf(principal));
      }
      const body = await r.handler(ctx, deps);
      if (ctx.body === undefined) ctx.body = body;
      if (r.scope !== 'public') await recordRoute(deps, ctx, r, body, remote(ctx));
    });
  }
}

import type { Context, Next } from 'koa';

/** CORS_METHODS are the methods the REST APIs serve (PATCH: /api/v2's); a preflight for another is not answered. */
export const CORS_METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'] as const;
/** CORS_HEADERS are the request headers a page may send: its API key and a body's type. */
export const CORS_HEADERS = ['Authorization', 'Content-Type'] as const;
/** CORS_MAX_AGE_SECONDS lets a browser reuse a preflight's answer for 10 minutes (a UI calls the same routes often). */
export const CORS_MAX_AGE_SECONDS = 600;

/**
 * corsMiddleware lets pages served from the listed origins (api.cors.allowed_origins, exact origins) call the
 * paths under `prefix` from a browser. A listed origin's preflight (OPTIONS with Access-Control-Request-Method)
 * is answered 204 with what it may send; its requests get Access-Control-Allow-Origin on every answer, errors
 * included, so the page can read them. Any other origin gets no allow header, and the browser refuses it.
 * No Access-Control-Allow-Credentials: the API takes a bearer key the page sends itself, never a cookie.
 */
export function corsMiddleware(allowedOrigins: readonly string[], prefix = '/api/') {
  const allowed = new Set(allowedOrigins);
  return async (ctx: Context, next: Next) => {
    if (!allowed.size || !ctx.path.startsWith(prefix)) return next();
    ctx.vary('Origin');
    const origin = ctx.get('origin');
    if (!origin || !allowed.has(origin)) return next();
    const requested = ctx.get('access-control-request-method');
    if (ctx.method === 'OPTIONS' && requested) {
      if (!(CORS_METHODS as readonly string[]).includes(requested.toUpperCase())) return next();
      ctx.set({
        'Access-Control-Allow-Origin': origin,
        'Access-Control-Allow-Methods': CORS_METHODS.join(', '),
        'Access-Control-Allow-Headers': CORS_HEADERS.join(', '),
        'Access-Control-Max-Age': String(CORS_MAX_AGE_SECONDS),
      });
      ctx.status = 204;
      return;
    }
    ctx.set('Access-Control-Allow-Origin', origin);
    return next();
  };
}

import type { Context, Next } from 'koa';
import { ERRORS, HeadwayError, safeErrorText } from '@headway/core';
import type { Logger } from '@headway/core';
import { nestingDepth } from '@headway/core';

export const BODY_LIMIT = 1024 * 1024;
/** POLICY_LIMIT caps policy text (PUT /api/v1/policy, policy check, gRPC SetPolicy and CheckPolicy). */
export const POLICY_LIMIT = 4 * 1024 * 1024;
/**
 * BODY_MAX_DEPTH caps how deeply a JSON body's objects and lists nest. No route takes more than a few levels
 * (a policy travels as text), and a body nested thousands deep would reach code that walks values
 * recursively.
 */
export const BODY_MAX_DEPTH = 64;

/**
 * readBody reads at most `limit` bytes before anything else looks at the request,
 * so an unauthenticated client cannot make the server buffer an unbounded body.
 */
export async function readBody(ctx: Context, limit = BODY_LIMIT): Promise<Buffer> {
  const declared = Number(ctx.get('content-length') || 0);
  if (declared > limit) throw new HeadwayError('payload_too_large', `request body of ${declared} bytes exceeds the ${limit}-byte limit`);
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of ctx.req) {
      size += (chunk as Buffer).length;
      if (size > limit) throw new HeadwayError('payload_too_large', `request body exceeds the ${limit}-byte limit`);
      chunks.push(chunk as Buffer);
    }
  } catch (err) {
    // A client that goes away inside its body (the request stream errors with ECONNRESET or "aborted") made a bad
    // request, not the server a failed one: it is not logged as an internal error nor counted as a 500.
    if (err instanceof HeadwayError || !ctx.req.destroyed) throw err;
    throw new HeadwayError('bad_request', `the client closed the connection after ${size} bytes of the request body`);
  }
  return Buffer.concat(chunks);
}

/** readText reads a text body (UTF-8) of at most `limit` bytes, for routes that take one (a HuJSON policy). */
export async function readText(ctx: Context, limit = BODY_LIMIT): Promise<string> {
  return (await readBody(ctx, limit)).toString('utf8');
}

/**
 * readJson parses a JSON object body (empty body → {}) whatever its Content-Type says, as headscale's gateway
 * does: browsers label a string body text/plain, and tools built for headscale send it so. What decides is the
 * body itself: text that is not JSON, or JSON that is not an object, is a 400 naming the problem. `camel`: false
 * keeps the keys as sent (where keys are data, such as domain names).
 */
export async function readJson(ctx: Context, limit = BODY_LIMIT, camel = true): Promise<Record<string, unknown>> {
  const raw = await readBody(ctx, limit);
  if (!raw.length) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw new HeadwayError('invalid_json', `body is not JSON: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new HeadwayError('invalid_json', `body must be a JSON object, found ${Array.isArray(parsed) ? 'a list' : parsed === null ? 'null' : `a ${typeof parsed}`}`);
  }
  if (nestingDepth(parsed, BODY_MAX_DEPTH) > BODY_MAX_DEPTH) {
    throw new HeadwayError('invalid_json', `body: objects and lists nest deeper than ${BODY_MAX_DEPTH} levels`);
  }
  return camel ? camelKeys(parsed as Record<string, unknown>) : parsed as Record<string, unknown>;
}

const SNAKE = /^[a-z][a-z0-9]*(_[a-z][a-z0-9]*)+$/;

/**
 * camelKeys reads headscale-style snake_case names (`acl_tags`, `disable_expiry`: its gateway takes the proto
 * names as well as the JSON ones, in bodies and query strings) as camelCase; other names stay as sent, so an error
 * about one names what the client sent (`__proto__` is a key like any other here, not the prototype).
 */
export function camelKeys(input: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(input)) {
    const key = SNAKE.test(k) ? k.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()) : k;
    Object.defineProperty(out, key, { value: v, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/**
 * problem answers an RFC 9457 problem. `message` repeats `detail`: headscale's gateway errors carry their text
 * there, and tools built for headscale (web UIs, scripts) show that field.
 */
export function problem(ctx: Context, status: number, code: string, detail: string, field?: string): void {
  ctx.status = status;
  ctx.type = 'application/problem+json';
  ctx.body = problemBody(status, code, detail, field);
}

/** problemBody is the body `problem` sends, for answers written outside koa (the metrics listener). */
export function problemBody(status: number, code: string, detail: string, field?: string) {
  const title = (ERRORS as Record<string, { title: string }>)[code]?.title ?? 'Error';
  return { type: `https://headway.dev/problems/${code}`, title, status, detail, code, ...(field ? { field } : {}), message: detail };
}

/** problemMiddleware turns thrown errors into RFC 9457 bodies; only unexpected errors are 500s. */
export function problemMiddleware(logger: Logger) {
  return async (ctx: Context, next: Next) => {
    try {
      await next();
    } catch (err) {
      if (err instanceof HeadwayError) {
        problem(ctx, err.status, err.code, err.message, err.field);
        // A policy with several errors lists them all (RFC 7807 extension member).
        const list = (err as { errors?: unknown }).errors;
        if (Array.isArray(list)) (ctx.body as Record<string, unknown>).errors = list;
        return;
      }
      const status = (err as { status?: number }).status;
      if (status && status >= 400 && status < 500) {
        problem(ctx, status, 'bad_request', (err as Error).message);
        return;
      }
      logger.error('request failed', { method: ctx.method, path: ctx.path, error: safeErrorText(err) });
      problem(ctx, 500, 'internal', 'internal error; see the server log');
    }
  };
}

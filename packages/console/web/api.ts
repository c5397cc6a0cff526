/*
 * api.ts: the console's one way to the server. Every call goes to the same /api/v1 (and /api/v2) routes the CLI and
 * scripts use, authenticated by the session cookie; a change carries the session's CSRF token in a header, which a
 * page on another site cannot set. Paths, bodies and answers are typed by the REST API's generated OpenAPI types, so a
 * renamed field breaks this build, not the page.
 */
import type { components, paths } from '@headway/api-schema';

export type Schemas = components['schemas'];
export type ApiNode = Schemas['Node'];
export type ApiUser = Schemas['User'];
export type ApiPreAuthKey = Schemas['PreAuthKey'];
export type ApiKeyInfo = Schemas['ApiKey'];

type Method = 'get' | 'post' | 'put' | 'delete';
type Path = keyof paths;
/** Operation is the OpenAPI operation of `M` on `P` (never when the path has none). */
type Operation<P extends Path, M extends Method> = paths[P][M] extends { responses: object } ? paths[P][M] : never;
/** PathsWith<M> are the templated paths that have an `M` operation. */
export type PathsWith<M extends Method> = { [P in Path]: Operation<P, M> extends never ? never : P }[Path];
/** Answer is the JSON body of the operation's 200 answer. */
export type Answer<P extends Path, M extends Method> = Operation<P, M> extends { responses: { 200: { content: { 'application/json': infer R } } } } ? R : unknown;
/** Body is the JSON request body the operation takes. */
export type Body<P extends Path, M extends Method> = Operation<P, M> extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;

/** ApiError is a refused call: the server's own message (its problem's detail) and status. */
export class ApiError extends Error {
  constructor(readonly status: number, message: string, readonly code?: string, readonly field?: string, readonly errors?: string[]) {
    super(message);
  }
}

let csrf = '';
/** setCsrf keeps the session's CSRF token (from /admin/session) for every change. */
export function setCsrf(token: string): void {
  csrf = token;
}

/** fill puts `params` into a templated path's {names}, each encoded. */
function fill(path: string, params: Record<string, string | number> = {}): string {
  return path.replace(/\{(\w+)\}/g, (_, name: string) => {
    const v = params[name];
    if (v === undefined) throw new Error(`no value for {${name}} in ${path}`);
    return encodeURIComponent(String(v));
  });
}

export interface CallOptions<B> {
  params?: Record<string, string | number>;
  query?: Record<string, string | number | boolean | undefined>;
  body?: B;
  /** text sends a text body as is (the policy's HuJSON), with its content type. */
  text?: { type: string; value: string };
  headers?: Record<string, string>;
}

/** raw makes a call and answers the Response (the caller reads text or headers); a failure throws ApiError. */
export async function raw(method: string, path: string, opts: Omit<CallOptions<unknown>, 'params'> = {}): Promise<Response> {
  const headers: Record<string, string> = { accept: 'application/json', ...opts.headers };
  let body: string | undefined;
  if (opts.text) { headers['content-type'] = opts.text.type; body = opts.text.value; }
  else if (opts.body !== undefined) { headers['content-type'] = 'application/json'; body = JSON.stringify(opts.body); }
  if (method !== 'GET') headers['x-csrf-token'] = csrf;
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(opts.query ?? {})) if (v !== undefined && v !== '') q.set(k, String(v));
  const url = q.size ? `${path}?${q}` : path;
  const res = await fetch(url, { method, headers, body, credentials: 'same-origin' });
  if (res.status === 401) {
    // The session ended (idle, absolute limit, signed out elsewhere): back to the sign-in page.
    location.assign('/admin/signin');
    throw new ApiError(401, 'signed out');
  }
  if (!res.ok) {
    let message = `${res.status} ${res.statusText}`;
    let code: string | undefined;
    let field: string | undefined;
    let errors: string[] | undefined;
    try {
      const p = await res.json() as { message?: string; detail?: string; code?: string; field?: string; errors?: string[] };
      message = p.message ?? p.detail ?? message;
      code = p.code;
      field = p.field;
      errors = p.errors;
    } catch { /* not JSON: the status says it */ }
    throw new ApiError(res.status, message, code, field, errors);
  }
  return res;
}

/** call makes a typed call to a templated path: call('get', '/api/v1/node', {}) answers { nodes }. */
export async function call<M extends Method, P extends PathsWith<M>>(method: M, path: P, opts: CallOptions<Body<P, M>> = {}): Promise<Answer<P, M>> {
  const res = await raw(method.toUpperCase(), fill(path, opts.params), opts);
  const text = await res.text();
  return (text ? JSON.parse(text) : {}) as Answer<P, M>;
}

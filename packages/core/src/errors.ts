/**
 * The error catalogue: every error the API or CLI can return, with a stable code,
 * its HTTP status and a message template. Client faults are 4xx, never 500.
 */
export const ERRORS = {
  bad_request: { status: 400, title: 'Bad request' },
  invalid_field: { status: 400, title: 'Invalid field' },
  invalid_json: { status: 400, title: 'Invalid JSON body' },
  invalid_policy: { status: 400, title: 'Invalid policy' },
  policy_read_only: { status: 400, title: 'Policy is read-only in file mode' },
  dns_read_only: { status: 400, title: 'DNS settings are read-only in file mode' },
  unauthorized: { status: 401, title: 'Unauthorized' },
  forbidden: { status: 403, title: 'Forbidden' },
  csrf_failed: { status: 403, title: 'Missing or wrong CSRF token' },
  not_found: { status: 404, title: 'Not found' },
  route_not_found: { status: 404, title: 'No such route' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  conflict: { status: 409, title: 'Conflict' },
  name_taken: { status: 409, title: 'Name already in use' },
  user_has_nodes: { status: 409, title: 'User still owns nodes' },
  key_used: { status: 409, title: 'Key already used' },
  precondition_failed: { status: 412, title: 'Precondition failed' },
  payload_too_large: { status: 413, title: 'Body too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported content type' },
  rate_limited: { status: 429, title: 'Too many requests' },
  not_implemented: { status: 501, title: 'Not implemented' },
  unavailable: { status: 503, title: 'Service unavailable' },
  internal: { status: 500, title: 'Internal error' },
} as const;

export type ErrorCode = keyof typeof ERRORS;

/** HeadwayError is a client-visible failure; `field` names the offending input when there is one. */
export class HeadwayError extends Error {
  readonly status: number;
  constructor(readonly code: ErrorCode, message: string, readonly field?: string) {
    super(message);
    this.name = 'HeadwayError';
    this.status = ERRORS[code].status;
  }
}

/**
 * shown quotes a value a client sent for an error message, cut to `max` characters: an error echoing a
 * 100,000-character name whole does not fit in a gRPC status (HTTP/2 trailers) and breaks the client's connection.
 * A value that is not a string is shown as its JSON text, written by jsonPreview: JSON.stringify recurses, and a
 * list nested thousands deep overflows the stack.
 */
export function shown(v: unknown, max = 80): string {
  if (typeof v === 'string') return v.length <= max ? JSON.stringify(v) : `${JSON.stringify(v.slice(0, max))}... (${v.length} characters)`;
  const text = jsonPreview(v, max + 1);
  return text.length <= max ? JSON.stringify(text) : `${JSON.stringify(text.slice(0, max))}... (more than ${max} characters)`;
}

/** Frame is one object or list jsonPreview is inside: what closes it, and its remaining entries. */
interface Frame { close: string; entries: Iterator<[string | undefined, unknown]>; first: boolean }

/**
 * jsonPreview writes the start of a value's JSON text (as JSON.stringify would, `undefined` for what it would
 * skip at the top), at most `limit` characters of it. It keeps its own stack of open objects and lists and
 * stops at the limit, so neither depth nor size nor a cycle can make it recurse or run long.
 */
export function jsonPreview(value: unknown, limit: number): string {
  let out = '';
  const stack: Frame[] = [];
  const scalar = (v: unknown): string | undefined => {
    if (v === null) return 'null';
    switch (typeof v) {
      case 'string': return JSON.stringify(v.length > limit ? v.slice(0, limit) : v);
      case 'number': return Number.isFinite(v) ? String(v) : 'null';
      case 'boolean': return String(v);
      case 'bigint': return String(v);
      default: return undefined;
    }
  };
  /** open writes v: a scalar at once, an object or list as its opening bracket and a frame for its entries. */
  const open = (v: unknown): void => {
    const toJSON = v && typeof v === 'object' ? (v as { toJSON?: unknown }).toJSON : undefined;
    if (typeof toJSON === 'function') {
      try { v = (toJSON as () => unknown).call(v); } catch { v = undefined; }
    }
    if (!v || typeof v !== 'object') { out += scalar(v) ?? 'null'; return; }
    if (Array.isArray(v)) {
      out += '[';
      stack.push({ close: ']', entries: arrayEntries(v), first: true });
    } else {
      out += '{';
      stack.push({ close: '}', entries: objectEntries(v as Record<string, unknown>), first: true });
    }
  };
  if (!(value && typeof value === 'object') && scalar(value) === undefined) return 'undefined';
  open(value);
  while (stack.length && out.length < limit) {
    const frame = stack[stack.length - 1]!;
    const next = frame.entries.next();
    if (next.done) { out += frame.close; stack.pop(); continue; }
    const [key, v] = next.value;
    if (!frame.first) out += ',';
    frame.first = false;
    if (key !== undefined) out += `${JSON.stringify(key.length > limit ? key.slice(0, limit) : key)}:`;
    open(v);
  }
  return out.length > limit ? out.slice(0, limit) : out;
}

function* arrayEntries(list: readonly unknown[]): Iterator<[string | undefined, unknown]> {
  for (let i = 0; i < list.length; i++) yield [undefined, list[i]];
}

/** objectEntries yields own enumerable properties lazily (a million keys are not listed first), skipping what JSON skips. */
function* objectEntries(obj: Record<string, unknown>): Iterator<[string | undefined, unknown]> {
  for (const key in obj) {
    if (!Object.prototype.hasOwnProperty.call(obj, key)) continue;
    const v = obj[key];
    if (v === undefined || typeof v === 'function' || typeof v === 'symbol') continue;
    yield [key, v];
  }
}

export const badField = (field: string, message: string) => new HeadwayError('invalid_field', `${field}: ${message}`, field);
/** notFound names what was asked for, cut to 80 characters (a path segment can be kilobytes; the answer need not echo it). */
export const notFound = (what: string, id: string | number) => {
  const text = String(id);
  return new HeadwayError('not_found', `${what} ${text.length > 80 ? `${text.slice(0, 80)}…` : text} not found`);
};

/**
 * safeErrorText describes a failure for the ERR log. Driver errors (they carry a
 * string `code`, e.g. SQLITE_CONSTRAINT or 23505) are named by code only: knex
 * puts the SQL with its bound values, client-sent Hostinfo included, in the message.
 */
export function safeErrorText(err: unknown): string {
  if (!(err instanceof Error)) return 'non-Error thrown';
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && code) return `${err.name} (database or system error ${code})`;
  return err.message;
}

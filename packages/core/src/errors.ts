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
  unauthorized: { status: 401, title: 'Unauthorized' },
  forbidden: { status: 403, title: 'Forbidden' },
  not_found: { status: 404, title: 'Not found' },
  route_not_found: { status: 404, title: 'No such route' },
  method_not_allowed: { status: 405, title: 'Method not allowed' },
  conflict: { status: 409, title: 'Conflict' },
  name_taken: { status: 409, title: 'Name already in use' },
  user_has_nodes: { status: 409, title: 'User still owns nodes' },
  key_used: { status: 409, title: 'Key already used' },
  payload_too_large: { status: 413, title: 'Body too large' },
  unsupported_media_type: { status: 415, title: 'Unsupported content type' },
  rate_limited: { status: 429, title: 'Too many requests' },
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
 * shown quotes a value a client sent for an error message, cut to `max` characters: an error that echoed a
 * 100,000-character name whole did not fit in a gRPC status (HTTP/2 trailers) and broke the client's connection.
 */
export function shown(v: unknown, max = 80): string {
  const s = typeof v === 'string' ? v : String(JSON.stringify(v));
  return s.length <= max ? JSON.stringify(s) : `${JSON.stringify(s.slice(0, max))}... (${s.length} characters)`;
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

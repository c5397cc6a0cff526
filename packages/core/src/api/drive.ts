import type { Context } from 'koa';
import { badField, HeadwayError } from '../errors.js';
import type { DriveDestination, DriveGrantRecord, DriveSource } from '../ports/drive.js';
import type { State } from '../state/state.js';
import type { DriveService } from '../drive/service.js';
import { readJson } from './http.js';
import type { ApiDeps, Route } from './routes.js';

/** DriveEndView is one end of a grant as the API shows it: kind, id (users, nodes) and current name. */
export interface DriveEndView { kind: DriveSource['kind']; id?: string; name: string }

/** DriveGrantView is the API shape of a stored Taildrive grant. */
export interface DriveGrantView {
  id: string;
  src: DriveEndView;
  dst: DriveEndView;
  shares: string[];
  access: 'ro' | 'rw';
  createdAt: string;
}

function endView(end: DriveSource | DriveDestination, state: State): DriveEndView {
  switch (end.kind) {
    case 'user': return { kind: 'user', id: String(end.id), name: state.getUser(end.id)?.name ?? '(deleted user)' };
    case 'node': return { kind: 'node', id: String(end.id), name: state.getNode(end.id)?.givenName ?? '(deleted node)' };
    default: return { kind: end.kind, name: end.name };
  }
}

export function driveGrantView(g: DriveGrantRecord, state: State): DriveGrantView {
  return {
    id: String(g.id), src: endView(g.src, state), dst: endView(g.dst, state),
    shares: g.shares, access: g.access, createdAt: g.createdAt.toISOString(),
  };
}

function service(deps: ApiDeps): DriveService {
  if (!deps.drive) throw new HeadwayError('conflict', 'Taildrive grants are not available on this server');
  return deps.drive;
}

const ALLOWED = new Set(['src', 'dst', 'shares', 'access']);

/**
 * grantBody checks a POST body field by field: `src` and `dst` are selector
 * strings, `shares` a list of share names (default ["*"]), `access` ro or rw
 * (default ro, the least); an unknown field is refused rather than ignored.
 */
function grantBody(b: Record<string, unknown>): { src: string; dst: string; shares: string[]; access: 'ro' | 'rw' } {
  const unknown = Object.keys(b).filter((k) => !ALLOWED.has(k));
  if (unknown.length) throw badField(unknown[0]!, `unknown field (expected src, dst, shares, access)`);
  const text = (field: string): string => {
    const v = b[field];
    if (v === undefined || v === null || v === '') throw badField(field, field === 'src' ? 'is required: user:NAME, group:NAME, tag:NAME or node:NAME' : 'is required: node:NAME or tag:NAME');
    if (typeof v !== 'string') throw badField(field, `expected a string, found ${Array.isArray(v) ? 'a list' : typeof v}`);
    return v;
  };
  let shares = ['*'];
  if (b.shares !== undefined && b.shares !== null) {
    if (!Array.isArray(b.shares) || b.shares.some((x) => typeof x !== 'string')) throw badField('shares', 'expected a list of share names');
    if (!b.shares.length) throw badField('shares', 'must name at least one share (or "*" for all)');
    shares = b.shares as string[];
  }
  const access = b.access ?? 'ro';
  if (access !== 'ro' && access !== 'rw') throw badField('access', `expected "ro" or "rw", found ${JSON.stringify(access)}`);
  return { src: text('src'), dst: text('dst'), shares, access };
}

/** DRIVE_ROUTES manage the database drive adapter's Taildrive grants; ROUTES lists them, so they share its API-key check. */
export const DRIVE_ROUTES: Route[] = [
  {
    method: 'GET', path: '/api/v1/drive', summary: 'List stored Taildrive grants', response: '{grants: DriveGrant[]}',
    handler: async (_ctx: Context, deps: ApiDeps) => ({ grants: (await service(deps).list()).map((g) => driveGrantView(g, deps.state)) }),
  },
  {
    method: 'POST', path: '/api/v1/drive', summary: 'Grant Taildrive access (pushed to devices at once)',
    body: { src: 'user:NAME|ID, group:NAME, tag:NAME or node:NAME|ID (required)', dst: 'node:NAME|ID or tag:NAME (required)', shares: 'share names or "*" (default ["*"])', access: '"ro" (default) or "rw"' },
    response: '{grant: DriveGrant}',
    handler: async (ctx: Context, deps: ApiDeps) => {
      const input = grantBody(await readJson(ctx));
      return { grant: driveGrantView(await service(deps).grant(input), deps.state) };
    },
  },
  {
    method: 'DELETE', path: '/api/v1/drive/:id', summary: 'Revoke a Taildrive grant (pushed to devices at once)', response: '{}',
    handler: async (ctx: Context, deps: ApiDeps) => {
      const raw = String(ctx.params.id ?? '');
      if (!/^\d+$/.test(raw)) throw badField('id', `expected a numeric grant id, found ${JSON.stringify(raw)}`);
      await service(deps).revoke(Number(raw));
      return {};
    },
  },
];

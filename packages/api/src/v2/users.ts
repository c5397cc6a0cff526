import { z } from 'zod';
import type { Node, User } from '@headway/core';
import { HeadwayError } from '@headway/core';
import { route, type ApiDeps, type Route } from '../route.js';
import { checkTailnet, Tailnet, tailnetName } from './tailnet.js';

const V2User = z.object({
  id: z.string().meta({ description: 'User id (decimal)', examples: ['1'] }),
  displayName: z.string(),
  loginName: z.string().meta({ description: 'The user name; e-mail address for users from an identity provider', examples: ['alice'] }),
  profilePicUrl: z.string(),
  tailnetId: z.string(),
  created: z.string().meta({ description: 'RFC 3339 time' }),
  type: z.enum(['member', 'shared']),
  role: z.string().meta({ description: 'Always "member": Headway has no per-user admin roles', examples: ['member'] }),
  status: z.enum(['active', 'idle', 'suspended', 'needs-approval', 'over-billing-limit']),
  deviceCount: z.number().int(),
  lastSeen: z.string().meta({ description: "RFC 3339 time of the user's devices' latest contact (zero time when never)" }),
  currentlyConnected: z.boolean(),
}).meta({ id: 'V2User', description: 'A user as Tailscale\'s API shows it' });

const ZERO_TIME = '0001-01-01T00:00:00Z';

/** v2User is a user in Tailscale's shape; device count, last seen and connection come from `nodes`, the user's own (not tagged). */
export function v2User(deps: ApiDeps, u: User, nodes: Node[]) {
  const seen = nodes.map((n) => n.lastSeen?.getTime() ?? 0).reduce((a, b) => Math.max(a, b), 0);
  const connected = nodes.some((n) => deps.state.presence.isOnline(n.id));
  return {
    id: String(u.id), displayName: u.displayName || u.name, loginName: u.email || u.name, profilePicUrl: u.profilePicUrl,
    tailnetId: tailnetName(deps), created: u.createdAt.toISOString(), type: 'member' as const, role: 'member',
    status: connected || seen ? 'active' as const : 'idle' as const, deviceCount: nodes.length,
    lastSeen: seen ? new Date(seen).toISOString() : ZERO_TIME, currentlyConnected: connected,
  };
}

/** ownNodes groups the nodes owned by a user (not tagged) by their user, in one pass over the tailnet. */
function ownNodes(deps: ApiDeps): Map<number, Node[]> {
  const byUser = new Map<number, Node[]>();
  for (const n of deps.state.nodes.list()) {
    if (n.userId === null || n.tags.length) continue;
    let list = byUser.get(n.userId);
    if (!list) byUser.set(n.userId, (list = []));
    list.push(n);
  }
  return byUser;
}

export const USER_ROUTES: Route[] = [
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/users', operationId: 'v2ListUsers', tag: 'v2:Users', summary: 'List users',
    description: 'Every user of the tailnet. `type=shared` lists none (Headway has no sharing); `role` other than member lists none.',
    params: z.object({ tailnet: Tailnet }),
    query: z.object({ type: z.enum(['member', 'shared']).optional(), role: z.string().optional() }),
    response: z.object({ users: z.array(V2User) }), responseDescription: 'The users',
    errors: [403, 404], scope: { resource: 'users', write: false },
    handle: async ({ params, query }, deps) => {
      checkTailnet(deps, params.tailnet);
      if (query.type === 'shared' || (query.role && query.role !== 'member')) return { users: [] };
      const owned = ownNodes(deps);
      return { users: deps.state.users.list({}).map((u) => v2User(deps, u, owned.get(u.id) ?? [])) };
    },
  }),
  route({
    method: 'GET', path: '/api/v2/users/:id', operationId: 'v2GetUser', tag: 'v2:Users', summary: 'Get a user',
    description: 'One user by id.',
    params: z.object({ id: z.string() }),
    response: V2User, responseDescription: 'The user',
    errors: [403, 404], scope: { resource: 'users', write: false },
    handle: async ({ params }, deps) => {
      const u = /^\d+$/.test(params.id) ? deps.state.users.get(Number(params.id)) : undefined;
      if (!u) throw new HeadwayError('not_found', `user ${JSON.stringify(params.id.slice(0, 80))} not found`);
      return v2User(deps, u, ownNodes(deps).get(u.id) ?? []);
    },
  }),
];

import type { Context } from 'koa';
import { z } from 'zod';
import { HeadwayError, InvalidPolicyError, policyVersion, snapshotOf } from '@headway/core';
import { parseHuJSON, parseIpPort, PolicyError, previewMatches, toPlain, type MatchQuery } from '@headway/policy';
import { POLICY_LIMIT, readText } from '../http.js';
import { route, type ApiDeps, type Route, type TextBody } from '../route.js';
import { checkTailnet, Tailnet } from './tailnet.js';

/*
 * The policy file under /api/v2 as Tailscale serves it: HuJSON or JSON by Accept, its version as a quoted ETag,
 * If-Match checked where the policy is written (PolicyService.set), validation answering 200 with a message, and
 * rule previews. Every rule lives in PolicyService and @headway/policy; this module translates shapes.
 */

/** NO_POLICY is what the API shows while no policy is set: the policy that means the same (every device may reach every device). */
const NO_POLICY = '// No policy is set: every device may reach every device.\n{\n  "acls": [{ "action": "accept", "src": ["*"], "dst": ["*:*"] }],\n}\n';

const POLICY_BODY: TextBody = {
  types: ['application/hujson', 'application/json'], required: true,
  description: 'The policy: HuJSON (JSON with comments and trailing commas), or JSON',
};

/** etag quotes a version as an ETag header carries it. */
const etag = (version: string) => `"${version}"`;

/**
 * ifMatchVersions reads If-Match: the versions it names (quotes and W/ dropped), or undefined when absent or `*`.
 * `ts-default` (Tailscale's name for a policy never set) is the version of no policy.
 */
export function ifMatchVersions(header: string): string[] | undefined {
  const values = header.split(',').map((v) => v.trim().replace(/^W\//, '').replace(/^"(.*)"$/, '$1')).filter(Boolean);
  if (!values.length || values.includes('*')) return undefined;
  return values.map((v) => (v === 'ts-default' ? policyVersion(undefined) : v));
}

/** wantsJson: the answer is JSON when Accept asks for it, else when Accept names nothing of ours and the request body was JSON. */
function wantsJson(ctx: Context): boolean {
  const accept = ctx.get('accept').toLowerCase();
  if (accept.includes('hujson')) return false;
  if (accept.includes('application/json')) return true;
  return ctx.method === 'POST' && ctx.get('content-type').toLowerCase().startsWith('application/json');
}

/** plainJson is a policy text as standard JSON data (comments and trailing commas gone); a text that does not parse is a 400 with its line and column. */
function plainJson(text: string): Record<string, unknown> {
  try {
    return toPlain(parseHuJSON(text)) as Record<string, unknown>;
  } catch (err) {
    if (err instanceof PolicyError) throw new HeadwayError('invalid_policy', err.message, 'policy');
    throw err;
  }
}

/** answerPolicy writes the policy in force as the client asked for it, with its version as the ETag. */
function answerPolicy(ctx: Context, deps: ApiDeps): unknown {
  const text = deps.policy.policyText ?? NO_POLICY;
  ctx.set('ETag', etag(deps.policy.version));
  if (wantsJson(ctx)) {
    ctx.type = 'application/json';
    ctx.body = plainJson(text);
  } else {
    ctx.type = 'application/hujson';
    ctx.body = text;
  }
  return ctx.body;
}

/** readPolicyBody reads the policy text of a request; an empty body is a 400. */
async function readPolicyBody(ctx: Context): Promise<string> {
  const text = await readText(ctx, POLICY_LIMIT);
  if (!text.trim()) throw new HeadwayError('invalid_policy', 'the body is empty: send the policy (HuJSON or JSON)', 'policy');
  return text;
}

/** validationFailure is Tailscale's validation answer for a refused policy: failing tests grouped by their source, else the error. */
function validationFailure(err: HeadwayError, tests: unknown): { message: string; data?: { user: string; errors: string[] }[] } {
  const list = err instanceof InvalidPolicyError ? err.errors : [err.message];
  const failed = list.filter((e) => e.startsWith('test(s) failed: '));
  if (!failed.length) return { message: err.message };
  const byUser = new Map<string, string[]>();
  for (const f of failed) {
    const rest = f.slice('test(s) failed: '.length);
    const idx = /^tests\[(\d+)\]/.exec(rest)?.[1];
    const test = idx !== undefined && Array.isArray(tests) ? tests[Number(idx)] as Record<string, unknown> | undefined : undefined;
    const user = String(test?.src ?? test?.user ?? '');
    byUser.set(user, [...(byUser.get(user) ?? []), rest]);
  }
  return { message: 'test(s) failed', data: [...byUser].map(([user, errors]) => ({ user, errors })) };
}

const PolicyDocument = z.record(z.string(), z.unknown()).meta({
  id: 'V2PolicyFile', description: 'The policy: HuJSON text (Accept: application/hujson, the default) or JSON (Accept: application/json)',
});
const ValidationResult = z.object({
  message: z.string().meta({ description: 'Why the policy was refused; the whole answer is empty when it passed' }),
  data: z.array(z.object({ user: z.string(), errors: z.array(z.string()) })).optional()
    .meta({ description: 'Failing tests, by their source' }),
}).meta({ id: 'V2PolicyValidation' });
const RuleMatch = z.object({
  users: z.array(z.string()).meta({ description: 'The rule\'s sources, as written' }),
  ports: z.array(z.string()).meta({ description: 'The rule\'s destinations, as written' }),
  lineNumber: z.number().int().meta({ description: 'Line of the rule in the policy text' }),
});

export const POLICY_ROUTES: Route[] = [
  route({
    method: 'GET', path: '/api/v2/tailnet/:tailnet/acl', operationId: 'v2GetPolicyFile', tag: 'v2:Policy File', summary: 'Get the policy file',
    description: 'The policy in force: HuJSON as stored (comments kept) by default or with `Accept: application/hujson`; JSON with `Accept: application/json`. '
      + 'The `ETag` header names this version (quoted); send it back as `If-Match` to set the policy only if nobody changed it since (`ts-default`: only if no policy was ever set). '
      + 'With `details=1`: `{acl, warnings, errors}`. While no policy is set the answer is the policy that means the same (everything allowed).',
    params: z.object({ tailnet: Tailnet }),
    query: z.object({ details: z.enum(['0', '1', 'true', 'false']).optional() }),
    response: PolicyDocument, responseDescription: 'The policy, with its ETag',
    errors: [403, 404], scope: { resource: 'policy_file', write: false },
    handle: async ({ params, query }, deps, ctx) => {
      checkTailnet(deps, params.tailnet);
      if (query.details === '1' || query.details === 'true') {
        const text = deps.policy.policyText ?? NO_POLICY;
        ctx.set('ETag', etag(deps.policy.version));
        try {
          return { acl: text, warnings: await deps.policy.check(text), errors: [] };
        } catch (err) {
          if (!(err instanceof HeadwayError)) throw err;
          return { acl: text, warnings: [], errors: err instanceof InvalidPolicyError ? err.errors : [err.message] };
        }
      }
      return answerPolicy(ctx, deps) as Record<string, unknown>;
    },
  }),
  route({
    method: 'POST', path: '/api/v2/tailnet/:tailnet/acl', operationId: 'v2SetPolicyFile', tag: 'v2:Policy File', summary: 'Set the policy file',
    description: 'Replaces the policy (policy.mode: database; 400 otherwise, naming policy.path). With `If-Match: "<ETag>"` the policy is set only if the stored '
      + 'policy is still that version, checked in the same transaction as the write (412 otherwise, also across instances sharing the database). '
      + 'An invalid policy or a failing `tests` block is a 400 naming what is wrong (with line and column). Answers the new policy as GET does.',
    params: z.object({ tailnet: Tailnet }), textBody: POLICY_BODY,
    response: PolicyDocument, responseDescription: 'The policy now in force, with its ETag',
    errors: [403, 404, 412], scope: { resource: 'policy_file', write: true },
    handle: async ({ params }, deps, ctx) => {
      checkTailnet(deps, params.tailnet);
      const text = await readPolicyBody(ctx);
      await deps.policy.set(text, { ifVersion: ifMatchVersions(ctx.get('if-match')) });
      return answerPolicy(ctx, deps) as Record<string, unknown>;
    },
  }),
  route({
    method: 'POST', path: '/api/v2/tailnet/:tailnet/acl/validate', operationId: 'v2ValidatePolicyFile', tag: 'v2:Policy File', summary: 'Validate a policy file', readOnly: true,
    description: 'Checks a policy (HuJSON or JSON object) against the live tailnet, running its `tests`, or runs a JSON list of tests against the policy in force. '
      + 'As Tailscale answers: 200 with an empty body when it passes; 200 with `{message, data}` when the policy is invalid or tests fail. Nothing changes.',
    params: z.object({ tailnet: Tailnet }), textBody: { ...POLICY_BODY, description: 'A policy (HuJSON or JSON object), or a JSON list of tests' },
    response: ValidationResult, responseDescription: 'Empty when the policy passes; else why not',
    errors: [403, 404], scope: { resource: 'policy_file', write: false },
    handle: async ({ params }, deps, ctx) => {
      checkTailnet(deps, params.tailnet);
      const raw = await readPolicyBody(ctx);
      let text = raw;
      let tests: unknown;
      try {
        if (raw.trimStart().startsWith('[')) {
          tests = plainJson(raw);
          text = JSON.stringify({ ...plainJson(deps.policy.policyText ?? NO_POLICY), tests });
        } else {
          tests = plainJson(raw).tests;
        }
        await deps.policy.check(text);
      } catch (err) {
        if (!(err instanceof HeadwayError) || err.status !== 400) throw err;
        ctx.status = 200;
        ctx.body = validationFailure(err, tests);
        return ctx.body as z.input<typeof ValidationResult>;
      }
      ctx.status = 200;
      ctx.body = '';
      return ctx.body as unknown as z.input<typeof ValidationResult>;
    },
  }),
  route({
    method: 'POST', path: '/api/v2/tailnet/:tailnet/acl/preview', operationId: 'v2PreviewPolicyFile', tag: 'v2:Policy File', summary: 'Preview rule matches', readOnly: true,
    description: 'Which access rules of the policy in the body apply to a user (`type=user`, `previewFor` a login name or e-mail: rules whose sources cover one of '
      + "the user's devices, or everyone) or to an address and port (`type=ipport`, `previewFor` such as `100.64.0.1:22`), resolved against the live tailnet. Nothing changes.",
    params: z.object({ tailnet: Tailnet }),
    query: z.object({
      type: z.enum(['user', 'ipport']),
      previewFor: z.string().min(1).meta({ description: 'A user (type=user) or ip:port (type=ipport)' }),
    }),
    textBody: POLICY_BODY,
    response: z.object({ matches: z.array(RuleMatch), type: z.string(), previewFor: z.string() }).meta({ id: 'V2PolicyPreview' }),
    responseDescription: 'The rules that apply',
    errors: [403, 404], scope: { resource: 'policy_file', write: false },
    handle: async ({ params, query }, deps, ctx) => {
      checkTailnet(deps, params.tailnet);
      const text = await readPolicyBody(ctx);
      let q: MatchQuery;
      if (query.type === 'user') {
        q = { type: 'user', user: query.previewFor };
      } else {
        const at = parseIpPort(query.previewFor);
        if (!at) throw new HeadwayError('invalid_field', `previewFor: expected an address and port such as 100.64.0.1:22, found ${JSON.stringify(query.previewFor.slice(0, 80))}`, 'previewFor');
        q = { type: 'ipport', ...at };
      }
      const snap = snapshotOf(deps.state);
      try {
        return { matches: previewMatches(text, snap, q, { userNames: snap.users.map((u) => u.name) }), type: query.type, previewFor: query.previewFor };
      } catch (err) {
        if (!(err instanceof PolicyError)) throw err;
        const field = err.reason.startsWith('previewFor') ? 'previewFor' : 'policy';
        throw new HeadwayError(field === 'policy' ? 'invalid_policy' : 'invalid_field', err.message, field);
      }
    },
  }),
];

import { z } from 'zod';
import { InvalidPolicyError, snapshotOf } from '@headway/core';
import { checkPolicy, nodeReach, policyTestResults, type Policy, type Snapshot } from '@headway/policy';
import { POLICY_LIMIT } from './http.js';
import { route, type ApiDeps, type Route } from './route.js';
import { idText, numericId } from './schemas.js';

/*
 * Tools for writing a policy before it is set: its `tests` block run test by test, and what one machine could reach
 * and be reached by under it. Both read a proposed text against the live users and nodes and change nothing.
 */

const ProposedPolicy = z.string().meta({ description: 'Policy text (HuJSON); empty for no policy (every device may reach every device)' });

/** proposed parses a proposed policy against the live tailnet; a policy with errors is a 400 listing each (with line and column). */
function proposed(deps: ApiDeps, text: string): { policy: Policy | null; snap: Snapshot } {
  const snap = snapshotOf(deps.state);
  if (!text.trim()) return { policy: null, snap };
  const { policy, errors } = checkPolicy(text, { userNames: snap.users.map((u) => u.name) });
  if (!policy) throw new InvalidPolicyError(errors.map((e) => e.message));
  return { policy, snap };
}

const TestResult = z.object({
  block: z.enum(['tests', 'sshTests']).meta({ description: 'Which block the test is in' }),
  index: z.number().int().meta({ description: 'Its position in the block, from 0' }),
  src: z.string().meta({ description: 'The test\'s source, as written' }),
  passed: z.boolean(),
  failures: z.array(z.string()).meta({ description: 'Each way it failed; empty when it passed' }),
}).meta({ id: 'PolicyTestResult' });

const ReachEntry = z.object({
  id: z.string().meta({ description: 'Node id' }),
  name: z.string().meta({ description: 'Node name' }),
  ports: z.array(z.string()).meta({ description: 'Ports open between them ("22", "80-443", "*"; "/proto N" when the rule names protocols)', examples: [['22', '*/proto 1']] }),
}).meta({ id: 'PolicyReachEntry' });

export const POLICY_TOOL_ROUTES: Route[] = [
  route({
    method: 'POST', path: '/api/v1/policy/tests', operationId: 'runPolicyTests', tag: 'Policy', summary: 'Run a policy\'s tests',
    description: 'Runs every entry of the `tests` and `sshTests` blocks of the policy sent against the live tailnet and answers each verdict '
      + '(setting a policy stops at the first failure). A policy that does not parse is a 400 listing every error. Nothing changes.',
    body: z.object({ policy: ProposedPolicy }), bodyLimit: POLICY_LIMIT, readOnly: true,
    response: z.object({ results: z.array(TestResult) }), responseDescription: 'Each test\'s verdict, in the policy\'s order',
    handle: async ({ body }, deps) => {
      const { policy, snap } = proposed(deps, body.policy);
      return { results: policy ? policyTestResults(policy, snap) : [] };
    },
  }),
  route({
    method: 'POST', path: '/api/v1/policy/preview', operationId: 'previewNodeReach', tag: 'Policy', summary: 'What a node could reach under a policy',
    description: 'For one node under the policy sent (not set): the nodes it may open connections to, the nodes that may open connections to it '
      + '(each with the ports), and the peers its network map would hold. Only nodes\' own addresses count, not the subnets they route. Nothing changes.',
    body: z.object({
      policy: ProposedPolicy,
      node: idText().pipe(numericId()).meta({ description: 'Node id', examples: ['1'] }),
    }),
    bodyLimit: POLICY_LIMIT, readOnly: true,
    response: z.object({
      node: z.object({ id: z.string(), name: z.string() }),
      canReach: z.array(ReachEntry).meta({ description: 'Nodes this node may connect to' }),
      reachableFrom: z.array(ReachEntry).meta({ description: 'Nodes that may connect to this node' }),
      peers: z.array(z.object({ id: z.string(), name: z.string() })).meta({ description: 'Peers in this node\'s network map' }),
    }),
    responseDescription: 'The node\'s reach',
    errors: [404],
    handle: async ({ body }, deps) => {
      const node = deps.state.nodes.require(body.node);
      const { policy, snap } = proposed(deps, body.policy);
      return { node: { id: String(node.id), name: node.givenName }, ...nodeReach(policy, snap, String(node.id)) };
    },
  }),
];

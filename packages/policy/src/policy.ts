import { PolicyError } from './hujson.js';
import type { IPSet } from './ip.js';
import { readPolicy } from './parse/read.js';
import { collectErrors } from './parse/reader.js';

/**
 * The policy's parsed form and its parser's entry points. The parser itself is under parse/: reader.ts (errors
 * and HuJSON access), aliases.ts (the grammars inside strings), names.ts (names checked against definitions),
 * read.ts (the whole file), rules.ts and ssh.ts (its rule sections).
 */
export { parseAlias, parsePortList } from './parse/aliases.js';
export { parseGoDuration, formatGoDuration } from './parse/ssh.js';
export { dict } from './parse/reader.js';

/** Alias is one parsed policy name for a set of devices or addresses. */
export type Alias =
  | { kind: 'wildcard' }
  | { kind: 'user'; name: string }
  | { kind: 'userDomain'; domain: string }
  | { kind: 'group'; name: string }
  | { kind: 'tag'; name: string }
  | { kind: 'host'; name: string }
  | { kind: 'prefix'; text: string; set: IPSet }
  | { kind: 'autogroup'; name: string };

export interface PortRange {
  First: number;
  Last: number;
}

/** ProtoPorts is one `ip` entry of a grant: protocol numbers (null = Tailscale's default
 * TCP/UDP/ICMP set) and port ranges. */
export interface ProtoPorts {
  protos: number[] | null;
  ports: PortRange[];
}

export interface Grant {
  src: Alias[];
  dst: Alias[];
  ip: ProtoPorts[];
  app: Record<string, unknown[]> | null;
  via: string[];
}

export interface AclRule {
  action: 'accept';
  proto: number[] | null;
  src: Alias[];
  dst: { alias: Alias; ports: PortRange[] }[];
}

export interface SshRule {
  action: 'accept' | 'check';
  checkPeriod: string | null;
  src: Alias[];
  dst: Alias[];
  users: string[];
  acceptEnv: string[];
}

export interface NodeAttr {
  target: Alias[];
  attr: string[];
  app: Record<string, unknown[]> | null;
}

export interface PolicyTest {
  src: string;
  proto: number[] | null;
  accept: string[];
  deny: string[];
}

export interface SshPolicyTest {
  src: string;
  dst: string[];
  accept: string[];
  check: string[];
  deny: string[];
}

/** Policy is a parsed and validated access policy. */
export interface Policy {
  groups: Record<string, string[]>;
  hosts: Record<string, IPSet>;
  tagOwners: Record<string, string[]>;
  acls: AclRule[] | null;
  grants: Grant[] | null;
  ssh: SshRule[];
  nodeAttrs: NodeAttr[];
  autoApprovers: { routes: Record<string, Alias[]>; exitNode: Alias[] };
  tests: PolicyTest[];
  sshTests: SshPolicyTest[];
  randomizeClientPort: boolean;
  /**
   * unenforced names what the policy asks that Headway does not do, each a sentence for policy warnings: conditions
   * it does not check (device posture: a rule with one applies to every device its other parts name), and node
   * attributes it does not provide (Funnel, ipPool).
   */
  unenforced?: string[];
}

/** ParseOptions: tailnetDomains are the e-mail domains owned by the tailnet (for
 * `user:*@domain` and `localpart:*@domain`); unset means such domains are not checked. */
export interface ParseOptions {
  tailnetDomains?: string[];
  /** userNames are the live users' names, when known: `"alice:80"` with a user alice then
   * suggests `alice@` instead of only saying that no host alice exists. */
  userNames?: string[];
}

/**
 * checkPolicy validates a policy and returns every error it can reach, in the order met, instead of the first
 * (a broken HuJSON syntax still stops at its first error: nothing after it can be read reliably). The policy is
 * null when there is any error.
 */
export function checkPolicy(text: string, opts: ParseOptions = {}): { policy: Policy | null; errors: PolicyError[] } {
  const { value, errors } = collectErrors(() => readPolicy(text, opts));
  return { policy: value, errors };
}

/**
 * parsePolicy parses HuJSON policy text and validates it on its own (names, ports, autogroup placement); a policy
 * with errors throws one PolicyError listing all of them (see checkPolicy). Validation against a device list
 * (tests) is separate.
 */
export function parsePolicy(text: string, opts: ParseOptions = {}): Policy {
  const { policy, errors } = checkPolicy(text, opts);
  if (!policy) throw PolicyError.of(errors);
  return policy;
}

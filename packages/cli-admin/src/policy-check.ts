import { readFileSync } from 'node:fs';
import { checkPolicy, listErrors, policyWarnings, userReferenceWarnings } from '@headway/policy';
import { ApiError } from '@headway/cli';

/** readPolicyFile reads a policy file, naming the path when it cannot. */
export function readPolicyFile(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new Error(err.code === 'ENOENT' ? `policy file ${path} does not exist` : `cannot read policy file ${path}: ${err.message}`);
  }
}

/** PolicyInvalid carries every error found in a policy, for printing them all at once. */
export class PolicyInvalid extends Error {
  constructor(readonly errors: string[]) {
    super(errors.join('; '));
    this.name = 'PolicyInvalid';
  }
}

/**
 * checkPolicyOffline validates a policy without a server and returns its warnings; a bad
 * policy throws PolicyInvalid listing every error as `file:line:column: reason`. With no
 * users or devices known, only checks that need none can run, and the users the policy
 * names are listed as not verified.
 */
export function checkPolicyOffline(text: string, file: string): string[] {
  const { policy, errors } = checkPolicy(text);
  if (!policy) throw new PolicyInvalid(errors.map((e) => (e.line > 0 ? `${file}:${e.line}:${e.column}: ${e.reason}` : `${file}: ${e.reason}`)));
  return [...policyWarnings(policy, { users: [], nodes: [] }), ...userReferenceWarnings(policy, undefined)];
}

/** asPolicyInvalid turns the server's invalid-policy answer (with its `errors` list) into PolicyInvalid; anything else is returned unchanged. */
export function asPolicyInvalid(e: unknown): unknown {
  if (e instanceof ApiError && e.code === 'invalid_policy') {
    const list = e.problem?.errors;
    return new PolicyInvalid(Array.isArray(list) && list.length > 0 ? list.map(String) : [e.message]);
  }
  return e;
}

/**
 * renderPolicyErrors prints one error as one line, several as a count and one indented line each, up to
 * MAX_LISTED_ERRORS of them and then how many more (`-o json` has them all).
 */
export function renderPolicyErrors(errors: string[]): string {
  if (errors.length === 1) return `Error: ${errors[0]}\n`;
  return `Error: the policy has ${errors.length} errors:\n${listErrors(errors).map((e) => `  ${e}\n`).join('')}`;
}

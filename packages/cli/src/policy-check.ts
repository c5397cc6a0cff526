import { readFileSync } from 'node:fs';
import { PolicyError, parsePolicy, policyWarnings } from '@headway/policy';

/** readPolicyFile reads a policy file, naming the path when it cannot. */
export function readPolicyFile(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    throw new Error(err.code === 'ENOENT' ? `policy file ${path} does not exist` : `cannot read policy file ${path}: ${err.message}`);
  }
}

/**
 * checkPolicyOffline parses and validates a policy without a server and returns its
 * warnings; a bad policy throws an Error reading `file:line:column: reason`.
 * With no users or devices known, only checks that need none can run.
 */
export async function checkPolicyOffline(text: string, file: string): Promise<string[]> {
  try {
    const policy = parsePolicy(text);
    return policyWarnings(policy, { users: [], nodes: [] });
  } catch (e) {
    if (e instanceof PolicyError) {
      throw new Error(e.line > 0 ? `${file}:${e.line}:${e.column}: ${e.reason}` : `${file}: ${e.reason}`);
    }
    throw e;
  }
}

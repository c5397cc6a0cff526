import type { Test } from 'tap';

export { runDatabaseName, withScratchDatabase } from '../src/testing.js';

/** inCI: in CI every database must run; elsewhere a missing one is skipped with a printed reason. */
export const inCI = process.env.CI === 'true';

/** missingServer skips the database with a printed reason, but fails in CI, where it must run. */
export function missingServer(t: Test, name: string, variable: string): void {
  if (inCI) {
    t.fail(`${name}: ${variable} is not set, and CI must run the storage suite on ${name} (eval "$(bash .ci/databases.sh start)")`);
  } else {
    t.skip(`${name}: ${variable} not set`, () => undefined);
  }
}


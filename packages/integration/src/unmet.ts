/** The part of a tap test that unmet uses. */
export interface SkippableTest {
  fail(message: string): void;
  comment(message: string): void;
  skip(message: string, fn: () => void): void;
}

/**
 * unmet skips a test whose precondition (a tool, a binary) is missing, printing the reason; under CI=true,
 * where .ci/run installs every precondition, the same absence fails the test instead.
 */
export function unmet(t: SkippableTest, reason: string): void {
  if (process.env.CI === 'true') {
    t.fail(reason);
  } else {
    t.comment(`skipped: ${reason}`);
    t.skip(reason, () => undefined);
  }
}

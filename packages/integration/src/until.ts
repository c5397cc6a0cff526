/**
 * until waits for a condition the server reaches asynchronously (a log line, a dropped connection, a freed slot)
 * instead of sleeping a guessed time and asserting: on a loaded machine a fixed sleep is sometimes too short. The
 * deadline only turns a condition that never comes into a failure naming it, so it is generous.
 */
export async function until(what: string, fn: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

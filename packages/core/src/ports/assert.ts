/** PortAssertionError: a loaded adapter lacks methods its port requires. */
export class PortAssertionError extends Error {
  constructor(readonly adapter: string, readonly port: string, readonly missing: string[]) {
    super(`adapter ${adapter} does not implement the ${port} port: missing ${missing.join(', ')}`);
    this.name = 'PortAssertionError';
  }
}

/**
 * assertPort checks an adapter instance has every method of its port, including
 * methods of nested repositories, and names all that are missing at once.
 */
export function assertPort(
  value: unknown,
  adapter: string,
  port: string,
  methods: readonly string[],
  nested: Record<string, readonly string[]> = {},
): void {
  const missing: string[] = [];
  const has = (obj: unknown, name: string) =>
    obj !== null && typeof obj === 'object' && typeof (obj as Record<string, unknown>)[name] === 'function';
  if (value === null || typeof value !== 'object') {
    throw new PortAssertionError(adapter, port, ['(the adapter registered no object)']);
  }
  for (const m of methods) if (!has(value, m)) missing.push(m);
  for (const [repo, repoMethods] of Object.entries(nested)) {
    const r = (value as Record<string, unknown>)[repo];
    for (const m of repoMethods) if (!has(r, m)) missing.push(`${repo}.${m}`);
  }
  if (missing.length) throw new PortAssertionError(adapter, port, missing);
}

// Shared set-up for the unit tests beside State, the session hub, the network
// view and the registrar: a State over a real in-memory SQLite database.
import { randomBytes } from 'node:crypto';
import { createLogger, resolveConfig, silentLogger, State, type Change, type HeadwayConfig, type Logger, type NewNodeInput, type StoragePort } from '@headway/core';
import { openSqliteStorage } from '@headway/storage-sql';

/** openMemoryStorage opens a private `:memory:` SQLite database with the real schema. */
export async function openMemoryStorage(): Promise<StoragePort> {
  return openSqliteStorage({ path: ':memory:', logger: silentLogger });
}

/** testConfig resolves a config the way the server does; any error in it fails the test at once. */
export function testConfig(raw: Record<string, unknown> = {}): HeadwayConfig {
  const { config, problems } = resolveConfig({ server_url: 'http://127.0.0.1:9', ...raw }, { env: {} });
  const bad = problems.filter((p) => p.level !== 'warn');
  if (bad.length) throw new Error(`test config invalid: ${bad.map((p) => `${p.key}: ${p.message}`).join('; ')}`);
  return config;
}

export interface TestState {
  state: State;
  storage: StoragePort;
  config: HeadwayConfig;
  /** changes are the bus events in the order they were published. */
  changes: Change[];
  logs: string[];
}

/** Teardown is the part of a tap test the harness needs to close what it opened. */
interface Teardown { teardown(fn: () => void | Promise<void>): void }

/** startState opens a fresh database and a State over it, closed when the test ends. */
export async function startState(t: Teardown, raw: Record<string, unknown> = {}, wrap?: (s: StoragePort) => StoragePort): Promise<TestState> {
  const real = await openMemoryStorage();
  t.teardown(() => real.close());
  const storage = wrap ? wrap(real) : real;
  const config = testConfig(raw);
  const logs: string[] = [];
  const state = new State(storage, config, createLogger({ level: 'debug', write: (l) => logs.push(l) }));
  await state.init();
  const changes: Change[] = [];
  state.bus.subscribe((c) => changes.push(c));
  return { state, storage, config, changes, logs };
}

export const hex32 = (): string => randomBytes(32).toString('hex');
export const machineKey = (): string => `mkey:${hex32()}`;
export const nodeKey = (): string => `nodekey:${hex32()}`;

/** nodeInput is a registration of a new machine with fresh keys (pre-auth key unless `extra` says otherwise). */
export function nodeInput(hostname: string, userId: number | null, extra: Partial<NewNodeInput> = {}): NewNodeInput {
  return { machineKey: machineKey(), nodeKey: nodeKey(), hostname, userId, registerMethod: 'authkey', ...extra };
}

/** changeTypes lists the types of published changes, in order. */
export const changeTypes = (changes: Change[]): string[] => changes.map((c) => c.type);

/** Rng is testkit's seedable PRNG (mulberry32), so a failing random run can be replayed from its seed. */
export { PlanRng as Rng } from '@headway/testkit';

/** seedsFromEnv lets a failure be replayed: HEADWAY_TEST_SEED=1234 runs that seed only. */
export function seedsFromEnv(count: number): number[] {
  const fixed = process.env.HEADWAY_TEST_SEED;
  if (fixed) return [Number(fixed)];
  const base = randomBytes(4).readUInt32LE(0);
  return Array.from({ length: count }, (_, i) => (base + i * 0x9e3779b9) >>> 0);
}

/**
 * Faults wraps a real storage so one chosen repository call (`nodes.update`, ...)
 * fails once, whether made directly or inside a transaction (which then rolls back).
 */
export class Faults {
  /** pending: per call, how many more of it succeed before the one that fails. */
  private readonly pending = new Map<string, number>();
  /** failNext makes the next call fail, or with `after`, the one after that many more succeeded. */
  failNext(call: string, after = 0): void { this.pending.set(call, after); }

  private fails(call: string): boolean {
    const left = this.pending.get(call);
    if (left === undefined) return false;
    if (left > 0) { this.pending.set(call, left - 1); return false; }
    this.pending.delete(call);
    return true;
  }

  private repos<R extends object>(real: R): R {
    const out: Record<string, unknown> = {};
    for (const name of ['users', 'nodes', 'preAuthKeys', 'apiKeys', 'pendingRegistrations', 'policy'] as const) {
      const repo = (real as Record<string, Record<string, unknown>>)[name]!;
      out[name] = new Proxy(repo, {
        get: (target, prop) => {
          const v = Reflect.get(target, prop) as unknown;
          if (typeof v !== 'function') return v;
          return (...args: unknown[]) => {
            const call = `${name}.${String(prop)}`;
            if (this.fails(call)) return Promise.reject(new Error(`injected failure in ${call}`));
            return (v as (...a: unknown[]) => unknown).apply(target, args);
          };
        },
      });
    }
    return out as R;
  }

  wrap = (real: StoragePort): StoragePort => ({
    ...this.repos(real),
    migrate: () => real.migrate(),
    ping: () => real.ping(),
    describe: () => real.describe(),
    close: () => real.close(),
    transaction: (fn) => real.transaction((tx) => fn(this.repos(tx))),
  });
}

import { Flags } from '@oclif/core';
import { openConfiguredStorage, readConfig, runningServerPid } from '@headway/cli';
import type { PolicyRepository } from '@headway/core/ports';

/** BYPASS is headscale's flag name for reaching the policy in the database without the server. */
export const BYPASS = 'bypass-grpc-and-access-database-directly';

export const bypassFlag = {
  [BYPASS]: Flags.boolean({
    description: 'read or write the policy in the database the config names, without a server (policy.mode: database); refused while a server runs on that data directory',
    default: false,
  }),
};

/**
 * withDatabasePolicy runs `fn` on the policy stored in the configured database, as headscale's
 * --bypass-grpc-and-access-database-directly does: for a server that is stopped (or will not start).
 * A running server would not hear of a write, so it is refused; so is a policy that lives in a file. The
 * database is brought to this release's schema first, as `headway serve` would at start.
 */
export async function withDatabasePolicy<T>(configPath: string | undefined, fn: (policy: PolicyRepository) => Promise<T>): Promise<T> {
  const { config } = readConfig(configPath);
  const pid = runningServerPid(config.data_dir);
  if (pid !== undefined) {
    throw new Error(`a Headway server (pid ${pid}) is running on ${config.data_dir}: leave out --${BYPASS} and the command goes through it`);
  }
  if (config.policy.mode !== 'database') {
    throw new Error(`--${BYPASS} reads the policy from the database, but policy.mode is ${config.policy.mode}: ${config.policy.path ? `edit ${config.policy.path}` : 'no policy is stored there'}`);
  }
  const storage = await openConfiguredStorage(config, { migrate: true });
  try {
    return await fn(storage.policy);
  } finally {
    await storage.close();
  }
}

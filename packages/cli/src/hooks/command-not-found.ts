import type { Hook } from '@oclif/core';

/**
 * commandNotFound reports an unknown command in one line and exits 2 (a usage error),
 * instead of oclif's multi-line message and exit 127.
 */
const commandNotFound: Hook<'command_not_found'> = async function (opts) {
  process.stderr.write(`Error: unknown command "${opts.id.replace(/:/g, ' ')}"; run \`headway --help\` for the list of commands\n`);
  process.exit(2);
};

export default commandNotFound;

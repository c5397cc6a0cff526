import type { Hook } from '@oclif/core';

/**
 * commandNotFound reports an unknown command in one line and exits 2 (a usage error),
 * instead of oclif's multi-line message and exit 127. oclif folds stray words after an
 * argument-less command into the command id (`nodes list extra`), so a known prefix is
 * reported as an unexpected argument rather than an unknown command.
 */
const commandNotFound: Hook<'command_not_found'> = async function (opts) {
  const parts = opts.id.split(':');
  let message = `unknown command "${parts.join(' ')}"; run \`headway --help\` for the list of commands`;
  for (let i = parts.length - 1; i >= 1; i--) {
    if (opts.config.findCommand(parts.slice(0, i).join(':'))) {
      message = `Unexpected argument: ${parts.slice(i).join(' ')} (for "${parts.slice(0, i).join(' ')}")`;
      break;
    }
  }
  process.stderr.write(`Error: ${message}\n`);
  process.exit(2);
};

export default commandNotFound;

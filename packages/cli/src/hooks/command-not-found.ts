import type { Hook, Interfaces } from '@oclif/core';
import { closest } from '../suggest.js';

/**
 * spellings lists every way to type a command or topic (visible ids first, so a tie
 * suggests the documented spelling) with the canonical id each stands for.
 */
function spellings(config: Interfaces.Config): { spelling: string; id: string }[] {
  const visible = config.commands.filter((c) => !c.hidden);
  const out: { spelling: string; id: string }[] = visible.map((c) => ({ spelling: c.id, id: c.id }));
  for (const t of config.topics) if (!t.hidden) out.push({ spelling: t.name, id: t.name });
  for (const c of visible) for (const a of [...(c.aliases ?? []), ...(c.hiddenAliases ?? [])]) out.push({ spelling: a, id: c.id });
  return out;
}

/**
 * suggestCommand finds the command (or topic) a mistyped id most likely meant. Under a
 * known topic only the last word is compared with that topic's commands (`users lst` →
 * `users list`); otherwise the whole id is compared with every command and topic.
 */
export function suggestCommand(config: Interfaces.Config, id: string): string | undefined {
  const all = spellings(config);
  const parts = id.split(':');
  if (parts.length >= 2) {
    const topic = parts.slice(0, -1).join(':');
    const under = all.filter((s) => s.spelling.startsWith(`${topic}:`) && s.spelling.split(':').length === parts.length);
    if (under.length > 0) {
      const verb = closest(parts.at(-1)!, under.map((s) => s.spelling.slice(topic.length + 1)));
      if (verb) return under.find((s) => s.spelling === `${topic}:${verb}`)!.id;
    }
  }
  const guess = closest(id, all.map((s) => s.spelling));
  return guess ? all.find((s) => s.spelling === guess)!.id : undefined;
}

/**
 * commandNotFound reports an unknown command in one line and exits 2 (a usage error),
 * instead of oclif's multi-line message and exit 127, with the nearest command when one
 * is close ("did you mean"). oclif folds stray words after an argument-less command into
 * the command id (`nodes list extra`), so a known prefix is reported as an unexpected
 * argument rather than an unknown command.
 */
const commandNotFound: Hook<'command_not_found'> = async function (opts) {
  if (opts.id.startsWith('-')) {
    process.stderr.write(`Error: unknown flag ${JSON.stringify(opts.id)} before any command; run \`headway --help\` for the list of commands\n`);
    process.exit(2);
  }
  const parts = opts.id.split(':');
  for (let i = parts.length - 1; i >= 1; i--) {
    if (opts.config.findCommand(parts.slice(0, i).join(':'))) {
      process.stderr.write(`Error: Unexpected argument: ${parts.slice(i).join(' ')} (for "${parts.slice(0, i).join(' ')}")\n`);
      process.exit(2);
    }
  }
  const guess = suggestCommand(opts.config, opts.id);
  const hint = guess ? `did you mean "${guess.replace(/:/g, ' ')}"? ` : '';
  const topic = parts.length > 1 && opts.config.findTopic(parts[0]!) ? `headway ${parts[0]} --help` : 'headway --help';
  process.stderr.write(`Error: unknown command "${parts.join(' ')}"; ${hint}run \`${topic}\` for the list of commands\n`);
  process.exit(2);
};

export default commandNotFound;

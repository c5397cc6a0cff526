// Every command of the CLI and its admin plugin shows usage examples in its help, and every
// example is a command line that parses: the command exists and takes those flags and
// arguments, with values its flag parsers accept (a renamed flag breaks this test).
import { fileURLToPath } from 'node:url';
import { Config, Parser, type Command } from '@oclif/core';
import t from 'tap';
import { normalizeBooleanArgv } from '../src/base.js';
import { ensureManifests } from '../src/launch.js';

t.setTimeout(120_000);

const CLI_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const OURS = new Set(['@headway/cli', '@headway/cli-admin']);

/** words splits an example the way a POSIX shell would for these simple lines (quotes, no escapes). */
function words(line: string): string[] {
  const out: string[] = [];
  const re = /'([^']*)'|"([^"]*)"|(\S+)/g;
  for (const m of line.matchAll(re)) out.push(m[1] ?? m[2] ?? m[3]!);
  return out;
}

t.test('every command has examples, and each one parses', async (t) => {
  await ensureManifests(CLI_ROOT); // as bin/run.js does: another test may leave a stale one
  const config = await Config.load({ root: CLI_ROOT });
  const commands = config.commands.filter((c) => OURS.has(c.pluginName ?? '') && !c.hidden);
  t.ok(commands.some((c) => c.id === 'nodes:list') && commands.some((c) => c.id === 'serve'), 'core and admin commands are both loaded');
  for (const cached of commands) {
    const examples = (cached.examples ?? []).map((e) => (typeof e === 'string' ? e : e.command));
    t.ok(examples.length > 0, `${cached.id} has examples`);
    const cmd = (await cached.load()) as unknown as Command.Class;
    for (const example of examples) {
      const line = example.replace(/<%= config\.bin %>/g, config.bin);
      t.notMatch(line, /<%/, `${line}: no unrendered template`);
      const argv = words(line.replace(/\s*>.*$/, '')); // a shell redirection is not an argument
      const id = cached.id.split(':');
      t.same(argv.slice(0, id.length + 1), [config.bin, ...id], `${line}: runs ${cached.id}`);
      const flags = { ...(cmd.baseFlags ?? {}), ...(cmd.flags ?? {}) };
      try {
        const rest = normalizeBooleanArgv(argv.slice(id.length + 1), flags as Parameters<typeof normalizeBooleanArgv>[1]);
        await Parser.parse(rest, { flags, args: cmd.args ?? {}, strict: cmd.strict ?? true });
        t.pass(`${line}: parses`);
      } catch (e) {
        t.fail(`${line}: ${(e as Error).message}`);
      }
    }
  }
});

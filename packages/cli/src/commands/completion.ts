import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Args, Command } from '@oclif/core';

/** SHELLS are headscale's `completion` shells; the first three come from @oclif/plugin-autocomplete's own scripts. */
const SHELLS = ['bash', 'zsh', 'fish', 'powershell'] as const;

/** SCRIPT is where autocomplete:create writes each shell's completion function under the CLI's cache directory. */
const SCRIPT = { bash: ['bash', 'headway.bash'], zsh: ['zsh', '_headway'], powershell: ['powershell', 'headway.ps1'] } as const;

/**
 * Completion prints a shell completion script on stdout, as `headscale completion SHELL` does, for
 * `source <(headway completion bash)` or a file in the shell's completion directory. bash, zsh and
 * PowerShell use @oclif/plugin-autocomplete's scripts (what `headway autocomplete` installs); fish,
 * which that plugin lacks, gets `complete` lines for every command word and flag.
 */
export default class Completion extends Command {
  static override summary = 'Print a shell completion script (bash, zsh, fish or powershell)';
  static override args = { shell: Args.string({ description: 'the shell', options: [...SHELLS], required: true }) };
  static override description = 'Load it with `source <(headway completion bash)`, or save it where the shell looks: '
    + '`headway completion fish > ~/.config/fish/completions/headway.fish`, `headway completion zsh > "${fpath[1]}/_headway"`.';
  static override examples = ['<%= config.bin %> completion bash', '<%= config.bin %> completion zsh', '<%= config.bin %> completion fish', '<%= config.bin %> completion powershell'];

  async run(): Promise<void> {
    const { args } = await this.parse(Completion);
    const shell = args.shell as (typeof SHELLS)[number];
    if (shell === 'fish') {
      process.stdout.write(this.fish());
      return;
    }
    await this.config.runCommand('autocomplete:create');
    const [dir, file] = SCRIPT[shell];
    process.stdout.write(await readFile(join(this.config.cacheDir, 'autocomplete', 'functions', dir, file), 'utf8'));
  }

  /** fish completes each command word after the words before it, and each command's long flags. */
  private fish(): string {
    const bin = this.config.bin;
    const lines = [`# fish completion for ${bin}`, `complete -c ${bin} -f`];
    const seen = new Set<string>();
    const commands = this.config.commands.filter((c) => !c.hidden && !c.id.startsWith('autocomplete'));
    for (const c of commands) {
      const words = c.id.split(':');
      for (let i = 0; i < words.length; i++) {
        const key = words.slice(0, i + 1).join(' ');
        if (seen.has(key)) continue;
        seen.add(key);
        const before = words.slice(0, i);
        const cond = before.length ? `__fish_seen_subcommand_from ${before.at(-1)}` : '__fish_use_subcommand';
        const about = i === words.length - 1 ? (c.summary ?? '') : '';
        lines.push(`complete -c ${bin} -n '${cond}' -a ${words[i]}${about ? ` -d ${quote(about)}` : ''}`);
      }
      const last = words.at(-1)!;
      for (const [name, f] of Object.entries(c.flags ?? {})) {
        if (f.hidden) continue;
        const short = f.char ? ` -s ${f.char}` : '';
        lines.push(`complete -c ${bin} -n '__fish_seen_subcommand_from ${last}' -l ${name}${short}${f.type === 'option' ? ' -r' : ''}${f.summary || f.description ? ` -d ${quote((f.summary || f.description)!)}` : ''}`);
      }
    }
    return lines.join('\n') + '\n';
  }
}

/** quote makes a fish single-quoted string. */
function quote(s: string): string {
  return `'${s.split('\n')[0]!.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

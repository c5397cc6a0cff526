/**
 * `headway completion SHELL` (headscale's `completion` command): each script is printed on stdout;
 * the bash one, sourced in a real bash, completes command words; fish gets a line per word and flag.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { runHeadway } from '../src/cli.js';

t.test('completion bash: sourced in bash, it completes topics and their commands', async (t) => {
  const r = await runHeadway({}, ['completion', 'bash']);
  t.equal(r.code, 0, r.stderr);
  const file = join(mkdtempSync(join(tmpdir(), 'hw-completion-')), 'headway.bash');
  writeFileSync(file, r.stdout);
  const complete = (line: string) => {
    const words = line.split(' ');
    const script = `source ${JSON.stringify(file)}; COMP_WORDS=(${words.map((w) => JSON.stringify(w)).join(' ')}); COMP_CWORD=${words.length - 1}; COMP_LINE=${JSON.stringify(line)}; _headway_autocomplete; printf '%s\\n' "\${COMPREPLY[@]}"`;
    return new Set(execFileSync('bash', ['-c', script], { encoding: 'utf8' }).split('\n').filter(Boolean));
  };
  t.same([...complete('headway nod')], ['nodes']);
  t.same([...complete('headway nodes ta')], ['tag']);
  t.ok(complete('headway policy ').has('check'), 'policy check is offered');
});

t.test('completion zsh, fish and powershell print their scripts; an unknown shell is a usage error', async (t) => {
  const zsh = await runHeadway({}, ['completion', 'zsh']);
  t.equal(zsh.code, 0, zsh.stderr);
  t.match(zsh.stdout, /^#compdef headway/);
  const fish = await runHeadway({}, ['completion', 'fish']);
  t.equal(fish.code, 0, fish.stderr);
  t.match(fish.stdout, /^complete -c headway -n '__fish_use_subcommand' -a nodes$/m);
  t.match(fish.stdout, /^complete -c headway -n '__fish_seen_subcommand_from nodes' -a tag -d '.+'$/m);
  t.match(fish.stdout, /^complete -c headway -n '__fish_seen_subcommand_from tag' -l tags -s t -r/m);
  const pwsh = await runHeadway({}, ['completion', 'powershell']);
  t.equal(pwsh.code, 0, pwsh.stderr);
  t.match(pwsh.stdout, /Register-ArgumentCompleter/);
  const bad = await runHeadway({}, ['completion', 'tcsh']);
  t.equal(bad.code, 2);
  t.match(bad.stderr, /Expected tcsh to be one of: bash, zsh, fish, powershell/);
  t.equal(bad.stdout, '', 'nothing printed');
});

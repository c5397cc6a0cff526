import { createInterface } from 'node:readline/promises';
import { Command, Errors, Flags, type Interfaces } from '@oclif/core';
import { parseDuration } from '@headway/core/ports';
import YAML from 'yaml';
import { ApiClient, clientFromConfigFile } from './client.js';
import { closest } from './suggest.js';

/** OUTPUT_FORMATS are the machine-readable formats -o accepts (headscale's set); no -o means human text. */
export const OUTPUT_FORMATS = ['json', 'json-line', 'yaml'] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

/** UsageError marks bad command-line input: it exits 2 (runtime failures exit 1). */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/** ConfirmationRefused means a destructive command was neither confirmed nor forced. */
export class ConfirmationRefused extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfirmationRefused';
  }
}

const TRUE_WORDS = new Set(['true', '1', 'yes', 't', 'y']);
const FALSE_WORDS = new Set(['false', '0', 'no', 'f', 'n']);

/**
 * normalizeBooleanArgv rewrites `--flag=true` to `--flag` and `--flag=false` to `--no-flag`
 * for boolean flags, because oclif would otherwise read `--flag=false` as true plus a stray
 * argument. Any other value after `=` is a usage error. Tokens after `--` are left alone.
 */
export function normalizeBooleanArgv(argv: string[], flags: Record<string, { type: string; allowNo?: boolean; aliases?: string[] }>): string[] {
  const booleans = new Map<string, string>();
  for (const [name, def] of Object.entries(flags)) {
    if (def.type !== 'boolean') continue;
    booleans.set(name, name);
    for (const alias of def.aliases ?? []) booleans.set(alias, name);
  }
  const out: string[] = [];
  let passthrough = false;
  for (const token of argv) {
    const m = passthrough ? null : /^--([A-Za-z0-9][\w-]*)=(.*)$/s.exec(token);
    if (token === '--') passthrough = true;
    const name = m ? booleans.get(m[1]!) : undefined;
    if (!m || !name) {
      out.push(token);
      continue;
    }
    const value = m[2]!.toLowerCase();
    if (TRUE_WORDS.has(value)) out.push(`--${name}`);
    else if (FALSE_WORDS.has(value)) {
      if (!flags[name]!.allowNo) throw new UsageError(`--${name} cannot be set to false`);
      out.push(`--no-${name}`);
    } else throw new UsageError(`--${m[1]} expects true or false, got ${JSON.stringify(m[2])}`);
  }
  return out;
}

/** usageLine squeezes an oclif parse error into one line without the "see --help" boilerplate. */
export function usageLine(message: string): string {
  const cleaned = message
    .replace(/See more help with --help/g, '')
    .replace(/The following errors? occurred:/g, '')
    .replace(/^Parsing --(\S+)\s*\n\s*/, '--$1: ')
    .replace(/Missing required flag (\S+)/g, 'missing required flag --$1')
    .replace(/^Nonexistent flags?: /, 'unknown flag: ');
  return cleaned
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .join('; ');
}

/**
 * parseErrorLine turns an oclif parse error into one line a person can act on: a missing
 * argument is named with what it is for, an unknown flag gets the nearest flag of that
 * command ("did you mean"), and both point at the command's --help.
 */
export function parseErrorLine(e: unknown, defs: Record<string, unknown>, id: string | undefined): string {
  const help = id ? ` See \`headway ${id.replace(/:/g, ' ')} --help\`.` : '';
  const err = e as { args?: { name?: string; description?: string }[]; flags?: string[]; message?: string };
  const name = (e as Error)?.constructor?.name;
  if (name === 'RequiredArgsError' && Array.isArray(err.args) && err.args.length > 0) {
    const list = err.args.map((a) => `${(a.name ?? '').toUpperCase()}${a.description ? ` (${a.description})` : ''}`).join(', ');
    return `Missing required argument${err.args.length === 1 ? '' : 's'} ${list}.${help}`;
  }
  if (name === 'NonExistentFlagsError' && Array.isArray(err.flags) && err.flags.length > 0) {
    const known = Object.keys(defs).map((f) => `--${f}`);
    const parts = err.flags.map((raw) => {
      const flag = raw.replace(/=.*$/s, '');
      const guess = flag.startsWith('--') ? closest(flag, known) : undefined;
      return guess ? `${flag} (did you mean ${guess}?)` : flag;
    });
    return `unknown flag${parts.length === 1 ? '' : 's'}: ${parts.join(', ')}.${help}`;
  }
  return usageLine(e instanceof Error ? e.message : String(e));
}

/** boolFlag is a boolean flag that also accepts `--no-x` and `--x=true|false`. */
export function boolFlag(opts: { description: string; char?: Interfaces.AlphabetLowercase | Interfaces.AlphabetUppercase; default?: boolean; helpGroup?: string }) {
  return Flags.boolean({ ...opts, allowNo: true, default: opts.default ?? false });
}

async function parseDurationFlag(input: string): Promise<number> {
  const ms = parseDuration(input);
  if (ms === undefined) throw new UsageError(`${JSON.stringify(input)} is not a duration (use e.g. 30m, 24h, 90d, 87600h)`);
  if (ms <= 0) throw new UsageError(`${JSON.stringify(input)} must be longer than zero`);
  return ms;
}

/** durationFlag reads `30m`, `24h`, `90d`, `87600h` into milliseconds; anything else is a usage error. */
export function durationFlag(opts: { description: string; char?: Interfaces.AlphabetLowercase; default: string }) {
  const ms = parseDuration(opts.default);
  if (ms === undefined) throw new Error(`durationFlag: bad default ${opts.default}`);
  return Flags.custom<number>({ parse: parseDurationFlag })({ description: opts.description, char: opts.char, default: ms, defaultHelp: async () => opts.default });
}

/** idFlag is a numeric resource id (the server's ids are positive integers sent as strings). */
export const idFlag = Flags.custom<string>({
  parse: async (input: string) => {
    if (!/^[1-9]\d*$/.test(input.trim())) throw new UsageError(`${JSON.stringify(input)} is not an id (a positive whole number)`);
    return input.trim();
  },
});

/** listFlag takes comma-separated values and may be repeated; an empty value (`--tags ""`) means none. */
export function listFlag(opts: { description: string; char?: Interfaces.AlphabetLowercase }) {
  return Flags.string({ ...opts, multiple: true, multipleNonGreedy: true });
}

/** splitList flattens a listFlag's values: `-t a,b -t c` → [a, b, c]; empty items are dropped. */
export function splitList(values: string[] | undefined): string[] {
  return (values ?? []).flatMap((v) => v.split(',')).map((v) => v.trim()).filter((v) => v !== '');
}

/** ParsedValues is the shape of parsed flags or args: values keyed by name. */
export type ParsedValues = Record<string, unknown>;

/** GLOBAL_FLAGS are the flags every `headway` command takes unless it narrows its baseFlags. */
export const GLOBAL_FLAGS = {
  config: Flags.string({ char: 'c', description: 'config file (default: $HEADWAY_CONFIG, /etc/headway/config.yaml, ~/.headway/config.yaml, ./config.yaml)', helpGroup: 'GLOBAL' }),
  output: Flags.option({ char: 'o', description: 'output format; empty for human-readable', options: OUTPUT_FORMATS, helpGroup: 'GLOBAL' })(),
  force: Flags.boolean({ description: 'answer yes to confirmation prompts (it never makes a command do more)', allowNo: true, default: false, helpGroup: 'GLOBAL' }),
};

/**
 * HeadwayCommand is the base of every `headway` command: it owns the global flags
 * (-c, -o, --force), turns parse failures into exit 2 with one line, runtime failures
 * into exit 1 with one line (or `{"error": ...}` under -o json/yaml), and renders output.
 */
export abstract class HeadwayCommand extends Command {
  /** baseFlags are the global flags; a command that has no use for some lists only the others (e.g. `serve` takes only -c). */
  static override baseFlags: Partial<typeof GLOBAL_FLAGS> = GLOBAL_FLAGS;

  protected outputFormat: OutputFormat | undefined;
  protected force = false;
  protected configPath: string | undefined;
  private apiClient: ApiClient | undefined;

  protected override async parse<F extends ParsedValues, B extends ParsedValues, A extends ParsedValues>(
    options?: Interfaces.Input<F, B, A>,
    argv: string[] = this.argv,
  ): Promise<Interfaces.ParserOutput<F, B, A>> {
    const input = options ?? (this.ctor as unknown as Interfaces.Input<F, B, A>);
    const defs = { ...(input.baseFlags ?? {}), ...(input.flags ?? {}) } as Record<string, { type: string; allowNo?: boolean; aliases?: string[] }>;
    let parsed: Interfaces.ParserOutput<F, B, A>;
    try {
      parsed = await super.parse(input, normalizeBooleanArgv(argv, defs));
    } catch (e) {
      throw new UsageError(parseErrorLine(e, defs, this.ctor.id ?? this.id));
    }
    const globals = parsed.flags as Record<string, unknown>;
    this.outputFormat = globals.output as OutputFormat | undefined;
    this.force = globals.force === true;
    this.configPath = globals.config as string | undefined;
    return parsed;
  }

  /** client connects lazily, so commands that fail flag checks never touch the config or socket. */
  protected client(): ApiClient {
    this.apiClient ??= clientFromConfigFile(this.configPath);
    return this.apiClient;
  }

  /** print writes `data` in the -o format, or the human text when no format was asked for. */
  protected print(data: unknown, human: string | (() => string)): void {
    if (this.outputFormat) {
      process.stdout.write(serialize(data, this.outputFormat));
      return;
    }
    const text = typeof human === 'function' ? human() : human;
    if (text !== '') process.stdout.write(text.endsWith('\n') ? text : text + '\n');
  }

  /**
   * confirm asks before a destructive action and says whether to go ahead. --force skips
   * it (and only that: it never widens what the action does); with no TTY on stdin there is
   * nobody to ask, so it refuses rather than guessing. Answering no returns false: the
   * caller prints what did not happen and exits 0, as headscale does.
   */
  protected async confirm(question: string): Promise<boolean> {
    if (this.force) return true;
    if (!process.stdin.isTTY) {
      throw new ConfirmationRefused(`${question} Not confirmed: stdin is not a terminal; pass --force to proceed`);
    }
    const rl = createInterface({ input: process.stdin, output: process.stderr });
    try {
      const answer = (await rl.question(`${question} [y/N] `)).trim().toLowerCase();
      return answer === 'y' || answer === 'yes';
    } finally {
      rl.close();
    }
  }

  protected override async catch(err: Interfaces.CommandError): Promise<unknown> {
    if (err instanceof Errors.ExitError) throw err;
    const usage = err instanceof UsageError;
    const message = oneLine(err.message || String(err));
    if (!usage && this.outputFormat) {
      process.stdout.write(serialize({ error: message }, this.outputFormat));
    } else {
      process.stderr.write(`Error: ${message}\n`);
    }
    process.exitCode = usage ? 2 : 1;
    return undefined;
  }
}

/** serialize renders a value in one of the -o formats, newline-terminated. */
export function serialize(data: unknown, format: OutputFormat): string {
  switch (format) {
    case 'json':
      return JSON.stringify(data, null, 2) + '\n';
    case 'json-line':
      return JSON.stringify(data) + '\n';
    case 'yaml':
      return YAML.stringify(data ?? null);
  }
}

function oneLine(s: string): string {
  return s.replace(/\s*\n\s*/g, '; ').trim();
}

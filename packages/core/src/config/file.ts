import { readFileSync } from 'node:fs';
import YAML from 'yaml';
import type { ConfigProblem } from './problems.js';

/** MAX_CONFIG_BYTES bounds the config file read (headscale's whole example is ~20 KB). */
const MAX_CONFIG_BYTES = 1 << 20;

/**
 * readConfigFile reads and parses the config file at `source`; anything wrong with it (unreadable, too large,
 * invalid YAML) is added to `problems` and the file counts as empty.
 */
export function readConfigFile(source: string, problems: ConfigProblem[]): unknown {
  let text: string;
  try {
    text = readFileSync(source, 'utf8');
  } catch (err) {
    // A directory or an unreadable file: the file is named, with the error code.
    problems.push({ level: 'error', key: '', message: `cannot read config file ${source}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` });
    return {};
  }
  if (Buffer.byteLength(text) > MAX_CONFIG_BYTES) {
    problems.push({ level: 'error', key: '', message: `config file ${source} is ${Buffer.byteLength(text)} bytes; a config file may be at most ${MAX_CONFIG_BYTES} bytes` });
    return {};
  }
  return parseYaml(text, source, problems);
}

/**
 * parseYaml reads the config file's YAML, adding a problem (with file:line:col where there is one) for anything
 * wrong. Duplicate keys are found here in one pass, because the yaml package's uniqueKeys compares every key with
 * every other in a mapping (quadratic in a mapping's size). Merge keys (`<<: *base`) are read as headscale's YAML
 * reader does. An alias bomb or nesting too deep to convert is a problem, not a throw.
 */
function parseYaml(text: string, source: string, problems: ConfigProblem[]): unknown {
  const lines = new YAML.LineCounter();
  const at = (offset: number | undefined) => {
    if (offset === undefined) return '';
    const pos = lines.linePos(offset);
    return `:${pos.line}:${pos.col}`;
  };
  const invalid = (where: string, message: string) => problems.push({ level: 'error', key: '', message: `${source}${where}: invalid YAML: ${message}` });
  let doc: YAML.Document.Parsed;
  try {
    doc = YAML.parseDocument(text, { prettyErrors: true, uniqueKeys: false, merge: true, lineCounter: lines });
  } catch (err) {
    invalid('', tooDeep(err));
    return {};
  }
  if (doc.errors.length) {
    // The yaml package's first line ends "at line 2, column 1:" before the excerpt it prints below; the position is already in front.
    for (const e of doc.errors) invalid(at(e.pos[0]), e.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '').replace(/:$/, ''));
    return {};
  }
  const before = problems.length;
  const seen = new Set<unknown>();
  const visit = (node: unknown): void => {
    // Aliases share nodes: each is checked once (an alias bomb does not multiply the walk).
    if (!node || typeof node !== 'object' || seen.has(node)) return;
    seen.add(node);
    if (YAML.isMap(node)) {
      const keys = new Set<unknown>();
      for (const pair of node.items) {
        const key = YAML.isScalar(pair.key) ? pair.key.value : pair.key;
        if (key !== '<<' && keys.has(key)) invalid(at((pair.key as YAML.Node | null)?.range?.[0]), `Map keys must be unique (${JSON.stringify(key)} again)`);
        keys.add(key);
        visit(pair.value);
      }
    } else if (YAML.isSeq(node)) for (const item of node.items) visit(item);
  };
  try {
    visit(doc.contents);
  } catch (err) {
    invalid('', tooDeep(err));
    return {};
  }
  if (problems.length > before) return {};
  // A file mode written as a YAML number keeps its digits: 0o770 would be read as 504 and 0770 as 770, neither of
  // which is the mode meant.
  const mode = doc.get('unix_socket_permission', true);
  if (YAML.isScalar(mode) && typeof mode.value === 'number' && mode.source) {
    mode.value = mode.format === 'OCT' ? `0${mode.source.slice(2)}` : mode.source;
  }
  try {
    return doc.toJS({ maxAliasCount: 1000 }) ?? {};
  } catch (err) {
    // An alias bomb ("Excessive alias count") or nesting deeper than the stack.
    invalid('', tooDeep(err));
    return {};
  }
}

/** tooDeep names a stack overflow as what it means in a config file; any other error by its first line. */
function tooDeep(err: unknown): string {
  return err instanceof RangeError ? 'nested too deeply' : String((err as Error).message).split('\n')[0]!;
}

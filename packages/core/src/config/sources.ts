import { closest, distance } from 'fastest-levenshtein';
import { note, REMOVED, RENAMED, unimplementedFeature, type Unimplemented } from './headscale.js';
import { CONFIG_KEYS, isConfigKey, KEYS, type ConfigKey } from './keys.js';
import type { ConfigProblem } from './problems.js';
import { describe } from './syntax.js';

/*
 * Where values come from: the config file's mapping and HEADWAY_* environment variables, gathered into one flat
 * map by dotted key before any value is checked. Unknown keys and variables are warnings that name the nearest
 * known one.
 */

/** Given is a value as written, and where: the key itself, its old name, or an environment variable. */
export interface Given { value: unknown; from: string }
export type Flat = Map<ConfigKey, Given>;

/**
 * flatten reads the config file's mapping into `flat` by dotted key: removed headscale keys are fatal, renamed ones
 * are moved to their new name with a warning, keys Headway accepts without acting on are noted in `unimplemented`.
 */
export function flatten(obj: Record<string, unknown>, prefix: string, flat: Flat, problems: ConfigProblem[], unimplemented: Unimplemented): void {
  for (const [k, v] of Object.entries(obj)) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (isConfigKey(key)) {
      const renamed = flat.get(key);
      if (renamed) problems.push({ level: 'error', key, message: `set twice: also as ${renamed.from}, its old name; keep one` });
      flat.set(key, { value: v, from: key });
      continue;
    }
    if (Object.hasOwn(REMOVED, key)) {
      if (key === 'dns_config' && v && typeof v === 'object') {
        const children = Object.keys(v);
        for (const c of children) {
          const sub = `dns_config.${c}`;
          problems.push({ level: 'fatal', key: sub, message: `removed: ${REMOVED[sub] ?? REMOVED.dns_config}` });
        }
        if (children.length) continue;
      }
      problems.push({ level: 'fatal', key, message: `removed: ${REMOVED[key]}` });
      continue;
    }
    if (Object.hasOwn(RENAMED, key)) {
      const to = RENAMED[key]!;
      if (flat.has(to)) {
        problems.push({ level: 'error', key, message: `set twice: also as ${to}, its new name; keep one` });
        continue;
      }
      problems.push({ level: 'warn', key, message: `renamed to \`${to}\`; the old key still works but will be removed` });
      flat.set(to, { value: v, from: key });
      continue;
    }
    const isParent = CONFIG_KEYS.some((known) => known.startsWith(key + '.'))
      || Object.keys(REMOVED).some((r) => r.startsWith(key + '.'));
    if (isParent && v !== null && typeof v === 'object' && !Array.isArray(v)) {
      flatten(v as Record<string, unknown>, key, flat, problems, unimplemented);
      continue;
    }
    if (isParent && v !== null) {
      problems.push({ level: 'error', key, message: `expected a mapping of keys, found ${describe(v)}` });
      continue;
    }
    const feature = unimplementedFeature(key);
    if (feature) {
      // An `oidc:` block is named key by key (oidc.issuer, oidc.client_id, ...), not as one mapping.
      if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) {
        for (const child of Object.keys(v)) note(unimplemented, feature, `${key}.${child}`);
      } else note(unimplemented, feature, key);
      continue;
    }
    const hint = suggestKey(key);
    problems.push({ level: 'warn', key, message: `unknown key (ignored)${hint ? `; did you mean \`${hint}\`?` : ''}` });
  }
}

/**
 * suggestKey names the known key nearest to a misspelt one (`metrics_listen_adr` →
 * `metrics_listen_addr`), so an unknown-key warning says what was probably meant;
 * nothing when no key is within a third of the name's length.
 */
export function suggestKey(key: string): string | undefined {
  // A key is compared with the known keys and sections at its own depth: `polcy` with `policy`, not `policy.mode`.
  const depth = key.split('.').length;
  const known = new Set<string>();
  for (const k of [...CONFIG_KEYS, ...Object.values(RENAMED)]) {
    const parts = k.split('.');
    if (parts.length >= depth) known.add(parts.slice(0, depth).join('.'));
  }
  return known.size ? nearest(key, [...known], key.length) : undefined;
}

/** nearest is the candidate closest to name when it is within a third of `length` edits (at least 2), else undefined. */
function nearest(name: string, candidates: string[], length: number): string | undefined {
  const best = closest(name, candidates);
  return distance(name, best) <= Math.max(2, Math.floor(length / 3)) ? best : undefined;
}

export function envName(key: string): string {
  return 'HEADWAY_' + key.toUpperCase().replace(/\./g, '_');
}

/** readEnv sets each key named by a HEADWAY_<KEY> variable in `flat`, over the file's value. */
export function readEnv(env: NodeJS.ProcessEnv, flat: Flat): void {
  for (const key of CONFIG_KEYS) {
    const name = envName(key);
    const text = env[name];
    if (text === undefined) continue;
    flat.set(key, { value: KEYS[key].fromEnv(text), from: name });
  }
}

/** OTHER_VARIABLES are HEADWAY_* variables that name no key but that the CLI, the scripts or the tests read. */
const OTHER_VARIABLES = new Set(['HEADWAY_CONFIG', 'HEADWAY_NODE_HOME', 'HEADWAY_CI_WORK', 'HEADWAY_CHILD_CONFIG', 'HEADWAY_LOAD_RECORD', 'HEADWAY_CONTAINER_CACHE', 'HEADWAY_BASE_IMAGE']);

/**
 * unknownEnvProblems warns about each HEADWAY_* variable that names no key (`HEADWAY_LISTEN_ADR`), with the
 * nearest variable that does: a misspelt variable is otherwise ignored without a word.
 */
export function unknownEnvProblems(env: NodeJS.ProcessEnv): ConfigProblem[] {
  const names = CONFIG_KEYS.map(envName);
  const known = new Set(names);
  const problems: ConfigProblem[] = [];
  for (const name of Object.keys(env)) {
    if (!name.startsWith('HEADWAY_') || known.has(name) || OTHER_VARIABLES.has(name) || name.startsWith('HEADWAY_TEST_')) continue;
    const best = nearest(name, names, name.length - 'HEADWAY_'.length);
    const hint = best ? `; did you mean ${best}?` : '';
    problems.push({ level: 'warn', key: name, message: `this environment variable names no configuration key (ignored)${hint}` });
  }
  return problems;
}

/**
 * headscaleEnvProblems warns about each HEADSCALE_<KEY> variable naming a key Headway has:
 * headscale reads those, Headway reads HEADWAY_<KEY>, and a container environment carried
 * over from headscale would otherwise be ignored without a word.
 */
export function headscaleEnvProblems(env: NodeJS.ProcessEnv): ConfigProblem[] {
  const problems: ConfigProblem[] = [];
  for (const key of CONFIG_KEYS) {
    const ours = envName(key);
    const theirs = 'HEADSCALE_' + ours.slice('HEADWAY_'.length);
    if (env[theirs] !== undefined) {
      problems.push({ level: 'warn', key: theirs, message: `ignored: Headway reads ${ours} (the \`${key}\` key)${env[ours] === undefined ? `; rename the variable` : ''}` });
    }
  }
  return problems;
}

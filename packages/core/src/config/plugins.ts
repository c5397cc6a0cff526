import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { ConfigProblem } from './problems.js';
import type { AdapterDescriptor, OptionProblem, PluginEntry, PortName } from '../ports/adapter.js';

/*
 * Adapter and plugin resolution without the container: `headway config check`
 * runs checkPlugins through the ports-only entry point, so nothing here may
 * import the server (awilix, koa, the control plane). kernel/loader.ts registers.
 */

/** BUILTIN lists the adapters shipped with Headway per port, by short id. */
export const BUILTIN: Record<PortName, readonly string[]> = {
  storage: ['sqlite', 'postgres', 'mysql'],
  policy: ['file', 'database'],
  dns: [],
  drive: [],
  identity: ['oidc'],
};

const PREFIX: Record<PortName, string> = {
  storage: '@headway/storage-',
  policy: '@headway/policy-',
  dns: '@headway/dns-',
  drive: '@headway/drive-',
  identity: '@headway/identity-',
};

/** AdapterLoadError stops the server at boot with a message a user can act on. */
export class AdapterLoadError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'AdapterLoadError';
  }
}

/** adapterPackage maps a short id (`sqlite`) to its package; a full package name passes through. */
export function adapterPackage(port: PortName, id: string): string {
  if (!BUILTIN[port].includes(id)) return id;
  // The database-backed policy source lives in packages/policy-db.
  return port === 'policy' && id === 'database' ? '@headway/policy-db' : PREFIX[port] + id;
}

async function importPackage(name: string): Promise<unknown> {
  // Resolve from the working directory first (a self-hoster's own plugin install),
  // then from Headway's own location (bundled adapters and workspace packages).
  for (const base of [join(process.cwd(), 'noop.js'), import.meta.url]) {
    try {
      const resolved = createRequire(base).resolve(name);
      return await import(pathToFileURL(resolved).href);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'MODULE_NOT_FOUND') throw err;
    }
  }
  try {
    return await import(name);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // Loader hooks (test runners, tsx) may rewrap the error, so the message counts too.
    const missing = code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND'
      || new RegExp(`Cannot find (package|module) '${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}'`).test((err as Error).message);
    if (missing) return undefined;
    throw err;
  }
}

/** importDescriptor imports a package and checks it default-exports a descriptor for `port`. */
export async function importDescriptor(port: PortName, pkg: string, label: string): Promise<AdapterDescriptor> {
  let mod: unknown;
  try {
    mod = await importPackage(pkg);
  } catch (err) {
    throw new AdapterLoadError(`${label}: adapter package ${pkg} failed to load: ${(err as Error).message}`);
  }
  if (mod === undefined) {
    const known = BUILTIN[port].join(', ') || '(none built in)';
    throw new AdapterLoadError(`${label}: unknown ${port} adapter "${pkg}" (package ${pkg} not found); known ids: ${known}, or an installed npm package name`);
  }
  const desc = (mod as { default?: unknown }).default;
  if (!desc || typeof desc !== 'object' || typeof (desc as AdapterDescriptor).register !== 'function') {
    throw new AdapterLoadError(`${label}: package ${pkg} does not default-export an adapter descriptor {port, id, register}`);
  }
  const d = desc as AdapterDescriptor;
  if (d.port !== port) {
    throw new AdapterLoadError(`${label}: package ${pkg} provides the ${d.port} port, not ${port}`);
  }
  return d;
}

/** PluginOptionsError: a plugin's options failed its own schema; `problems` name each option. */
export class PluginOptionsError extends AdapterLoadError {
  constructor(readonly plugin: string, readonly problems: OptionProblem[]) {
    super(problems.map((p) => `${plugin}: option ${p.option ? `"${p.option}"` : '(options)'}: ${p.message}`).join('\n'));
    this.name = 'PluginOptionsError';
  }
}

function issuePath(path: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> | undefined): string {
  return (path ?? []).map((p) => String(typeof p === 'object' ? p.key : p)).join('.');
}

/**
 * pluginOptions runs a descriptor's own check on its options and returns what the
 * plugin's register receives (a schema's output, with its defaults); a plugin
 * with neither schema nor validate gets the options as written.
 */
export async function pluginOptions(d: AdapterDescriptor, options: Record<string, unknown>, label: string): Promise<Record<string, unknown>> {
  let problems: OptionProblem[] = [];
  let value = options;
  try {
    if (d.schema) {
      const result = await d.schema['~standard'].validate(options);
      if (result.issues) problems = result.issues.map((i) => ({ option: issuePath(i.path), message: i.message }));
      else value = result.value as Record<string, unknown>;
    }
    if (!problems.length && d.validate) problems = [...(await d.validate(value))];
  } catch (err) {
    throw new AdapterLoadError(`${label}: checking its options failed: ${(err as Error).message}`);
  }
  if (problems.length) throw new PluginOptionsError(label, problems);
  return value;
}

export const pluginLabel = (i: number, e: PluginEntry) => `plugins[${i}] (${e.package})`;

/**
 * checkPlugins imports every `plugins:` package and runs its options check
 * without registering anything: `headway config check` reports what start-up would
 * refuse. Every problem of every plugin is returned, each naming plugin and option.
 */
export async function checkPlugins(entries: readonly PluginEntry[]): Promise<ConfigProblem[]> {
  const problems: ConfigProblem[] = [];
  for (const [i, e] of entries.entries()) {
    const label = pluginLabel(i, e);
    try {
      await pluginOptions(await importDescriptor(e.port, e.package, label), e.options, label);
    } catch (err) {
      if (err instanceof PluginOptionsError) {
        for (const p of err.problems) problems.push({ level: 'error', key: `${label} options.${p.option}`.replace(/\.$/, ''), message: p.message });
      } else problems.push({ level: 'error', key: '', message: (err as Error).message });
    }
  }
  return problems;
}

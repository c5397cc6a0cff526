import { asValue } from 'awilix';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { HeadwayConfig } from '../config/schema.js';
import type { ConfigProblem } from '../config/load.js';
import type { AdapterContext, AdapterDescriptor, OptionProblem, PluginEntry, PortName } from '../ports/adapter.js';
import { PORT_SELECTION } from '../ports/adapter.js';
import { assertDnsPort, DNS, type DnsPort } from '../ports/dns.js';

/** BUILTIN lists the adapters shipped with Headway per port, by short id. */
export const BUILTIN: Record<PortName, readonly string[]> = {
  storage: ['sqlite', 'postgres', 'mysql'],
  policy: ['file', 'database'],
  dns: [],
  drive: [],
};

const PREFIX: Record<PortName, string> = {
  storage: '@headway/storage-',
  policy: '@headway/policy-',
  dns: '@headway/dns-',
  drive: '@headway/drive-',
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
async function importDescriptor(port: PortName, pkg: string, label: string): Promise<AdapterDescriptor> {
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

/**
 * loadAdapter resolves, imports and registers one adapter for a port; an unknown
 * id, a module that is not a descriptor for this port, or a register that throws
 * each fail with a message naming the adapter (and the known ids).
 */
export async function loadAdapter(port: PortName, id: string, ctx: Omit<AdapterContext, 'options'>, configKey: string): Promise<AdapterDescriptor> {
  const pkg = adapterPackage(port, id);
  const d = await importDescriptor(port, pkg, configKey);
  if (ctx.container.hasRegistration(port)) {
    throw new AdapterLoadError(`${configKey}: two adapters for the ${port} port (${pkg} and one registered before it)`);
  }
  const options = await pluginOptions(d, {}, `${configKey} (${pkg})`);
  try {
    await d.register({ ...ctx, options });
  } catch (err) {
    throw new AdapterLoadError(`${configKey}: ${port} adapter ${pkg}: ${(err as Error).message}`);
  }
  if (!ctx.container.hasRegistration(port)) {
    throw new AdapterLoadError(`${configKey}: ${port} adapter ${pkg} registered nothing under "${port}"`);
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
async function pluginOptions(d: AdapterDescriptor, options: Record<string, unknown>, label: string): Promise<Record<string, unknown>> {
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

const pluginLabel = (i: number, e: PluginEntry) => `plugins[${i}] (${e.package})`;

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

/** PLUGIN_ASSERTIONS holds the method check of each port that `plugins:` may serve. */
const PLUGIN_ASSERTIONS: Partial<Record<PortName, (value: unknown, adapter: string) => void>> = {
  dns: assertDnsPort,
};

/** LoadedPlugins are the plugin adapters by port, in the order `plugins:` lists them. */
export interface LoadedPlugins { dns: DnsPort[] }

/** PreparedPlugins are `plugins:` entries imported and with their options checked, not yet registered. */
export interface PreparedPlugins {
  entries: Array<{ entry: PluginEntry; label: string; d: AdapterDescriptor; options: Record<string, unknown> }>;
}

/**
 * preparePlugins imports every `plugins:` package and checks its options, and
 * throws one error naming every problem of every plugin. The server calls it
 * before it opens the database, so a bad option stops it having changed nothing.
 */
export async function preparePlugins(config: Pick<HeadwayConfig, 'plugins'>): Promise<PreparedPlugins> {
  const entries: PreparedPlugins['entries'] = [];
  const messages: string[] = [];
  for (const [i, entry] of config.plugins.entries()) {
    const label = pluginLabel(i, entry);
    const selection = PORT_SELECTION[entry.port];
    if (selection?.by !== 'plugins' || !PLUGIN_ASSERTIONS[entry.port]) {
      messages.push(`${label}: the ${entry.port} port cannot be served by plugins${selection?.by === 'config' ? ` (it is chosen by ${selection.key})` : ''}`);
      continue;
    }
    try {
      const d = await importDescriptor(entry.port, entry.package, label);
      entries.push({ entry, label, d, options: await pluginOptions(d, entry.options, label) });
    } catch (err) {
      messages.push((err as Error).message);
    }
  }
  if (messages.length) throw new AdapterLoadError(messages.join('\n'));
  return { entries };
}

/**
 * registerPlugins registers each prepared plugin in turn and collects the
 * adapter it registered under its port's token. A port that allows one plugin
 * refuses a second; the list of a port is also registered as `<port>Adapters`.
 */
export async function registerPlugins(prepared: PreparedPlugins, ctx: Omit<AdapterContext, 'options'>): Promise<LoadedPlugins> {
  const loaded: Record<string, unknown[]> = {};
  for (const { entry, label, d, options } of prepared.entries) {
    const { port } = entry;
    const list = (loaded[port] ??= []);
    const selection = PORT_SELECTION[port];
    if (list.length && selection.by === 'plugins' && !selection.several) {
      throw new AdapterLoadError(`${label}: the ${port} port takes one plugin, and an earlier entry serves it`);
    }
    const before = ctx.container.getRegistration(port);
    // awilix caches a resolved singleton by name: without this, every plugin after
    // the first would resolve to the first one's adapter.
    ctx.container.cache.delete(port);
    try {
      await d.register({ ...ctx, options });
    } catch (err) {
      throw new AdapterLoadError(`${label}: ${port} adapter ${entry.package}: ${(err as Error).message}`);
    }
    const after = ctx.container.getRegistration(port);
    if (!after || after === before) {
      throw new AdapterLoadError(`${label}: ${port} adapter ${entry.package} registered nothing under "${port}"`);
    }
    const adapter = ctx.container.resolve<unknown>(port);
    PLUGIN_ASSERTIONS[port]!(adapter, entry.package);
    list.push(adapter);
  }
  const result: LoadedPlugins = { dns: (loaded[DNS] ?? []) as DnsPort[] };
  ctx.container.register(`${DNS}Adapters`, asValue(result.dns));
  return result;
}

/** loadPlugins is preparePlugins then registerPlugins, for callers with nothing to do in between. */
export async function loadPlugins(config: Pick<HeadwayConfig, 'plugins'>, ctx: Omit<AdapterContext, 'options'>): Promise<LoadedPlugins> {
  return registerPlugins(await preparePlugins(config), ctx);
}

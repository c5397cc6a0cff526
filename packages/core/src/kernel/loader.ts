import { asValue } from 'awilix';
import type { HeadwayConfig } from '../config/schema.js';
import type { AdapterContext, AdapterDescriptor, OptionProblem, PluginEntry, PortName } from '../ports/adapter.js';
import { PORT_SELECTION } from '../ports/adapter.js';
import { assertDnsPort, DNS, type DnsPort } from '../ports/dns.js';
import { assertDrivePort, DRIVE, type DrivePort } from '../ports/drive.js';
import { assertIdentityPort, IDENTITY, type IdentityPort } from '../ports/identity.js';
import { POLICY } from '../ports/policy.js';
import { STORAGE } from '../ports/storage.js';
import { adapterPackage, AdapterLoadError, BUILTIN, importDescriptor, pluginLabel, pluginOptions } from '../config/plugins.js';


/** PORT_TOKENS is the container token each port's adapter registers its service under. */
export const PORT_TOKENS: Record<PortName, string> = { storage: STORAGE, policy: POLICY, dns: DNS, drive: DRIVE, identity: IDENTITY };

/**
 * loadAdapter resolves, imports and registers one adapter for a port; an unknown
 * id, a module that is not a descriptor for this port, or a register that throws
 * each fail with a message naming the adapter (and the known ids).
 */
export async function loadAdapter(port: PortName, id: string, ctx: Omit<AdapterContext, 'options'>, configKey: string): Promise<AdapterDescriptor> {
  const pkg = adapterPackage(port, id);
  const d = await importDescriptor(port, pkg, configKey);
  const token = PORT_TOKENS[port];
  if (ctx.container.hasRegistration(token)) {
    throw new AdapterLoadError(`${configKey}: two adapters for the ${port} port (${pkg} and one registered before it)`);
  }
  const options = await pluginOptions(d, {}, `${configKey} (${pkg})`);
  try {
    await d.register({ ...ctx, options });
  } catch (err) {
    throw new AdapterLoadError(`${configKey}: ${port} adapter ${pkg}: ${(err as Error).message}`);
  }
  if (!ctx.container.hasRegistration(token)) {
    throw new AdapterLoadError(`${configKey}: ${port} adapter ${pkg} registered nothing under the ${port} port's token ("${token}", ${port.toUpperCase()} from @headway/core/ports)`);
  }
  return d;
}


/** PLUGIN_ASSERTIONS holds the method check of each port that `plugins:` may serve. */
const PLUGIN_ASSERTIONS: Partial<Record<PortName, (value: unknown, adapter: string) => void>> = {
  dns: assertDnsPort,
  drive: assertDrivePort,
  identity: assertIdentityPort,
};

/** LoadedPlugins are the plugin adapters by port, in the order `plugins:` lists them. */
export interface LoadedPlugins { dns: DnsPort[]; drive: DrivePort[]; identity?: IdentityPort }

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
  const result: LoadedPlugins = { dns: (loaded[DNS] ?? []) as DnsPort[], drive: (loaded[DRIVE] ?? []) as DrivePort[], identity: loaded[IDENTITY]?.[0] as IdentityPort | undefined };
  ctx.container.register(`${DNS}Adapters`, asValue(result.dns));
  ctx.container.register(`${DRIVE}Adapters`, asValue(result.drive));
  return result;
}

/** loadPlugins is preparePlugins then registerPlugins, for callers with nothing to do in between. */
export async function loadPlugins(config: Pick<HeadwayConfig, 'plugins'>, ctx: Omit<AdapterContext, 'options'>): Promise<LoadedPlugins> {
  return registerPlugins(await preparePlugins(config), ctx);
}

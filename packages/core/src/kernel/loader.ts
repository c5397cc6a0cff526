import { createRequire } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { AdapterContext, AdapterDescriptor, PortName } from '../ports/adapter.js';

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

/**
 * loadAdapter resolves, imports and registers one adapter for a port; an unknown
 * id, a module that is not a descriptor for this port, or a register that throws
 * each fail with a message naming the adapter (and the known ids).
 */
export async function loadAdapter(port: PortName, id: string, ctx: AdapterContext, configKey: string): Promise<AdapterDescriptor> {
  const pkg = adapterPackage(port, id);
  const known = BUILTIN[port].join(', ') || '(none built in)';
  let mod: unknown;
  try {
    mod = await importPackage(pkg);
  } catch (err) {
    throw new AdapterLoadError(`${configKey}: adapter package ${pkg} failed to load: ${(err as Error).message}`);
  }
  if (mod === undefined) {
    throw new AdapterLoadError(`${configKey}: unknown ${port} adapter "${id}" (package ${pkg} not found); known ids: ${known}, or an installed npm package name`);
  }
  const desc = (mod as { default?: unknown }).default;
  if (!desc || typeof desc !== 'object' || typeof (desc as AdapterDescriptor).register !== 'function') {
    throw new AdapterLoadError(`${configKey}: package ${pkg} does not default-export an adapter descriptor {port, id, register}`);
  }
  const d = desc as AdapterDescriptor;
  if (d.port !== port) {
    throw new AdapterLoadError(`${configKey}: package ${pkg} provides the ${d.port} port, not ${port}`);
  }
  if (ctx.container.hasRegistration(port)) {
    throw new AdapterLoadError(`${configKey}: two adapters for the ${port} port (${pkg} and one registered before it)`);
  }
  try {
    await d.register(ctx);
  } catch (err) {
    throw new AdapterLoadError(`${configKey}: ${port} adapter ${pkg}: ${(err as Error).message}`);
  }
  if (!ctx.container.hasRegistration(port)) {
    throw new AdapterLoadError(`${configKey}: ${port} adapter ${pkg} registered nothing under "${port}"`);
  }
  return d;
}

import type { AwilixContainer } from 'awilix';
import type { HeadwayConfig } from '../config/schema.js';
import type { Logger } from '../log.js';

/** The ports an adapter package may provide; `database.type` and `policy.mode` choose them. */
export type PortName = 'storage' | 'policy' | 'dns' | 'drive' | 'identity';

/**
 * PORT_SELECTION says where each port's adapters come from: a config key naming
 * exactly one (storage, policy), or `plugins:` entries, several in the listed
 * order where `several` (DNS records merge, drive grants add up), or nowhere yet. Config validation
 * and the loader both read it, so they refuse the same entries.
 */
export const PORT_SELECTION: Record<PortName,
  { by: 'config'; key: string } | { by: 'plugins'; several: boolean } | { by: 'none'; reason: string }> = {
  storage: { by: 'config', key: 'database.type' },
  policy: { by: 'config', key: 'policy.mode' },
  dns: { by: 'plugins', several: true },
  drive: { by: 'plugins', several: true },
  // One login method; without a plugin, oidc.issuer loads @headway/identity-oidc.
  identity: { by: 'plugins', several: false },
};

/** PluginEntry is one `plugins:` item: the npm package, the port it serves, and its own options. */
export interface PluginEntry {
  package: string;
  port: PortName;
  options: Record<string, unknown>;
}

export interface AdapterContext<O = Record<string, unknown>> {
  container: AwilixContainer;
  config: HeadwayConfig;
  logger: Logger;
  /**
   * options are the plugin's `options:` from its `plugins:` entry, as its schema
   * returned them; the loader always sets them (`{}` when none are written), so
   * only a test calling register directly may leave them out.
   */
  options?: O;
  /**
   * migrate: false asks a storage adapter to open the database as it finds it, without
   * creating or updating Headway's schema, because the caller must write nothing (the dry
   * run of `headway migrate from-headscale`). The server leaves it unset: adapters migrate.
   */
  migrate?: boolean;
}

/**
 * OptionsSchema is the part of the Standard Schema interface (standardschema.dev)
 * Headway calls, so a plugin may hand over a zod, valibot or arktype schema as is.
 * Declared structurally here rather than importing a schema library: core must
 * not force one on plugin authors.
 */
export interface OptionsSchema<O = unknown> {
  readonly '~standard': {
    readonly version: 1;
    readonly vendor: string;
    validate(value: unknown): OptionsSchemaResult<O> | Promise<OptionsSchemaResult<O>>;
  };
}
export type OptionsSchemaResult<O> =
  | { readonly value: O; readonly issues?: undefined }
  | { readonly issues: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<PropertyKey | { readonly key: PropertyKey }> }> };

/** OptionProblem is one thing wrong with a plugin's options; `option` names it (`file`, `zones.0.name`). */
export interface OptionProblem { option: string; message: string }

/**
 * AdapterDescriptor is the default export of every adapter package. `register`
 * builds the adapter (connecting where needed) and registers it in the container
 * under the port's token; the loader then asserts the port's methods.
 */
export interface AdapterDescriptor<O = Record<string, unknown>> {
  port: PortName;
  id: string;
  /** schema validates the plugin's `options:` at start-up and in `headway config check`. */
  schema?: OptionsSchema<O>;
  /** validate is the alternative to a schema: it returns every problem (none when the options are good). */
  validate?(options: Record<string, unknown>): OptionProblem[] | Promise<OptionProblem[]>;
  register(ctx: AdapterContext<O>): Promise<void> | void;
}

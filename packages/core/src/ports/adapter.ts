import type { AwilixContainer } from 'awilix';
import type { HeadwayConfig } from '../config/schema.js';
import type { Logger } from '../log.js';

/** The ports an adapter package may provide; `database.type` and `policy.mode` choose them. */
export type PortName = 'storage' | 'policy' | 'dns' | 'drive';

export interface AdapterContext {
  container: AwilixContainer;
  config: HeadwayConfig;
  logger: Logger;
}

/**
 * AdapterDescriptor is the default export of every adapter package. `register`
 * builds the adapter (connecting where needed) and registers it in the container
 * under the port's token; the loader then asserts the port's methods.
 */
export interface AdapterDescriptor {
  port: PortName;
  id: string;
  register(ctx: AdapterContext): Promise<void> | void;
}

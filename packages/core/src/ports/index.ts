/**
 * @headway/core/ports is the ports-only entry point: what storage and policy adapters,
 * plugins and the CLI need (port interfaces, tokens and assertions, domain types, the
 * error catalogue, the config types, loader, key table, duration and RFC 3339 time helpers, the logger,
 * prefix parsing, key hashing) without loading the server. Nothing re-exported here may import koa,
 * @koa/router, @headway/derp, @headway/noise, prom-client or the control, server, state,
 * policy and api modules; test/ports-entry.test.ts proves it in a fresh process.
 * Keep this a plain list of re-exports: a new port file gets one line here.
 */
export * from './assert.js';
export * from './adapter.js';
export * from './storage.js';
export * from './policy.js';
export * from './dns.js';
export * from './drive.js';
export * from './identity.js';
export * from './cluster.js';
export * from '../domain.js';
export * from '../errors.js';
export * from '../log.js';
export * from '../config/schema.js';
export * from '../config/load.js';
export * from '../config/keys.js';
export * from '../config/duration.js';
export * from '../config/plugins.js';
// The server's prefix arithmetic, from the one IP library (@headway/policy/ip loads none of the compiler);
// parsePrefix here is its parseIPPrefix (a CIDR or bare address, host bits masked off).
export {
  parseIP, formatIP, parseIPPrefix as parsePrefix, mask, formatPrefix, prefixSize, prefixLast, prefixContains, prefixOverlaps,
  canonicalPrefix, EXIT_ROUTES, isExitRoute, type IPAddr, type Prefix,
} from '@headway/policy/ip';
export * from '../backup.js';
export * from '../secrets.js';
export * from '../client-address.js';
export * from '../node-flags.js';

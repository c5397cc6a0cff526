export * from './server.js';
export * from './tailscale.js';
export * from './cli.js';
export * from './headscale-cli.js';
export * from './cluster.js';
export * from './until.js';

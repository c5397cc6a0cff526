export * from './server.js';
export * from './tailscale.js';

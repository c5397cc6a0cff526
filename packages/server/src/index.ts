export * from './app.js';
export * from './reach.js';
export * from './memory.js';
export * from './server.js';
export * from './compose.js';
export * from './relay.js';
export * from './site.js';

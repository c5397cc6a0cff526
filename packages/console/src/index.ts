export * from './routes.js';
export * from './auth.js';
export * from './assets.js';
export * from './events.js';
export * from './oidc.js';

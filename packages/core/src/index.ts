export * from './domain.js';
export * from './log.js';
export * from './config/schema.js';
export * from './ports/assert.js';
export * from './ports/adapter.js';
export * from './ports/storage.js';

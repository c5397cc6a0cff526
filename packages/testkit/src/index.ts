export * from './wire.js';
export * from './netmap.js';
export * from './zstd.js';
export * from './device.js';
export * from './tailnet-plan.js';
export * from './h2frames.js';

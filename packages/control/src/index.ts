export * from './control.js';
export * from './sessions.js';
export * from './map-session.js';
export * from './clock.js';
export * from './fanout-knobs.js';
export * from './batch-window.js';
export * from './scheduler.js';
export * from './peer-blocks.js';
export * from './dns.js';
export * from './derpmap.js';
export * from './mapper.js';

export * from './frames.js';
export * from './register.js';
export * from './pages.js';
export * from './login.js';
export * from './peerset.js';
export * from './filter-chunks.js';

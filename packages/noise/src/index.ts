export * from './keys.js';
export * from './cipher.js';
export * from './handshake.js';
export * from './messages.js';
export * from './conn.js';
export * from './server.js';
export * from './client.js';
export * from './websocket.js';

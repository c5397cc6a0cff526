/**
 * @headway/cli's library surface, for CLI plugins (the bundled @headway/cli-admin and any
 * installed one): the base command (global flags, output formats, exit codes), the API
 * client that reaches the server the same way `headway` does, the table and JSON
 * renderers, and the checks and lookups shared by the admin topics.
 */
export * from './base.js';
export * from './client.js';
export * from './format.js';
export * from './topics.js';
export type * from './api-types.js';
export { openConfiguredStorage, readConfig, runningServerPid } from './storage.js';

/**
 * @headway/cli's library surface, for CLI plugins: the base command (global flags, output
 * formats, exit codes) and the API client that reaches the server the same way `headway` does.
 */
export { HeadwayCommand, UsageError, ConfirmationRefused, OUTPUT_FORMATS, serialize, boolFlag, durationFlag, idFlag, listFlag, splitList, normalizeBooleanArgv, usageLine, type OutputFormat, type ParsedValues } from './base.js';
export { ApiClient, ApiError, ConnectionError, clientFromConfigFile, targetFromConfig, type ApiTarget, type HttpMethod } from './client.js';
export { renderTable, formatTime, userJson, nodeJson, preAuthKeyJson, apiKeyJson } from './format.js';
export { checkTags, checkRoutes, commandAliases, matchesKeyPrefix } from './topics.js';
export type { ApiUser, ApiNode, ApiPreAuthKey, ApiKeyInfo, ApiProblem } from './api-types.js';

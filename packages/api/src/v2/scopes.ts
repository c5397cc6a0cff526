/* Tailscale's OAuth scopes live in core (the OAuth client service checks them too); /api/v2 reads them from there. */
export { SCOPE_RESOURCES, parseScopes, allows, covers, scopeName, TAGGING_SCOPES, type Scope, type ScopeResource } from '@headway/core';

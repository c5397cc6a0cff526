import { formatTime, renderTable, type ApiOAuthClient } from '@headway/cli';

/** oauthClientJson: snake_case, as the other commands' JSON output. */
export function oauthClientJson(c: ApiOAuthClient): Record<string, unknown> {
  return { id: c.id, description: c.description, scopes: c.scopes, tags: c.tags, created_at: c.createdAt, last_used: c.lastUsed };
}

export function oauthClientsTable(clients: ApiOAuthClient[]): string {
  return renderTable(
    ['ID', 'Description', 'Scopes', 'Tags', 'Created', 'Last used'],
    clients.map((c) => [c.id, c.description, c.scopes, c.tags, formatTime(c.createdAt), formatTime(c.lastUsed)]),
  );
}

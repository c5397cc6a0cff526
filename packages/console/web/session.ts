/** session.ts: who is signed in, as /admin/session answers (the CSRF token included). */
export interface SessionInfo {
  admin: string;
  via: 'link' | 'oidc';
  csrf: string;
  expiresAt: string;
}

export async function loadSession(): Promise<SessionInfo | undefined> {
  const res = await fetch('/admin/session', { credentials: 'same-origin', headers: { accept: 'application/json' } });
  if (res.status === 401) return undefined;
  if (!res.ok) throw new Error(`/admin/session: ${res.status}`);
  return await res.json() as SessionInfo;
}

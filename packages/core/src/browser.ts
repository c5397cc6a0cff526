import type { BrowserCookie, BrowserRequest } from './ports/identity.js';

/**
 * readBrowserRequest is what an identity adapter may read of a browser's request: its URL (resolved against
 * server_url), its method and its cookies (URI-decoded where they were encoded).
 */
export function readBrowserRequest(req: { originalUrl: string; method: string; cookieHeader: string }, serverUrl: string): BrowserRequest {
  const cookies: Record<string, string> = {};
  for (const part of req.cookieHeader.split(';')) {
    const i = part.indexOf('=');
    if (i <= 0) continue;
    const name = part.slice(0, i).trim();
    const value = part.slice(i + 1).trim();
    try { cookies[name] = decodeURIComponent(value); } catch { cookies[name] = value; }
  }
  return { url: new URL(req.originalUrl, serverUrl), method: req.method, cookies };
}

/** browserCookieLines are the Set-Cookie values of an adapter's cookies: HttpOnly, SameSite=Lax, Secure under https. */
export function browserCookieLines(cookies: readonly BrowserCookie[], secure: boolean): string[] {
  return cookies.map((c) => [
    `${c.name}=${encodeURIComponent(c.value)}`, `Path=${c.path ?? '/'}`, `Max-Age=${Math.floor(c.maxAgeMs / 1000)}`,
    'HttpOnly', 'SameSite=Lax', ...(secure ? ['Secure'] : []),
  ].join('; '));
}

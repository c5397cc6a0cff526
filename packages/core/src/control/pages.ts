import type { PendingRegistration } from '../domain.js';

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** registrationExpiredPage is the register page for an unknown or expired registration key (served with 404). */
export function registrationExpiredPage(): string {
  return `<!doctype html><title>Headway</title><h1>Registration expired</h1><p>This registration link is unknown or has expired. Run <code>tailscale up</code> again on the device to get a new one.</p>`;
}

/**
 * registerPage is the page an interactive login's AuthURL shows: the command an
 * administrator runs to approve the device. Everything the device sent is escaped.
 */
export function registerPage(key: string, pending: PendingRegistration): string {
  const host = escapeHtml(String((pending.hostinfo as { Hostname?: string } | null)?.Hostname ?? 'a device'));
  return `<!doctype html><meta charset="utf-8"><title>Headway: register ${host}</title>
<h1>Register ${host}</h1>
<p>An administrator can add this device to the network by running, on the Headway server:</p>
<pre><code>headway auth register --auth-id ${escapeHtml(key)} --user USERNAME</code></pre>
<p>Replace <code>USERNAME</code> with the user who will own the device. This link expires at ${pending.expiresAt.toISOString()}.</p>`;
}

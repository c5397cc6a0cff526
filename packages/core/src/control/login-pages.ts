/**
 * Pages a person sees while logging a device in through an identity provider.
 * Plain functions returning HTML; every value is escaped. (They are meant to move
 * onto the shared page template, control/pages.ts, once it exists.)
 */

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Headway: ${escapeHtml(title)}</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;line-height:1.5}button{font-size:1rem;padding:.5rem 1.5rem}</style>
</head><body><h1>${escapeHtml(title)}</h1>
${body}
</body></html>`;
}

/** confirmLoginPage asks the person to confirm the device joins as them (a link alone never registers a device). */
export function confirmLoginPage(o: { hostname: string; user: string; email: string; token: string; action: string; expiresAt: Date }): string {
  const who = o.email && o.email !== o.user ? `${o.user} (${o.email})` : o.user;
  return page(`Log in ${o.hostname}?`, `<p>You are signed in as <strong>${escapeHtml(who)}</strong>.</p>
<p>Confirm only if you started this login on the device <strong>${escapeHtml(o.hostname)}</strong> yourself: it will join the network as you.</p>
<form method="post" action="${escapeHtml(o.action)}">
<input type="hidden" name="token" value="${escapeHtml(o.token)}">
<button type="submit">Log in ${escapeHtml(o.hostname)}</button>
</form>
<p><small>This confirmation expires at ${escapeHtml(o.expiresAt.toISOString())}.</small></p>`);
}

/** loginDonePage tells the person the device is registered. */
export function loginDonePage(o: { hostname: string; user: string; node: string }): string {
  return page('Device logged in', `<p><strong>${escapeHtml(o.hostname)}</strong> is logged in as <strong>${escapeHtml(o.user)}</strong> and known as <code>${escapeHtml(o.node)}</code>.</p>
<p>You can close this page.</p>`);
}

/** loginRefusedPage says why a login was refused (not allowed, unverified e-mail, expired, provider error). */
export function loginRefusedPage(reason: string): string {
  return page('Login refused', `<p>${escapeHtml(reason)}</p>
<p>Nothing was registered. If you think this is wrong, ask the administrator of this network. To try again, run <code>tailscale up</code> on the device for a new link.</p>`);
}

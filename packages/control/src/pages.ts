import { createHash } from 'node:crypto';

/*
 * The few HTML pages the control server shows a person (the register page a device's
 * `tailscale up` opens, its expired variant, and the identity-provider login pages). One template:
 * readable from a 360 px phone to a desktop, light or dark as the device prefers, and
 * self-contained: the CSS and the one small script are inline and allowed by their
 * hashes in a Content-Security-Policy that allows nothing else (no external asset, no
 * other script, no form, no framing).
 */

/** escapeHtml makes text safe inside HTML elements and double-quoted attributes. */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

const STYLE = `
:root{color-scheme:light dark;--bg:#f4f6f8;--fg:#1b1f24;--muted:#57606a;--card:#fff;--line:#d0d7de;--accent:#0b62d6;--code-bg:#0d1117;--code-fg:#e6edf3}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;--card:#161b22;--line:#30363d;--accent:#4493f8;--code-bg:#010409;--code-fg:#e6edf3}}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%;text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--fg);font:16px/1.55 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",sans-serif}
main{max-width:42rem;margin:0 auto;padding:1.25rem 1rem 2rem}
.brand{margin:0 0 1rem;font-weight:600;letter-spacing:.02em;color:var(--muted)}
.card{background:var(--card);border:1px solid var(--line);border-radius:12px;padding:1.25rem}
h1{font-size:1.5rem;line-height:1.25;margin:0 0 .75rem;overflow-wrap:anywhere}
p{margin:.75rem 0}
h2{font-size:1.15rem;line-height:1.3;margin:1.75rem 0 .5rem}
li{margin:.4rem 0}
.muted{color:var(--muted);font-size:.925rem}
code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:.925em;overflow-wrap:anywhere}
.command{margin:1rem 0}
.command pre{margin:0;background:var(--code-bg);color:var(--code-fg);border:1px solid var(--line);border-radius:8px;padding:.875rem 1rem;white-space:pre-wrap;overflow-wrap:anywhere;user-select:all;-webkit-user-select:all}
.command button{margin-top:.5rem;font:inherit;font-size:.925rem;padding:.45rem .9rem;border-radius:8px;border:1px solid var(--accent);background:transparent;color:var(--accent);cursor:pointer}
.command button:focus-visible{outline:2px solid var(--accent);outline-offset:2px}
form{margin:1.25rem 0 .5rem}
.primary{font:inherit;font-weight:600;padding:.6rem 1.4rem;border-radius:8px;border:1px solid var(--accent);background:var(--accent);color:#fff;cursor:pointer;max-width:100%;overflow-wrap:anywhere}
.primary:focus-visible{outline:2px solid var(--accent);outline-offset:2px}
@media (min-width:40rem){main{padding-top:3rem}.card{padding:2rem}h1{font-size:1.75rem}}
`.trim();

/** SCRIPT shows each copy button (hidden without script) and copies its command, or selects it where the clipboard is refused. */
const SCRIPT = `
for (const b of document.querySelectorAll('button[data-copy]')) {
  const code = document.getElementById(b.dataset.copy);
  b.hidden = false;
  b.addEventListener('click', async () => {
    try { await navigator.clipboard.writeText(code.textContent); b.textContent = 'Copied'; }
    catch { const r = document.createRange(); r.selectNodeContents(code); getSelection().removeAllRanges(); getSelection().addRange(r); b.textContent = 'Selected: copy with Ctrl+C'; }
  });
}
`.trim();

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text, 'utf8').digest('base64')}'`;

/** PAGE_CSP allows exactly the inline style and script above, by hash, and nothing else. */
export const PAGE_CSP = [
  "default-src 'none'", `style-src ${sha256(STYLE)}`, `script-src ${sha256(SCRIPT)}`,
  "img-src 'none'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
].join('; ');

/** FORM_PAGE_CSP is PAGE_CSP for a page whose form posts back to this server (the login confirmation). */
export const FORM_PAGE_CSP = PAGE_CSP.replace("form-action 'none'", "form-action 'self'");

/**
 * PAGE_HEADERS go with every page: the CSP, no MIME sniffing, no framing, and no
 * Referer (a register URL carries its registration id), and no caching of a page
 * that is only good for minutes.
 */
export const PAGE_HEADERS: Readonly<Record<string, string>> = {
  'Content-Security-Policy': PAGE_CSP,
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
};

/** STATIC_PAGE_HEADERS go with a page rendered without the script (`script: false`): its CSP runs no script at all. */
export const STATIC_PAGE_HEADERS: Readonly<Record<string, string>> = {
  ...PAGE_HEADERS,
  'Content-Security-Policy': PAGE_CSP.replace(/script-src [^;]+/, "script-src 'none'"),
};

/**
 * renderPage wraps `body` (HTML the caller escaped) in the shared template; `title` is text. `script: false`
 * leaves the copy-button script out (commands stay selectable with one tap), for STATIC_PAGE_HEADERS.
 */
export function renderPage(page: { title: string; body: string; script?: boolean }): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<meta name="referrer" content="no-referrer">
<title>${escapeHtml(page.title)}</title>
<style>${STYLE}</style>
</head>
<body>
<main>
<p class="brand">Headway</p>
<div class="card">
${page.body}
</div>
</main>
${page.script === false ? '' : `<script>${SCRIPT}</script>\n`}</body>
</html>
`;
}

/** commandBlock shows a shell command in a block selected whole by one tap, with a copy button. */
export function commandBlock(id: string, command: string): string {
  return `<div class="command"><pre id="${escapeHtml(id)}"><code>${escapeHtml(command)}</code></pre>`
    + `<button type="button" data-copy="${escapeHtml(id)}" hidden>Copy command</button></div>`;
}

/**
 * approveCommand is the command an administrator runs to let a waiting device in;
 * the register page shows it with the user left for them to fill in.
 */
export function approveCommand(key: string): string {
  return `headway auth register --auth-id ${key} --user USERNAME`;
}

/** registerPage is what `tailscale up` sends a person to while the device waits for approval. */
export function registerPage(p: { hostname: string; key: string; expiresAt: Date }): string {
  const host = escapeHtml(p.hostname);
  return renderPage({
    title: `Headway: register ${p.hostname}`,
    body: `<h1>Register ${host}</h1>
<p>This device is waiting to join the network. An administrator adds it by running, on the Headway server:</p>
${commandBlock('approve-command', approveCommand(p.key))}
<p>Replace <code>USERNAME</code> with the user who will own the device. The device connects by itself once approved.</p>
<p class="muted">This link expires at <time datetime="${p.expiresAt.toISOString()}">${p.expiresAt.toISOString()}</time>.</p>`,
  });
}

/** homePage answers `GET /`: what this server is, how a device joins, and where the API documentation and the health check are. */
export function homePage(serverUrl: string): string {
  return renderPage({
    title: 'Headway',
    body: `<h1>Headway coordination server</h1>
<p>Devices join this network with the Tailscale client:</p>
${commandBlock('join-command', `tailscale up --login-server ${serverUrl}`)}
<p>Administrators use the <code>headway</code> command on the server, or the HTTP API: <a href="/api/v1/docs">API documentation</a>. Health check: <a href="/health"><code>/health</code></a>.</p>`,
  });
}

/** expiredRegistrationPage answers a register link that is unknown or past its time. */
export function expiredRegistrationPage(): string {
  return renderPage({
    title: 'Headway: registration expired',
    body: `<h1>Registration expired</h1>
<p>This registration link is unknown, has expired, or was already approved or rejected. If the device is not connected, run <code>tailscale up</code> again on it to get a new one.</p>`,
  });
}

/** approvedRegistrationPage answers a register link whose login was approved (a person reloading the page). */
export function approvedRegistrationPage(o: { hostname: string; node: string; owner: string }): string {
  return renderPage({
    title: `Headway: ${o.hostname} approved`,
    body: `<h1>Device approved</h1>
<p><strong>${escapeHtml(o.hostname)}</strong> was approved and is registered as <code>${escapeHtml(o.node)}</code>, owned by <strong>${escapeHtml(o.owner)}</strong>. It connects by itself; you can close this page.</p>`,
  });
}

/** rejectedRegistrationPage answers a register link whose login an administrator rejected. */
export function rejectedRegistrationPage(): string {
  return renderPage({
    title: 'Headway: login rejected',
    body: `<h1>Login rejected</h1>
<p>An administrator rejected this login; the device was not registered. Run <code>tailscale up</code> on it again to ask anew.</p>`,
  });
}

/** FORM_PAGE_HEADERS are PAGE_HEADERS for a page with a form that posts to this server. */
export const FORM_PAGE_HEADERS: Readonly<Record<string, string>> = { ...PAGE_HEADERS, 'Content-Security-Policy': FORM_PAGE_CSP };

/** confirmLoginPage asks the person to confirm the device joins as them (a link alone never registers a device). */
export function confirmLoginPage(o: { hostname: string; user: string; email: string; token: string; action: string; expiresAt: Date }): string {
  const who = o.email && o.email !== o.user ? `${o.user} (${o.email})` : o.user;
  return renderPage({
    title: `Headway: log in ${o.hostname}?`,
    body: `<h1>Log in ${escapeHtml(o.hostname)}?</h1>
<p>You are signed in as <strong>${escapeHtml(who)}</strong>.</p>
<p>Confirm only if you started this login on the device <strong>${escapeHtml(o.hostname)}</strong> yourself: it will join the network as you.</p>
<form method="post" action="${escapeHtml(o.action)}">
<input type="hidden" name="token" value="${escapeHtml(o.token)}">
<button class="primary" type="submit">Log in ${escapeHtml(o.hostname)}</button>
</form>
<p class="muted">This confirmation expires at <time datetime="${o.expiresAt.toISOString()}">${o.expiresAt.toISOString()}</time>.</p>`,
  });
}

/** loginDonePage tells the person the device is registered. */
export function loginDonePage(o: { hostname: string; user: string; node: string }): string {
  return renderPage({
    title: 'Headway: device logged in',
    body: `<h1>Device logged in</h1>
<p><strong>${escapeHtml(o.hostname)}</strong> is logged in as <strong>${escapeHtml(o.user)}</strong> and known as <code>${escapeHtml(o.node)}</code>.</p>
<p>You can close this page.</p>`,
  });
}

/** loginRefusedPage says why a login was refused (not allowed, unverified e-mail, expired, provider error). */
export function loginRefusedPage(reason: string): string {
  return renderPage({
    title: 'Headway: login refused',
    body: `<h1>Login refused</h1>
<p>${escapeHtml(reason)}</p>
<p>Nothing was registered. If you think this is wrong, ask the administrator of this network. To try again, run <code>tailscale up</code> on the device for a new link.</p>`,
  });
}

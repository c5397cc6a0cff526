import type { State } from '@headway/core';
import { commandBlock, escapeHtml, renderPage } from './pages.js';
import type { SshCheck } from './ssh-check.js';

/*
 * The pages of an SSH check (`check` rules of the SSH policy): what the link the SSH
 * client printed shows, the confirmation a signed-in owner submits, and the outcomes.
 */

/** SshCheckView names the two devices and the account of a check for a page. */
export interface SshCheckView { src: string; owner: string; dst: string; localUser: string }

/** sshCheckView reads a check's devices and the source's owner from the State. */
export function sshCheckView(state: State, c: SshCheck): SshCheckView {
  const src = state.nodes.get(c.src);
  const dst = state.nodes.get(c.dst);
  const owner = !src ? 'nobody' : src.tags.length ? src.tags.join(', ') : (src.userId !== null ? state.users.get(src.userId)?.name : undefined) ?? 'nobody';
  return { src: src?.givenName ?? `node ${c.src}`, owner, dst: dst?.givenName ?? `node ${c.dst}`, localUser: c.localUser || 'the mapped user' };
}

function what(v: SshCheckView): string {
  return `<strong>${escapeHtml(v.src)}</strong> (${escapeHtml(v.owner)}) is connecting to <strong>${escapeHtml(v.dst)}</strong> as <code>${escapeHtml(v.localUser)}</code>`;
}

function expiry(at: Date): string {
  return `<p class="muted">This check expires at <time datetime="${at.toISOString()}">${at.toISOString()}</time>.</p>`;
}

/** sshCheckPage is the link of a waiting check without an identity provider: an administrator approves it on the server. */
export function sshCheckPage(state: State, c: SshCheck, expiresAt: Date): string {
  return renderPage({
    title: 'Headway: SSH check',
    body: `<h1>SSH connection waiting for approval</h1>
<p>${what(sshCheckView(state, c))}. The SSH policy asks for a check first. An administrator lets it in by running, on the Headway server:</p>
${commandBlock('approve-command', `headway auth approve --auth-id ${c.id}`)}
<p>or refuses it with:</p>
${commandBlock('reject-command', `headway auth reject --auth-id ${c.id}`)}
${expiry(expiresAt)}`,
  });
}

/** sshCheckConfirmPage asks the signed-in owner to let the connection in (a link alone never approves one). */
export function sshCheckConfirmPage(o: { view: SshCheckView; user: string; token: string; action: string; expiresAt: Date }): string {
  return renderPage({
    title: `Headway: allow SSH to ${o.view.dst}?`,
    body: `<h1>Allow SSH to ${escapeHtml(o.view.dst)}?</h1>
<p>You are signed in as <strong>${escapeHtml(o.user)}</strong>. ${what(o.view)}.</p>
<p>Allow it only if you started this SSH connection yourself.</p>
<form method="post" action="${escapeHtml(o.action)}">
<input type="hidden" name="token" value="${escapeHtml(o.token)}">
<button class="primary" type="submit">Allow SSH to ${escapeHtml(o.view.dst)}</button>
</form>
${expiry(o.expiresAt)}`,
  });
}

/** sshCheckDonePage tells the person the connection goes through. */
export function sshCheckDonePage(o: { view: SshCheckView; user: string }): string {
  return renderPage({
    title: 'Headway: SSH allowed',
    body: `<h1>SSH connection allowed</h1>
<p>${escapeHtml(o.user)} approved: ${what(o.view)}. The session continues in your terminal; you can close this page.</p>`,
  });
}

/** sshCheckRefusedPage says why the check could not be approved here. */
export function sshCheckRefusedPage(reason: string): string {
  return renderPage({
    title: 'Headway: SSH check refused',
    body: `<h1>SSH check not approved</h1>
<p>${escapeHtml(reason)}</p>
<p>The connection still waits until it expires. To try again, connect again for a new link.</p>`,
  });
}

/** sshCheckGonePage answers a check link that is malformed, unknown, expired or already answered. */
export function sshCheckGonePage(): string {
  return renderPage({
    title: 'Headway: SSH check expired',
    body: `<h1>SSH check expired</h1>
<p>This link is unknown, has expired, or its connection was already answered. Connect again with SSH for a new one.</p>`,
  });
}

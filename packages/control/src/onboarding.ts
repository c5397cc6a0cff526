import { randomUUID } from 'node:crypto';
import { commandBlock, escapeHtml, renderPage } from './pages.js';

/*
 * The onboarding pages a person opens on a device to point its Tailscale client at this server (/apple,
 * /windows, the paths headscale serves), and the Apple configuration profiles /apple links to. The pages carry
 * no script (STATIC_PAGE_HEADERS); every command is shown whole, with the server's URL in it.
 */

/** APPLE_PLATFORMS maps each /apple/{platform} to the Tailscale app's preference domain the profile configures. */
export const APPLE_PLATFORMS = {
  ios: { domain: 'io.tailscale.ipn.ios', name: 'Tailscale for iOS, iPadOS and tvOS' },
  'macos-app-store': { domain: 'io.tailscale.ipn.macos', name: 'Tailscale for macOS from the App Store' },
  'macos-standalone': { domain: 'io.tailscale.ipn.macsys', name: 'Tailscale for macOS, standalone download' },
} as const;

export type ApplePlatform = keyof typeof APPLE_PLATFORMS;

export function isApplePlatform(p: string): p is ApplePlatform {
  return Object.hasOwn(APPLE_PLATFORMS, p);
}

const APP_STORE = 'https://apps.apple.com/app/tailscale/id1470499037';
const MAC_STANDALONE = 'https://pkgs.tailscale.com/stable/#macos';
const WINDOWS_DOWNLOAD = 'https://tailscale.com/download/windows';

const link = (href: string, text: string) => `<a href="${escapeHtml(href)}">${escapeHtml(text)}</a>`;

/** applePage answers GET /apple: how to point Tailscale on an iPhone, iPad, Mac or Apple TV at this server. */
export function applePage(serverUrl: string): string {
  const url = escapeHtml(serverUrl);
  return renderPage({
    title: 'Headway: Apple devices',
    script: false,
    body: `<h1>Connect an Apple device</h1>
<p>This network's coordination server is <code>${url}</code>. Point the Tailscale app at it once; the app then logs in here instead of at Tailscale's own service.</p>
<h2>iPhone and iPad</h2>
<ol>
<li>Install Tailscale from the ${link(APP_STORE, 'App Store')}.</li>
<li>Open it, tap the account button (top right), then the menu (…) and choose <strong>Use custom coordination server</strong>.</li>
<li>Enter <code>${url}</code> and log in.</li>
</ol>
<h2>Mac</h2>
<p>From a terminal, with either app installed:</p>
${commandBlock('mac-login', `tailscale login --login-server ${serverUrl}`)}
<p>Or in the app: hold <kbd>Option</kbd> and click the Tailscale icon in the menu bar, open <strong>Debug</strong>, choose <strong>Custom Login Server</strong> and <strong>Add Account…</strong>, enter <code>${url}</code> and log in in the browser window that opens.</p>
<p>To make this server the app's default, install a configuration profile (download it, open it, then approve it in System Settings, <strong>Privacy &amp; Security</strong> › <strong>Profiles</strong>). Read a profile before installing it.</p>
<ul>
<li>${link('/apple/macos-app-store', 'Profile for the App Store app')}</li>
<li>${link('/apple/macos-standalone', 'Profile for the standalone app')} (${link(MAC_STANDALONE, 'downloaded from Tailscale')})</li>
</ul>
<p>The same setting without a profile, then restart Tailscale:</p>
${commandBlock('mac-defaults-app-store', `defaults write io.tailscale.ipn.macos ControlURL ${serverUrl}`)}
<p class="muted">That is for the App Store app; for the standalone app:</p>
${commandBlock('mac-defaults-standalone', `defaults write io.tailscale.ipn.macsys ControlURL ${serverUrl}`)}
<h2>iPhone, iPad or Apple TV managed by a profile</h2>
<p>${link('/apple/ios', 'The iOS profile')} sets this server for Tailscale on iOS, iPadOS and tvOS (install it through your device management, or open it on the device).</p>
<h2>Apple TV</h2>
<ol>
<li>Install Tailscale from the App Store on the Apple TV.</li>
<li>In the Apple TV's <strong>Settings</strong> › <strong>Apps</strong> › <strong>Tailscale</strong>, set <strong>Alternate coordination server URL</strong> to <code>${url}</code>.</li>
<li>Open Tailscale, install the VPN configuration it asks for, and log in by scanning the code it shows.</li>
</ol>`,
  });
}

/** windowsPage answers GET /windows: how to point Tailscale for Windows at this server. */
export function windowsPage(serverUrl: string): string {
  return renderPage({
    title: 'Headway: Windows',
    script: false,
    body: `<h1>Connect a Windows PC</h1>
<p>This network's coordination server is <code>${escapeHtml(serverUrl)}</code>.</p>
<ol>
<li>Install ${link(WINDOWS_DOWNLOAD, 'Tailscale for Windows')}.</li>
<li>Open Command Prompt or PowerShell and log in to this server:</li>
</ol>
${commandBlock('windows-login', `tailscale login --login-server ${serverUrl}`)}
<p>To make this server the default for every user of the PC (an administrator's prompt; Tailscale reads it as a system policy):</p>
${commandBlock('windows-policy', `reg add "HKLM\\SOFTWARE\\Policies\\Tailscale" /v LoginURL /t REG_SZ /d "${serverUrl}" /f`)}`,
  });
}

const xml = (s: string) => s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c]!);

/**
 * appleProfile is the configuration profile (a property list, application/x-apple-aspen-config) that sets the
 * Tailscale app of `platform` to log in at `serverUrl`. Fresh UUIDs each time, as a profile needs unique ones.
 */
export function appleProfile(platform: ApplePlatform, serverUrl: string, uuid: () => string = randomUUID): string {
  const p = APPLE_PLATFORMS[platform];
  const id = `net.headway.${platform}`;
  return `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>PayloadType</key><string>Configuration</string>
  <key>PayloadVersion</key><integer>1</integer>
  <key>PayloadIdentifier</key><string>${id}</string>
  <key>PayloadUUID</key><string>${uuid()}</string>
  <key>PayloadDisplayName</key><string>Headway login server</string>
  <key>PayloadDescription</key><string>${xml(`${p.name} logs in at ${serverUrl}`)}</string>
  <key>PayloadRemovalDisallowed</key><false/>
  <key>PayloadContent</key>
  <array>
    <dict>
      <key>PayloadType</key><string>${p.domain}</string>
      <key>PayloadVersion</key><integer>1</integer>
      <key>PayloadIdentifier</key><string>${id}.control-url</string>
      <key>PayloadUUID</key><string>${uuid()}</string>
      <key>PayloadEnabled</key><true/>
      <key>ControlURL</key><string>${xml(serverUrl)}</string>
    </dict>
  </array>
</dict>
</plist>
`;
}

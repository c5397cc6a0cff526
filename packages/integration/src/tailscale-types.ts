/** Types of the Tailscale client harness (tailscale.ts): installs, CLI results, parsed status and options. */

/** TailscaleBinaries is one installed client version: `<home>/<version>/{tailscale,tailscaled}`. */
export interface TailscaleBinaries {
  /** version is the install directory name, e.g. "v1.102.5". */
  version: string;
  tailscale: string;
  tailscaled: string;
}

/** CommandResult is the outcome of one finished (or timed-out) CLI run. */
export interface CommandResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
}

/** TailscalePeerStatus is the subset of ipnstate.PeerStatus the tests look at; the rest is kept. */
export interface TailscalePeerStatus {
  ID?: string;
  PublicKey?: string;
  HostName?: string;
  DNSName?: string;
  OS?: string;
  UserID?: number;
  TailscaleIPs?: string[] | null;
  AllowedIPs?: string[] | null;
  PrimaryRoutes?: string[] | null;
  Tags?: string[] | null;
  Online?: boolean;
  ExitNode?: boolean;
  ExitNodeOption?: boolean;
  Relay?: string;
  CurAddr?: string;
  [field: string]: unknown;
}

/** TailscaleStatus is parsed `tailscale status --json` (ipnstate.Status); unknown fields are kept. */
export interface TailscaleStatus {
  Version?: string;
  BackendState: string;
  AuthURL?: string;
  TailscaleIPs?: string[] | null;
  Self?: TailscalePeerStatus;
  Peer?: Record<string, TailscalePeerStatus> | null;
  Health?: string[] | null;
  MagicDNSSuffix?: string;
  CurrentTailnet?: { Name?: string; MagicDNSSuffix?: string; MagicDNSEnabled?: boolean } | null;
  User?: Record<string, unknown> | null;
  [field: string]: unknown;
}

/** NetworkMapJson is parsed `tailscale debug netmap` (netmap.NetworkMap as JSON); unknown fields are kept. */
export interface NetworkMapJson {
  SelfNode?: Record<string, unknown>;
  Peers?: Array<Record<string, unknown>> | null;
  DERPMap?: Record<string, unknown> | null;
  PacketFilter?: unknown;
  Domain?: string;
  [field: string]: unknown;
}

/** StartOptions configures {@link TailscaleDevice.start}. */
export interface StartOptions {
  /** name labels the temp directory and error messages; letters, digits, '-' and '_' only. */
  name: string;
  /** version selects an installed client ("v1.80.3" or "1.80.3"); default: the newest installed. */
  version?: string;
  /** env adds or overrides daemon environment variables (after the network-isolation knobs). */
  env?: Record<string, string>;
  /** extraDaemonArgs are appended to the tailscaled command line. */
  extraDaemonArgs?: string[];
  /** startTimeoutMs bounds how long to wait for the LocalAPI socket to answer; default 20 s. */
  startTimeoutMs?: number;
}

/** UpOptions configures {@link TailscaleDevice.up}. */
export interface UpOptions {
  /** loginServer is the control URL, e.g. "http://127.0.0.1:8080" (HTTP on loopback: no HTTPS fallback). */
  loginServer: string;
  /** authKey logs in without interaction; without it `up` returns the interactive AuthURL. */
  authKey?: string;
  hostname: string;
  advertiseRoutes?: string[];
  advertiseExitNode?: boolean;
  acceptRoutes?: boolean;
  /** advertiseTags, e.g. ["tag:server"]. */
  advertiseTags?: string[];
  /** reset passes --reset so flags not given revert to defaults (needed for a second `up` with other flags). */
  reset?: boolean;
  extraArgs?: string[];
  /** timeoutMs bounds the whole call: authkey login until Running, or interactive until an AuthURL shows; default 30 s. */
  timeoutMs?: number;
}

/** UpResult is what `tailscale up` produced; authUrl is set for interactive logins. */
export interface UpResult {
  authUrl?: string;
  stdout: string;
  stderr: string;
  /** exited settles when an interactive `tailscale up` (still waiting after printing its AuthURL) ends, e.g. after a rejected login. */
  exited?: Promise<CommandResult>;
}

/** PingOptions configures {@link TailscaleDevice.ping}. */
export interface PingOptions {
  /** tsmp pings through WireGuard at the TSMP layer instead of disco. */
  tsmp?: boolean;
  /** icmp pings with ICMP through WireGuard. */
  icmp?: boolean;
  /** count is the maximum number of pings (`-c`); default 1. */
  count?: number;
  /** timeoutMs is the per-ping timeout; default 5 s. */
  timeoutMs?: number;
  /** untilDirect keeps pinging until a direct path is found (the CLI's default); default false. */
  untilDirect?: boolean;
}

/** PingResult is a successful `tailscale ping`; via is "DERP(<region>)" or the direct ip:port of the last pong. */
export interface PingResult {
  output: string;
  via?: string;
}

/** TapLike is the part of a tap test that {@link requireTailscale} needs (tap's `t.skip` defines a skipped subtest). */
export interface TapLike {
  skip(name: string, cb: () => void): unknown;
  fail(message: string): unknown;
  comment(...args: unknown[]): unknown;
}

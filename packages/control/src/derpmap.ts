import { readFile } from 'node:fs/promises';
import YAML from 'yaml';
import type { HeadwayConfig } from '@headway/core';
import { parseHostPort } from '@headway/core';
import type { Logger } from '@headway/core';

export interface DerpRegion { RegionID: number; RegionCode: string; RegionName: string; Nodes: Record<string, unknown>[]; [k: string]: unknown }
export interface DerpMap { Regions: Record<string, DerpRegion>; [k: string]: unknown }

const REGION_FIELDS = ['RegionID', 'RegionCode', 'RegionName', 'Latitude', 'Longitude', 'Avoid', 'NoMeasureNoHome', 'Nodes'];
const NODE_FIELDS = ['Name', 'RegionID', 'HostName', 'CertName', 'IPv4', 'IPv6', 'STUNPort', 'STUNOnly', 'DERPPort', 'CanPort80', 'InsecureForTests', 'STUNTestIP'];

/** Go decodes JSON (and headscale's YAML) field names case-insensitively; normalize to tailcfg names. */
function normalize(obj: Record<string, unknown>, fields: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    const name = fields.find((f) => f.toLowerCase() === k.toLowerCase().replace(/_/g, '')) ?? k;
    out[name] = v;
  }
  return out;
}

/** parseDerpMap reads a DERP map document (JSON or YAML, any key case) into tailcfg form. */
export function parseDerpMap(text: string, origin: string): DerpMap {
  let doc: unknown;
  try {
    doc = YAML.parse(text);
  } catch (err) {
    throw new Error(`${origin}: not valid YAML or JSON: ${(err as Error).message}`);
  }
  const root = doc && typeof doc === 'object' ? Object.fromEntries(Object.entries(doc).map(([k, v]) => [k.toLowerCase(), v])) : {};
  const regions = root.regions;
  if (!regions || typeof regions !== 'object') throw new Error(`${origin}: expected a "Regions" mapping of region id to region`);
  const out: DerpMap = { Regions: {} };
  for (const [id, raw] of Object.entries(regions as Record<string, unknown>)) {
    if (!raw || typeof raw !== 'object') throw new Error(`${origin}: region ${id} must be a mapping`);
    const r = normalize(raw as Record<string, unknown>, REGION_FIELDS);
    const rid = Number(r.RegionID ?? id);
    if (!Number.isInteger(rid) || rid <= 0) throw new Error(`${origin}: region ${id} has no valid RegionID`);
    const nodes = Array.isArray(r.Nodes) ? r.Nodes.map((n) => normalize(n as Record<string, unknown>, NODE_FIELDS)) : [];
    if (!nodes.length) throw new Error(`${origin}: region ${rid} has no Nodes`);
    out.Regions[String(rid)] = { ...r, RegionID: rid, RegionCode: String(r.RegionCode ?? ''), RegionName: String(r.RegionName ?? ''), Nodes: nodes.map((n) => ({ ...n, RegionID: rid })) };
  }
  return out;
}

/**
 * CERT_PIN_MIN_CAPABILITY_VERSION: Tailscale 1.82 (capability version 115) is
 * the first release whose DERP client reads CertName "sha256-raw:<hex>" as a
 * pinned self-signed certificate; 1.80 (113) takes it for a host name and fails
 * every TLS handshake with the relay.
 */
export const CERT_PIN_MIN_CAPABILITY_VERSION = 115;

/** RelayTlsEndpoint is the relay's own TLS port and the SHA-256 of its self-signed certificate. */
export interface RelayTlsEndpoint { port: number; certSha256: string }

/**
 * relayNeedsOwnTls: Tailscale clients dial DERP only over TLS (plain HTTP needs
 * TS_DEBUG_USE_DERP_HTTP=1), so with a plain-http server_url and no
 * tls_cert_path the embedded relay gets a TLS port of its own.
 */
export function relayNeedsOwnTls(config: HeadwayConfig): boolean {
  return config.derp.server.enabled && new URL(config.server_url).protocol === 'http:' && !config.tls_cert_path;
}

/** relayHostName is the DERP node's HostName: the server_url host, which the relay certificate must name. */
export function relayHostName(config: HeadwayConfig): string {
  return new URL(config.server_url).hostname.replace(/^\[|\]$/g, '');
}

/**
 * embeddedRegion describes the built-in relay as clients must dial it. Host and
 * port come from server_url, or with relayTls from the relay's own TLS port:
 * clients that can pin (pinCapable) get the certificate's sha256-raw CertName;
 * older ones get InsecureForTests, i.e. TLS without certificate checks.
 */
export function embeddedRegion(config: HeadwayConfig, boundStunPort?: number, relayTls?: RelayTlsEndpoint, pinCapable = true): DerpRegion {
  const url = new URL(config.server_url);
  const https = url.protocol === 'https:';
  const port = Number(url.port || (https ? 443 : 80));
  const stun = config.derp.server.stun_listen_addr ? parseHostPort(config.derp.server.stun_listen_addr) : undefined;
  const s = config.derp.server;
  const node: Record<string, unknown> = {
    Name: String(s.region_id), RegionID: s.region_id, HostName: relayHostName(config),
    DERPPort: relayTls ? relayTls.port : port, STUNPort: boundStunPort ?? (stun ? stun.port : -1), CanPort80: !relayTls && !https && port === 80,
  };
  if (s.ipv4) node.IPv4 = s.ipv4;
  if (s.ipv6) node.IPv6 = s.ipv6;
  if (relayTls && pinCapable) node.CertName = `sha256-raw:${relayTls.certSha256}`;
  // Plain HTTP (no relayTls) is usable only by clients in test mode (TS_DEBUG_USE_DERP_HTTP=1).
  else if (!https) node.InsecureForTests = true;
  return { RegionID: s.region_id, RegionCode: s.region_code, RegionName: s.region_name, Nodes: [node] };
}

/**
 * DerpMapSource merges `derp.urls`, `derp.paths` and the embedded region by region
 * id (later sources win), refreshes them periodically, and reports changes.
 */
export class DerpMapSource {
  private current: DerpMap = { Regions: {} };
  /** legacy is current with the embedded relay as clients that cannot pin its certificate must see it. */
  private legacy: DerpMap = this.current;
  private currentJson = '{"Regions":{}}';
  private legacyJson = this.currentJson;
  private timer?: NodeJS.Timeout;
  /** stunPort is the port STUN actually bound (stun_listen_addr may ask for port 0). */
  stunPort?: number;
  /** relayTls is the embedded relay's own TLS port, when it has one (see relayNeedsOwnTls). */
  private relayTls?: RelayTlsEndpoint;
  private initialized = false;

  constructor(private readonly config: HeadwayConfig, private readonly logger: Logger, private readonly onChange: () => void) {}

  async init(): Promise<void> {
    this.publish(await this.build(true));
    this.initialized = true;
    const d = this.config.derp;
    if (d.auto_update_enabled && (d.urls.length || d.paths.length) && d.update_frequency > 0) {
      this.timer = setInterval(() => void this.refresh(), d.update_frequency);
      this.timer.unref();
    }
  }

  /** map is the DERP map as clients that can pin a certificate (Tailscale 1.82+) receive it. */
  get map(): DerpMap { return this.current; }

  /** mapFor is the DERP map for a client of the given capability version. */
  mapFor(capVersion: number | undefined): DerpMap {
    return capVersion !== undefined && capVersion < CERT_PIN_MIN_CAPABILITY_VERSION ? this.legacy : this.current;
  }

  /** jsonFor is mapFor serialized once per change, for map responses. */
  jsonFor(capVersion: number | undefined): string {
    return capVersion !== undefined && capVersion < CERT_PIN_MIN_CAPABILITY_VERSION ? this.legacyJson : this.currentJson;
  }

  /**
   * setRelayTls records the relay's TLS port and certificate; after init it
   * republishes the map at once (a renewed certificate must reach devices
   * without waiting for a refresh of derp.urls).
   */
  setRelayTls(endpoint: RelayTlsEndpoint): void {
    this.relayTls = endpoint;
    if (!this.initialized) return;
    const s = this.config.derp.server;
    if (!(s.enabled && s.automatically_add_embedded_derp_region)) return;
    const next: DerpMap = { ...this.current, Regions: { ...this.current.Regions } };
    const r = embeddedRegion(this.config, this.stunPort, this.relayTls);
    next.Regions[String(r.RegionID)] = r;
    this.publish(next);
    this.onChange();
  }

  /** publish installs a new map and its legacy variant, serialized once. */
  private publish(next: DerpMap): void {
    this.current = next;
    this.currentJson = JSON.stringify(next);
    const s = this.config.derp.server;
    if (this.relayTls && s.enabled && s.automatically_add_embedded_derp_region) {
      const r = embeddedRegion(this.config, this.stunPort, this.relayTls, false);
      this.legacy = { ...next, Regions: { ...next.Regions, [String(r.RegionID)]: r } };
      this.legacyJson = JSON.stringify(this.legacy);
    } else {
      this.legacy = next;
      this.legacyJson = this.currentJson;
    }
  }

  async refresh(): Promise<boolean> {
    try {
      const next = await this.build(false);
      if (JSON.stringify(next) === this.currentJson) return false;
      this.publish(next);
      this.logger.info('DERP map updated', { regions: Object.keys(next.Regions).length });
      this.onChange();
      return true;
    } catch (err) {
      this.logger.warn('DERP map refresh failed; keeping the previous map', { error: (err as Error).message });
      return false;
    }
  }

  /**
   * build merges every source. At start-up (firstLoad) an unreachable URL only
   * warns so the server still starts; on a refresh it throws, and the caller keeps
   * the previous map.
   */
  private async build(firstLoad: boolean): Promise<DerpMap> {
    const merged: DerpMap = { Regions: {} };
    const add = (m: DerpMap) => Object.assign(merged.Regions, m.Regions);
    for (const url of this.config.derp.urls) {
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        add(parseDerpMap(await res.text(), url));
      } catch (err) {
        const msg = `derp.urls ${url}: ${(err as Error).message}`;
        if (firstLoad) this.logger.warn(msg); else throw new Error(msg);
      }
    }
    for (const path of this.config.derp.paths) {
      let text: string;
      try {
        text = await readFile(path, 'utf8');
      } catch (err) {
        throw new Error(`derp.paths ${path}: ${(err as Error).message}`);
      }
      add(parseDerpMap(text, `derp.paths ${path}`));
    }
    const s = this.config.derp.server;
    if (s.enabled && s.automatically_add_embedded_derp_region) {
      const r = embeddedRegion(this.config, this.stunPort, this.relayTls);
      merged.Regions[String(r.RegionID)] = r;
    }
    return merged;
  }

  close(): void { clearInterval(this.timer); }
}

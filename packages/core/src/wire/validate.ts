import { isIPv4, isIPv6 } from 'node:net';
import { z } from 'zod';
import { HeadwayError } from '../errors.js';
import { parseIPPrefix } from '@headway/policy/ip';

/*
 * Schemas of the control protocol's request bodies, after tailscale's tailcfg
 * (RegisterRequest, MapRequest, Hostinfo, NetInfo, Service, Location, TPMInfo).
 *
 * Why validate every field, not only the ones Headway reads: Hostinfo is stored
 * and sent to every peer inside their MapResponses, so a known field with the
 * wrong type (`"OS": 5`) would make each peer's Go decoder reject its netmap.
 * Go's encoding/json also matches keys case-insensitively, so an unknown key that
 * only differs in case from a known one (`"os"`) is refused for the same reason.
 * Other unknown keys are kept: newer clients add fields.
 *
 * Go semantics are kept where a real client relies on them: `null` for a field
 * means "unset" (it is dropped), and missing fields are zero values.
 */

/** PROTOCOL_LIMITS are the size caps on client-sent values; generous next to what real clients send. */
export const PROTOCOL_LIMITS = {
  /** text is the cap on most string fields. */
  text: 1024,
  /** hostname matches the nodes.hostname column (255 characters). */
  hostname: 255,
  /** url caps Followup (an AuthURL Headway handed out). */
  url: 2048,
  /** blob caps base64 fields (signatures, certificates, SSH host keys). */
  blob: 16 * 1024,
  routes: 4096,
  tags: 256,
  services: 1024,
  endpoints: 1024,
  sshHostKeys: 64,
  wolMacs: 64,
  debugFlags: 64,
  derpLatency: 1024,
  /** hostinfoBytes caps the serialized Hostinfo: it is stored and copied into every peer's map. */
  hostinfoBytes: 256 * 1024,
  /** depth caps nesting of unknown fields, so storing and re-serializing them cannot exhaust the stack. */
  depth: 32,
} as const;

/** Go's CapabilityVersion is an int; anything past int32 is not a real client. */
const MAX_CAPABILITY_VERSION = 2 ** 31 - 1;

/** optional: Go leaves a field at its zero value for null, so null reads as absent. */
function optional<T extends z.ZodType>(schema: T) {
  return schema.nullish().transform((v): z.output<T> | undefined => v ?? undefined);
}

const text = (max: number = PROTOCOL_LIMITS.text) => z.string().max(max);
/** printable refuses control characters in values stored in their own columns (PostgreSQL cannot store NUL). */
const printable = (max: number) => z.string().max(max).regex(/^[^\u0000-\u001f\u007f]*$/, { error: 'must not contain control characters' });
const bool = () => optional(z.boolean());
/** optBool is tailscale's opt.Bool: true, false or null. */
const optBool = bool;
const int = (min: number, max: number) => optional(z.int().min(min).max(max));
const stringList = (maxItems: number, maxLen: number = PROTOCOL_LIMITS.text) => optional(z.array(text(maxLen)).max(maxItems));

/** hexKey is a tailscale public key in text form: `<prefix>:<64 hex digits>` (stored lower-case). */
function hexKey(prefix: string) {
  return z.string()
    .regex(new RegExp(`^${prefix}:[0-9a-fA-F]{64}$`), { error: `expected ${prefix}:<64 hex digits>` })
    .transform((s) => s.toLowerCase());
}

/** rfc3339 is a Go time.Time in JSON: RFC 3339 with a zone, years 0000-9999. */
const rfc3339 = z.string()
  .regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/, { error: 'expected an RFC 3339 time such as 2026-01-02T15:04:05Z' })
  .refine((s) => !Number.isNaN(new Date(s).getTime()), { error: 'expected an RFC 3339 time such as 2026-01-02T15:04:05Z' });

const base64 = (max: number) => z.string().max(max).regex(/^[A-Za-z0-9+/]*={0,2}$/, { error: 'expected base64' });

/** prefix is a netip.Prefix: an address and a length, e.g. 10.0.0.0/24 or fd00::/64. */
const prefix = z.string().max(64).refine((s) => s.includes('/') && parseIPPrefix(s) !== undefined, { error: 'expected a CIDR prefix such as 10.0.0.0/24' });

/** addrPort is a netip.AddrPort: 1.2.3.4:41641 or [2001:db8::1]:41641 (an IPv6 zone is allowed). */
const addrPort = z.string().max(80).refine((s) => {
  const m = /^(?:\[([0-9A-Fa-f:.]+)(?:%[^\]]{1,32})?\]|(\d{1,3}(?:\.\d{1,3}){3})):(\d{1,5})$/.exec(s);
  if (!m || Number(m[3]) > 65535) return false;
  return m[1] !== undefined ? isIPv6(m[1]) : isIPv4(m[2]!);
}, { error: 'expected address:port such as 192.0.2.1:41641 or [2001:db8::1]:41641' });

/**
 * goObject is a tailcfg struct: known fields checked, unknown fields kept, and
 * keys that differ from a known field only in letter case refused (Go would decode
 * them into that field).
 */
function goObject<S extends z.ZodRawShape>(shape: S) {
  const known = new Map(Object.keys(shape).map((k) => [k.toLowerCase(), k]));
  return z.looseObject(shape).superRefine((obj, ctx) => {
    for (const key of Object.keys(obj)) {
      const same = known.get(key.toLowerCase());
      if (same !== undefined && same !== key) ctx.addIssue({ code: 'custom', path: [key], message: `differs from the field ${same} only in letter case` });
    }
  });
}

const NetInfo = goObject({
  MappingVariesByDestIP: optBool(),
  HairPinning: optBool(),
  WorkingIPv6: optBool(),
  OSHasIPv6: optBool(),
  WorkingUDP: optBool(),
  WorkingICMPv4: optBool(),
  HavePortMap: bool(),
  UPnP: optBool(),
  PMP: optBool(),
  PCP: optBool(),
  PreferredDERP: int(0, 2 ** 31 - 1),
  LinkType: optional(text(64)),
  DERPLatency: optional(z.record(text(64), z.number()).refine((m) => Object.keys(m).length <= PROTOCOL_LIMITS.derpLatency, {
    error: `must have at most ${PROTOCOL_LIMITS.derpLatency} entries`,
  })),
  FirewallMode: optional(text(64)),
});

const Service = goObject({
  Proto: optional(text(32)),
  Port: int(0, 65535),
  Description: optional(text()),
});

const Location = goObject({
  Country: optional(text()),
  CountryCode: optional(text(16)),
  City: optional(text()),
  CityCode: optional(text(64)),
  Latitude: optional(z.number()),
  Longitude: optional(z.number()),
  Priority: int(-(2 ** 31), 2 ** 31 - 1),
});

const TPMInfo = goObject({
  Manufacturer: optional(text(64)),
  Vendor: optional(text()),
  Model: int(-(2 ** 31), 2 ** 31 - 1),
  // A uint64 in Go: may exceed what a JSON number holds exactly, so only its sign is checked.
  FirmwareVersion: optional(z.number().min(0)),
  SpecRevision: int(-(2 ** 31), 2 ** 31 - 1),
  FamilyIndicator: optional(text(64)),
});

/** depthOf measures nesting of a parsed JSON value without recursion limits of its own. */
function depthOf(value: unknown): number {
  let max = 0;
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length) {
    const [v, d] = stack.pop()!;
    if (d > max) max = d;
    if (d > PROTOCOL_LIMITS.depth) break;
    if (v && typeof v === 'object') for (const c of Object.values(v)) stack.push([c, d + 1]);
  }
  return max;
}

/** HostinfoSchema is tailcfg.Hostinfo. */
export const HostinfoSchema = goObject({
  IPNVersion: optional(text()),
  FrontendLogID: optional(text()),
  BackendLogID: optional(text()),
  OS: optional(text(64)),
  OSVersion: optional(text()),
  Container: optBool(),
  Env: optional(text()),
  Distro: optional(text()),
  DistroVersion: optional(text()),
  DistroCodeName: optional(text()),
  App: optional(text()),
  Desktop: optBool(),
  Package: optional(text()),
  DeviceModel: optional(text()),
  PushDeviceToken: optional(text(4096)),
  Hostname: optional(printable(PROTOCOL_LIMITS.hostname)),
  ShieldsUp: bool(),
  ShareeNode: bool(),
  NoLogsNoSupport: bool(),
  RemoteConfig: bool(),
  WireIngress: bool(),
  IngressEnabled: bool(),
  AllowsUpdate: bool(),
  Machine: optional(text()),
  GoArch: optional(text()),
  GoArchVar: optional(text()),
  GoVersion: optional(text()),
  RoutableIPs: optional(z.array(prefix).max(PROTOCOL_LIMITS.routes)),
  RequestTags: stringList(PROTOCOL_LIMITS.tags, 256),
  WoLMACs: stringList(PROTOCOL_LIMITS.wolMacs, 64),
  Services: optional(z.array(Service).max(PROTOCOL_LIMITS.services)),
  NetInfo: optional(NetInfo),
  sshHostKeys: stringList(PROTOCOL_LIMITS.sshHostKeys, PROTOCOL_LIMITS.blob),
  Cloud: optional(text()),
  Userspace: optBool(),
  UserspaceRouter: optBool(),
  AppConnector: optBool(),
  ServicesHash: optional(text()),
  PeerRelay: bool(),
  ExitNodeID: optional(text()),
  Location: optional(Location),
  TPM: optional(TPMInfo),
  StateEncrypted: optBool(),
}).superRefine((h, ctx) => {
  if (depthOf(h) > PROTOCOL_LIMITS.depth) {
    ctx.addIssue({ code: 'custom', path: [], message: `nests deeper than ${PROTOCOL_LIMITS.depth} levels` });
    return;
  }
  const size = Buffer.byteLength(JSON.stringify(h));
  if (size > PROTOCOL_LIMITS.hostinfoBytes) ctx.addIssue({ code: 'custom', path: [], message: `is ${size} bytes, more than the ${PROTOCOL_LIMITS.hostinfoBytes} allowed` });
});

export type Hostinfo = z.output<typeof HostinfoSchema>;

const capabilityVersion = z.int().min(0).max(MAX_CAPABILITY_VERSION);

/** RegisterRequestSchema is tailcfg.RegisterRequest. */
export const RegisterRequestSchema = goObject({
  Version: optional(capabilityVersion),
  NodeKey: hexKey('nodekey'),
  OldNodeKey: optional(z.union([z.literal(''), hexKey('nodekey')])),
  NLKey: optional(z.string().max(200).regex(/^((nlpub|tlpub):[0-9a-fA-F]*)?$/, { error: 'expected nlpub:<hex>' })),
  Auth: optional(goObject({
    AuthKey: optional(text(512)),
    Oauth2Token: optional(z.looseObject({})),
  })),
  Expiry: optional(rfc3339),
  Followup: optional(text(PROTOCOL_LIMITS.url)),
  Hostinfo: optional(HostinfoSchema),
  Ephemeral: bool(),
  NodeKeySignature: optional(base64(PROTOCOL_LIMITS.blob)),
  SignatureType: int(0, 255),
  Timestamp: optional(rfc3339),
  DeviceCert: optional(base64(PROTOCOL_LIMITS.blob)),
  Signature: optional(base64(PROTOCOL_LIMITS.blob)),
  Tailnet: optional(text(256)),
});

export type RegisterRequest = z.output<typeof RegisterRequestSchema>;

/** MapRequestSchema is tailcfg.MapRequest. */
export const MapRequestSchema = goObject({
  Version: optional(capabilityVersion),
  Compress: optional(text(32)),
  KeepAlive: bool(),
  NodeKey: hexKey('nodekey'),
  DiscoKey: optional(z.union([z.literal(''), hexKey('discokey')])),
  HardwareAttestationKey: optional(text(512)),
  HardwareAttestationKeySignature: optional(base64(PROTOCOL_LIMITS.blob)),
  HardwareAttestationKeySignatureTimestamp: optional(rfc3339),
  Stream: bool(),
  Hostinfo: optional(HostinfoSchema),
  MapSessionHandle: optional(text(256)),
  MapSessionSeq: optional(z.int()),
  Endpoints: optional(z.array(addrPort).max(PROTOCOL_LIMITS.endpoints)),
  EndpointTypes: optional(z.array(z.int().min(0).max(255)).max(PROTOCOL_LIMITS.endpoints)),
  TKAHead: optional(text(256)),
  ReadOnly: bool(),
  OmitPeers: bool(),
  DebugFlags: stringList(PROTOCOL_LIMITS.debugFlags, 256),
  ConnectionHandleForTest: optional(text(256)),
});

export type MapRequest = z.output<typeof MapRequestSchema>;

/** SetDNSRequestSchema is tailcfg.SetDNSRequest: a device asks for a DNS record (the ACME DNS-01 TXT record). */
export const SetDNSRequestSchema = goObject({
  Version: optional(capabilityVersion),
  NodeKey: hexKey('nodekey'),
  Name: text(255),
  Type: text(16),
  Value: text(255),
});

export type SetDNSRequest = z.output<typeof SetDNSRequestSchema>;

/** fieldPath spells an issue's path the way the protocol doc does: Hostinfo.RoutableIPs[2]. */
function fieldPath(path: PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out ? `.${String(p)}` : String(p);
  return out;
}

/**
 * parse checks a decoded body against a schema and returns the typed value, or
 * throws a 400 HeadwayError naming the first bad field. Messages never repeat the
 * value sent: it may be a secret (an auth key) and it would be logged.
 */
function parse<S extends z.ZodType>(schema: S, what: string, body: unknown): z.output<S> {
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  const issue = r.error.issues[0]!;
  const field = fieldPath(issue.path);
  const reason = issue.message.replace(/^Invalid input: /, '');
  const more = r.error.issues.length > 1 ? ` (and ${r.error.issues.length - 1} more)` : '';
  throw new HeadwayError('invalid_field', `invalid ${what}: ${field ? `${field}: ` : ''}${reason}${more}`, field || undefined);
}

/** parseRegisterRequest validates a /machine/register body (see RegisterRequestSchema). */
export function parseRegisterRequest(body: unknown): RegisterRequest {
  return parse(RegisterRequestSchema, 'RegisterRequest', body);
}

/** parseMapRequest validates a /machine/map body (see MapRequestSchema). */
export function parseMapRequest(body: unknown): MapRequest {
  return parse(MapRequestSchema, 'MapRequest', body);
}

/** parseSetDNSRequest validates a /machine/set-dns body (see SetDNSRequestSchema). */
export function parseSetDNSRequest(body: unknown): SetDNSRequest {
  return parse(SetDNSRequestSchema, 'SetDNSRequest', body);
}

/** isHostinfo tells whether a stored value is a Hostinfo this server would accept today. */
export function isHostinfo(value: unknown): value is Hostinfo {
  return HostinfoSchema.safeParse(value).success;
}

const EndpointList = z.array(addrPort);

/** isEndpointList tells whether stored endpoints are all address:port strings peers can decode. */
export function isEndpointList(value: unknown): value is string[] {
  return EndpointList.safeParse(value).success;
}

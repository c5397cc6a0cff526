/**
 * The pure parts of `npm run bench:headscale` (bench-headscale.ts): its options, the /proc readings it samples a
 * server process with, the four-group policy both servers run with the peers it gives each device, and the side by
 * side table it prints.
 */
import { parseArgs } from 'node:util';
import { formatTable, statusBytes } from './bench-stats.js';

/** HeadscaleBenchOptions are the knobs of the side-by-side benchmark. */
export interface HeadscaleBenchOptions {
  /** sizes: devices per run; 0 measures an idle server alone. */
  sizes: number[];
  /** rounds: how many renames are timed per size and server (the table shows the median round). */
  rounds: number;
  /** joinTimeoutSeconds bounds joining every device and waiting until each holds its expected peers. */
  joinTimeoutSeconds: number;
  /** renameTimeoutSeconds bounds one rename reaching every device. */
  renameTimeoutSeconds: number;
  /** servers: which servers run, in this order. */
  servers: ServerName[];
}

export type ServerName = 'headway' | 'headscale';

export const HEADSCALE_USAGE = 'usage: bench-headscale.js [--sizes 0,100,300] [--rounds R] [--join-timeout S] [--rename-timeout S] [--servers headway,headscale]';

/** parseHeadscaleBenchOptions reads `--flag value` or `--flag=value` arguments. */
export function parseHeadscaleBenchOptions(argv: readonly string[]): HeadscaleBenchOptions {
  const text = { type: 'string' } as const;
  let values: Record<string, string | undefined>;
  try {
    ({ values } = parseArgs({ args: [...argv], options: { sizes: text, rounds: text, 'join-timeout': text, 'rename-timeout': text, servers: text }, strict: true }));
  } catch (err) {
    throw new Error(`${(err as Error).message}; ${HEADSCALE_USAGE}`);
  }
  const int = (what: string, raw: string, min: number): number => {
    const n = Number(raw.trim());
    if (raw.trim() === '' || !Number.isInteger(n) || n < min) throw new Error(`--${what}: "${raw}" is not an integer >= ${min}`);
    return n;
  };
  const opt = (name: string, fallback: number, min: number): number => (values[name] === undefined ? fallback : int(name, values[name]!, min));
  const sizes = values.sizes === undefined ? [0, 100, 300] : values.sizes.split(',').filter((s) => s.trim() !== '').map((s) => int('sizes', s, 0));
  if (!sizes.length) throw new Error('--sizes: empty list; expected e.g. --sizes 0,100');
  const servers = (values.servers ?? 'headway,headscale').split(',').map((s) => s.trim()).filter(Boolean);
  const bad = servers.find((s) => s !== 'headway' && s !== 'headscale');
  if (bad !== undefined || !servers.length) throw new Error(`--servers: "${bad ?? ''}" is not headway or headscale`);
  return {
    sizes, rounds: opt('rounds', 3, 1), joinTimeoutSeconds: opt('join-timeout', 300, 1), renameTimeoutSeconds: opt('rename-timeout', 60, 1),
    servers: [...new Set(servers as ServerName[])],
  };
}

/** parseStatusRss reads VmRSS (resident memory now) and VmHWM (its peak so far) from /proc/<pid>/status, in bytes. */
export function parseStatusRss(status: string): { rss: number; hwm: number } {
  return { rss: statusBytes(status, 'VmRSS'), hwm: statusBytes(status, 'VmHWM') };
}

/**
 * parseStatTicks reads utime + stime (fields 14 and 15, in clock ticks) from /proc/<pid>/stat. The command name
 * (field 2) is in parentheses and may hold spaces and parentheses itself, so fields are counted after the last `)`.
 */
export function parseStatTicks(stat: string): number {
  const close = stat.lastIndexOf(')');
  if (close < 0) throw new Error('/proc stat has no command name');
  const rest = stat.slice(close + 1).trim().split(/\s+/);
  // rest[0] is field 3 (state): utime is field 14, stime field 15.
  const utime = Number(rest[11]), stime = Number(rest[12]);
  if (!Number.isInteger(utime) || !Number.isInteger(stime)) throw new Error('/proc stat: utime/stime are not numbers');
  return utime + stime;
}

/** BENCH_DNS is both servers' DNS: MagicDNS on, so a peer's Name is `<given name>.bench.test.` on either. */
export const BENCH_DNS = { magic_dns: true, base_domain: 'bench.test', override_local_dns: false, nameservers: { global: [] } };

/** GROUP_TAGS are the four tags the devices are split into, device i carrying GROUP_TAGS[i % 4]. */
export const GROUP_TAGS = ['tag:g0', 'tag:g1', 'tag:g2', 'tag:g3'] as const;

/** REACHES[g] are the groups group g may reach: g0 reaches all, g1 itself, g2 itself and g3, g3 itself. */
const REACHES: readonly (readonly number[])[] = [[0, 1, 2, 3], [1], [2, 3], [3]];

/**
 * benchPolicy is the HuJSON policy both servers run: tags only (no user to resolve), owned by nobody (the keys are
 * made by the administrator), one acl per group.
 */
export function benchPolicy(): string {
  const acls = REACHES.map((to, g) => `    { "action": "accept", "src": ["${GROUP_TAGS[g]}"], "dst": [${to.map((x) => `"${GROUP_TAGS[x]}:*"`).join(', ')}] },`);
  return [
    '// npm run bench:headscale: four tagged groups; g0 reaches everyone, g2 reaches g3, each group itself.',
    '{',
    `  "tagOwners": { ${GROUP_TAGS.map((t) => `"${t}": []`).join(', ')} },`,
    '  "acls": [',
    ...acls,
    '  ],',
    '}',
    '',
  ].join('\n');
}

/** groupOf is the group (index into GROUP_TAGS) of device i. */
export function groupOf(i: number): number {
  return i % GROUP_TAGS.length;
}

/** groupsSee says whether a device of group a holds a device of group b as a peer: either may reach the other. */
export function groupsSee(a: number, b: number): boolean {
  return REACHES[a]!.includes(b) || REACHES[b]!.includes(a);
}

/** expectedPeerIndexes lists the devices (by index, of n) that device i must hold as peers under benchPolicy. */
export function expectedPeerIndexes(i: number, n: number): number[] {
  const out: number[] = [];
  for (let j = 0; j < n; j++) if (j !== i && groupsSee(groupOf(i), groupOf(j))) out.push(j);
  return out;
}

/** ServerFigures are one server's figures at one size (undefined: not measured at this size, e.g. no devices). */
export interface ServerFigures {
  rssIdle: number;
  rssPeak: number;
  rssSteady: number;
  /** hwm is the kernel's own peak RSS of the process (VmHWM) at the end, next to the 0.5 s samples' peak. */
  hwm: number;
  /** joinMs: from the first dial until every device held its expected peers; undefined if that never happened. */
  joinMs?: number;
  joinTimedOut: boolean;
  joinFailures: number;
  /** mapStreamsEnded: map streams of joined devices that ended (the server closed them, or an error) while measured. */
  mapStreamsEnded: number;
  serverCpuJoinMs: number;
  loadCpuJoinMs: number;
  /** renames: every round; renameMs is the median round's time until the last device had the new name. */
  renames: RenameRound[];
  renameMs?: number;
}

/** RenameRound is one timed rename. */
export interface RenameRound {
  /** callMs: how long the API call took; reachedMs: after it returned, until every device had the new name. */
  callMs: number;
  reachedMs?: number;
  /** reached: devices holding the new name by the end (all of them unless it timed out). */
  reached: number;
  devices: number;
  serverCpuMs: number;
  loadCpuMs: number;
}

/** medianRound picks the round with the median reaching time (the lower of an even count); unreached rounds sort last. */
export function medianRound(rounds: readonly RenameRound[]): RenameRound | undefined {
  if (!rounds.length) return undefined;
  const sorted = [...rounds].sort((a, b) => (a.reachedMs ?? Infinity) - (b.reachedMs ?? Infinity));
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

const mibText = (b: number): string => (b / 1048576).toFixed(1);
const secText = (ms: number): string => (ms / 1000).toFixed(2);

/**
 * sizeTable renders one size's figures with a column per server, in the order given; a server with no figures
 * (it failed) shows `-`. The timeouts word a join or rename that never converged. With no devices there is no
 * join: only the idle reading and the peak since start.
 */
export function sizeTable(devices: number, servers: ReadonlyArray<{ name: string; figures?: ServerFigures }>, renameTimeoutSeconds: number, joinTimeoutSeconds: number): string {
  const cell = (f: ServerFigures | undefined, pick: (f: ServerFigures) => string): string => (f ? pick(f) : '-');
  const rows: string[][] = [[`N=${devices}`, ...servers.map((s) => s.name)]];
  const row = (label: string, pick: (f: ServerFigures) => string): void => { rows.push([label, ...servers.map((s) => cell(s.figures, pick))]); };
  row('RSS idle, 10 s after start (MiB)', (f) => mibText(f.rssIdle));
  row('RSS peak, sampled every 0.5 s (MiB)', (f) => mibText(f.rssPeak));
  row('RSS peak, kernel VmHWM (MiB)', (f) => mibText(f.hwm));
  if (devices > 0) {
    row('RSS steady, 10 s after the join (MiB)', (f) => mibText(f.rssSteady));
    row('join until all converged (s)', (f) => (f.joinMs !== undefined ? secText(f.joinMs) : f.joinTimedOut ? `did not converge within ${joinTimeoutSeconds}s` : 'failed'));
    row('devices that failed to join', (f) => String(f.joinFailures));
    row('map streams that ended and were polled again', (f) => String(f.mapStreamsEnded));
    row('server CPU in the join (s)', (f) => secText(f.serverCpuJoinMs));
    row('load generator CPU in the join (s)', (f) => secText(f.loadCpuJoinMs));
    const median = (f: ServerFigures) => medianRound(f.renames);
    row('rename reaching every device (ms, median)', (f) => {
      const m = median(f);
      if (!m) return 'not measured';
      return m.reachedMs !== undefined ? m.reachedMs.toFixed(0) : `did not converge within ${renameTimeoutSeconds}s (${m.reached}/${m.devices})`;
    });
    row('rename, every round (ms)', (f) => f.renames.map((r) => (r.reachedMs !== undefined ? r.reachedMs.toFixed(0) : 'timeout')).join(' ') || '-');
    row('rename API call (ms, median round)', (f) => { const m = median(f); return m ? m.callMs.toFixed(0) : '-'; });
    row('server CPU per rename (ms, median round)', (f) => { const m = median(f); return m ? m.serverCpuMs.toFixed(0) : '-'; });
    row('load generator CPU per rename (ms, median round)', (f) => { const m = median(f); return m ? m.loadCpuMs.toFixed(0) : '-'; });
  }
  return formatTable(rows);
}

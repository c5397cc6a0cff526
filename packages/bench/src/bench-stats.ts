/** Small numeric and formatting helpers for the benchmark report, and the size guard both benchmarks apply. */
import { execFileSync } from 'node:child_process';

/** LatencySummary describes a set of latencies in milliseconds (nearest-rank percentiles). */
export interface LatencySummary {
  count: number;
  p50: number;
  p99: number;
  max: number;
  mean: number;
}

/** percentile uses the nearest-rank method on an ascending-sorted array; q is in (0, 1]. */
export function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) throw new Error('percentile: no samples');
  if (!(q > 0 && q <= 1)) throw new Error(`percentile: q must be in (0, 1], got ${q}`);
  const rank = Math.ceil(q * sorted.length);
  return sorted[Math.min(sorted.length, rank) - 1]!;
}

/** summarize sorts a copy of the samples and reports p50, p99, max and mean, rounded to 0.01 ms. */
export function summarize(samples: readonly number[]): LatencySummary {
  if (samples.length === 0) return { count: 0, p50: NaN, p99: NaN, max: NaN, mean: NaN };
  const sorted = [...samples].sort((a, b) => a - b);
  const mean = sorted.reduce((s, x) => s + x, 0) / sorted.length;
  return { count: sorted.length, p50: round2(percentile(sorted, 0.5)), p99: round2(percentile(sorted, 0.99)), max: round2(sorted[sorted.length - 1]!), mean: round2(mean) };
}

export function round2(n: number): number {
  return Math.round(n * 100) / 100;
}

/** parseSizes reads a `100,1000,5000` list; every entry must be an integer of at least 2 (a peer needs a peer). */
export function parseSizes(text: string): number[] {
  const sizes = text.split(',').map((s) => s.trim()).filter((s) => s.length > 0).map((s) => {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 2) throw new Error(`--sizes: "${s}" is not an integer >= 2`);
    return n;
  });
  if (sizes.length === 0) throw new Error('--sizes: empty list; expected e.g. --sizes 100,1000');
  return sizes;
}

/** formatTable renders rows as aligned columns; the first row is the header. */
export function formatTable(rows: readonly (readonly string[])[]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => { widths[i] = Math.max(widths[i] ?? 0, cell.length); });
  const line = (row: readonly string[]): string => row.map((cell, i) => (i === 0 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!))).join('  ');
  const out = rows.map(line);
  if (out.length > 1) out.splice(1, 0, widths.map((w) => '-'.repeat(w)).join('  '));
  return out.join('\n');
}

/** kib formats a byte count as KiB with one decimal. */
export function kib(bytes: number): string {
  return (bytes / 1024).toFixed(1);
}

/** mib formats a byte count as MiB with one decimal. */
export function mib(bytes: number): string {
  return (bytes / 1048576).toFixed(1);
}

/** FD_HEADROOM covers what each process holds besides one socket per session: the database, listeners, stdio, IPC. */
const FD_HEADROOM = 256;

/** fileDescriptorLimit asks a shell for the soft RLIMIT_NOFILE this process inherited (Node has no getrlimit). */
export function fileDescriptorLimit(): number {
  try {
    const out = execFileSync('/bin/sh', ['-c', 'ulimit -n'], { encoding: 'utf8' }).trim();
    return out === 'unlimited' ? Number.POSITIVE_INFINITY : Number(out);
  } catch {
    return Number.NaN;
  }
}

/**
 * skipReason says why a benchmark does not run size `n`: above BENCH_MAX when the sizes were not given, or
 * more sockets than ulimit -n allows (driver and server each hold one per session). A limit that could not be
 * read is only noted through `log`.
 */
export function skipReason(n: number, opts: { explicitSizes: boolean; maxSize: number }, fdLimit: number, log: (line: string) => void): string | undefined {
  if (!opts.explicitSizes && n > opts.maxSize) return `above BENCH_MAX=${opts.maxSize} (set BENCH_MAX=${n} or pass --sizes to run it)`;
  const needed = n + FD_HEADROOM;
  if (Number.isNaN(fdLimit)) log(`note: could not read ulimit -n; N=${n} needs about ${needed} file descriptors per process`);
  else if (fdLimit < needed) return `needs about ${needed} file descriptors per process but ulimit -n is ${fdLimit}; raise it (ulimit -n ${needed * 2}) to run this size`;
  return undefined;
}

/** statusBytes reads one `Name: N kB` line of /proc/<pid>/status, in bytes. */
export function statusBytes(status: string, name: string): number {
  const m = new RegExp(`^${name}:\\s+(\\d+) kB$`, 'm').exec(status);
  if (!m) throw new Error(`/proc status has no ${name} line`);
  return Number(m[1]) * 1024;
}

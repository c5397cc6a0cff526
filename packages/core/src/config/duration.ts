const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * parseDuration reads Go-style durations (`30m`, `1h30m`, `87600h`, `0s`) plus days
 * (`90d`) into milliseconds; a bare `0` is zero. Anything else is undefined.
 */
export function parseDuration(text: string): number | undefined {
  const s = text.trim();
  if (s === '0') return 0;
  if (!/^(\d+(\.\d+)?(ms|s|m|h|d))+$/.test(s)) return undefined;
  let total = 0;
  for (const m of s.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)) total += Number(m[1]) * UNITS[m[2]!]!;
  return Math.round(total);
}

/** formatDuration writes milliseconds back in the largest exact unit (`24h`, `90d`, `1500ms`). */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  for (const [u, n] of [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000]] as const) {
    if (ms % n === 0) return `${ms / n}${u}`;
  }
  return `${ms}ms`;
}

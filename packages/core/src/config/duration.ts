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

/** LATEST_TIME: the last time an RFC 3339 year (four digits) and every database's timestamp column hold. */
export const LATEST_TIME = Date.UTC(9999, 11, 31, 23, 59, 59, 999);
const RFC3339_PARTS = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(\.\d+)?)?(Z|[+-](\d{2}):(\d{2}))$/i;

/**
 * rfc3339Time reads an RFC 3339 time (seconds optional), or undefined if `text` is none: a calendar date that does
 * not exist (February 31, hour 24) is refused where Date.parse rolls it over into the next month or day.
 */
export function rfc3339Time(text: string): Date | undefined {
  const m = RFC3339_PARTS.exec(text);
  if (!m) return undefined;
  const [year, month, day, hour, minute, second] = [1, 2, 3, 4, 5, 6].map((k) => Number(m[k] ?? 0)) as [number, number, number, number, number, number];
  // Day 0 of the next month is this month's last (setUTCFullYear, unlike Date.UTC, leaves years below 100 alone).
  const last = new Date(0);
  last.setUTCFullYear(year, month, 0);
  const days = last.getUTCDate();
  if (month < 1 || month > 12 || day < 1 || day > days || hour > 23 || minute > 59 || second > 59) return undefined;
  if (m[9] !== undefined && (Number(m[9]) > 23 || Number(m[10]) > 59)) return undefined;
  const ms = Date.parse(text);
  return Number.isFinite(ms) ? new Date(ms) : undefined;
}

import { distance } from 'fastest-levenshtein';

function commonPrefix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/**
 * closest picks the candidate a mistyped word most likely meant, for "did you mean"
 * hints. In order: a candidate the word begins (`--exp` → `--expiration`); the candidate
 * sharing the longest start of at least 4 letters and two thirds of the word (`--expire`
 * → `--expiration`); else the one at the smallest edit distance if that is small for the
 * word's length (`lst` → `list`, `nodse` → `nodes`, but `frobnicate` suggests nothing).
 * Ties go to the earlier candidate, so callers list preferred spellings first.
 */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  const w = word.toLowerCase();
  const bare = (s: string) => s.replace(/^-+/, '');
  if (bare(w).length < 2) return undefined;
  const lower = candidates.map((c) => c.toLowerCase());
  const starts = lower.map((c, i) => [c, i] as const).filter(([c]) => c.startsWith(w)).sort((a, b) => a[0].length - b[0].length);
  if (starts.length > 0) return candidates[starts[0]![1]];
  let best = -1;
  let bestPrefix = 0;
  lower.forEach((c, i) => {
    const p = commonPrefix(bare(w), bare(c));
    if (p > bestPrefix) {
      best = i;
      bestPrefix = p;
    }
  });
  if (bestPrefix >= 4 && bestPrefix * 3 >= bare(w).length * 2) return candidates[best];
  let bestDistance = Infinity;
  lower.forEach((c, i) => {
    const d = distance(w, c);
    if (d < bestDistance) {
      best = i;
      bestDistance = d;
    }
  });
  const limit = bare(w).length <= 3 ? 1 : Math.max(2, Math.floor(bare(w).length / 3));
  return bestDistance <= limit ? candidates[best] : undefined;
}

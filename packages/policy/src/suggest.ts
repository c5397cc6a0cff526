/**
 * Suggestions for a name a policy uses but does not define ("group:admin" when "group:admins" exists). A name is
 * suggested only when it is a slip away: within a third of the written name's length, counted as an edit distance.
 * This is a few lines of our own rather than a dependency: the policy package has none, and names are short.
 */

/** MAX_NAME: a longer name gets no suggestion (the distance costs length², and nobody mistypes 64 characters). */
const MAX_NAME = 64;

/**
 * editDistance counts the edits from a to b: inserting, deleting or replacing a character, or swapping two
 * neighbouring ones ("tag:sevrer"), each 1 (the optimal string alignment distance). Past `max` it stops early and
 * returns max + 1.
 */
export function editDistance(a: string, b: string, max = Infinity): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let before: number[] = [];
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    let rowMin = i;
    for (let j = 1; j <= b.length; j++) {
      let d = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, before[j - 2]! + 1);
      cur.push(d);
      if (d < rowMin) rowMin = d;
    }
    // A row's smallest entry never shrinks further down (beyond the one a swap can reach back to), so once past max it stays past.
    if (rowMin > max) return max + 1;
    before = prev;
    prev = cur;
  }
  return Math.min(prev[b.length]!, max + 1);
}

/**
 * closest is the candidate nearest to name (ignoring case) when it is within a third of name's length, not
 * counting `prefix` ("group:" of "group:admin", which the candidates share); a tie goes to the first candidate.
 * Names shorter than 3 characters get none: one edit from "a" is any other letter.
 */
export function closest(name: string, candidates: Iterable<string>, prefix = '', budget?: { cells: number }): string | undefined {
  if (name.length > MAX_NAME) return undefined;
  const max = Math.floor((name.length - prefix.length) / 3);
  const want = name.toLowerCase();
  let best: string | undefined;
  let bestDistance = max + 1;
  for (const c of candidates) {
    if (budget) {
      budget.cells -= 1;
      if (budget.cells < 0) break;
    }
    if (c === name || c.length > MAX_NAME || (prefix && !c.startsWith(prefix))) continue;
    if (Math.abs(c.length - name.length) >= bestDistance) continue;
    if (budget) budget.cells -= name.length * c.length;
    const d = editDistance(want, c.toLowerCase(), bestDistance - 1);
    if (d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  return best;
}

/**
 * Suggester looks up suggestions for one policy: each name once, and within a bounded amount of work (a policy
 * that names thousands of undefined groups among thousands of defined ones is refused as fast without hints).
 */
export class Suggester {
  private readonly budget = { cells: 1_000_000 };
  private readonly memo = new Map<string, string | undefined>();

  /** closest is closest() of name among one kind of names ("group", "tag", "host", ...), each looked up once. */
  closest(kind: string, name: string, candidates: () => Iterable<string>, prefix = ''): string | undefined {
    const key = `${kind}\u0000${name}`;
    if (!this.memo.has(key)) this.memo.set(key, this.budget.cells > 0 ? closest(name, candidates(), prefix, this.budget) : undefined);
    return this.memo.get(key);
  }

  /** didYouMean is `; did you mean "x"?` for the closest candidate, or '' when none is close. */
  didYouMean(kind: string, name: string, candidates: () => Iterable<string>, prefix = ''): string {
    const c = this.closest(kind, name, candidates, prefix);
    return c === undefined ? '' : `; did you mean ${JSON.stringify(c)}?`;
  }
}

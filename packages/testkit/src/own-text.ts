/**
 * OwnText is the text of a map message that is the session's own (zstd.ts, parseSegmented), built piece by piece.
 * The pieces stay apart until the whole is parsed: reading the end of a string built with `+=` joins it into one
 * (V8 flattens it), and a message of many frames would copy its text again for every frame it looks behind.
 */

/**
 * JsonScan follows JSON text fed in pieces (a piece may end inside a string): the open containers ('{' or '['),
 * whether it is inside a string or just after a backslash in one, and whether it ever closed more than it opened.
 */
export interface JsonScan { open: number[]; inString: boolean; escaped: boolean; overclosed: boolean }

export function scanJson(st: JsonScan, text: string): void {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (st.inString) {
      if (st.escaped) st.escaped = false;
      else if (c === 0x5c) st.escaped = true;
      else if (c === 0x22) st.inString = false;
    } else if (c === 0x22) st.inString = true;
    else if (c === 0x7b || c === 0x5b) st.open.push(c);
    else if (c === 0x7d || c === 0x5d) { if (st.open.pop() === undefined) st.overclosed = true; }
  }
}

/** TAIL: how many of the last characters OwnText keeps at hand, more than any look behind needs. */
const TAIL = 64;

export class OwnText {
  private readonly parts: string[] = [];
  /** scannedParts: the first this many pieces were fed to the scan. */
  private scannedParts = 0;
  private readonly st: JsonScan = { open: [], inString: false, escaped: false, overclosed: false };
  /** tail: the text's last TAIL characters (fewer when it is shorter). */
  tail = '';

  /** append adds text; a whole JSON string (a mark) may skip the scan, since it leaves the scan's state as it was. */
  append(text: string, wholeString = false): void {
    if (!text) return;
    this.parts.push(text);
    if (wholeString && this.scannedParts === this.parts.length - 1) this.scannedParts++;
    this.tail = text.length >= TAIL ? text.slice(-TAIL) : (this.tail + text).slice(-TAIL);
  }

  /** scan is the state of the JSON scan at the end of the text, scanning only the pieces added since the last call. */
  scan(): JsonScan {
    for (; this.scannedParts < this.parts.length; this.scannedParts++) scanJson(this.st, this.parts[this.scannedParts]!);
    return this.st;
  }

  /** endsWith: the text ends with s (s no longer than TAIL). */
  endsWith(s: string): boolean {
    return this.tail.endsWith(s);
  }

  /**
   * trimEnd takes blanks off the end, and then n more characters. What it takes must be what leaves a scan's state
   * as it was (blanks and a comma between tokens): a piece already scanned is not scanned again.
   */
  trimEnd(n = 0): void {
    let drop = n;
    for (let blanks = true; this.parts.length;) {
      const last = this.parts.at(-1)!;
      let cut = blanks ? last.trimEnd() : last;
      if (blanks && !cut) { this.parts.pop(); continue; }
      blanks = false;
      const k = Math.min(drop, cut.length);
      cut = cut.slice(0, cut.length - k);
      drop -= k;
      if (cut) this.parts[this.parts.length - 1] = cut;
      else this.parts.pop();
      if (!drop) break;
    }
    this.scannedParts = Math.min(this.scannedParts, this.parts.length);
    this.tail = '';
    for (let i = this.parts.length - 1; i >= 0 && this.tail.length < TAIL; i--) this.tail = this.parts[i]! + this.tail;
    this.tail = this.tail.slice(-TAIL);
  }

  /** text is the whole text. */
  text(): string {
    return this.parts.join('');
  }
}

/** stringEnd is the index of the quote closing the JSON string whose opening quote is at i, or -1. */
function stringEnd(text: string, i: number): number {
  for (let j = i + 1; ; j++) {
    j = text.indexOf('"', j);
    if (j < 0) return -1;
    let k = j - 1;
    while (text.charCodeAt(k) === 0x5c) k--;
    if ((j - 1 - k) % 2 === 0) return j; // not escaped: an even number of backslashes before it
  }
}

/** valueEnd is the index of the `,` or `}` that ends the value starting at i, at the depth of that value, or -1. */
function valueEnd(text: string, i: number): number {
  let depth = 0;
  for (; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      i = stringEnd(text, i);
      if (i < 0) return -1;
    } else if (c === 0x7b || c === 0x5b) depth++;
    else if (c === 0x7d || c === 0x5d) {
      if (depth === 0) return c === 0x7d ? i : -1;
      depth--;
    } else if (c === 0x2c && depth === 0) return i;
  }
  return -1;
}

/**
 * withoutMembers is a JSON object's text without its top-level members of the given names, found by a scan that
 * builds nothing, and the texts of the members taken out; undefined when none is there or the text is not an
 * object (then it is parsed as it is, and JSON.parse names what is wrong).
 */
export function withoutMembers(text: string, names: ReadonlySet<string>): { text: string; dropped: string[] } | undefined {
  let i = text.indexOf('{');
  if (i < 0 || text.slice(0, i).trim()) return undefined;
  const kept: string[] = [];
  const dropped: string[] = [];
  for (i++; ;) {
    while (/\s/.test(text[i] ?? '')) i++;
    if (text[i] === '}' && !kept.length && !dropped.length) break;
    if (text[i] !== '"') return undefined;
    const keyEnd = stringEnd(text, i);
    if (keyEnd < 0) return undefined;
    const end = valueEnd(text, keyEnd + 1);
    if (end < 0) return undefined;
    (names.has(text.slice(i + 1, keyEnd)) ? dropped : kept).push(text.slice(i, end));
    i = end + 1;
    if (text[end] === '}') break;
  }
  if (!dropped.length || text.slice(i).trim()) return undefined;
  return { text: `{${kept.join(',')}}`, dropped };
}

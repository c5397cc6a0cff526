/**
 * MAX_LISTED_ERRORS is how many errors a message lists; the rest are counted ("and 5 more"). A policy with
 * hundreds of errors has one mistake repeated, and a screen of them hides the first ones.
 */
export const MAX_LISTED_ERRORS = 20;

/** listErrors is what a message shows of a list of errors: the first MAX_LISTED_ERRORS, then "and N more". */
export function listErrors(messages: readonly string[]): string[] {
  if (messages.length <= MAX_LISTED_ERRORS) return [...messages];
  const more = messages.length - MAX_LISTED_ERRORS;
  return [...messages.slice(0, MAX_LISTED_ERRORS), `and ${more} more ${more === 1 ? 'error' : 'errors'}`];
}

/**
 * PolicyError is any rejection of a policy; line/column are 1-based and 0 when the problem is not tied to one place
 * in the text. One rejection can stand for several independent errors (parsePolicy reports every error a policy
 * has): `errors` lists them in the order they were found, line/column/reason are the first's, and the message lists
 * each on its own line.
 */
export class PolicyError extends Error {
  readonly line: number;
  readonly column: number;
  readonly reason: string;
  /** several holds the errors of a rejection that stands for more than one (see of). */
  private several: readonly PolicyError[] | undefined;

  constructor(reason: string, line = 0, column = 0) {
    super(line > 0 ? `line ${line}, column ${column}: ${reason}` : reason);
    this.name = 'PolicyError';
    this.reason = reason;
    this.line = line;
    this.column = column;
  }

  /** errors are the single errors this rejection stands for: itself alone, or every error parsePolicy found. */
  get errors(): readonly PolicyError[] {
    return this.several ?? [this];
  }

  /** of is the rejection for a list of errors (at least one): the error itself when there is one. */
  static of(errors: readonly PolicyError[]): PolicyError {
    const singles = errors.flatMap((e) => e.errors);
    if (singles.length === 1) return singles[0]!;
    const first = singles[0];
    if (!first) throw new Error('PolicyError.of needs at least one error');
    const all = new PolicyError(first.reason, first.line, first.column);
    all.message = `the policy has ${singles.length} errors:\n${listErrors(singles.map((e) => e.message)).map((m) => `  ${m}`).join('\n')}`;
    all.several = singles;
    return all;
  }
}

export interface Pos {
  line: number;
  column: number;
}

/** JNode is a parsed JSON value that remembers where it started, for error messages. */
export type JNode =
  | { kind: 'object'; pos: Pos; entries: { key: string; keyPos: Pos; value: JNode }[] }
  | { kind: 'array'; pos: Pos; items: JNode[] }
  | { kind: 'string'; pos: Pos; value: string }
  | { kind: 'number'; pos: Pos; value: number; text: string }
  | { kind: 'bool'; pos: Pos; value: boolean }
  | { kind: 'null'; pos: Pos };

/** parseHuJSON parses JSON extended only with // and /* comments and trailing commas.
 * Everything else Hjson or JSON5 would accept is rejected with its position, because a
 * policy that means something different to Tailscale than to us must not load. */
export function parseHuJSON(text: string): JNode {
  const p = new HuParser(text);
  p.skipTrivia();
  if (p.atEnd()) p.fail('empty policy: expected a JSON object');
  const v = p.value();
  p.skipTrivia();
  if (!p.atEnd()) p.fail(`unexpected ${p.describe()} after the end of the policy: expected nothing but spaces and comments after its closing bracket`);
  return v;
}

/**
 * MAX_DEPTH bounds how deeply objects and lists nest. Policies nest a handful of levels (capability values a few
 * more); without a bound a text of thousands of '[' overflowed the parser's stack, an error that was no
 * PolicyError and reached the API as a 500.
 */
export const MAX_DEPTH = 200;

class HuParser {
  private i = 0;
  private line = 1;
  private col = 1;
  private depth = 0;

  constructor(private readonly s: string) {}

  atEnd(): boolean {
    return this.i >= this.s.length;
  }

  pos(): Pos {
    return { line: this.line, column: this.col };
  }

  fail(reason: string, at: Pos = this.pos()): never {
    throw new PolicyError(reason, at.line, at.column);
  }

  private advance(n = 1): void {
    for (let k = 0; k < n; k++) {
      if (this.s[this.i] === '\n') { this.line++; this.col = 1; } else { this.col++; }
      this.i++;
    }
  }

  describe(): string {
    const c = this.s[this.i];
    if (c === undefined) return 'end of input';
    return `character ${JSON.stringify(c)}`;
  }

  skipTrivia(): void {
    for (;;) {
      const c = this.s[this.i];
      if (c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\ufeff') { this.advance(); continue; }
      if (c === '/' && this.s[this.i + 1] === '/') {
        while (!this.atEnd() && this.s[this.i] !== '\n') this.advance();
        continue;
      }
      if (c === '/' && this.s[this.i + 1] === '*') {
        const start = this.pos();
        const end = this.s.indexOf('*/', this.i + 2);
        if (end < 0) this.fail('unterminated /* comment: expected "*/" to end it', start);
        this.advance(end + 2 - this.i);
        continue;
      }
      if (c === '#') this.fail('"#" comments are not allowed; use // or /* */');
      return;
    }
  }

  value(): JNode {
    const at = this.pos();
    const c = this.s[this.i];
    switch (c) {
      case '{': case '[': {
        if (this.depth >= MAX_DEPTH) this.fail(`objects and lists nest deeper than ${MAX_DEPTH} levels`);
        this.depth++;
        const v = c === '{' ? this.object() : this.array();
        this.depth--;
        return v;
      }
      case '"': return { kind: 'string', pos: at, value: this.string() };
      case "'": this.fail('single-quoted strings are not allowed; use double quotes');
      // falls through (fail never returns)
      default: break;
    }
    if (c !== undefined && /[-0-9]/.test(c)) return this.number();
    const word = /^[A-Za-z_$][A-Za-z0-9_$]*/.exec(this.s.slice(this.i))?.[0];
    if (word === 'true' || word === 'false') { this.advance(word.length); return { kind: 'bool', pos: at, value: word === 'true' }; }
    if (word === 'null') { this.advance(4); return { kind: 'null', pos: at }; }
    if (c === undefined) this.fail('unexpected end of input: expected a value');
    if (c === '}' || c === ']' || c === ',' || c === ':') this.fail(`expected a value (a string, number, object, list, true, false or null), found ${this.describe()}`);
    const rest = /^[^,\]}\n]*/.exec(this.s.slice(this.i))?.[0]?.trim() ?? '';
    this.fail(`quoteless string ${quoted(rest)}: strings must be double-quoted`);
  }

  private object(): JNode {
    const at = this.pos();
    this.advance();
    const entries: { key: string; keyPos: Pos; value: JNode }[] = [];
    const seen = new Set<string>();
    for (;;) {
      this.skipTrivia();
      const c = this.s[this.i];
      if (c === '}') { this.advance(); return { kind: 'object', pos: at, entries }; }
      if (c === undefined) this.fail('unexpected end of input: the object that starts here is not closed (expected "}")', at);
      if (entries.length > 0) {
        if (c !== ',') this.fail(`missing comma between object members: expected "," or "}", found ${this.describe()}`);
        this.advance();
        this.skipTrivia();
        if (this.s[this.i] === '}') { this.advance(); return { kind: 'object', pos: at, entries }; }
      }
      const keyPos = this.pos();
      const k = this.s[this.i];
      if (k === "'") this.fail('single-quoted strings are not allowed; use double quotes');
      if (k !== '"') {
        const word = /^[^\s:,{}[\]"]*/.exec(this.s.slice(this.i))?.[0] ?? '';
        if (word === '') this.fail(`expected an object key, found ${this.describe()}`);
        this.fail(`unquoted key ${quoted(word)}: expected a double-quoted key`);
      }
      const key = this.string();
      if (seen.has(key)) this.fail(`duplicate key ${quoted(key)}`, keyPos);
      seen.add(key);
      this.skipTrivia();
      if (this.s[this.i] !== ':') this.fail(`expected ":" after key ${quoted(key)}, found ${this.describe()}`);
      this.advance();
      this.skipTrivia();
      entries.push({ key, keyPos, value: this.value() });
    }
  }

  private array(): JNode {
    const at = this.pos();
    this.advance();
    const items: JNode[] = [];
    for (;;) {
      this.skipTrivia();
      const c = this.s[this.i];
      if (c === ']') { this.advance(); return { kind: 'array', pos: at, items }; }
      if (c === undefined) this.fail('unexpected end of input: the list that starts here is not closed (expected "]")', at);
      if (items.length > 0) {
        if (c !== ',') this.fail(`missing comma between array elements: expected "," or "]", found ${this.describe()}`);
        this.advance();
        this.skipTrivia();
        if (this.s[this.i] === ']') { this.advance(); return { kind: 'array', pos: at, items }; }
      }
      items.push(this.value());
    }
  }

  private string(): string {
    const start = this.pos();
    if (this.s.startsWith('"""', this.i)) this.fail('multi-line strings are not allowed');
    let j = this.i + 1;
    for (;;) {
      const c = this.s[j];
      if (c === undefined) this.fail('unterminated string: expected a closing \'"\'', start);
      if (c === '\n' || c === '\r') this.fail('multi-line strings are not allowed; a string must end on its line', start);
      if (c === '\\') { j += 2; continue; }
      if (c === '"') break;
      if (c.charCodeAt(0) < 0x20) this.fail(`control character U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')} in string: expected it escaped (\\t, \\n or \\u00XX)`, { line: start.line, column: start.column + j - this.i });
      j++;
    }
    const raw = this.s.slice(this.i, j + 1);
    let out: string;
    try {
      out = JSON.parse(raw) as string;
    } catch {
      const bad = badEscape(raw);
      const what = bad ? `invalid escape ${bad.text} in string` : 'invalid escape in string';
      this.fail(`${what}: expected one of \\" \\\\ \\/ \\b \\f \\n \\r \\t or \\u and 4 hex digits`, bad ? { line: start.line, column: start.column + bad.index } : start);
    }
    this.advance(j + 1 - this.i);
    return out;
  }

  private number(): JNode {
    const at = this.pos();
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(this.s.slice(this.i));
    if (!m) this.fail(`invalid number: expected a digit after "-", found ${this.s[this.i + 1] === undefined ? 'end of input' : `character ${JSON.stringify(this.s[this.i + 1])}`}`);
    const next = this.s[this.i + m[0].length];
    if (next !== undefined && /[A-Za-z0-9_.]/.test(next)) {
      const rest = /^[^,\]}\n]*/.exec(this.s.slice(this.i))?.[0]?.trim() ?? '';
      this.fail(`quoteless string ${quoted(rest)}: strings must be double-quoted`);
    }
    this.advance(m[0].length);
    return { kind: 'number', pos: at, value: Number(m[0]), text: m[0] };
  }
}

/** badEscape finds the first backslash sequence JSON does not define in a quoted string, and its offset. */
function badEscape(raw: string): { text: string; index: number } | null {
  for (let k = 0; k < raw.length - 1; k++) {
    if (raw[k] !== '\\') continue;
    const next = raw[k + 1]!;
    if ('"\\/bfnrt'.includes(next)) { k++; continue; }
    if (next === 'u' && /^[0-9a-fA-F]{4}$/.test(raw.slice(k + 2, k + 6))) { k += 5; continue; }
    return { text: raw.slice(k, Math.min(next === 'u' ? k + 6 : k + 2, raw.length - 1)), index: k };
  }
  return null;
}

/** toPlain converts a parsed node into ordinary JSON data (used for opaque capability values). */
export function toPlain(n: JNode): unknown {
  switch (n.kind) {
    case 'object': return Object.fromEntries(n.entries.map((e) => [e.key, toPlain(e.value)]));
    case 'array': return n.items.map(toPlain);
    case 'string': case 'number': case 'bool': return n.value;
    case 'null': return null;
  }
}

/** quoted is text from the input for an error message, cut to 60 characters (a key or word may be megabytes long). */
function quoted(text: string): string {
  return text.length <= 60 ? JSON.stringify(text) : `${JSON.stringify(text.slice(0, 60))}... (${text.length} characters)`;
}

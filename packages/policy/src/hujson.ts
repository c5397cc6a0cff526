/** PolicyError is any rejection of a policy; line/column are 1-based and 0 when the
 * problem is not tied to one place in the text. */
export class PolicyError extends Error {
  readonly line: number;
  readonly column: number;
  readonly reason: string;

  constructor(reason: string, line = 0, column = 0) {
    super(line > 0 ? `line ${line}, column ${column}: ${reason}` : reason);
    this.name = 'PolicyError';
    this.reason = reason;
    this.line = line;
    this.column = column;
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
  if (!p.atEnd()) p.fail(`unexpected ${p.describe()} after the end of the policy`);
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
        if (end < 0) this.fail('unterminated /* comment', start);
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
      if (c === undefined) this.fail('unexpected end of input: unclosed object', at);
      if (entries.length > 0) {
        if (c !== ',') this.fail(`missing comma between object members (found ${this.describe()})`);
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
        this.fail(`unquoted key ${quoted(word)}`);
      }
      const key = this.string();
      if (seen.has(key)) this.fail(`duplicate key ${quoted(key)}`, keyPos);
      seen.add(key);
      this.skipTrivia();
      if (this.s[this.i] !== ':') this.fail(`expected ":" after key ${quoted(key)}`);
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
      if (c === undefined) this.fail('unexpected end of input: unclosed array', at);
      if (items.length > 0) {
        if (c !== ',') this.fail(`missing comma between array elements (found ${this.describe()})`);
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
      if (c === undefined) this.fail('unterminated string', start);
      if (c === '\n' || c === '\r') this.fail('multi-line strings are not allowed; a string must end on its line', start);
      if (c === '\\') { j += 2; continue; }
      if (c === '"') break;
      if (c.charCodeAt(0) < 0x20) this.fail('control character in string', start);
      j++;
    }
    const raw = this.s.slice(this.i, j + 1);
    let out: string;
    try {
      out = JSON.parse(raw) as string;
    } catch {
      this.fail('invalid escape in string', start);
    }
    this.advance(j + 1 - this.i);
    return out;
  }

  private number(): JNode {
    const at = this.pos();
    const m = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(this.s.slice(this.i));
    if (!m) this.fail('invalid number');
    const next = this.s[this.i + m[0].length];
    if (next !== undefined && /[A-Za-z0-9_.]/.test(next)) {
      const rest = /^[^,\]}\n]*/.exec(this.s.slice(this.i))?.[0]?.trim() ?? '';
      this.fail(`quoteless string ${quoted(rest)}: strings must be double-quoted`);
    }
    this.advance(m[0].length);
    return { kind: 'number', pos: at, value: Number(m[0]), text: m[0] };
  }
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

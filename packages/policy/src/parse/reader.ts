import { PolicyError, toPlain, type JNode, type Pos } from '../hujson.js';
import { Suggester } from '../suggest.js';

/**
 * The policy reader's tools: errors with positions, collected rather than thrown while checkPolicy reads (so a
 * broken file is reported in one round), "did you mean" hints, and typed access to HuJSON nodes.
 */

export function err(reason: string, at?: Pos): never {
  throw new PolicyError(reason, at?.line ?? 0, at?.column ?? 0);
}

/** collected holds the errors checkPolicy gathers while it reads a policy; null outside. */
let collected: PolicyError[] | null = null;

/** suggesting holds the suggestions of the policy being read (null outside a read: each call then has its own). */
let suggesting: Suggester | null = null;

/**
 * collectErrors runs `read` with errors collected (see attempt) and suggestions shared, and returns what it read
 * (null when there was any error) with every error met, each message once. A PolicyError thrown out of `read`
 * (a piece not run in attempt, such as HuJSON syntax) ends the read and is listed last.
 */
export function collectErrors<T>(read: () => T): { value: T | null; errors: PolicyError[] } {
  const outer = { collected, suggesting };
  collected = [];
  suggesting = new Suggester();
  try {
    const value = read();
    const errors = uniqueErrors(collected);
    return { value: errors.length ? null : value, errors };
  } catch (e) {
    if (!(e instanceof PolicyError)) throw e;
    return { value: null, errors: uniqueErrors([...collected, e]) };
  } finally {
    ({ collected, suggesting } = outer);
  }
}

function uniqueErrors(errors: PolicyError[]): PolicyError[] {
  const seen = new Set<string>();
  return errors.filter((e) => !seen.has(e.message) && !!seen.add(e.message));
}

/**
 * attempt runs one independent piece of validation (a section, an entry, one src or dst).
 * Under checkPolicy (parsePolicy too reads through it) a PolicyError is recorded and
 * `fallback` stands in, so the pieces after it are still checked and a broken file is
 * reported in one round; outside one the error propagates unchanged.
 */
export function attempt<T>(fn: () => T, fallback: T): T {
  if (!collected) return fn();
  try {
    return fn();
  } catch (e) {
    if (!(e instanceof PolicyError)) throw e;
    collected.push(e);
    return fallback;
  }
}

export const present = <T>(v: T | null): v is T => v !== null;

/** suggester is the suggestions of the policy being read, or a fresh one outside a read. */
export function suggester(): Suggester {
  return suggesting ?? new Suggester();
}

/** didYouMean is `; did you mean "x"?` naming the candidate a slip away from name, or ''. */
export function didYouMean(kind: string, name: string, candidates: () => Iterable<string>, prefix = ''): string {
  return suggester().didYouMean(kind, name, candidates, prefix);
}

/** ACCEPT_WORDS are what other firewalls call "accept"; DENY_WORDS, rules Tailscale policies do not have. */
const ACCEPT_WORDS = new Set(['allow', 'allowed', 'permit', 'pass', 'accepted', 'grant']);
const DENY_WORDS = new Set(['deny', 'denied', 'drop', 'reject', 'block', 'refuse']);

/**
 * actionHint says what an unsupported rule action should be: the valid action it was meant to be ("allow",
 * "Accept" and "acept" are "accept"), why there is no deny, or which actions there are.
 */
export function actionHint(action: string, valid: string[]): string {
  const word = action.trim().toLowerCase();
  const quoted = valid.map((v) => JSON.stringify(v)).join(' or ');
  if (valid.includes(word)) return `; did you mean ${JSON.stringify(word)}? (actions are lower case)`;
  if (ACCEPT_WORDS.has(word)) return valid.includes('check') ? '; did you mean "accept"? (or "check", to ask for a recent login)' : '; did you mean "accept"?';
  if (DENY_WORDS.has(word)) return `; rules only allow (${quoted}), and what no rule allows is denied`;
  const near = didYouMean('action', word, () => valid);
  return near || `; use ${quoted}`;
}

type ObjNode = Extract<JNode, { kind: 'object' }>;

export function expectObject(n: JNode, what: string): ObjNode {
  if (n.kind !== 'object') err(`${what} must be an object`, n.pos);
  return n;
}

/** fields checks an object against its allowed keys and returns them by name. */
export function fields(n: JNode, what: string, allowed: string[]): Map<string, JNode> {
  const o = expectObject(n, what);
  const out = new Map<string, JNode>();
  for (const e of o.entries) {
    const known = attempt(() => {
      if (!allowed.includes(e.key)) err(`unknown field ${JSON.stringify(e.key)} in ${what}${didYouMean(`field of ${what}`, e.key, () => allowed)}`, e.keyPos);
      return true;
    }, false);
    if (known) out.set(e.key, e.value);
  }
  return out;
}

export function str(n: JNode | undefined, what: string): string {
  if (!n) return '';
  if (n.kind !== 'string') err(`${what} must be a string`, n.pos);
  return n.value;
}

export function strList(n: JNode | undefined, what: string): string[] {
  if (!n || n.kind === 'null') return [];
  if (n.kind !== 'array') err(`${what} must be a list of strings`, n.pos);
  return n.items.map((i) => str(i, what));
}

/**
 * dict is an object without a prototype for a policy's named entries: a name the policy writes is only ever its own
 * entry. In a `{}`, a host named "constructor" or "toString" would find Object.prototype's function (used as an
 * address set, it breaks every node's filter), and an app capability named "__proto__" would set the prototype.
 */
export function dict<T>(): Record<string, T> {
  return Object.create(null) as Record<string, T>;
}

/** capMap reads an `app` object: capability names, each with a list of values. */
export function capMap(n: JNode | undefined, what: string): Record<string, unknown[]> | null {
  if (!n || n.kind === 'null') return null;
  const o = expectObject(n, what);
  const out = dict<unknown[]>();
  for (const e of o.entries) {
    if (e.value.kind !== 'array') err(`${what}[${JSON.stringify(e.key)}] must be a list`, e.value.pos);
    out[e.key] = e.value.items.map(toPlain);
  }
  return out;
}

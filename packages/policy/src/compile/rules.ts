import { IPSet, parseSetText } from '../ip.js';
import type { FilterRule } from './types.js';

/**
 * What the compiler remembers of each FilterRule object, across contexts: rules are never modified once made, and
 * an extended context keeps the rule objects of the grants it does not compile again, so everything read from a
 * rule (its merge key, its parsed entries, its sources as a set) is read once per object.
 */

const RULE_KEYS = new WeakMap<FilterRule, string>();
/** LIST_KEYS: a SrcIPs list joined, once per list (srcList gives every rule from the same sources one list). */
const LIST_KEYS = new WeakMap<readonly string[], string>();

/** ruleKey is what rules merge by: their sources and protocols. */
export function ruleKey(r: FilterRule): string {
  let k = RULE_KEYS.get(r);
  if (k === undefined) {
    let list = LIST_KEYS.get(r.SrcIPs);
    if (list === undefined) LIST_KEYS.set(r.SrcIPs, list = r.SrcIPs.join(','));
    k = `${list}|${(r.IPProto ?? []).join(',')}`;
    RULE_KEYS.set(r, k);
  }
  return k;
}

/** PiecePorts are a rule's DstPorts entries parsed, each as a set, and their union. */
export interface PiecePorts { entrySets: IPSet[]; dsts: IPSet }

/**
 * PIECE_PORTS: a piece rule's DstPorts entries parsed and their union, once per rule object. A piece is merged in
 * every scope whose own rules share its key as well as in the global list, and its entries (thousands for a
 * destination of every member) are parsed once for all of them.
 */
const PIECE_PORTS = new WeakMap<FilterRule, PiecePorts>();

export function piecePorts(r: FilterRule): PiecePorts {
  let v = PIECE_PORTS.get(r);
  if (!v) {
    const entrySets = (r.DstPorts ?? []).map((d) => parseSetText(d.IP));
    v = { entrySets, dsts: new IPSet(entrySets.flatMap((x) => x.ranges)) };
    PIECE_PORTS.set(r, v);
  }
  return v;
}

/** knownPorts records what piecePorts would parse from a rule, for a rule made from sets already at hand. */
export function knownPorts(r: FilterRule, ports: PiecePorts): void {
  PIECE_PORTS.set(r, ports);
}

/** RULE_IDS numbers rule objects, so a merged rule is named by the very pieces it was merged from (PreRule.sig). */
const RULE_IDS = new WeakMap<FilterRule, number>();
let nextRuleId = 0;
export function ruleId(r: FilterRule): number {
  let id = RULE_IDS.get(r);
  if (id === undefined) { id = nextRuleId++; RULE_IDS.set(r, id); }
  return id;
}

/**
 * SRC_SETS holds, for a SrcIPs list rendered from a known set (IPSet.strings of a resolved source), that set:
 * merging then takes it instead of parsing the list back (thousands of addresses for autogroup:member).
 */
const SRC_SETS = new WeakMap<string[], IPSet>();
/** SRC_LISTS: the one SrcIPs list of each set, shared by every rule with those sources (rules are never modified). */
const SRC_LISTS = new WeakMap<IPSet, string[]>();

/** srcList is the SrcIPs list of a set of sources, one list object per set. */
export function srcList(set: IPSet): string[] {
  let out = SRC_LISTS.get(set);
  if (!out) {
    out = set.strings();
    SRC_SETS.set(out, set);
    SRC_LISTS.set(set, out);
  }
  return out;
}

/** sourcesOf is a rule's SrcIPs as a set: the one srcList rendered it from, or the list parsed. */
export function sourcesOf(r: FilterRule): IPSet {
  return SRC_SETS.get(r.SrcIPs) ?? parseAll(r.SrcIPs);
}

/** parseAll is the union of SrcIPs/DstPorts/CapGrant address texts (each remembered across contexts by parseSetText). */
export function parseAll(texts: string[]): IPSet {
  return texts.length === 1 ? parseSetText(texts[0]!) : new IPSet(texts.flatMap((t) => parseSetText(t).ranges));
}

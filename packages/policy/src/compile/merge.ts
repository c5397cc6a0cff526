import { IPSet, parseSetText } from '../ip.js';
import type { FlatEntries, Hit } from './hits.js';
import type { NodeList } from './node-lists.js';
import { piecePorts, ruleId, ruleKey, sourcesOf } from './rules.js';
import type { FilterRule, NetPortRange } from './types.js';

/**
 * Merging: a node's rules are its grants' rules in order with the DstPorts of rules from the same sources and
 * protocols joined at the first one's place (as Tailscale merges them). Each merged rule is a PreRule, its
 * addresses parsed once and shared by every node whose list holds it.
 */

/**
 * Piece is one rule of a node's unmerged rule sequence (for every grant in order: its global rules, then its
 * autogroup:self rules, then its via rules), with `pos` its place in that sequence (see piecePos). Merging by
 * position lets a node's merged list be assembled from the shared global list plus its own few pieces.
 */
export interface Piece { pos: number; rule: FilterRule }

export function piecePos(grant: number, part: 0 | 1 | 2, k: number): number {
  return (grant * 3 + part) * 65536 + k;
}

/**
 * PreRule is one merged filter rule with its addresses parsed once per context: its sources, every DstPorts
 * entry and CapGrant Dst, the unions the peer and route checks need, and (lazily) which nodes hold an address
 * in each entry. The same PreRule serves every node whose merged list contains it.
 */
export interface PreRule {
  rule: FilterRule;
  /** key is mergeRules' key (sources and protocols); null for a CapGrant rule, which is never merged. */
  key: string | null;
  firstPos: number;
  pieces: Piece[];
  srcs: IPSet;
  dsts: IPSet;
  entrySets: IPSet[];
  capSets: IPSet[][];
  capUnions: IPSet[];
  /** sig names the pieces merged into this rule (positions and rule objects): equal sigs, equal PreRules (see RuleMerger.keep). */
  sig: string;
  /** hits maps a node index to the DstPorts entries (in order) holding one of its addresses; hitLists interns them. */
  hits?: Map<number, Hit>;
  hitLists?: Map<string, Hit>;
  /** hitAsks counts the nodes that asked for their entries before hits was built (see hitOf). */
  hitAsks?: number;
  /** plain: the rule narrowed to a node's entries, by those entries' text (see plainRule); one map per key in a
   * context (RuleMerger.plainBySource). */
  plain?: Map<string, FilterRule>;
  peerSets?: { S: NodeList; D: NodeList };
  /** hitsSeen and peerSetsSeen: how many nodes (the first of the tailnet) hits and peerSets reflect (see RuleMerger.keep). */
  hitsSeen: number;
  peerSetsSeen: number;
  /** flat: entrySets as plain numbers, for hitIn's scan (made on first use, see flatOf). */
  flat?: FlatEntries;
}

/** PLAIN_KEPT_MAX bounds how many narrowed forms of one rule (PreRule.plain) an extension keeps. */
const PLAIN_KEPT_MAX = 4096;

/**
 * RuleMerger merges pieces into PreRules for one context. Over an extension it keeps the merged rules made of the
 * same pieces (the same positions and rule objects) as before, and with them what they know of the nodes, and the
 * narrowed forms of the rules of each key in use, so unchanged filters stay equal by identity.
 */
export class RuleMerger {
  /** reusable are the merged rules of the context before an extension, by PreRule.sig, until scopes are rebuilt. */
  private reusable?: Map<string, PreRule>;
  /**
   * plainBySource: per PreRule.key (sources and protocols), the rule narrowed to a node's entries, by those entries'
   * text (see plainRule), shared by every rule of that key in this context and kept over an extension for the keys
   * in use before it, so a rule that is merged again (a grant in it compiled again) hands its nodes the objects
   * they had when their entries did not change.
   */
  private plainBySource = new Map<string, Map<string, FilterRule>>();

  /**
   * merge is mergeRules over pieces sorted by position: DstPorts of rules with identical sources and
   * protocols joined at the first one's place, CapGrant rules kept apart. Each result is parsed once (PreRule).
   */
  merge(pieces: Piece[]): PreRule[] {
    const groups: { first: Piece; key: string | null; pieces: Piece[]; dstPorts: NetPortRange[] }[] = [];
    const index = new Map<string, number>();
    for (const p of pieces) {
      if (p.rule.CapGrant) { groups.push({ first: p, key: null, pieces: [p], dstPorts: [] }); continue; }
      const key = ruleKey(p.rule);
      const at = index.get(key);
      if (at !== undefined) {
        groups[at]!.pieces.push(p);
        groups[at]!.dstPorts.push(...(p.rule.DstPorts ?? []));
      } else {
        index.set(key, groups.length);
        groups.push({ first: p, key, pieces: [p], dstPorts: [...(p.rule.DstPorts ?? [])] });
      }
    }
    return groups.map((g) => {
      const sig = g.pieces.map((p) => `${p.pos}:${ruleId(p.rule)}`).join(',');
      // The same pieces merge into the same rule: an extended context keeps it, and what it knows of the nodes.
      const kept = this.reusable?.get(sig);
      if (kept) return kept;
      const rule = g.key === null ? g.first.rule : { ...g.first.rule, DstPorts: g.dstPorts };
      const parsed = g.pieces.map((p) => piecePorts(p.rule));
      const entrySets = parsed.length === 1 ? parsed[0]!.entrySets : parsed.flatMap((x) => x.entrySets);
      const capSets = (rule.CapGrant ?? []).map((c) => c.Dsts.map((d) => parseSetText(d)));
      const capUnions = capSets.map((sets) => new IPSet(sets.flatMap((s) => s.ranges)));
      // Two pieces' unions are merged in one pass; more are sorted together (runs in order sort in O(n log runs)).
      const entryUnion = parsed.length <= 2 ? parsed.slice(1).reduce((acc, x) => acc.union(x.dsts), parsed[0]!.dsts)
        : new IPSet(parsed.flatMap((x) => x.dsts.ranges));
      return {
        rule, key: g.key, firstPos: g.first.pos, pieces: g.pieces, sig,
        srcs: sourcesOf(rule),
        dsts: capUnions.length ? new IPSet([...entryUnion.ranges, ...capUnions.flatMap((s) => s.ranges)]) : entryUnion,
        entrySets, capSets, capUnions, hitsSeen: 0, peerSetsSeen: 0,
        plain: g.key === null ? undefined : this.plainFor(g.key),
      };
    });
  }

  private plainFor(key: string): Map<string, FilterRule> {
    let m = this.plainBySource.get(key);
    if (!m) this.plainBySource.set(key, m = new Map());
    return m;
  }

  /**
   * keep is an extension's start: the merged rules of `lists` (every list of the context so far) are offered to the
   * merges that follow, and only the narrowed forms of their keys stay, none grown past PLAIN_KEPT_MAX forms.
   */
  keep(lists: Iterable<PreRule[]>): void {
    const reusable = new Map<string, PreRule>();
    for (const list of lists) for (const p of list) reusable.set(p.sig, p);
    this.reusable = reusable;
    const plain = new Map<string, Map<string, FilterRule>>();
    for (const p of reusable.values()) {
      const m = p.key === null ? undefined : this.plainBySource.get(p.key);
      if (m && m.size <= PLAIN_KEPT_MAX) plain.set(p.key!, m);
    }
    this.plainBySource = plain;
  }

  /** doneKeeping lets the rules kept over an extension go once every list of the context is merged again. */
  doneKeeping(): void {
    this.reusable = undefined;
  }
}

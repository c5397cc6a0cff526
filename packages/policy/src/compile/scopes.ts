import type { Policy } from '../policy.js';
import type { CompiledGrant, GrantCompiler } from './grants.js';
import { RuleMerger, piecePos, type Piece, type PreRule } from './merge.js';
import type { NodeIndex, NodeInfo } from './nodes.js';
import { ruleKey } from './rules.js';
import { ALLOW_ALL, type FilterRule } from './types.js';

/**
 * Scope is what a group of nodes adds to the global rules: the autogroup:self rules of one user (shared by all
 * its untagged nodes) or the via rules of one router. `list` is the merged rule list of its owners, `extras` the
 * entries of it that are not global PreRules.
 */
export interface Scope {
  owners: number[];
  list: PreRule[];
  extras: PreRule[];
}

/**
 * RuleLists is each node's merged rule list: the global list every node shares (the grants' rules for every node,
 * merged), or its scope's list when the node has rules of its own. Lists are made on first use; an extension
 * drops them (extended) and they are made again, mostly of the merged rules kept over it (RuleMerger).
 */
export class RuleLists {
  /** compiled: the grants compiled and merged once, on first use (see grantsCompiled). */
  private compiled?: { grants: CompiledGrant[] | null; globalList: PreRule[]; globalByKey: Map<string, PreRule> };
  private nodeScopes: (Scope | null | undefined)[];
  private readonly userScopes = new Map<string, Scope | null>();
  /** selfPieces: each user's autogroup:self rules, kept across extensions for users that gained or lost no node. */
  private readonly selfPieces = new Map<string, Piece[]>();
  readonly merger = new RuleMerger();

  /** effective is the policy the grants come from (null: no policy, every node gets ALLOW_ALL). */
  constructor(private readonly effective: Policy | null, private readonly compiler: GrantCompiler, private readonly nodes: NodeIndex) {
    this.nodeScopes = new Array<Scope | null | undefined>(nodes.infos.length);
  }

  /**
   * grantsCompiled compiles the policy's grants and merges their rules on first use. A context asked only about
   * nodes' routes (approvedRoutesOf) never pays for it.
   */
  private grantsCompiled(): { grants: CompiledGrant[] | null; globalList: PreRule[]; globalByKey: Map<string, PreRule> } {
    if (this.compiled) return this.compiled;
    const grants = this.effective ? this.compiler.compileGrants(this.effective) : null;
    const globalByKey = new Map<string, PreRule>();
    let globalList: PreRule[];
    if (grants) {
      const pieces: Piece[] = [];
      grants.forEach((g, gi) => g.rules.forEach((rule, k) => pieces.push({ pos: piecePos(gi, 0, k), rule })));
      globalList = this.merger.merge(pieces);
      for (const p of globalList) if (p.key !== null) globalByKey.set(p.key, p);
    } else {
      globalList = this.merger.merge([{ pos: 0, rule: ALLOW_ALL[0]! }]);
    }
    this.compiled = { grants, globalList, globalByKey };
    return this.compiled;
  }
  /** grants are the compiled grants; null without a policy. */
  get grants(): CompiledGrant[] | null { return this.grantsCompiled().grants; }
  get globalList(): PreRule[] { return this.grantsCompiled().globalList; }
  private get globalByKey(): Map<string, PreRule> { return this.grantsCompiled().globalByKey; }

  /**
   * scopeOf is the node's own part of the rules: its user's autogroup:self rules (untagged nodes) or its via
   * rules (tagged routers); null when the node has only the global rules.
   */
  scopeOf(i: NodeInfo): Scope | null {
    let s = this.nodeScopes[i.idx];
    if (s !== undefined) return s;
    s = null;
    const grants = this.grants;
    if (grants) {
      if (!i.tagged && i.node.userId) {
        const uid = i.node.userId;
        s = this.userScopes.get(uid);
        if (s === undefined) {
          // A user's autogroup:self rules read only the user's own nodes (and whether each is in the grant's
          // source sets), so an extension keeps them for users that gained or lost no node: the sets change only
          // by the new and the moved nodes' memberships.
          let pieces = this.selfPieces.get(uid);
          if (!pieces) {
            const own: Piece[] = [];
            grants.forEach((g, gi) => {
              if (g.self) this.compiler.selfRules(g.self, i).forEach((rule, k) => own.push({ pos: piecePos(gi, 1, k), rule }));
            });
            this.selfPieces.set(uid, pieces = own);
          }
          s = pieces.length ? this.makeScope(pieces, (this.nodes.nodesByUser.get(uid) ?? []).map((n) => n.idx)) : null;
          this.userScopes.set(uid, s);
        }
      } else if (i.tagged) {
        const pieces: Piece[] = [];
        grants.forEach((g, gi) => {
          if (g.via) this.compiler.viaRules(g.via, i).forEach((rule, k) => pieces.push({ pos: piecePos(gi, 2, k), rule }));
        });
        if (pieces.length) s = this.makeScope(pieces, [i.idx]);
      }
    }
    this.nodeScopes[i.idx] = s;
    return s;
  }

  /** makeScope merges a scope's pieces with the global rules of the same keys; the other global rules stay shared. */
  private makeScope(pieces: Piece[], owners: number[]): Scope {
    const collided = new Set<string>();
    for (const p of pieces) {
      if (p.rule.CapGrant) continue;
      const k = ruleKey(p.rule);
      if (this.globalByKey.has(k)) collided.add(k);
    }
    const kept: PreRule[] = [];
    const toMerge = [...pieces];
    for (const g of this.globalList) {
      if (g.key !== null && collided.has(g.key)) toMerge.push(...g.pieces);
      else kept.push(g);
    }
    toMerge.sort((a, b) => a.pos - b.pos);
    const extras = this.merger.merge(toMerge);
    const list = [...kept, ...extras].sort((a, b) => a.firstPos - b.firstPos);
    return { owners, list, extras };
  }

  /** listOf is the node's merged rule list. */
  listOf(i: NodeInfo): PreRule[] {
    return this.scopeOf(i)?.list ?? this.globalList;
  }

  /** unreducedRules is every rule relevant to compiling this node's filter, before
   * dropping destinations the node does not serve. */
  unreducedRules(i: NodeInfo): FilterRule[] {
    if (!this.grants) return ALLOW_ALL;
    return this.listOf(i).map((p) => p.rule);
  }

  /** matchersOf are the parsed rules weighed for `n`'s routes: the global ones and its scope's own. */
  matchersOf(n: NodeInfo): PreRule[] {
    const s = this.scopeOf(n);
    return s ? [...this.globalList, ...s.extras] : this.globalList;
  }

  /** forgetSelf drops a user's autogroup:self rules (the user gained or lost a node). */
  forgetSelf(uid: string): void {
    this.selfPieces.delete(uid);
  }

  /**
   * extended drops every list once an extension has updated the nodes: the merged rules of the lists so far are
   * offered to the merges that make them again (RuleMerger.keep), and the scopes are made again on use.
   */
  extended(): void {
    if (this.compiled) {
      const lists = [this.compiled.globalList];
      for (const sc of this.userScopes.values()) if (sc) lists.push(sc.extras);
      this.merger.keep(lists);
      this.compiled = undefined;
    }
    this.userScopes.clear();
    this.nodeScopes = new Array<Scope | null | undefined>(this.nodes.infos.length);
  }
}

import { INTERNET, IPSet } from '../ip.js';
import { hitOf, plainRule } from './hits.js';
import type { PreRule } from './merge.js';
import { addressPrefixes, type NodeIndex, type NodeInfo } from './nodes.js';
import type { RuleLists } from './scopes.js';
import { ALLOW_ALL, type CapGrant, type FilterRule, type NetPortRange } from './types.js';

/**
 * Packet filters: each node's filter is its merged rule list narrowed to the destinations the node serves. A
 * node's filter is remembered per generation of the context (an extension starts the next) and, in the next one,
 * compiled again only against the rules its new list adds.
 */

/**
 * FilterMemo is a node's filter as compiled in one generation of a context (see PacketFilters.compile): the node as
 * it was then, its rule list, and for each rule of the filter, the merged rule that gave it.
 */
interface FilterMemo { info: NodeInfo; list: PreRule[]; generation: number; from: PreRule[]; out: FilterRule[] }

/**
 * ListMove: the merged rules a list of the next generation adds to one of the generation before (in list order),
 * those it drops, and among them the twins: an added rule of the same key (sources and protocols) and place as a
 * dropped one, whose DstPorts differ only in a few entries (see twinOf), found both ways (old to twin, twin to old).
 */
interface ListMove { added: PreRule[]; dropped: Set<PreRule>; twins: Map<PreRule, Twin>; twinned: Map<PreRule, Twin> }

/**
 * Twin: the rule that replaced a merged rule in the next generation, the addresses of the entries they differ in,
 * and (lazily, see movedBy) the nodes holding one of them, with how many nodes the context had then.
 */
interface Twin { old: PreRule; next: PreRule; changed: IPSet; moved?: Set<number>; movedSeen?: number }

/**
 * TWIN_MAX_CHANGED: a rule and its successor differing in more DstPorts entries than this are not twins (each node
 * is compiled against the successor then). A tag change or a join batch moves a few nodes' entries; a policy
 * change rewrites rules whole.
 */
const TWIN_MAX_CHANGED = 64;
/** TWIN_LOOKAHEAD: how far the entry diff of twins looks for where two DstPorts lists agree again. */
const TWIN_LOOKAHEAD = 8;

function sameEntry(x: NetPortRange, y: NetPortRange): boolean {
  return x.IP === y.IP && x.Ports.First === y.Ports.First && x.Ports.Last === y.Ports.Last;
}

/** PacketFilters compiles the nodes' packet filters of one context, across its generations. */
export class PacketFilters {
  /**
   * filterMemo: per node index, its filter as last compiled (see compile), from this generation or the one before;
   * listMoves: per rule list of the generation before, what its successor adds and drops.
   */
  private filterMemo: (FilterMemo | undefined)[] = [];
  private generation = 0;
  private listMoves = new WeakMap<PreRule[], Map<PreRule[], ListMove>>();
  /** twinOfRule: per dropped rule, its twin among the rules that replaced it (null: none), once per pair (see twinOf). */
  private twinOfRule = new WeakMap<PreRule, { next: PreRule; twin: Twin | null }>();
  /** twinsKept counts the rules a node's filter kept or skipped by a twin (see compile), for tests. */
  twinsKept = 0;

  constructor(private readonly rules: RuleLists, private readonly nodes: NodeIndex) {}

  /**
   * compile is the node's filter: only destinations the node itself serves. Each rule of the node's list gives
   * it at most one rule (ruleFor), which depends on that merged rule and on the node alone: an extension keeps the
   * merged rules made of the same pieces, and a node kept in place keeps its addresses and routes. So a node compiled
   * in the generation before (filterMemo) keeps what its kept rules gave it and is compiled against the rules its
   * new list adds (listMove), in list order, instead of against all of them: a join batch or a tag change replaces
   * a few of the rules, and every session's filter is compiled again in the flush that follows. The property tests
   * compare the result with a context built from scratch.
   */
  compile(i: NodeInfo): FilterRule[] {
    if (!this.rules.grants) return ALLOW_ALL;
    const list = this.rules.listOf(i);
    const memo = this.filterMemo[i.idx];
    const m = memo?.info === i ? memo : undefined;
    if (m?.list === list) return [...m.out];
    const plain = i.subnetSet.isEmpty() && i.exitRoutes.length === 0;
    const from: PreRule[] = [];
    const out: FilterRule[] = [];
    const take = (p: PreRule): void => {
      const r = this.ruleFor(p, i, plain);
      if (r) { from.push(p); out.push(r); }
    };
    if (m?.generation === this.generation - 1) {
      const move = this.listMove(m.list, list);
      // A rule replaced by its twin, with none of this node's addresses in the entries they differ in, gives a node
      // that routes nothing what the rule before gave it: the same rule (equal sources, protocols and entries of
      // its own) or nothing. A tag change replaces many rules so, and every node but the retagged one keeps what
      // it had from each of them instead of looking its entries up again.
      const unmoved = (t: Twin | undefined): boolean => {
        if (t === undefined || !plain || this.movedBy(t).has(i.idx)) return false;
        this.twinsKept++;
        return true;
      };
      const added = move.twinned.size ? move.added.filter((q) => !unmoved(move.twinned.get(q))) : move.added;
      let a = 0;
      m.from.forEach((p, k) => {
        let kept = p;
        if (move.dropped.has(p)) {
          const t = move.twins.get(p);
          if (!unmoved(t)) return;
          kept = t!.next;
        }
        while (a < added.length && added[a]!.firstPos < kept.firstPos) take(added[a++]!);
        from.push(kept);
        out.push(m.out[k]!);
      });
      while (a < added.length) take(added[a++]!);
    } else {
      for (const p of list) take(p);
    }
    this.filterMemo[i.idx] = { info: i, list, generation: this.generation, from, out };
    return [...out];
  }

  /**
   * nextGeneration starts an extension's generation: a node's filter compiled in the generation now ending is the
   * base of its next one; older ones would keep the rule lists (and those rules' node indexes) of generations long gone.
   */
  nextGeneration(): void {
    this.filterMemo = this.filterMemo.map((m) => (m?.generation === this.generation ? m : undefined));
    this.generation++;
  }

  /** listMove is what `next` adds to `prev` (in list order) and drops from it, once per pair of lists. */
  private listMove(prev: PreRule[], next: PreRule[]): ListMove {
    let row = this.listMoves.get(prev);
    if (!row) this.listMoves.set(prev, row = new Map());
    let move = row.get(next);
    if (!move) {
      const was = new Set(prev), now = new Set(next);
      const added = next.filter((p) => !was.has(p)), dropped = new Set(prev.filter((p) => !now.has(p)));
      const twins = new Map<PreRule, Twin>(), twinned = new Map<PreRule, Twin>();
      if (added.length && dropped.size) {
        // Pair by key: one dropped and one added rule of each key at most (a list holds a key once).
        const byKey = new Map<string, PreRule | null>();
        for (const p of dropped) if (p.key !== null) byKey.set(p.key, byKey.has(p.key) ? null : p);
        const addedKeys = new Map<string, number>();
        for (const q of added) if (q.key !== null) addedKeys.set(q.key, (addedKeys.get(q.key) ?? 0) + 1);
        for (const q of added) {
          const p = q.key === null || addedKeys.get(q.key) !== 1 ? undefined : byKey.get(q.key);
          const t = p ? this.twinOf(p, q) : null;
          if (t) { twins.set(t.old, t); twinned.set(q, t); }
        }
      }
      move = { added, dropped, twins, twinned };
      row.set(next, move);
    }
    return move;
  }

  /** movedBy is the nodes with an address in the entries the twins differ in (usually the one retagged node). */
  private movedBy(t: Twin): Set<number> {
    const n = this.nodes.infos.length;
    if (!t.moved || t.movedSeen !== n) {
      t.moved = new Set(this.nodes.nodesWithAddrIn(t.changed));
      t.movedSeen = n;
    }
    return t.moved;
  }

  /**
   * twinOf is `next` as old's twin, or null: the same key and first place, and DstPorts that an in-order walk of
   * both lists aligns entry for entry but for at most TWIN_MAX_CHANGED entries; `changed` holds those entries'
   * addresses. A node with no address among them holds the same entries, in the same order, in both rules (every
   * entry holding one of its addresses is aligned with an equal one). Once per pair of rules.
   */
  private twinOf(old: PreRule, next: PreRule): Twin | null {
    const known = this.twinOfRule.get(old);
    if (known?.next === next) return known.twin;
    let twin: Twin | null = null;
    if (old.firstPos === next.firstPos && !old.rule.CapGrant && !next.rule.CapGrant) {
      const a = old.rule.DstPorts ?? [], b = next.rule.DstPorts ?? [];
      const changed: IPSet[] = [];
      let i = 0, j = 0;
      while ((i < a.length || j < b.length) && changed.length <= TWIN_MAX_CHANGED) {
        if (i < a.length && j < b.length && sameEntry(a[i]!, b[j]!)) { i++; j++; continue; }
        // Where do they agree again: d entries dropped from old, or d entries inserted in next.
        let d = 1;
        for (; d <= TWIN_LOOKAHEAD; d++) {
          if (j < b.length && i + d < a.length && sameEntry(a[i + d]!, b[j]!)) { while (d--) changed.push(old.entrySets[i++]!); break; }
          if (i < a.length && j + d < b.length && sameEntry(a[i]!, b[j + d]!)) { while (d--) changed.push(next.entrySets[j++]!); break; }
        }
        if (d > TWIN_LOOKAHEAD) {
          if (i < a.length) changed.push(old.entrySets[i++]!);
          if (j < b.length) changed.push(next.entrySets[j++]!);
        }
      }
      if (changed.length <= TWIN_MAX_CHANGED) twin = { old, next, changed: new IPSet(changed.flatMap((x) => x.ranges)) };
    }
    this.twinOfRule.set(old, { next, twin });
    return twin;
  }

  /** ruleFor is what merged rule p gives node i's filter (undefined: nothing); plain: i routes nothing. */
  private ruleFor(p: PreRule, i: NodeInfo, plain: boolean): FilterRule | undefined {
    const r = p.rule;
    if (r.CapGrant) {
      const caps: CapGrant[] = [];
      r.CapGrant.forEach((cg, c) => {
        const dsts = new Set<string>();
        if (plain) {
          i.addrs.forEach((a, k) => { if (p.capUnions[c]!.containsAddr(a)) dsts.add(addressPrefixes(i)[k]!); });
        } else {
          cg.Dsts.forEach((d, k) => {
            const set = p.capSets[c]![k]!;
            i.addrs.forEach((a, ak) => { if (set.containsAddr(a)) dsts.add(addressPrefixes(i)[ak]!); });
            if (set.overlaps(i.subnetSet)) dsts.add(d);
          });
        }
        if (dsts.size > 0) caps.push({ Dsts: [...dsts].sort(), CapMap: cg.CapMap });
      });
      return caps.length > 0 ? { SrcIPs: r.SrcIPs, CapGrant: caps } : undefined;
    }
    // A node that routes nothing serves exactly the entries holding its own addresses: read them from the index.
    const own = hitOf(p, i, this.nodes);
    if (plain) return own && plainRule(p, own);
    // A router or exit node: the entries holding its own addresses (the index), those overlapping its routes and,
    // for an exit node, those within the internet. A rule reaching none of that is skipped whole, without testing
    // each of its entries (autogroup:member lists hundreds) for the few routers.
    const routed = !i.subnetSet.isEmpty() && p.dsts.overlaps(i.subnetSet);
    const exits = i.exitRoutes.length > 0 && p.dsts.overlaps(INTERNET);
    if (!routed && !exits) return own && plainRule(p, own);
    const dsts: NetPortRange[] = [];
    let k = 0;
    (r.DstPorts ?? []).forEach((d, e) => {
      if (own && own.es[k] === e) { k++; dsts.push(d); return; }
      const set = p.entrySets[e]!;
      if ((routed && set.overlaps(i.subnetSet)) || (exits && set.subsetOf(INTERNET))) dsts.push(d);
    });
    return dsts.length > 0 ? { ...r, DstPorts: dsts } : undefined;
  }
}

import type { Node, State } from '@headway/core';
import { OWNER_SETS_MAX } from './fanout-knobs.js';
import type { MapSession } from './map-session.js';

/** OwnerOf answers a node's owner id (undefined for a node gone); count() is how many distinct owners the tailnet has. */
export type OwnerOf = ((id: number) => number | undefined) & { count: () => number };

/**
 * ownerMemo is an OwnerOf that looks each node up once, for one flush: a policy change marks every session
 * rebuilt, and each of them walks its peers' owners.
 */
export function ownerMemo(state: State, ownerId: (n: Node) => number): OwnerOf {
  const memo = new Map<number, number | undefined>();
  let distinct: number | undefined;
  const ownerOf = (id: number): number | undefined => {
    let o = memo.get(id);
    if (o === undefined && !memo.has(id)) {
      const n = state.nodes.get(id);
      o = n ? ownerId(n) : undefined;
      memo.set(id, o);
    }
    return o;
  };
  return Object.assign(ownerOf, {
    count: () => (distinct ??= new Set(state.nodes.list().map(ownerId)).size),
  });
}

/**
 * OwnerSets holds the distinct shownOwners sets, one shared by every session showing the same owners (a session's
 * set is replaced, never changed): devices of one peer class show the same few owners.
 */
export class OwnerSets {
  private readonly sets = new Map<string, ReadonlySet<number>>();

  /** of is the shared set of these owner ids. */
  of(ids: Iterable<number>): ReadonlySet<number> {
    const sorted = [...ids].sort((a, b) => a - b);
    const key = sorted.join(',');
    let set = this.sets.get(key);
    if (!set) {
      // Kept while in use, bounded: past the bound the table starts over (sessions keep the sets they hold).
      if (this.sets.size >= OWNER_SETS_MAX) this.sets.clear();
      set = new Set(sorted);
      this.sets.set(key, set);
    }
    return set;
  }

  /**
   * rebuilt records that the session's client rebuilt its netmap: it now shows its own and its peers' owners. The
   * walk stops once every owner in the tailnet is in (a handful, met within a few dozen peers).
   */
  rebuilt(s: MapSession, ownerOf: OwnerOf): void {
    const owners = new Set<number>();
    const mine = ownerOf(s.nodeId);
    if (mine !== undefined) owners.add(mine);
    const all = ownerOf.count();
    if (owners.size < all) {
      s.peers.some((id) => {
        const o = ownerOf(id);
        if (o !== undefined) owners.add(o);
        return owners.size >= all;
      });
    }
    s.shownOwners = this.of(owners);
  }
}

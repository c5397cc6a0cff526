import { ALL, INTERNET, IPSet, TAILNET_WILDCARD } from '../ip.js';
import type { Alias, Policy } from '../policy.js';
import type { NodeIndex, NodeInfo } from './nodes.js';

/**
 * AliasResolver turns a policy's aliases into address sets on one tailnet, each alias once: the same set object
 * for the same alias, so that everything derived from a set (its nodes, its rendering) is derived once too. A
 * context's extension grows or recomputes the sets the changed nodes touch and keeps the identity of the others.
 */
export class AliasResolver {
  private readonly resolved = new Map<string, IPSet | null>();
  /** resolvedAliases: the alias behind each key of `resolved` (an extension grows the sets of those the new nodes join). */
  private readonly resolvedAliases = new Map<string, Alias>();
  private resolvedAll = new WeakMap<Alias[], IPSet>();
  /** resolvedLists: each alias list's sets (resolveList), once per list and extension. */
  private resolvedLists = new WeakMap<Alias[], (IPSet | null)[]>();

  constructor(private readonly policy: Policy | null, private readonly nodes: NodeIndex) {}

  /** resolve turns an alias into addresses; null for autogroup:self (resolved per node). Memoized per alias. */
  resolve(a: Alias): IPSet | null {
    switch (a.kind) {
      case 'wildcard': return TAILNET_WILDCARD;
      case 'host': return this.policy?.hosts[a.name] ?? new IPSet();
      case 'prefix': return a.set;
      default: {
        const key = `${a.kind}\u0000${a.kind === 'userDomain' ? a.domain : a.name}`;
        let v = this.resolved.get(key);
        if (v === undefined) {
          v = this.resolveUncached(a);
          this.resolved.set(key, v);
          this.resolvedAliases.set(key, a);
        }
        return v;
      }
    }
  }

  private resolveUncached(a: Alias): IPSet | null {
    const pol = this.policy;
    const nodes = this.nodes;
    const union = (infos: NodeInfo[]) => new IPSet(infos.flatMap((i) => i.ips.ranges));
    switch (a.kind) {
      case 'user': return union(nodes.nodesOfUser(nodes.userOf(a.name)));
      case 'userDomain': {
        const suffix = '@' + a.domain.toLowerCase();
        const out: NodeInfo[] = [];
        for (const [uid, list] of nodes.nodesByUser) {
          const u = nodes.userById.get(uid);
          if (u?.email && u.email.toLowerCase().endsWith(suffix)) out.push(...list);
        }
        return union(out);
      }
      case 'group': {
        const bare = a.name.slice('group:'.length);
        const fromProvider = nodes.users.filter((u) => u.groups?.includes(bare));
        return union([...(pol?.groups[a.name] ?? []).map((m) => nodes.userOf(m)), ...fromProvider].flatMap((u) => nodes.nodesOfUser(u)));
      }
      case 'tag': return union(nodes.nodesByTag.get(a.name) ?? []);
      case 'autogroup':
        switch (a.name) {
          case 'autogroup:internet': return INTERNET;
          case 'autogroup:member': return union(nodes.infos.filter((i) => !i.tagged));
          case 'autogroup:tagged': return union(nodes.infos.filter((i) => i.tagged));
          case 'autogroup:danger-all': return ALL;
          default: return null;
        }
      default: return this.resolve(a);
    }
  }

  /**
   * resolveList is resolve of every alias of a list, once per list: an acl's grants (one per destination) share its
   * source list, which would otherwise be resolved again for each destination.
   */
  resolveList(aliases: Alias[]): (IPSet | null)[] {
    let v = this.resolvedLists.get(aliases);
    if (!v) {
      v = aliases.map((a) => this.resolve(a));
      this.resolvedLists.set(aliases, v);
    }
    return v;
  }

  /** resolveAll is the union of a list's sets, once per list. */
  resolveAll(aliases: Alias[]): IPSet {
    let v = this.resolvedAll.get(aliases);
    if (!v) {
      v = new IPSet(this.resolveList(aliases).flatMap((x) => x?.ranges ?? []));
      this.resolvedAll.set(aliases, v);
    }
    return v;
  }

  /**
   * differing is the keys of the aliases resolved so far whose sets `was` and `now` resolve differently: those a
   * moved node leaves or enters, when `was` resolves on the moved nodes as they were and `now` as they are.
   */
  differing(was: (a: Alias) => IPSet | null, now: (a: Alias) => IPSet | null): Set<string> {
    const dirty = new Set<string>();
    for (const [key, alias] of this.resolvedAliases) {
      const a = was(alias);
      const b = now(alias);
      if (a && b && !a.equals(b)) dirty.add(key);
    }
    return dirty;
  }

  /** grow adds to each set resolved so far (but those of `dirty`) what `more` resolves its alias to on the new nodes alone. */
  grow(more: (a: Alias) => IPSet | null, dirty: Set<string>): void {
    for (const [key, set] of this.resolved) {
      if (dirty.has(key)) continue;
      const extra = set && more(this.resolvedAliases.get(key)!);
      if (set && extra && !extra.isEmpty() && !extra.subsetOf(set)) this.resolved.set(key, set.union(extra));
    }
  }

  /** resolveAgain resolves the aliases of `dirty` from scratch, on the nodes as they are now. */
  resolveAgain(dirty: Set<string>): void {
    for (const key of dirty) this.resolved.set(key, this.resolveUncached(this.resolvedAliases.get(key)!));
  }

  /** newGeneration drops the per-list results, which name sets from before an extension. */
  newGeneration(): void {
    this.resolvedAll = new WeakMap();
    this.resolvedLists = new WeakMap();
  }
}

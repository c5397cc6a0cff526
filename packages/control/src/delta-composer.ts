import { peerListOf, type CompiledNode } from '@headway/policy';
import type { Node, NodeID, PeerChange, State, UserProfile, WireNode } from '@headway/core';
import { filterUpdate } from './filter-chunks.js';
import type { Mapper } from './mapper.js';
import type { MapSession } from './map-session.js';
import { encode, jsonArray, member, type Json, type Member } from './map-json.js';
import { DeltaMessage, sharedKey } from './delta-message.js';
import type { FanoutCounters } from './delta-encoder.js';
import { ownerMemo, type OwnerOf, type OwnerSets } from './owners.js';
import type { Batch } from './pending-batch.js';
import { ListDiffs, PeerSet } from './peerset.js';
import { UNSHARED_KEY_LENGTH } from './fanout-knobs.js';

/** Profile is an owner's UserProfile text and id. */
interface Profile { readonly id: number; readonly json: Json<UserProfile> }

/**
 * Upserts are the nodes a message sends whole (PeersChanged), that part's key among the flush's shared parts, and
 * their owners' profiles, each once; for sessions moving between the same two shared peer lists also the
 * PeersRemoved member and the ids as a set, made for the first that needs them.
 */
interface Upserts {
  readonly nodes: readonly Node[];
  readonly key: string;
  readonly owners: readonly Profile[];
  removed?: Member;
  ids?: Set<number>;
}

/** What the composer reads and records beyond the batch. */
export interface ComposerDeps {
  readonly state: State;
  readonly mapper: Mapper;
  readonly owners: OwnerSets;
  readonly counters: FanoutCounters;
}

/**
 * peerSetOf is a compiled node's peers as a session holds them: its peer class's shared list, parsed once per class,
 * less the node itself (a copied result, which has no class list, gives its own).
 */
export function peerSetOf(view: CompiledNode): PeerSet {
  const list = peerListOf(view);
  return list ? PeerSet.ofList(list.ids, Number(list.self)) : PeerSet.ofList(view.peers);
}

const removedMember = (gone: readonly NodeID[]): Member => member('PeersRemoved', encode(gone as NodeID[]));

/**
 * DeltaComposer makes each session's message of one flush from the batch: the smallest MapResponse that brings
 * what its client holds up to date (patches for online, endpoint and key changes, PeersChanged for nodes sent whole,
 * PeersRemoved, PacketFilters and SSHPolicy when visibility or the policy changed, the profiles of owners it newly
 * shows), and records in the session what it was sent. Text that many sessions send is made once per flush.
 */
export class DeltaComposer {
  private readonly userText: ReadonlyMap<number, Json<UserProfile>>;
  private readonly profileText = new Map<number, Profile>();
  private readonly ownerOf: OwnerOf;
  private readonly peerText: ReadonlyMap<number, Json<WireNode>>;
  private readonly patchText: ReadonlyMap<number, Json<PeerChange>>;
  /** sharedText: the PeersChanged and PeersChangedPatch members of this flush, by key (see sharedKey). */
  private readonly sharedText = new Map<string, Member>();
  /** listDiffs: sessions of one peer class move between the same two shared lists; their difference is walked once. */
  private readonly listDiffs = new ListDiffs<Upserts>();
  /** upserts: the lists of nodes sent whole in this flush, by key: most sessions send one of a few. */
  private readonly upserts = new Map<string, Upserts>();
  /** allFull: the batch's whole list of nodes sent whole, which a content-only flush sends most sessions. */
  private allFull: Upserts | undefined;
  /** allPatches: the PeersChangedPatch part of every patch in the batch, which most sessions send. */
  private allPatches: { key: string; text: Member } | undefined;

  constructor(private readonly batch: Batch, private readonly d: ComposerDeps) {
    this.userText = new Map(batch.users.map((u) => [u.id, d.mapper.userProfile(u)] as const));
    this.ownerOf = ownerMemo(d.state, (n) => d.mapper.ownerId(n));
    this.peerText = new Map(batch.full.map((n) => [n.id, d.mapper.peer(n)] as const));
    this.patchText = new Map(batch.patches.map(({ change }) => [change.NodeID, encode(change)] as const));
  }

  /** messageFor is the session's message (undefined: nothing for it), and records what the session now holds. */
  messageFor(s: MapSession): DeltaMessage | undefined {
    const { mapper, state } = this.d;
    const me = state.nodes.get(s.nodeId);
    if (!me) return undefined;
    const m = new DeltaMessage(UNSHARED_KEY_LENGTH);
    // newer(seq): the change numbered seq came after this session's full map was rendered.
    const newer = (seq: number | undefined): boolean => seq !== undefined && seq > s.renderedAt;
    const selfChanged = newer(this.batch.self.get(s.nodeId));
    if (selfChanged) m.add('Node', mapper.selfNode(me, s.capVersion));
    // A renamed node's certificate name changes with it: the client reads CertDomains from DNSConfig only.
    if (selfChanged && mapper.certDomain(me) !== s.certDomain) {
      s.certDomain = mapper.certDomain(me);
      m.add('DNSConfig', encode(mapper.dnsConfig(me)));
    }
    const { gone, upsert, ups, removed } = this.batch.structural ? this.visibility(s, m, newer) : this.contentOnly(s, newer);
    if (gone.length) m.addMember('PeersRemoved', removed ?? removedMember(gone));
    let upserts = ups;
    if (upsert.length) {
      upserts ??= this.upsertsOf(upsert);
      m.addShared('PeersChanged', upserts.key, this.shared(upserts.key, () =>
        member('PeersChanged', jsonArray(upsert.map((n) => this.peerText.get(n.id) ?? mapper.peer(n))))));
    }
    const stale = this.offerProfiles(s, m, selfChanged ? me : undefined, upsert.length ? upserts!.owners : []);
    // A node sent whole in this message absorbs its patch (its text was made now).
    const patches = this.batch.patches;
    const sent = upsert.length && patches.length ? (upserts!.ids ??= new Set(upsert.map((n) => n.id))) : undefined;
    const mine = patches.filter(({ change, seq }) => newer(seq) && s.peers.has(change.NodeID) && !sent?.has(change.NodeID));
    if (mine.length) {
      // Every patch of the batch (the usual case) is the part every such session shares, made once.
      const part = mine.length === patches.length ? (this.allPatches ??= this.patchPart(mine)) : this.patchPart(mine);
      m.addShared('PeersChangedPatch', part.key, part.text);
    }
    // Clients apply profiles and peer changes without rebuilding their netmap, and `tailscale status` shows the
    // owners of the last rebuild: a message showing an owner that netmap lacks also resends the (unchanged) Domain,
    // which makes every client rebuild it.
    const rebuilds = selfChanged || m.has('SSHPolicy');
    if (stale && !rebuilds) m.add('Domain', encode(mapper.domain()));
    if (stale || rebuilds) this.d.owners.rebuilt(s, this.ownerOf);
    return m.length ? m : undefined;
  }

  /**
   * visibility: who the session sees may have changed. It is sent the peers new to it and those it holds whose entry
   * changed since its map, its filter's changed chunks and its SSH policy when changed.
   */
  private visibility(s: MapSession, m: DeltaMessage, newer: (seq: number | undefined) => boolean): Delta {
    const { mapper } = this.d;
    const { fullSeq } = this.batch;
    const view = mapper.view.forNode(s.nodeId);
    const next = peerSetOf(view);
    let gone: readonly number[];
    let ups: Upserts;
    let removed: Member | undefined;
    // The batch's changed nodes are usually few: look those up in the two sets rather than every peer in the map.
    if (fullSeq.size < next.size) {
      // Sessions of one peer class moving between the same two shared lists get the same difference, and build its
      // nodes, its part's key and owners once.
      const pair = s.peers.sharedChanges(next, this.listDiffs);
      const diff = pair ?? s.peers.changes(next);
      gone = diff.gone;
      let held: number[] | undefined;
      for (const [id, seq] of fullSeq) {
        if (newer(seq) && next.has(id) && s.peers.has(id)) (held ??= []).push(id);
      }
      if (held) ups = this.upsertsOf(this.nodesOf([...diff.added, ...held].sort((a, b) => a - b)));
      else if (pair) {
        // A copy: its PeersRemoved member is this pair's, while the list may be another's too.
        ups = pair.memo ??= { ...this.upsertsOf(this.nodesOf(diff.added)) };
        if (gone.length) removed = ups.removed ??= removedMember(gone);
      } else ups = this.upsertsOf(this.nodesOf(diff.added));
    } else {
      const ids: number[] = [];
      gone = s.peers.diff(next, (id, added) => { if (added || newer(fullSeq.get(id))) ids.push(id); });
      ups = this.upsertsOf(this.nodesOf(ids));
    }
    s.peers = next;
    const update = filterUpdate(s.filterRules, s.filterNames, view.packetFilter);
    s.filterRules = view.packetFilter;
    s.filterNames = update.names;
    if (update.pieces !== null) m.addFilter(update);
    const ssh = mapper.sshJson(s.nodeId);
    if (ssh !== s.ssh) { m.add('SSHPolicy', ssh); s.ssh = ssh; }
    return { gone, upsert: ups.nodes, ups, removed };
  }

  /** contentOnly: visibility did not change (every node sees every node, or only content changed). */
  private contentOnly(s: MapSession, newer: (seq: number | undefined) => boolean): Delta {
    const { removed, full, fullSeq } = this.batch;
    const gone = removed.length ? removed.filter((id) => s.peers.delete(id)) : removed;
    if (!full.length) return { gone, upsert: [] };
    const policy = this.d.mapper.view.hasPolicy;
    const upsert = full.filter((n) => newer(fullSeq.get(n.id)) && (policy ? s.peers.has(n.id) : n.id !== s.nodeId));
    // Under a policy every node sent is one the session holds; without one, every node is its peer.
    if (!policy) for (const n of upsert) s.peers.add(n.id);
    // The same nodes as the batch's (a filter keeps order): the list every such session shares.
    const ups = upsert.length === full.length ? (this.allFull ??= this.upsertsOf(full)) : undefined;
    return { gone, upsert, ups };
  }

  /**
   * offerProfiles adds the profiles of every owner this message introduces or changes, once per session: the
   * node's own owner first, then its new peers', then users renamed. True when the client's netmap does not show
   * one of them (see shownOwners).
   */
  private offerProfiles(s: MapSession, m: DeltaMessage, self: Node | undefined, owners: readonly Profile[]): boolean {
    if (!self && !owners.length && !this.userText.size) return false;
    const profiles: Json<UserProfile>[] = [];
    let stale = false;
    const offer = (id: number, json: Json<UserProfile>, introduced: boolean): void => {
      if (introduced && !s.shownOwners.has(id)) stale = true;
      if (s.profiles.get(id) === json) return;
      if (s.shownOwners.has(id)) stale = true; // a changed profile the client's netmap shows
      s.profiles.set(id, json);
      profiles.push(json);
    };
    if (self) { const p = this.profileOf(self); offer(p.id, p.json, true); }
    for (const p of owners) offer(p.id, p.json, true);
    for (const [id, json] of this.userText) if (s.profiles.has(id)) offer(id, json, false);
    if (profiles.length) m.add('UserProfiles', jsonArray(profiles));
    return stale;
  }

  private patchPart(patches: Batch['patches']): { key: string; text: Member } {
    const key = sharedKey('PeersChangedPatch', patches.map((p) => p.change.NodeID));
    return { key, text: this.shared(key, () => member('PeersChangedPatch', jsonArray(patches.map((p) => this.patchText.get(p.change.NodeID)!)))) };
  }

  private shared(key: string, build: () => Member): Member {
    let text = this.sharedText.get(key);
    if (text === undefined) { text = build(); this.sharedText.set(key, text); }
    return text;
  }

  private profileOf(n: Node): Profile {
    let p = this.profileText.get(n.id);
    if (!p) { p = this.d.mapper.profile(n); this.profileText.set(n.id, p); }
    return p;
  }

  private nodesOf(ids: readonly number[]): Node[] {
    const nodes: Node[] = [];
    for (const id of ids) {
      const n = this.d.state.nodes.get(id);
      if (n) nodes.push(n);
    }
    return nodes;
  }

  private upsertsOf(nodes: readonly Node[]): Upserts {
    const key = sharedKey('PeersChanged', nodes.map((n) => n.id));
    const known = this.upserts.get(key);
    if (known) return known;
    if (nodes.length) this.d.counters.upsertLists++;
    const owners: Profile[] = [];
    const seen = new Map<number, string>();
    for (const n of nodes) {
      const p = this.profileOf(n);
      if (seen.get(p.id) !== p.json) { seen.set(p.id, p.json); owners.push(p); }
    }
    const ups: Upserts = { nodes, key, owners };
    this.upserts.set(key, ups);
    return ups;
  }
}

/** Delta is how a session's peers change in a message: removed, sent whole, and what of it is shared. */
interface Delta {
  readonly gone: readonly number[];
  readonly upsert: readonly Node[];
  readonly ups?: Upserts;
  readonly removed?: Member;
}

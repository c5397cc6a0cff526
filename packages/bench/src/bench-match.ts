/**
 * bench-match judges whether a benchmark device holds exactly the peers the policy lets it see. The workers check
 * that after every message each watched device applies; a scan of every peer per message (O(peers) each, thousands
 * at 10,000 devices) would be the largest single item of the workers' CPU in a measured change, CPU taken from the
 * server on shared cores and added to the very latency being measured. MatchingPeers keeps the answer up
 * to date as the netmap's peer map is edited instead, at O(1) per peer added or removed.
 */
import { bitsHas, type Node, type NodeID, type PeerBits } from '@headway/testkit';

/** Wanted is one device's expected peers: a bitset of plan indices and its population count. */
export interface Wanted { bits: PeerBits; size: number }

/** PeerIndex names the plan index of a peer (undefined: no device of the plan). */
export type PeerIndex = (peer: Node) => number | undefined;

/** peersMatch is the whole check: the peers are exactly the wanted plan indices. */
export function peersMatch(peers: ReadonlyMap<NodeID, Node>, want: Wanted, indexOf: PeerIndex): boolean {
  if (peers.size !== want.size) return false;
  for (const p of peers.values()) {
    const i = indexOf(p);
    if (i === undefined || !bitsHas(want.bits, i)) return false;
  }
  return true;
}

/**
 * MatchingPeers is a netmap's peer map that counts, as it is edited, how many of its peers are wanted: it holds
 * exactly the wanted peers when that count and its size both equal the wanted size. watch() sets what is wanted
 * and counts once from scratch. A peer's plan index is read when it is added or removed, so indexOf must answer
 * the same for one peer object throughout (the benchmark's devices keep their node keys).
 */
export class MatchingPeers extends Map<NodeID, Node> {
  private want: Wanted | undefined;
  private wanted = 0;

  constructor(private readonly indexOf: PeerIndex) {
    super();
  }

  /** watch makes want the peers matched against (undefined: none) and recounts. */
  watch(want: Wanted | undefined): void {
    this.want = want;
    this.wanted = 0;
    for (const p of super.values()) this.wanted += this.weight(p);
  }

  /** matches: exactly the watched peers are held (false when nothing is watched). */
  matches(): boolean {
    return this.want !== undefined && this.size === this.want.size && this.wanted === this.want.size;
  }

  override set(id: NodeID, node: Node): this {
    const old = super.get(id);
    if (old) this.wanted -= this.weight(old);
    this.wanted += this.weight(node);
    return super.set(id, node);
  }

  override delete(id: NodeID): boolean {
    const old = super.get(id);
    if (!old) return false;
    this.wanted -= this.weight(old);
    return super.delete(id);
  }

  override clear(): void {
    this.wanted = 0;
    super.clear();
  }

  private weight(p: Node): number {
    if (!this.want) return 0;
    const i = this.indexOf(p);
    return i !== undefined && bitsHas(this.want.bits, i) ? 1 : 0;
  }
}

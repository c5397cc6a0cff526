/**
 * bench-match judges whether a benchmark device holds exactly the peers the policy lets it see, by a scan of every
 * peer (the check of a device keeping whole nodes; bench-compact.ts keeps the answer up to date as a compact peer
 * map is edited).
 */
import { bitsHas, type Node, type NodeID, type PeerBits } from '@headway/testkit';

/** Wanted is one device's expected peers: a bitset of plan indices and its population count. */
export interface Wanted { bits: PeerBits; size: number }

/** PeerIndex names the plan index of a peer (undefined: no device of the plan). */
export type PeerIndex = (peer: Node) => number | undefined;

/** peersMatch is the whole check: the peers are exactly the wanted plan indices, each once. */
export function peersMatch(peers: ReadonlyMap<NodeID, Node>, want: Wanted, indexOf: PeerIndex): boolean {
  if (peers.size !== want.size) return false;
  const seen = new Uint32Array(want.bits.length);
  for (const p of peers.values()) {
    const i = indexOf(p);
    if (i === undefined || !bitsHas(want.bits, i) || bitsHas(seen, i)) return false;
    seen[i >>> 5]! |= 1 << (i & 31);
  }
  return true;
}

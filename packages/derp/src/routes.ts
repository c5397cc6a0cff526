import type { ClientConn } from './conn.js';
import { encodeFrame, FrameType, looksLikeDisco, PeerGoneReason } from './frames.js';
import { KEY_LENGTH } from './keys.js';
import type { DerpServerStats, MeshForwarder } from './types.js';

/** keyHexOf turns `nodekey:<hex>` (or bare hex) into the lower-case hex the tables are keyed by. */
export function keyHexOf(nodePublicKey: string): string {
  if (typeof nodePublicKey !== 'string') return '';
  return nodePublicKey.startsWith('nodekey:') ? nodePublicKey.slice(8).toLowerCase() : nodePublicKey.toLowerCase();
}

/**
 * Routes knows where every node of the region can be reached: logged-in clients of this
 * relay, and nodes connected to other relays through their mesh peers. It forwards packets
 * accordingly, tells mesh watchers who comes and goes, and sends PeerGone to the clients
 * that heard from a node once the node is reachable nowhere.
 */
export class Routes {
  /** clients maps raw-key hex to the one active connection for that key. */
  private readonly clients = new Map<string, ClientConn>();
  /** receiversOf maps a sender's key hex to connections it has sent to, who get PeerGone when it leaves. */
  private readonly receiversOf = new Map<string, Set<ClientConn>>();
  /** watchers are mesh peers told about every client that connects or leaves here. */
  private readonly watchers = new Set<ClientConn>();
  /** remote maps a key hex to the mesh peer whose relay holds that node (one lookup per packet). */
  private readonly remote = new Map<string, MeshForwarder>();
  /**
   * remoteAll lists, oldest first, every mesh peer claiming a key, only while more than one
   * does (a device moving between instances shows up on the new one before the old one
   * reports it gone): the newest wins, and the others take over if it leaves first.
   */
  private readonly remoteAll = new Map<string, MeshForwarder[]>();

  constructor(
    private readonly counters: DerpServerStats,
    private readonly queueDepth: number,
    /** closing says the relay is shutting down: departures then go unannounced. */
    private readonly closing: () => boolean,
  ) {}

  /** client is the active connection of a node key's hex, if it is connected here. */
  client(hex: string): ClientConn | undefined {
    return this.clients.get(hex);
  }

  /** clientCount is the number of distinct logged-in node keys. */
  get clientCount(): number {
    return this.clients.size;
  }

  /**
   * addClient makes conn the connection of its key and returns the one it replaces, if any.
   * Watchers hear of the key only when it is new here: a reconnect is no departure.
   */
  addClient(conn: ClientConn): ClientConn | undefined {
    const previous = this.clients.get(conn.keyHex);
    this.clients.set(conn.keyHex, conn);
    if (this.watchers.size && !previous) {
      const present = encodeFrame(FrameType.PeerPresent, conn.key);
      for (const w of this.watchers) w.sendWatch(present);
    }
    return previous === conn ? undefined : previous;
  }

  /** watch adds a mesh peer to the watchers and tells it every client connected now. */
  watch(conn: ClientConn): void {
    if (this.watchers.has(conn)) return;
    this.watchers.add(conn);
    for (const c of this.clients.values()) conn.sendWatch(encodeFrame(FrameType.PeerPresent, c.key));
  }

  /**
   * remove forgets a closed connection everywhere. When it was the active connection of its
   * key, watchers hear it left, and so do the clients it sent to unless a mesh peer still
   * reaches the node.
   */
  remove(conn: ClientConn, wasActive: boolean): void {
    this.watchers.delete(conn);
    for (const srcHex of conn.sawSources) {
      const receivers = this.receiversOf.get(srcHex);
      receivers?.delete(conn);
      if (receivers && receivers.size === 0) this.receiversOf.delete(srcHex);
    }
    conn.sawSources.clear();
    if (!wasActive || this.clients.get(conn.keyHex) !== conn) return;
    this.clients.delete(conn.keyHex);
    if (this.watchers.size && !this.closing()) {
      const gone = encodeFrame(FrameType.PeerGone, conn.key, Buffer.of(PeerGoneReason.Disconnected));
      for (const w of this.watchers) w.sendWatch(gone);
    }
    // A node still reachable through a mesh peer has not left the region.
    if (this.remote.has(conn.keyHex)) return;
    this.notifyGone(conn.keyHex, conn.key);
  }

  /** addMeshRoute: the node key's hex is connected to the relay behind forwarder. */
  addMeshRoute(hex: string, forwarder: MeshForwarder): void {
    if (hex.length !== KEY_LENGTH * 2) return;
    const current = this.remote.get(hex);
    if (current && current !== forwarder) {
      let all = this.remoteAll.get(hex);
      if (!all) this.remoteAll.set(hex, (all = [current]));
      const i = all.indexOf(forwarder);
      if (i >= 0) all.splice(i, 1);
      all.push(forwarder);
    }
    this.remote.set(hex, forwarder);
  }

  /** removeMeshRoute forgets the route when it still points at forwarder (see DerpServer.removeMeshRoute). */
  removeMeshRoute(hex: string, forwarder: MeshForwarder): void {
    const all = this.remoteAll.get(hex);
    if (all) {
      const i = all.indexOf(forwarder);
      if (i < 0) return;
      all.splice(i, 1);
      this.remote.set(hex, all[all.length - 1]!);
      if (all.length === 1) this.remoteAll.delete(hex);
      return;
    }
    if (this.remote.get(hex) !== forwarder) return;
    this.remote.delete(hex);
    if (!this.clients.has(hex)) this.notifyGone(hex, Buffer.from(hex, 'hex'));
  }

  hasMeshRoute(hex: string): boolean {
    return this.remote.has(hex);
  }

  get meshRouteCount(): number {
    return this.remote.size;
  }

  /**
   * forward relays a client's packet: to the destination's connection here, else to the mesh
   * peer that reaches it, else nowhere (a disco packet then earns a rate-limited PeerGone).
   */
  forward(src: ClientConn, dstKey: Buffer, packet: Buffer): void {
    this.counters.packetsReceived++;
    const dstHex = dstKey.toString('hex');
    const dst = this.clients.get(dstHex);
    if (!dst || dst.state !== 'active') {
      const peer = this.remote.get(dstHex);
      if (peer) {
        if (peer.forwardPacket(src.key, dstKey, packet)) this.counters.packetsMeshForwarded++;
        else this.counters.packetsMeshDropped++;
        return;
      }
      this.counters.packetsDroppedUnknownDest++;
      // Tailscale only answers disco packets, rate-limited, so magicsock stops probing a peer not here.
      if (looksLikeDisco(packet) && src.takeNotHereToken()) {
        if (src.sendControl(encodeFrame(FrameType.PeerGone, dstKey, Buffer.of(PeerGoneReason.NotHere)))) {
          this.counters.peerGoneNotHereFrames++;
        }
      }
      return;
    }
    if (dst.socket.destroyed) {
      this.counters.packetsDroppedGone++;
      return;
    }
    this.counters.packetsForwarded++;
    this.deliver(dst, src.key, src.keyHex, packet);
  }

  /**
   * deliverFromMesh hands a packet another relay forwarded to the local client it names,
   * as if the original sender were connected here. A destination not connected here is
   * dropped, never forwarded again, so two relays can never bounce a packet between them.
   */
  deliverFromMesh(srcKey: Buffer, dstKey: Buffer, packet: Buffer): void {
    const dst = this.clients.get(dstKey.toString('hex'));
    if (!dst || dst.state !== 'active' || dst.socket.destroyed) {
      this.counters.packetsDroppedUnknownDest++;
      return;
    }
    this.counters.packetsFromMesh++;
    // srcKey is a view into the frame just read; the hex names it for PeerGone bookkeeping.
    this.deliver(dst, srcKey, srcKey.toString('hex'), packet);
  }

  /** deliver queues a RecvPacket for dst and remembers that it heard from the source (for PeerGone). */
  private deliver(dst: ClientConn, srcKey: Buffer, srcHex: string, packet: Buffer): void {
    const frame = encodeFrame(FrameType.RecvPacket, srcKey, packet);
    if (dst.sendPacketFrame(frame, this.queueDepth)) this.counters.packetsDroppedQueueFull++;
    if (!dst.sawSources.has(srcHex)) {
      dst.sawSources.add(srcHex);
      let receivers = this.receiversOf.get(srcHex);
      if (!receivers) this.receiversOf.set(srcHex, (receivers = new Set()));
      receivers.add(dst);
    }
  }

  /** notifyGone tells every client that received packets from the key that it left. */
  private notifyGone(hex: string, key: Buffer): void {
    const receivers = this.receiversOf.get(hex);
    this.receiversOf.delete(hex);
    if (!receivers || this.closing()) return;
    const gone = encodeFrame(FrameType.PeerGone, key, Buffer.of(PeerGoneReason.Disconnected));
    for (const receiver of receivers) {
      receiver.sawSources.delete(hex);
      if (receiver.sendControl(gone)) this.counters.peerGoneDisconnectedFrames++;
    }
  }
}

import { createHmac } from 'node:crypto';
import { MeshPeer, type DerpLogger, type DerpServer } from '@headway/derp';
import type { InstanceRecord } from '../ports/cluster.js';

/** MESH_KEY_LABEL separates the mesh key from any other value derived from the control key. */
const MESH_KEY_LABEL = 'headway derp mesh key v1';

/**
 * derpMeshKey derives the relays' mesh secret from the control (noise) private key that
 * every instance of a cluster already shares, so meshing needs no new secret or setting.
 * It is an HMAC, so the mesh key reveals nothing about the control key.
 */
export function derpMeshKey(controlPrivateKey: Buffer): string {
  return createHmac('sha256', controlPrivateKey).update(MESH_KEY_LABEL).digest('hex');
}

/**
 * derpUrlOf turns an instance's registered address (`http(s)://host:port[/...]` or
 * `host:port`) into its relay URL; undefined when it names no reachable host (port 0,
 * an unparsable value).
 */
export function derpUrlOf(address: string): string | undefined {
  const text = /^[a-z][a-z0-9+.-]*:\/\//i.test(address) ? address : `http://${address}`;
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return undefined;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
  if (!url.hostname || url.port === '0') return undefined;
  // A wildcard bind address names no host another machine could dial (and locally it would reach this instance).
  if (url.hostname === '0.0.0.0' || url.hostname === '[::]') return undefined;
  return `${url.protocol}//${url.host}/derp`;
}

/**
 * DerpMesh keeps one mesh connection from this instance's relay to the relay of every
 * other live cluster instance (the instances registry the ClusterMember refreshes at each
 * heartbeat), so a device whose relay connection landed on another instance is still
 * reachable: the local relay forwards its packets there. Instances that appear get a
 * peer; pruned or departed ones lose theirs (and its routes) at the next update.
 */
export class DerpMesh {
  /** peers maps an instance id to its mesh connection. */
  private readonly peers = new Map<string, MeshPeer>();
  private closed = false;
  /** unusable remembers instances already warned about (an address the mesh cannot dial). */
  private readonly unusable = new Set<string>();

  constructor(
    private readonly server: DerpServer,
    private readonly meshKey: string,
    private readonly logger: DerpLogger,
  ) {}

  /** update reconciles the mesh connections with the other live instances. */
  update(others: readonly InstanceRecord[]): void {
    if (this.closed) return;
    const wanted = new Map<string, string>();
    for (const inst of others) {
      const url = derpUrlOf(inst.address);
      if (url) wanted.set(inst.id, url);
      else if (!this.unusable.has(inst.id) && !/:0$/.test(inst.address)) {
        // Port 0 is an instance still starting; anything else will not change by itself.
        this.unusable.add(inst.id);
        this.logger.warn('derp mesh: cannot reach the relay of an instance at its registered address; set cluster.advertise_addr there to an address the other instances can dial', { instance: inst.id, address: inst.address });
      }
    }
    for (const [id, peer] of this.peers) {
      if (wanted.get(id) === peer.url) continue;
      this.peers.delete(id);
      this.logger.info('derp mesh: dropping the peer relay of an instance that left', { instance: id, url: peer.url });
      void peer.close();
    }
    for (const [id, url] of wanted) {
      if (this.peers.has(id)) continue;
      const peer = new MeshPeer({ url, meshKey: this.meshKey, server: this.server, logger: this.logger });
      this.peers.set(id, peer);
      this.logger.info('derp mesh: meshing with the relay of another instance', { instance: id, url });
      peer.start();
    }
  }

  /** status lists the mesh peers (tests, diagnostics). */
  status(): Array<{ instance: string; url: string; connected: boolean; routes: number }> {
    return [...this.peers].map(([instance, p]) => ({ instance, url: p.url, connected: p.connected, routes: p.routeCount }));
  }

  async close(): Promise<void> {
    this.closed = true;
    const peers = [...this.peers.values()];
    this.peers.clear();
    await Promise.all(peers.map((p) => p.close()));
  }
}

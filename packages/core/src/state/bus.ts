import { EventEmitter } from 'node:events';
import type { Node, User } from '../domain.js';

/** PeerPatch holds the fields a PeersChangedPatch can carry without a full peer. */
export interface PeerPatch {
  online?: boolean;
  lastSeen?: Date | null;
  endpoints?: string[];
  derpRegion?: number;
  keyExpiry?: Date | null;
  discoKey?: string;
  nodeKey?: string;
}

/** Change is one state change, published once after it is stored and applied. */
export type Change =
  | { type: 'node-added'; node: Node }
  | { type: 'node-changed'; node: Node }
  | { type: 'node-patch'; nodeId: number; patch: PeerPatch }
  | { type: 'node-removed'; nodeId: number; node: Node }
  | { type: 'user-changed'; user: User }
  | { type: 'user-removed'; userId: number }
  | { type: 'policy-changed' }
  /** drive-changed: a drive adapter's Taildrive grants changed (recompiled like a policy change). */
  | { type: 'drive-changed' }
  | { type: 'dns-changed' }
  /** dns-settings-changed: the stored DNS settings (dns.mode: database) changed; the DNS config is rebuilt. */
  | { type: 'dns-settings-changed' }
  | { type: 'derp-changed' };

/** ChangeBus fans every change out to map sessions and other listeners, synchronously and in order. */
export class ChangeBus {
  private readonly emitter = new EventEmitter();
  private remote = false;
  constructor() { this.emitter.setMaxListeners(0); }
  /**
   * applyingRemote is true while a change another cluster instance made is being
   * published here (publishing is synchronous), so the cluster does not announce it again.
   */
  get applyingRemote(): boolean { return this.remote; }
  publish(change: Change): void { this.emitter.emit('change', change); }
  /** publishRemote publishes a change another instance made, marked so it is not announced again. */
  publishRemote(change: Change): void { this.asRemote(() => this.publish(change)); }
  /** asRemote runs fn, whose every publication is of a change another instance made. */
  asRemote(fn: () => void): void {
    this.remote = true;
    try {
      fn();
    } finally {
      this.remote = false;
    }
  }
  subscribe(fn: (change: Change) => void): () => void {
    this.emitter.on('change', fn);
    return () => this.emitter.off('change', fn);
  }
  get listenerCount(): number { return this.emitter.listenerCount('change'); }
}

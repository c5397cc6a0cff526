import type { MapResponse } from '@headway/core';
import type { FilterUpdate } from './filter-chunks.js';
import { encoded, mapResponse, member, type FieldValue, type Json, type MapField, type Member } from './map-json.js';

/** SharedField: the fields whose text many sessions of one flush send the same (the same nodes, in id order). */
export type SharedField = 'PeersChanged' | 'PeersChangedPatch';

/**
 * DeltaPart is one member of a session's message in a flush:
 * - own: text only this session is likely to send (its own entry, its removed peers, profiles);
 * - shared: a list of nodes or patches that every session sending the same nodes sends the same, made once per
 *   flush and named by `key` (its field and node ids), so sessions are matched without comparing the text;
 * - filter: a PacketFilters update, with its pieces around the blocks of sources other sessions send too. Its text
 *   whole is made here only when short; a long one only when some session needs it whole.
 */
export type DeltaPart =
  | { readonly kind: 'own'; readonly field: MapField; readonly text: Member }
  | { readonly kind: 'shared'; readonly field: SharedField; readonly key: string; readonly text: Member }
  | { readonly kind: 'filter'; readonly field: 'PacketFilters'; readonly update: FilterUpdate; readonly text: Member | undefined };

/** sharedKey names a shared part among a flush's: its field and the ids of its nodes. */
export const sharedKey = (field: SharedField, ids: readonly number[]): string => `${field}=${ids.join(',')}`;

/** filterMember is a PacketFilters update as a member. */
const filterMember = (update: FilterUpdate): Member =>
  member('PacketFilters', encoded<FieldValue<'PacketFilters'>>(update.json!));

/**
 * DeltaMessage is the MapResponse one session is sent in a flush, as its members in the order they go out. It
 * holds text, not values: most of it is encoded once and shared by many sessions (see DeltaPart).
 */
export class DeltaMessage {
  readonly parts: DeltaPart[] = [];

  constructor(private readonly longFilter: number) {}

  get length(): number { return this.parts.length; }

  add<F extends MapField>(field: F, value: Json<FieldValue<F>>): void {
    this.parts.push({ kind: 'own', field, text: member(field, value) });
  }

  /** addMember adds a member already made (a PeersRemoved part shared by a peer class's sessions). */
  addMember(field: MapField, text: Member): void {
    this.parts.push({ kind: 'own', field, text });
  }

  addShared(field: SharedField, key: string, text: Member): void {
    this.parts.push({ kind: 'shared', field, key, text });
  }

  /** addFilter adds a PacketFilters update (update.pieces not null). */
  addFilter(update: FilterUpdate): void {
    let length = 0;
    for (const x of update.pieces!) length += typeof x === 'string' ? x.length : x.text.length;
    this.parts.push({ kind: 'filter', field: 'PacketFilters', update, text: length > this.longFilter ? undefined : filterMember(update) });
  }

  has(field: MapField): boolean { return this.parts.some((p) => p.field === field); }

  /** filter is the message's PacketFilters update, if any. */
  get filter(): FilterUpdate | undefined {
    for (const p of this.parts) if (p.kind === 'filter') return p.update;
    return undefined;
  }

  /**
   * key names the message's text among a flush's messages: equal keys, equal texts (an own part's key is its text,
   * which begins with a quote; a shared part's begins with its field's name). Undefined for a message holding a
   * long filter update: only its session sends that.
   */
  key(): string | undefined {
    let key = '';
    for (let i = 0; i < this.parts.length; i++) {
      const p = this.parts[i]!;
      if (p.kind === 'filter' && p.text === undefined) return undefined;
      if (i) key += '\n';
      key += p.kind === 'shared' ? p.key : p.text;
    }
    return key;
  }

  json(): Json<MapResponse> { return mapResponse(this.parts.map(wholeText)); }
}

/** wholeText is a part's member text, a long filter update's made now. */
export function wholeText(p: DeltaPart): Member {
  return p.text ?? filterMember((p as Extract<DeltaPart, { kind: 'filter' }>).update);
}

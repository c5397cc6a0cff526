import type { MapResponse } from '@headway/core';

declare const encodes: unique symbol;
declare const isMember: unique symbol;

/**
 * Json<T> is JSON text of a T. The map fan-out keeps much of a message as text encoded once and shared (a peer's
 * entry, a list of changed peers, a block of a packet filter's sources); this type keeps each piece of text to the
 * MapResponse field it may fill. At run time it is a plain string.
 */
export type Json<T> = string & { readonly [encodes]: T };

/** MapField is a field of a MapResponse, and FieldValue what it holds when present. */
export type MapField = keyof MapResponse;
export type FieldValue<F extends MapField> = Exclude<MapResponse[F], undefined>;

/** Member is one field of a MapResponse with its value, as JSON text (`"Field":value`). */
export type Member = string & { readonly [isMember]: true };

/** encode is a value's JSON text. */
export function encode<T>(value: T): Json<T> {
  return JSON.stringify(value) as Json<T>;
}

/** encoded marks text that holds a T's JSON (made by encode, or spliced from such text, and kept as a string). */
export function encoded<T>(text: string): Json<T> {
  return text as Json<T>;
}

/** jsonArray is the JSON array of items already encoded. */
export function jsonArray<T>(items: readonly Json<T>[]): Json<T[]> {
  return `[${items.join(',')}]` as Json<T[]>;
}

/** member is a field and its value as a MapResponse member. */
export function member<F extends MapField>(field: F, value: Json<FieldValue<F>>): Member {
  return `"${field}":${value}` as Member;
}

/** mapResponse is a MapResponse's JSON text from its members. */
export function mapResponse(members: readonly Member[]): Json<MapResponse> {
  return `{${members.join(',')}}` as Json<MapResponse>;
}

/** ListField is a field holding a list. */
export type ListField = Extract<{ [F in MapField]: FieldValue<F> extends readonly unknown[] ? F : never }[MapField], string>;

/**
 * aroundList is the text of a MapResponse of the members `before`, then the list `field`, then the members `after`,
 * cut where the list's items go: a full map's peers are spliced in between as the bytes each peer's text is cached as.
 */
export function aroundList(before: readonly Member[], field: ListField, after: readonly Member[]): [string, string] {
  const head = `{${before.length ? `${before.join(',')},` : ''}"${field}":[`;
  return [head, after.length ? `],${after.join(',')}}` : ']}'];
}

/** KEEPALIVE_JSON is the message a quiet stream is sent. */
export const KEEPALIVE_JSON = mapResponse([member('KeepAlive', encode(true))]);

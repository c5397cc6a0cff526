/**
 * Raw HTTP/2 frames (RFC 9113 §4.1) for tests that send what a well-behaved client never would: floods,
 * malformed frames, header blocks cut anywhere. A real client (node:http2, tailscaled) cannot be made to.
 */

/** H2_PREFACE is the client connection preface (RFC 9113 §3.4). */
export const H2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

/** h2Frame encodes one frame: 24-bit length, type, flags, 31-bit stream id, payload. */
export function h2Frame(type: number, flags: number, id: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const h = Buffer.alloc(9);
  h.writeUIntBE(payload.length, 0, 3);
  h[3] = type;
  h[4] = flags;
  h.writeUInt32BE(id, 5);
  return Buffer.concat([h, payload]);
}

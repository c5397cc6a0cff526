import { IkInitiator, IkResponder, type TransportKeys } from './handshake.js';
import { keyPairFromPrivate, type KeyPair } from './keys.js';

/** Tailscale's ts2021 framing constants (control/controlbase); every integer on the wire is big-endian. */
export const MESSAGE_TYPE_INITIATION = 1;
export const MESSAGE_TYPE_RESPONSE = 2;
export const MESSAGE_TYPE_ERROR = 3;
export const MESSAGE_TYPE_RECORD = 4;
export const INITIATION_LENGTH = 101;
export const RESPONSE_LENGTH = 51;
/** MAX_FRAME_LENGTH bounds a whole record including its 3-byte header. */
export const MAX_FRAME_LENGTH = 4096;
export const FRAME_HEADER_LENGTH = 3;
/** MAX_PLAINTEXT_PER_RECORD = 4096 - 3 (header) - 16 (tag). */
export const MAX_PLAINTEXT_PER_RECORD = MAX_FRAME_LENGTH - FRAME_HEADER_LENGTH - 16;
/** DEFAULT_MIN_CAPABILITY_VERSION matches headscale's oldest supported client (Tailscale 1.80). */
export const DEFAULT_MIN_CAPABILITY_VERSION = 113;

/** controlPrologue is mixed into the handshake so both sides prove they speak the same protocol version. */
export function controlPrologue(capabilityVersion: number): Buffer {
  return Buffer.from(`Tailscale Control Protocol v${capabilityVersion}`, 'ascii');
}

function checkCapabilityVersion(v: number): void {
  if (!Number.isInteger(v) || v < 0 || v > 0xffff) throw new RangeError(`capability version must be an integer 0..65535, got ${v}`);
}

/** errorFrame encodes a plaintext type-3 error message (truncated to the 16-bit length limit). */
export function errorFrame(message: string): Buffer {
  let text = Buffer.from(message, 'utf8');
  if (text.length > 0xffff) text = text.subarray(0, 0xffff);
  const header = Buffer.alloc(3);
  header[0] = MESSAGE_TYPE_ERROR;
  header.writeUInt16BE(text.length, 1);
  return Buffer.concat([header, text]);
}

/** ClientHandshake is the initiator state between sending the initiation and reading the response. */
export interface ClientHandshake {
  initiation: Buffer;
  /** finish consumes exactly one response (or error) message and yields the transport keys. */
  finish(response: Uint8Array): TransportKeys;
}

/** startClientHandshake builds the 101-byte initiation for a machine key talking to a control key. */
export function startClientHandshake(opts: {
  machinePrivateKey: Uint8Array;
  controlPublicKey: Uint8Array;
  capabilityVersion: number;
  ephemeralPrivateKey?: Uint8Array;
}): ClientHandshake {
  checkCapabilityVersion(opts.capabilityVersion);
  const initiator = new IkInitiator({
    prologue: controlPrologue(opts.capabilityVersion),
    staticKey: keyPairFromPrivate(opts.machinePrivateKey),
    remoteStaticPublicKey: opts.controlPublicKey,
    ephemeralPrivateKey: opts.ephemeralPrivateKey,
  });
  const body = initiator.writeMessage1();
  const header = Buffer.alloc(5);
  header.writeUInt16BE(opts.capabilityVersion, 0);
  header[2] = MESSAGE_TYPE_INITIATION;
  header.writeUInt16BE(body.length, 3);
  const initiation = Buffer.concat([header, body]);
  return {
    initiation,
    finish(response: Uint8Array): TransportKeys {
      const buf = Buffer.from(response);
      if (buf.length < 3) throw new Error(`handshake response too short: ${buf.length} bytes`);
      const type = buf[0];
      const length = buf.readUInt16BE(1);
      if (type === MESSAGE_TYPE_ERROR) {
        throw new Error(`server error: ${JSON.stringify(buf.subarray(3, 3 + length).toString('utf8'))}`);
      }
      if (type !== MESSAGE_TYPE_RESPONSE) throw new Error(`unexpected handshake response message type ${type}`);
      if (length !== RESPONSE_LENGTH - 3 || buf.length !== RESPONSE_LENGTH) {
        throw new Error(`wrong length ${length} received for handshake response`);
      }
      try {
        return initiator.readMessage2(buf.subarray(3)).keys;
      } catch (err) {
        throw new Error(`handshake response did not authenticate (wrong control key?): ${(err as Error).message}`);
      }
    },
  };
}

/** responseLengthFromHeader tells a reader how many bytes the server's first message occupies, from its 3-byte header. */
export function responseLengthFromHeader(header: Uint8Array): number {
  return 3 + Buffer.from(header).readUInt16BE(1);
}

/** AcceptedHandshake is the server's view of a successful initiation. */
export interface AcceptedHandshake {
  machinePublicKey: Buffer;
  capabilityVersion: number;
  response: Buffer;
  keys: TransportKeys;
}

/** HandshakeRefusal is thrown by acceptInitiation when the client must be told why (as an error frame). */
export class HandshakeRefusal extends Error {
  constructor(message: string, readonly sendToClient: boolean) {
    super(message);
    this.name = 'HandshakeRefusal';
  }
}

/** CONTROL_KEY_PAIRS caches the responder key pair per control private key buffer (deriving it per handshake doubled the cost). */
const CONTROL_KEY_PAIRS = new WeakMap<Uint8Array, KeyPair>();

function controlKeyPair(privateKey: Uint8Array): KeyPair {
  let pair = CONTROL_KEY_PAIRS.get(privateKey);
  if (!pair) CONTROL_KEY_PAIRS.set(privateKey, (pair = keyPairFromPrivate(privateKey)));
  return pair;
}

/**
 * acceptInitiation validates a 101-byte initiation against the control key and builds the 51-byte response.
 * Framing problems and too-old versions are refused with a message meant for the client; a decryption
 * failure is not explained to the client (it could be probing keys).
 */
export function acceptInitiation(opts: {
  controlPrivateKey: Uint8Array;
  initiation: Uint8Array;
  minCapabilityVersion?: number;
  ephemeralPrivateKey?: Uint8Array;
}): AcceptedHandshake {
  const msg = Buffer.from(opts.initiation);
  if (msg.length !== INITIATION_LENGTH) throw new HandshakeRefusal('wrong handshake initiation size', true);
  const version = msg.readUInt16BE(0);
  if (msg[2] !== MESSAGE_TYPE_INITIATION) throw new HandshakeRefusal('unexpected handshake message type', true);
  if (msg.readUInt16BE(3) !== INITIATION_LENGTH - 5) throw new HandshakeRefusal('wrong handshake initiation length', true);
  const minimum = opts.minCapabilityVersion ?? DEFAULT_MIN_CAPABILITY_VERSION;
  if (version < minimum) {
    throw new HandshakeRefusal(
      `client capability version ${version} is too old; this server requires at least ${minimum} (please upgrade Tailscale)`,
      true,
    );
  }
  const responder = new IkResponder({
    prologue: controlPrologue(version),
    staticKey: controlKeyPair(opts.controlPrivateKey),
    ephemeralPrivateKey: opts.ephemeralPrivateKey,
  });
  let machinePublicKey: Buffer;
  try {
    machinePublicKey = responder.readMessage1(msg.subarray(5)).remoteStaticPublicKey;
  } catch (err) {
    throw new HandshakeRefusal(`handshake initiation did not authenticate: ${(err as Error).message}`, false);
  }
  const { message, keys } = responder.writeMessage2();
  const header = Buffer.alloc(3);
  header[0] = MESSAGE_TYPE_RESPONSE;
  header.writeUInt16BE(message.length, 1);
  return { machinePublicKey, capabilityVersion: version, response: Buffer.concat([header, message]), keys };
}

import { aeadOpen, aeadSeal, blake2s, CipherState, noiseHkdf, type NonceOrder } from './cipher.js';
import { generateKeyPair, keyPairFromPrivate, x25519, type KeyPair } from './keys.js';

/** NOISE_PROTOCOL_NAME is hashed into the initial handshake state; both sides must agree on it exactly. */
export const NOISE_PROTOCOL_NAME = 'Noise_IK_25519_ChaChaPoly_BLAKE2s';

const ZERO_NONCE = Buffer.alloc(12);

/** SymmetricState is the Noise (ck, h, k) triple; every handshake key is used exactly once, so nonces stay zero. */
class SymmetricState {
  h: Buffer;
  ck: Buffer;
  private k: Buffer | undefined;

  constructor(protocolName: string) {
    const name = Buffer.from(protocolName, 'ascii');
    this.h = name.length <= 32 ? Buffer.concat([name, Buffer.alloc(32 - name.length)]) : blake2s(name);
    this.ck = Buffer.from(this.h);
  }

  mixHash(data: Uint8Array): void {
    this.h = blake2s(this.h, data);
  }

  mixKey(dh: Uint8Array): void {
    const [ck, k] = noiseHkdf(this.ck, dh);
    this.ck = ck;
    this.k = k;
  }

  encryptAndHash(plaintext: Uint8Array): Buffer {
    if (!this.k) throw new Error('handshake state has no key yet');
    const sealed = aeadSeal(this.k, ZERO_NONCE, this.h, plaintext);
    this.mixHash(sealed);
    return sealed;
  }

  decryptAndHash(sealed: Uint8Array): Buffer {
    if (!this.k) throw new Error('handshake state has no key yet');
    const plain = aeadOpen(this.k, ZERO_NONCE, this.h, sealed);
    this.mixHash(sealed);
    return plain;
  }

  split(): [Buffer, Buffer] {
    return noiseHkdf(this.ck, Buffer.alloc(0));
  }
}

/** TransportKeys is the result of a finished handshake, already oriented for the local side. */
export interface TransportKeys {
  send: CipherState;
  receive: CipherState;
  handshakeHash: Buffer;
}

/** IkOptions configure one side of a Noise IK handshake; `ephemeral` is injectable only for test vectors. */
export interface IkOptions {
  prologue: Uint8Array;
  staticKey: KeyPair;
  ephemeralPrivateKey?: Uint8Array;
  nonceOrder?: NonceOrder;
}

/**
 * IkInitiator runs the initiator half of Noise IK with standard Noise message bodies
 * (e || s || payload for message 1; the response carries e || payload). Tailscale framing is layered on top.
 */
export class IkInitiator {
  private readonly ss: SymmetricState;
  private readonly ephemeral: KeyPair;
  private sentFirst = false;

  constructor(private readonly opts: IkOptions & { remoteStaticPublicKey: Uint8Array }) {
    this.ss = new SymmetricState(NOISE_PROTOCOL_NAME);
    this.ss.mixHash(opts.prologue);
    this.ss.mixHash(opts.remoteStaticPublicKey);
    this.ephemeral = opts.ephemeralPrivateKey ? keyPairFromPrivate(opts.ephemeralPrivateKey) : generateKeyPair();
  }

  /** writeMessage1 produces `-> e, es, s, ss` + encrypted payload (32 + 48 + payload + 16 bytes). */
  writeMessage1(payload: Uint8Array = Buffer.alloc(0)): Buffer {
    if (this.sentFirst) throw new Error('IK initiation already written');
    this.sentFirst = true;
    const { ss, ephemeral, opts } = this;
    ss.mixHash(ephemeral.publicKey);
    ss.mixKey(x25519(ephemeral.privateKey, opts.remoteStaticPublicKey));
    const encryptedStatic = ss.encryptAndHash(opts.staticKey.publicKey);
    ss.mixKey(x25519(opts.staticKey.privateKey, opts.remoteStaticPublicKey));
    const encryptedPayload = ss.encryptAndHash(payload);
    return Buffer.concat([ephemeral.publicKey, encryptedStatic, encryptedPayload]);
  }

  /** readMessage2 consumes `<- e, ee, se` + encrypted payload and returns the payload and transport keys. */
  readMessage2(message: Uint8Array): { payload: Buffer; keys: TransportKeys } {
    if (!this.sentFirst) throw new Error('IK response read before the initiation was written');
    if (message.length < 32 + 16) throw new Error(`IK response too short: ${message.length} bytes`);
    const { ss, ephemeral, opts } = this;
    const responderEphemeral = message.subarray(0, 32);
    ss.mixHash(responderEphemeral);
    ss.mixKey(x25519(ephemeral.privateKey, responderEphemeral));
    ss.mixKey(x25519(opts.staticKey.privateKey, responderEphemeral));
    const payload = ss.decryptAndHash(message.subarray(32));
    const [initiatorToResponder, responderToInitiator] = ss.split();
    const order = opts.nonceOrder ?? 'big';
    return {
      payload,
      keys: {
        send: new CipherState(initiatorToResponder, order),
        receive: new CipherState(responderToInitiator, order),
        handshakeHash: Buffer.from(ss.h),
      },
    };
  }
}

/** IkResponder runs the responder half of Noise IK; it learns the initiator's static key from message 1. */
export class IkResponder {
  private readonly ss: SymmetricState;
  private initiatorEphemeral: Buffer | undefined;
  private initiatorStatic: Buffer | undefined;

  constructor(private readonly opts: IkOptions) {
    this.ss = new SymmetricState(NOISE_PROTOCOL_NAME);
    this.ss.mixHash(opts.prologue);
    this.ss.mixHash(opts.staticKey.publicKey);
  }

  /** readMessage1 authenticates the initiation and returns the initiator's static public key and payload. */
  readMessage1(message: Uint8Array): { remoteStaticPublicKey: Buffer; payload: Buffer } {
    if (this.initiatorEphemeral) throw new Error('IK initiation already read');
    if (message.length < 32 + 48 + 16) throw new Error(`IK initiation too short: ${message.length} bytes`);
    const { ss, opts } = this;
    const ephemeral = Buffer.from(message.subarray(0, 32));
    ss.mixHash(ephemeral);
    ss.mixKey(x25519(opts.staticKey.privateKey, ephemeral));
    const remoteStatic = ss.decryptAndHash(message.subarray(32, 80));
    ss.mixKey(x25519(opts.staticKey.privateKey, remoteStatic));
    const payload = ss.decryptAndHash(message.subarray(80));
    this.initiatorEphemeral = ephemeral;
    this.initiatorStatic = remoteStatic;
    return { remoteStaticPublicKey: remoteStatic, payload };
  }

  /** writeMessage2 produces `<- e, ee, se` + encrypted payload and the transport keys. */
  writeMessage2(payload: Uint8Array = Buffer.alloc(0)): { message: Buffer; keys: TransportKeys } {
    const { ss, opts, initiatorEphemeral, initiatorStatic } = this;
    if (!initiatorEphemeral || !initiatorStatic) throw new Error('IK response written before the initiation was read');
    const ephemeral = opts.ephemeralPrivateKey ? keyPairFromPrivate(opts.ephemeralPrivateKey) : generateKeyPair();
    ss.mixHash(ephemeral.publicKey);
    ss.mixKey(x25519(ephemeral.privateKey, initiatorEphemeral));
    ss.mixKey(x25519(ephemeral.privateKey, initiatorStatic));
    const encryptedPayload = ss.encryptAndHash(payload);
    const [initiatorToResponder, responderToInitiator] = ss.split();
    const order = opts.nonceOrder ?? 'big';
    return {
      message: Buffer.concat([ephemeral.publicKey, encryptedPayload]),
      keys: {
        send: new CipherState(responderToInitiator, order),
        receive: new CipherState(initiatorToResponder, order),
        handshakeHash: Buffer.from(ss.h),
      },
    };
  }
}

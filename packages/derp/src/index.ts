export { KEY_LENGTH, generateDerpKeyPair, publicKeyFromPrivate, formatNodeKey, parseNodeKey, type DerpKeyPair } from './keys.js';
export { sealTo, openFrom, NONCE_LENGTH, BOX_OVERHEAD } from './box.js';
export {
  FrameType,
  PeerGoneReason,
  DERP_MAGIC,
  PROTOCOL_VERSION,
  MAX_PACKET_SIZE,
  MAX_FRAME_LENGTH,
  MAX_CLIENT_INFO_LENGTH,
  FRAME_HEADER_LENGTH,
  encodeFrame,
  FrameReader,
  FrameTooLargeError,
  looksLikeDisco,
  DISCO_MAGIC,
  type Frame,
  type FrameTypeValue,
} from './frames.js';
export {
  DerpServer,
  type DerpServerOptions,
  type DerpServerStats,
  type DerpClientInfo,
  type DerpLogger,
  type VerifyClient,
  type RestartNotice,
  type MeshForwarder,
  DERP_LOGIN_LIMITS,
} from './server.js';
export { MeshPeer, type MeshPeerOptions } from './mesh.js';
export { DerpClient, type DerpClientOptions, type DerpMessage } from './client.js';
export {
  StunServer,
  parseBindingRequest,
  buildBindingRequest,
  buildBindingResponse,
  parseBindingResponse,
  crc32,
  type StunMappedAddress,
} from './stun.js';
export {
  verifyHandler,
  parseAdmitRequest,
  answerAdmitRequest,
  VerifyRequestError,
  MAX_VERIFY_BODY_BYTES,
  type DerpAdmitClientRequest,
  type DerpAdmitClientResponse,
} from './verify.js';
export { WebSocketStream, webSocketAccept, isValidWebSocketKey, newWebSocketKey, WsCloseCode, type WebSocketStreamOptions } from '@headway/noise';
export { runRelayBenchmark, type RelayBenchmarkOptions, type RelayBenchmarkResult } from './bench.js';
export { RelayListener, describeTlsFailure, type RelayListenerOptions } from './listener.js';
export {
  loadOrCreateRelayCertificate,
  certificateSha256,
  certificateCovers,
  RELAY_CERT_VALIDITY_DAYS,
  RELAY_CERT_RENEW_BEFORE_MS,
  type RelayCertificate,
  type RelayCertificateOptions,
} from './cert.js';
export { HandshakeFailureLog, type HandshakeFailure, type HandshakeFailureLogOptions, type FailureLogger } from './failurelog.js';

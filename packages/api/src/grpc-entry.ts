/**
 * @headway/api/grpc: headscale's gRPC API (HeadscaleService) and its listener, apart
 * from the main entry so that importing the REST API does not load grpc-js.
 */
export * from './grpc.js';
export * from './grpc-listener.js';

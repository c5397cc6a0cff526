/**
 * @headway/core/grpc: headscale's gRPC API (HeadscaleService) and its listener, apart
 * from the main entry so that importing the core does not load grpc-js.
 */
export * from './api/grpc.js';
export * from './server/grpc.js';

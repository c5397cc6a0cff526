// libsodium (the npm package) is libsodium compiled to WASM by emscripten, without type declarations. Its default
// export instantiates the module; these are the parts of it aead-wasm.ts calls (the C API, 64-bit lengths split
// into two 32-bit halves, low first).
declare module 'libsodium' {
  interface SodiumModule {
    HEAPU8: Uint8Array;
    _malloc(size: number): number;
    _sodium_init(): number;
    _crypto_aead_chacha20poly1305_ietf_encrypt_detached(
      c: number, mac: number, maclenP: number, m: number, mlenLo: number, mlenHi: number,
      ad: number, adlenLo: number, adlenHi: number, nsec: number, npub: number, k: number): number;
    _crypto_aead_chacha20poly1305_ietf_decrypt_detached(
      m: number, nsec: number, c: number, clenLo: number, clenHi: number, mac: number,
      ad: number, adlenLo: number, adlenHi: number, npub: number, k: number): number;
  }
  /** instantiate's argument is emscripten's Module object: what it already holds, the module uses. */
  const instantiate: (module?: { getRandomValue?: () => number }) => SodiumModule | Promise<SodiumModule>;
  export default instantiate;
}

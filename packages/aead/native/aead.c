/*
 * aead: ChaCha20-Poly1305 (IETF: 96-bit nonce, 128-bit tag, no associated data) for Noise transport records,
 * through the OpenSSL that Node itself links, with one cipher context per direction reused for every record.
 *
 * Why: node:crypto needs a cipher object per record (a nonce cannot be changed on one), and libsodium's WASM
 * build, which allocates nothing, runs ChaCha20 without the CPU's vector units. OpenSSL's assembly does, and
 * the context only gets a new key and nonce per record: a record costs a fraction of what it does in WASM, and
 * less still against node:crypto.
 *
 * seal(key, nonce, plaintext, out, offset[, ad]) writes ciphertext || tag into out at offset, returns its length.
 * open(key, nonce, sealed, out, offset[, ad]) writes the plaintext of ciphertext || tag into out at offset and
 * returns true, or false when the tag does not match; out is then left as it was (the plaintext is made in the
 * context's own scratch first and wiped there). ad is associated data (the Noise handshake's hash); transport
 * records have none.
 *
 * Each record is at most AEAD_MAX bytes of plaintext, as a Noise transport record is. The contexts belong to
 * one JavaScript environment (a thread); they hold the key of the last record until the next call, as the
 * caller's own key buffer does for the connection's life.
 *
 * The handshake's other two primitives are here too, for the same reason (node:crypto's per-call objects):
 * x25519(privateKey, publicKey, out) writes the 32-byte shared secret and returns true, or false when OpenSSL
 * refuses the agreement (a low-order public key gives all zeros, which it rejects); noiseHkdf(chainingKey, input,
 * out) writes Noise's HKDF with HMAC-BLAKE2s, two 32-byte outputs (64 bytes). Through node:crypto a handshake
 * takes a JWK import per peer key (about as long as the agreement) and an HKDF job per call, several times the
 * cost of the HKDF itself.
 *
 * An X25519 private key can be held as a handle (an OpenSSL key made once): x25519Key(privateKey, publicOut)
 * imports one and writes its public key, x25519Generate(privateOut, publicOut) makes a random one; x25519 takes a
 * handle in place of the raw private key. Importing a raw private key computes its public key, a scalar
 * multiplication as costly as the agreement itself: a handshake uses the server's static key twice and each side's
 * ephemeral key twice, so with handles each side does five multiplications instead of nine.
 *
 * zstdCompress(input, level), when this Node's own zstd is visible, compresses map messages (see ZstdCompress).
 *
 * A call that fails clears OpenSSL's error queue, which this thread shares with node:crypto: a refused agreement
 * left there made node:crypto's next call throw OpenSSL's stale error.
 */
#include <dlfcn.h>
#include <node_api.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AEAD_MAX 4096
#define TAG 16

/* zstd's compression API as Node links it (its own copy, for node:zlib); looked up at load time, since a Node built
 * against a system libzstd, or without it, may not have these symbols where the addon can see them. */
typedef struct ZSTD_CCtx_s ZSTD_CCtx;
typedef struct {
  ZSTD_CCtx *(*create)(void);
  size_t (*free)(ZSTD_CCtx *);
  size_t (*compress)(ZSTD_CCtx *, void *, size_t, const void *, size_t, int);
  size_t (*bound)(size_t);
  unsigned (*is_error)(size_t);
} Zstd;

typedef struct {
  EVP_CIPHER_CTX *enc;
  EVP_CIPHER_CTX *dec;
  unsigned char scratch[AEAD_MAX];
  Zstd zstd;
  ZSTD_CCtx *cctx;
  unsigned char *zout;
  size_t zout_len;
} Aead;

static void Finalize(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  Aead *a = data;
  EVP_CIPHER_CTX_free(a->enc);
  EVP_CIPHER_CTX_free(a->dec);
  OPENSSL_cleanse(a->scratch, sizeof a->scratch);
  if (a->cctx) a->zstd.free(a->cctx);
  free(a->zout);
  free(a);
}

/* Bytes reads a Uint8Array (a Buffer is one) argument. */
static int Bytes(napi_env env, napi_value v, unsigned char **p, size_t *n) {
  napi_typedarray_type type;
  napi_value ab;
  size_t offset;
  void *data;
  if (napi_get_typedarray_info(env, v, &type, n, &data, &ab, &offset) != napi_ok || type != napi_uint8_array) return 0;
  *p = data;
  return 1;
}

typedef struct {
  Aead *aead;
  unsigned char *key, *nonce, *in, *out, *ad;
  size_t in_len, ad_len;
  uint32_t offset;
} Call;

/* Args reads the five arguments and the optional sixth (ad); on a wrong one it throws a TypeError naming it and
 * returns 0. */
static int Args(napi_env env, napi_callback_info info, const char *name, int sealing, Call *c) {
  size_t argc = 6;
  napi_value argv[6];
  napi_valuetype ad_type = napi_undefined;
  size_t key_len, nonce_len, out_len;
  char msg[160];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || napi_get_instance_data(env, (void **)&c->aead) != napi_ok) return 0;
  const char *bad = NULL;
  if (argc < 5) bad = "five arguments (key, nonce, input, out, offset)";
  else if (!Bytes(env, argv[0], &c->key, &key_len) || key_len != 32) bad = "a 32-byte key";
  else if (!Bytes(env, argv[1], &c->nonce, &nonce_len) || nonce_len != 12) bad = "a 12-byte nonce";
  else if (!Bytes(env, argv[2], &c->in, &c->in_len)) bad = "the input as a Uint8Array";
  else if (sealing ? c->in_len > AEAD_MAX : (c->in_len < TAG || c->in_len - TAG > AEAD_MAX)) bad = sealing ? "at most 4096 bytes of plaintext" : "a sealed record of 16 to 4112 bytes";
  else if (!Bytes(env, argv[3], &c->out, &out_len)) bad = "out as a Uint8Array";
  else if (napi_get_value_uint32(env, argv[4], &c->offset) != napi_ok) bad = "a whole-number offset";
  else if ((size_t)c->offset + (sealing ? c->in_len + TAG : c->in_len - TAG) > out_len) bad = "room in out from offset";
  else if (argc > 5 && (napi_typeof(env, argv[5], &ad_type) != napi_ok ||
                        (ad_type != napi_undefined && (!Bytes(env, argv[5], &c->ad, &c->ad_len) || c->ad_len > INT_MAX)))) bad = "ad as a Uint8Array";
  if (ad_type == napi_undefined) { c->ad = NULL; c->ad_len = 0; }
  if (!bad) return 1;
  snprintf(msg, sizeof msg, "%s: needs %s", name, bad);
  napi_throw_type_error(env, NULL, msg);
  return 0;
}

static napi_value Seal(napi_env env, napi_callback_info info) {
  Call c;
  if (!Args(env, info, "seal", 1, &c)) return NULL;
  unsigned char *out = c.out + c.offset;
  int len = 0, last = 0;
  if (EVP_EncryptInit_ex(c.aead->enc, NULL, NULL, c.key, c.nonce) != 1 ||
      (c.ad_len && EVP_EncryptUpdate(c.aead->enc, NULL, &len, c.ad, (int)c.ad_len) != 1) ||
      EVP_EncryptUpdate(c.aead->enc, out, &len, c.in, (int)c.in_len) != 1 ||
      EVP_EncryptFinal_ex(c.aead->enc, out + len, &last) != 1 ||
      EVP_CIPHER_CTX_ctrl(c.aead->enc, EVP_CTRL_AEAD_GET_TAG, TAG, out + c.in_len) != 1) {
    ERR_clear_error();
    napi_throw_error(env, NULL, "seal: OpenSSL refused the record");
    return NULL;
  }
  napi_value result;
  napi_create_uint32(env, (uint32_t)(c.in_len + TAG), &result);
  return result;
}

static napi_value Open(napi_env env, napi_callback_info info) {
  Call c;
  if (!Args(env, info, "open", 0, &c)) return NULL;
  size_t n = c.in_len - TAG;
  unsigned char *plain = c.aead->scratch;
  int len = 0, last = 0, ok;
  /* EVP_CTRL_AEAD_SET_TAG takes a non-const pointer; OpenSSL copies the tag and does not write it. */
  ok = EVP_DecryptInit_ex(c.aead->dec, NULL, NULL, c.key, c.nonce) == 1 &&
       (!c.ad_len || EVP_DecryptUpdate(c.aead->dec, NULL, &len, c.ad, (int)c.ad_len) == 1) &&
       EVP_DecryptUpdate(c.aead->dec, plain, &len, c.in, (int)n) == 1 &&
       EVP_CIPHER_CTX_ctrl(c.aead->dec, EVP_CTRL_AEAD_SET_TAG, TAG, c.in + n) == 1 &&
       EVP_DecryptFinal_ex(c.aead->dec, plain + len, &last) == 1;
  if (ok) memcpy(c.out + c.offset, plain, n);
  else ERR_clear_error();
  OPENSSL_cleanse(plain, n);
  napi_value result;
  napi_get_boolean(env, ok, &result);
  return result;
}

/* ThreeArgs reads three byte arguments of exact lengths (a, b: 32 or any when 0; out: its length), or throws naming them. */
static int ThreeArgs(napi_env env, napi_callback_info info, const char *what, size_t a_len, size_t out_len,
                     unsigned char **a, size_t *an, unsigned char **b, size_t *bn, unsigned char **out) {
  size_t argc = 3;
  napi_value argv[3];
  size_t on;
  char msg[160];
  const char *bad = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return 0;
  if (argc < 3) bad = "three arguments";
  else if (!Bytes(env, argv[0], a, an) || (a_len && *an != a_len)) bad = a_len ? "a 32-byte first argument" : "the first argument as a Uint8Array";
  else if (!Bytes(env, argv[1], b, bn) || (a_len && *bn != a_len)) bad = a_len ? "a 32-byte second argument" : "the second argument as a Uint8Array";
  else if (!Bytes(env, argv[2], out, &on) || on < out_len) bad = out_len == 64 ? "a 64-byte out" : "a 32-byte out";
  if (!bad) return 1;
  snprintf(msg, sizeof msg, "%s: needs %s", what, bad);
  napi_throw_type_error(env, NULL, msg);
  return 0;
}

static void FreeKey(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  EVP_PKEY_free(data);
}

/* Handle wraps an X25519 key as a JavaScript value (freed with it) after writing its raw public key (and, when
 * priv is given, its raw private key) out; NULL with an error thrown when OpenSSL has no key to give. */
static napi_value Handle(napi_env env, EVP_PKEY *key, unsigned char *priv, unsigned char *pub, const char *what) {
  size_t pn = 32, qn = 32;
  napi_value handle;
  if (!key || EVP_PKEY_get_raw_public_key(key, pub, &qn) != 1 || qn != 32 ||
      (priv && (EVP_PKEY_get_raw_private_key(key, priv, &pn) != 1 || pn != 32))) {
    EVP_PKEY_free(key);
    ERR_clear_error();
    napi_throw_error(env, NULL, what);
    return NULL;
  }
  if (napi_create_external(env, key, FreeKey, NULL, &handle) != napi_ok) {
    EVP_PKEY_free(key);
    return NULL;
  }
  return handle;
}

/* TwoKeys reads two 32-byte Uint8Array arguments, or throws naming what was wrong. */
static int TwoKeys(napi_env env, napi_callback_info info, const char *what, const char *first, unsigned char **a, unsigned char **b) {
  size_t argc = 2, an, bn;
  napi_value argv[2];
  char msg[160];
  const char *bad = NULL;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return 0;
  if (argc < 2) bad = "two arguments";
  else if (!Bytes(env, argv[0], a, &an) || an != 32) bad = first;
  else if (!Bytes(env, argv[1], b, &bn) || bn != 32) bad = "a 32-byte public key out";
  if (!bad) return 1;
  snprintf(msg, sizeof msg, "%s: needs %s", what, bad);
  napi_throw_type_error(env, NULL, msg);
  return 0;
}

static napi_value X25519Key(napi_env env, napi_callback_info info) {
  unsigned char *priv, *pub;
  if (!TwoKeys(env, info, "x25519Key", "a 32-byte private key", &priv, &pub)) return NULL;
  return Handle(env, EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, priv, 32), NULL, pub, "x25519Key: OpenSSL refused the key");
}

static napi_value X25519Generate(napi_env env, napi_callback_info info) {
  unsigned char *priv, *pub;
  if (!TwoKeys(env, info, "x25519Generate", "a 32-byte private key out", &priv, &pub)) return NULL;
  EVP_PKEY *key = NULL;
  EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, NULL);
  if (!ctx || EVP_PKEY_keygen_init(ctx) != 1 || EVP_PKEY_keygen(ctx, &key) != 1) key = NULL;
  EVP_PKEY_CTX_free(ctx);
  return Handle(env, key, priv, pub, "x25519Generate: OpenSSL made no key");
}

/* X25519 takes its private key raw (imported for this call) or as a handle (x25519Key, x25519Generate). */
static napi_value X25519(napi_env env, napi_callback_info info) {
  size_t argc = 3, pn = 0, qn = 0, on = 0;
  napi_value argv[3];
  napi_valuetype type = napi_undefined;
  unsigned char *priv = NULL, *pub = NULL, *out = NULL;
  EVP_PKEY *held = NULL;
  const char *bad = NULL;
  char msg[160];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  if (argc < 3) bad = "three arguments";
  else if (napi_typeof(env, argv[0], &type) != napi_ok ||
           (type == napi_external ? napi_get_value_external(env, argv[0], (void **)&held) != napi_ok || !held
                                  : !Bytes(env, argv[0], &priv, &pn) || pn != 32)) bad = "a 32-byte first argument or a key handle";
  else if (!Bytes(env, argv[1], &pub, &qn) || qn != 32) bad = "a 32-byte second argument";
  else if (!Bytes(env, argv[2], &out, &on) || on < 32) bad = "a 32-byte out";
  if (bad) {
    snprintf(msg, sizeof msg, "x25519: needs %s", bad);
    napi_throw_type_error(env, NULL, msg);
    return NULL;
  }
  EVP_PKEY *key = held ? held : EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, NULL, priv, 32);
  EVP_PKEY *peer = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, NULL, pub, 32);
  EVP_PKEY_CTX *ctx = key ? EVP_PKEY_CTX_new(key, NULL) : NULL;
  size_t len = 32;
  int ok = key && peer && ctx && EVP_PKEY_derive_init(ctx) == 1 && EVP_PKEY_derive_set_peer(ctx, peer) == 1 &&
           EVP_PKEY_derive(ctx, out, &len) == 1 && len == 32;
  if (!ok) {
    OPENSSL_cleanse(out, 32);
    ERR_clear_error();
  }
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(peer);
  if (!held) EVP_PKEY_free(key);
  napi_value result;
  napi_get_boolean(env, ok, &result);
  return result;
}

/* Hmac is HMAC-BLAKE2s-256 of data under key into out (32 bytes). */
static int Hmac(const unsigned char *key, size_t key_len, const unsigned char *data, size_t data_len, unsigned char *out) {
  unsigned int len = 32;
  return HMAC(EVP_blake2s256(), key, (int)key_len, data, data_len, out, &len) != NULL && len == 32;
}

static napi_value NoiseHkdf(napi_env env, napi_callback_info info) {
  unsigned char *ck, *input, *out;
  size_t cn, in;
  if (!ThreeArgs(env, info, "noiseHkdf", 0, 64, &ck, &cn, &input, &in, &out)) return NULL;
  unsigned char prk[32], block[33];
  int ok = Hmac(ck, cn, input, in, prk);
  block[0] = 1;
  ok = ok && Hmac(prk, 32, block, 1, out);
  memcpy(block, out, 32);
  block[32] = 2;
  ok = ok && Hmac(prk, 32, block, 33, out + 32);
  OPENSSL_cleanse(prk, sizeof prk);
  OPENSSL_cleanse(block, sizeof block);
  if (!ok) {
    ERR_clear_error();
    napi_throw_error(env, NULL, "noiseHkdf: OpenSSL has no HMAC-BLAKE2s");
    return NULL;
  }
  return NULL;
}

/*
 * zstdCompress(input, level) is one zstd frame of input at level as a new Buffer, from one compression context per
 * thread reused for every call: the WASM build of zstd the server used for a session's own text spends about 20 us
 * per call before compressing a byte (8.2-10 against 24-25 us for 0.5-2 KB of JSON, 18 against 39 us for 9 KB).
 */
static napi_value ZstdCompress(napi_env env, napi_callback_info info) {
  size_t argc = 2, in_len;
  napi_value argv[2], result;
  unsigned char *in;
  int32_t level;
  Aead *a;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || napi_get_instance_data(env, (void **)&a) != napi_ok) return NULL;
  if (argc < 2 || !Bytes(env, argv[0], &in, &in_len)) {
    napi_throw_type_error(env, NULL, "zstdCompress: needs the input as a Uint8Array");
    return NULL;
  }
  if (napi_get_value_int32(env, argv[1], &level) != napi_ok || level < 1 || level > 19) {
    napi_throw_type_error(env, NULL, "zstdCompress: needs a level from 1 to 19");
    return NULL;
  }
  size_t need = a->zstd.bound(in_len);
  if (need > a->zout_len) {
    unsigned char *grown = realloc(a->zout, need);
    if (!grown) {
      napi_throw_error(env, NULL, "zstdCompress: out of memory");
      return NULL;
    }
    a->zout = grown;
    a->zout_len = need;
  }
  size_t n = a->zstd.compress(a->cctx, a->zout, a->zout_len, in, in_len, level);
  if (a->zstd.is_error(n)) {
    napi_throw_error(env, NULL, "zstdCompress: zstd refused the input");
    return NULL;
  }
  void *copy;
  if (napi_create_buffer_copy(env, n, a->zout, &copy, &result) != napi_ok) return NULL;
  return result;
}

/* LoadZstd finds zstd's functions in the process; 0 (and no zstdCompress) when any is missing. */
static int LoadZstd(Aead *a) {
  a->zstd.create = (ZSTD_CCtx * (*)(void)) dlsym(RTLD_DEFAULT, "ZSTD_createCCtx");
  a->zstd.free = (size_t(*)(ZSTD_CCtx *))dlsym(RTLD_DEFAULT, "ZSTD_freeCCtx");
  a->zstd.compress = (size_t(*)(ZSTD_CCtx *, void *, size_t, const void *, size_t, int))dlsym(RTLD_DEFAULT, "ZSTD_compressCCtx");
  a->zstd.bound = (size_t(*)(size_t))dlsym(RTLD_DEFAULT, "ZSTD_compressBound");
  a->zstd.is_error = (unsigned (*)(size_t))dlsym(RTLD_DEFAULT, "ZSTD_isError");
  if (!a->zstd.create || !a->zstd.free || !a->zstd.compress || !a->zstd.bound || !a->zstd.is_error) return 0;
  a->cctx = a->zstd.create();
  return a->cctx != NULL;
}

NAPI_MODULE_INIT() {
  Aead *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->enc = EVP_CIPHER_CTX_new();
  a->dec = EVP_CIPHER_CTX_new();
  const EVP_CIPHER *chacha = EVP_chacha20_poly1305();
  if (!a->enc || !a->dec || !chacha ||
      EVP_EncryptInit_ex(a->enc, chacha, NULL, NULL, NULL) != 1 ||
      EVP_DecryptInit_ex(a->dec, chacha, NULL, NULL, NULL) != 1) {
    Finalize(env, a, NULL);
    napi_throw_error(env, NULL, "aead: this Node's OpenSSL has no ChaCha20-Poly1305");
    return NULL;
  }
  if (napi_set_instance_data(env, a, Finalize, NULL) != napi_ok) { Finalize(env, a, NULL); return NULL; }
  napi_value fn;
  if (napi_create_function(env, "seal", NAPI_AUTO_LENGTH, Seal, NULL, &fn) != napi_ok || napi_set_named_property(env, exports, "seal", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "open", NAPI_AUTO_LENGTH, Open, NULL, &fn) != napi_ok || napi_set_named_property(env, exports, "open", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "x25519", NAPI_AUTO_LENGTH, X25519, NULL, &fn) != napi_ok || napi_set_named_property(env, exports, "x25519", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "noiseHkdf", NAPI_AUTO_LENGTH, NoiseHkdf, NULL, &fn) != napi_ok || napi_set_named_property(env, exports, "noiseHkdf", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "x25519Key", NAPI_AUTO_LENGTH, X25519Key, NULL, &fn) != napi_ok || napi_set_named_property(env, exports, "x25519Key", fn) != napi_ok) return NULL;
  if (napi_create_function(env, "x25519Generate", NAPI_AUTO_LENGTH, X25519Generate, NULL, &fn) != napi_ok || napi_set_named_property(env, exports, "x25519Generate", fn) != napi_ok) return NULL;
  if (LoadZstd(a) && (napi_create_function(env, "zstdCompress", NAPI_AUTO_LENGTH, ZstdCompress, NULL, &fn) != napi_ok || napi_set_named_property(env, exports, "zstdCompress", fn) != napi_ok)) return NULL;
  napi_value max;
  if (napi_create_uint32(env, AEAD_MAX, &max) != napi_ok || napi_set_named_property(env, exports, "max", max) != napi_ok) return NULL;
  return exports;
}

/*
 * memtrim: one Node-API function, trim(), that asks glibc to give the free pages
 * inside its heaps back to the system (malloc_trim(0); since glibc 2.8 that covers
 * free chunks in the middle of every arena, not only the top of the main heap).
 *
 * Why: a burst of joins allocates and frees tens of MiB of short-lived C memory
 * (HTTP/2 output copies, Noise frames, zstd output) between long-lived per-session
 * allocations. glibc returns freed memory to the system on its own only from the
 * top of a heap, so without this an idle server keeps the burst's high-water mark
 * resident. Node has no binding for it and there is no maintained npm package.
 *
 * trim() returns true when memory was released, false when there was none to give,
 * and undefined where the C library is not glibc (musl, macOS): nothing to call.
 */
#include <node_api.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

static napi_value Trim(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
#if defined(__GLIBC__)
  if (napi_get_boolean(env, malloc_trim(0) != 0, &result) != napi_ok) return NULL;
#else
  if (napi_get_undefined(env, &result) != napi_ok) return NULL;
#endif
  return result;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  if (napi_create_function(env, "trim", NAPI_AUTO_LENGTH, Trim, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "trim", fn) != napi_ok) return NULL;
  return exports;
}

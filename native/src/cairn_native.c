/*
 * cairn_native: the few system calls Node.js does not expose, as a Node-API addon (ABI-stable:
 * one build serves every Node.js from 18 on).
 *
 * mapFile(fd, length) -> ArrayBuffer
 *   Maps the first `length` bytes of an open file read-only (PROT_READ, MAP_SHARED) and returns
 *   them as an ArrayBuffer backed by the mapping. The mapping lives as long as the ArrayBuffer:
 *   its finalizer unmaps it once the garbage collector has collected the buffer and every view
 *   of it, so no JavaScript reference can outlive the memory it points into. The caller may
 *   close the descriptor at once (a mapping does not need it) and may unlink the file (the
 *   mapping keeps its pages until it is unmapped). The file must not shrink below `length`
 *   while mapped: a read past its end raises SIGBUS. Cairn maps only SSTables, which are
 *   immutable once installed.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <node_api.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define CHECK(call)                                                                  \
  do {                                                                             \
    if ((call) != napi_ok) return NULL;                                            \
  } while (0)

static void unmap(napi_env env, void* data, void* hint) {
  (void)env;
  munmap(data, (size_t)(uintptr_t)hint);
}

static napi_value throw_errno(napi_env env, const char* what, int err) {
  char message[160];
  snprintf(message, sizeof message, "%s: %s", what, strerror(err));
  napi_throw_error(env, "CAIRN_ERR_MMAP", message);
  return NULL;
}

static napi_value map_file(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 2) {
    napi_throw_type_error(env, NULL, "mapFile(fd, length) takes two numbers");
    return NULL;
  }
  double fd_arg;
  double length_arg;
  // Whole numbers only: napi_get_value_int32 would turn NaN into 0, a descriptor that exists.
  if (napi_get_value_double(env, argv[0], &fd_arg) != napi_ok ||
      napi_get_value_double(env, argv[1], &length_arg) != napi_ok || !(fd_arg >= 0) ||
      fd_arg > INT32_MAX || fd_arg != (double)(int32_t)fd_arg || !(length_arg >= 0) ||
      length_arg > 9007199254740991.0 || length_arg != (double)(int64_t)length_arg) {
    napi_throw_type_error(env, NULL, "mapFile(fd, length) takes a descriptor and a length >= 0");
    return NULL;
  }
  int fd = (int)fd_arg;
  int64_t length = (int64_t)length_arg;
  napi_value result;
  if (length == 0) {
    void* unused;
    CHECK(napi_create_arraybuffer(env, 0, &unused, &result));
    return result;
  }
  void* data = mmap(NULL, (size_t)length, PROT_READ, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return throw_errno(env, "mmap", errno);
  if (napi_create_external_arraybuffer(env, data, (size_t)length, unmap,
                                       (void*)(uintptr_t)length, &result) != napi_ok) {
    munmap(data, (size_t)length);
    napi_throw_error(env, "CAIRN_ERR_MMAP", "cannot wrap the mapping in an ArrayBuffer");
    return NULL;
  }
  return result;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  CHECK(napi_create_function(env, "mapFile", NAPI_AUTO_LENGTH, map_file, NULL, &fn));
  CHECK(napi_set_named_property(env, exports, "mapFile", fn));
  return exports;
}

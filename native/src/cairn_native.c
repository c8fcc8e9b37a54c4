/*
 * cairn_native: the few system calls Node.js does not expose, as a Node-API addon (ABI-stable:
 * one build serves every Node.js from 18 on).
 *
 * mapFile(fd, length, id) -> ArrayBuffer
 *   Maps the first `length` bytes of an open file read-only (PROT_READ, MAP_SHARED) and returns
 *   them as an ArrayBuffer backed by the mapping. The mapping lives as long as the ArrayBuffer:
 *   its finalizer unmaps it once the garbage collector has collected the buffer and every view
 *   of it, so no JavaScript reference can outlive the memory it points into. The caller may
 *   close the descriptor at once (a mapping does not need it) and may unlink the file (the
 *   mapping keeps its pages until it is unmapped). Throws an Error with code CAIRN_ERR_MMAP
 *   when mmap fails.
 *
 *   A file that shrinks while mapped raises SIGBUS on a read of a page past its new end (so
 *   does a page the disk fails to read), which would kill the process, wherever JavaScript or
 *   V8 reads the page. So the first mapFile installs a SIGBUS handler: a fault in a page of one
 *   of the faulting thread's mappings is repaired, a page of zeros mapped over it, and counted
 *   in `faults`; the read goes on and reads zeros. The caller must check `faults` after every
 *   operation that reads mapped bytes and discard what it read if the count moved (Cairn's LSM
 *   engine does, src/storage/lsm/engine.ts). Any other SIGBUS goes to the handler installed
 *   before this one (by default: the process dies of it).
 *
 * faults: ArrayBuffer
 *   The calling thread's: int32 pages repaired so far, int32 the `id` given to mapFile for the
 *   mapping of the last, and at byte 8 a float64, its offset in the file.
 *
 * dupFd(fd) -> number
 *   A new descriptor for the open file (a socket, here) that `fd` refers to, close-on-exec
 *   (fcntl F_DUPFD_CLOEXEC). A shard worker hands an accepted connection to the worker that owns
 *   it this way (src/api/front-end.ts): the accepting thread closes its own descriptor, the
 *   owner wraps the new one. Throws an Error with code CAIRN_ERR_DUP when fcntl fails.
 *
 * lockFile(fd) -> boolean
 *   Takes an exclusive, non-blocking flock(2) on the open file `fd`: true when taken, false when
 *   another open file description holds it (EWOULDBLOCK). The lock lasts while the descriptor is
 *   open and the kernel drops it when the process ends, however it ends, so a crashed holder
 *   never leaves a stale lock (src/node/data-dir-lock.ts locks the data directory this way, as
 *   etcd and LevelDB do). Throws an Error with code CAIRN_ERR_FLOCK on any other failure.
 *
 * crc32c(data, crc, start, end) -> number
 *   CRC32C (Castagnoli) of data[start, end) continuing from `crc`, exactly as
 *   src/storage/common/crc32c.ts computes it: with the SSE4.2 instruction where the CPU has it,
 *   else slicing-by-8 tables. A range outside `data` or a `data` that is not a Uint8Array throws a
 *   TypeError (src/storage/common/crc32c.ts calls it only for ranges it computed).
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <node_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#define CHECK(call)                                                                  \
  do {                                                                             \
    if ((call) != napi_ok) return NULL;                                            \
  } while (0)

/*
 * The descriptor `value` holds: a whole number in [0, INT32_MAX], else -1 (napi_get_value_int32
 * would turn NaN into 0, a descriptor that exists).
 */
static int fd_of(napi_env env, napi_value value) {
  double fd;
  if (napi_get_value_double(env, value, &fd) != napi_ok || !(fd >= 0) || fd > INT32_MAX ||
      fd != (double)(int32_t)fd) {
    return -1;
  }
  return (int)fd;
}

/* --- Mappings, and the pages a file that shrank took from them --------------------------- */

struct thread_state;

struct mapping {
  uint8_t* data;
  size_t length;
  int32_t id;
  struct thread_state* owner;
};

/*
 * One per thread that loaded the addon (Node's main thread, each worker): the mappings it made,
 * which only it reads (an ArrayBuffer does not cross threads) and only it adds and removes, and
 * the faults of its reads of them, which JavaScript reads (`faults`). Never freed: a finalizer
 * may still remove a mapping from it as its thread's environment is torn down.
 */
struct thread_state {
  struct {
    int32_t count; /* pages repaired */
    int32_t id;    /* of the mapping of the last */
    double offset; /* of the last in its file */
  } faults;
  struct mapping** mappings;
  size_t count;
  size_t capacity;
};

/* initial-exec: reading it in the signal handler allocates nothing (dynamic TLS may). */
static __thread struct thread_state* state __attribute__((tls_model("initial-exec")));
static struct sigaction previous_sigbus;
static pthread_once_t sigbus_once = PTHREAD_ONCE_INIT;
static uintptr_t page_size;

/*
 * Maps a page of zeros over the page of `at` if it lies in one of the thread's mappings: a page
 * its file no longer has. True if done (the faulting read then goes on, reading zeros).
 */
static bool repair(struct thread_state* s, const uint8_t* at) {
  for (size_t i = 0; i < s->count; i++) {
    struct mapping* m = s->mappings[i];
    if (at < m->data || at >= m->data + m->length) continue;
    void* page = (void*)((uintptr_t)at & ~(page_size - 1));
    if (mmap(page, page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
        MAP_FAILED) {
      return false;
    }
    s->faults.count++;
    s->faults.id = m->id;
    s->faults.offset = (double)((uint8_t*)page - m->data);
    return true;
  }
  return false;
}

static void on_sigbus(int sig, siginfo_t* info, void* context) {
  struct thread_state* s = state;
  int saved_errno = errno;
  /* si_code > 0: raised by the kernel for this access, not sent by a process. */
  bool repaired = s != NULL && info->si_code > 0 && repair(s, info->si_addr);
  errno = saved_errno;
  if (repaired) return;
  if (previous_sigbus.sa_flags & SA_SIGINFO) {
    previous_sigbus.sa_sigaction(sig, info, context);
  } else if (previous_sigbus.sa_handler != SIG_DFL && previous_sigbus.sa_handler != SIG_IGN) {
    previous_sigbus.sa_handler(sig);
  } else {
    /* The old disposition back, and the signal again, pending until this handler returns. */
    sigaction(SIGBUS, &previous_sigbus, NULL);
    raise(SIGBUS);
  }
}

static void install_sigbus(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &previous_sigbus);
}

static bool grow(struct thread_state* s) {
  size_t capacity = s->capacity == 0 ? 16 : 2 * s->capacity;
  struct mapping** mappings = realloc(s->mappings, capacity * sizeof *mappings);
  if (mappings == NULL) return false;
  s->mappings = mappings;
  s->capacity = capacity;
  return true;
}

static void finalize_mapping(napi_env env, void* data, void* hint) {
  (void)env;
  (void)data;
  struct mapping* m = hint;
  struct thread_state* s = m->owner;
  for (size_t i = 0; i < s->count; i++) {
    if (s->mappings[i] != m) continue;
    s->mappings[i] = s->mappings[--s->count];
    break;
  }
  munmap(m->data, m->length);
  free(m);
}

static napi_value throw_errno(napi_env env, const char* what, int err) {
  char message[160];
  snprintf(message, sizeof message, "%s: %s", what, strerror(err));
  napi_throw_error(env, "CAIRN_ERR_MMAP", message);
  return NULL;
}

static napi_value map_file(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int fd = fd_of(env, argv[0]);
  double length_arg;
  int32_t id;
  if (fd < 0 || napi_get_value_double(env, argv[1], &length_arg) != napi_ok ||
      !(length_arg >= 0) || length_arg > 9007199254740991.0 ||
      length_arg != (double)(int64_t)length_arg ||
      napi_get_value_int32(env, argv[2], &id) != napi_ok) {
    napi_throw_type_error(env, NULL,
                          "mapFile(fd, length, id) takes a descriptor, a length >= 0 and an id");
    return NULL;
  }
  size_t length = (size_t)length_arg;
  napi_value result;
  if (length == 0) {
    void* unused;
    CHECK(napi_create_arraybuffer(env, 0, &unused, &result));
    return result;
  }
  pthread_once(&sigbus_once, install_sigbus);
  struct thread_state* s = state;
  struct mapping* m = malloc(sizeof *m);
  if (m == NULL || (s->count == s->capacity && !grow(s))) {
    free(m);
    return throw_errno(env, "mapFile", ENOMEM);
  }
  void* data = mmap(NULL, length, PROT_READ, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    int err = errno;
    free(m);
    return throw_errno(env, "mmap", err);
  }
  *m = (struct mapping){data, length, id, s};
  s->mappings[s->count++] = m;
  if (napi_create_external_arraybuffer(env, data, length, finalize_mapping, m, &result) !=
      napi_ok) {
    finalize_mapping(env, data, m);
    napi_throw_error(env, "CAIRN_ERR_MMAP", "cannot wrap the mapping in an ArrayBuffer");
    return NULL;
  }
  return result;
}

/* --- CRC32C ------------------------------------------------------------------------------ */

static uint32_t crc_table[8][256];
static int crc_hardware;

static void crc_init(void) {
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = n;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc_table[0][n] = c;
  }
  for (uint32_t n = 0; n < 256; n++) {
    for (int t = 1; t < 8; t++) {
      uint32_t p = crc_table[t - 1][n];
      crc_table[t][n] = (p >> 8) ^ crc_table[0][p & 0xff];
    }
  }
#if defined(__x86_64__)
  unsigned a, b, c, d;
  crc_hardware = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_SSE4_2);
#endif
}

static uint32_t crc_software(uint32_t crc, const uint8_t* p, size_t n) {
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
        crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
        crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

#if defined(__x86_64__)
/*
 * The crc32 instruction has a latency of ~3 cycles and a throughput of one per cycle: three
 * independent streams over consecutive STRIDE-byte chunks keep it busy, and the CRC register is
 * linear, so the streams combine as reg(A|B|C) = Z(Z(reg(A)) ^ reg(B)) ^ reg(C), Z being "append
 * STRIDE zero bytes" (a 32x32 bit matrix, applied a byte at a time through `crc_shift`).
 */
#define STRIDE 256
static uint32_t crc_shift[4][256];

static uint32_t crc_zeros(uint32_t reg) {
  for (int i = 0; i < STRIDE; i++) reg = crc_table[0][reg & 0xff] ^ (reg >> 8);
  return reg;
}

static void crc_shift_init(void) {
  for (int k = 0; k < 4; k++) {
    for (uint32_t b = 0; b < 256; b++) crc_shift[k][b] = crc_zeros(b << (8 * k));
  }
}

static inline uint32_t crc_shifted(uint32_t reg) {
  return crc_shift[0][reg & 0xff] ^ crc_shift[1][(reg >> 8) & 0xff] ^
         crc_shift[2][(reg >> 16) & 0xff] ^ crc_shift[3][reg >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t crc, const uint8_t* p,
                                                            size_t n) {
  uint64_t c0 = (uint32_t)~crc;
  while (n >= 3 * STRIDE) {
    uint64_t c1 = 0, c2 = 0;
    for (int i = 0; i < STRIDE; i += 8) {
      uint64_t w0, w1, w2;
      memcpy(&w0, p + i, 8);
      memcpy(&w1, p + STRIDE + i, 8);
      memcpy(&w2, p + 2 * STRIDE + i, 8);
      c0 = __builtin_ia32_crc32di(c0, w0);
      c1 = __builtin_ia32_crc32di(c1, w1);
      c2 = __builtin_ia32_crc32di(c2, w2);
    }
    c0 = crc_shifted(crc_shifted((uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
    p += 3 * STRIDE;
    n -= 3 * STRIDE;
  }
  while (n >= 8) {
    uint64_t word;
    memcpy(&word, p, 8);
    c0 = __builtin_ia32_crc32di(c0, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = (uint32_t)c0;
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
#endif

static napi_value crc32c(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  napi_typedarray_type type;
  size_t length;
  void* data;
  uint32_t crc, start, end;
  if (argc < 4 ||
      napi_get_typedarray_info(env, argv[0], &type, &length, &data, NULL, NULL) != napi_ok ||
      type != napi_uint8_array || napi_get_value_uint32(env, argv[1], &crc) != napi_ok ||
      napi_get_value_uint32(env, argv[2], &start) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &end) != napi_ok || start > end || end > length) {
    napi_throw_type_error(env, NULL, "crc32c(data, crc, start, end) takes a Uint8Array and a range");
    return NULL;
  }
  const uint8_t* p = (const uint8_t*)data + start;
  size_t n = end - start;
#if defined(__x86_64__)
  if (crc_hardware) crc = crc_sse42(crc, p, n);
  else
#endif
    crc = crc_software(crc, p, n);
  napi_value result;
  CHECK(napi_create_uint32(env, crc, &result));
  return result;
}

static napi_value dup_fd(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int fd = fd_of(env, argv[0]);
  if (fd < 0) {
    napi_throw_type_error(env, NULL, "dupFd(fd) takes a descriptor");
    return NULL;
  }
  int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) {
    char message[160];
    snprintf(message, sizeof message, "dupFd(%d): %s", fd, strerror(errno));
    napi_throw_error(env, "CAIRN_ERR_DUP", message);
    return NULL;
  }
  napi_value result;
  CHECK(napi_create_int32(env, copy, &result));
  return result;
}

static napi_value lock_file(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int fd = fd_of(env, argv[0]);
  if (fd < 0) {
    napi_throw_type_error(env, NULL, "lockFile(fd) takes a descriptor");
    return NULL;
  }
  int rc;
  do {
    rc = flock(fd, LOCK_EX | LOCK_NB);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EWOULDBLOCK) {
    char message[160];
    snprintf(message, sizeof message, "flock(%d): %s", fd, strerror(errno));
    napi_throw_error(env, "CAIRN_ERR_FLOCK", message);
    return NULL;
  }
  napi_value result;
  CHECK(napi_get_boolean(env, rc == 0, &result));
  return result;
}

NAPI_MODULE_INIT() {
  if (state == NULL) {
    state = calloc(1, sizeof *state);
    if (state == NULL) return NULL;
  }
  page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
  napi_value faults;
  CHECK(napi_create_external_arraybuffer(env, &state->faults, sizeof state->faults, NULL, NULL,
                                         &faults));
  CHECK(napi_set_named_property(env, exports, "faults", faults));
  crc_init();
#if defined(__x86_64__)
  if (crc_hardware) crc_shift_init();
#endif
  napi_property_descriptor functions[] = {
      {"crc32c", NULL, crc32c, NULL, NULL, NULL, napi_enumerable, NULL},
      {"mapFile", NULL, map_file, NULL, NULL, NULL, napi_enumerable, NULL},
      {"dupFd", NULL, dup_fd, NULL, NULL, NULL, napi_enumerable, NULL},
      {"lockFile", NULL, lock_file, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  CHECK(napi_define_properties(env, exports, sizeof functions / sizeof *functions, functions));
  return exports;
}

/**
 * Cairn's Node-API addon (native/src/cairn_native.c, built by scripts/build-native.mjs on
 * `npm install`), loaded once per thread. It is optional: where it was not built (no C compiler)
 * or is turned off with CAIRN_NO_NATIVE=1, its functions are undefined here and callers use their
 * JavaScript paths (pread instead of mapped tables, crc32c.ts's tables instead of the CPU's
 * CRC32C instruction), which give the same results more slowly.
 */
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

interface Addon {
  mapFile(fd: number, length: number, id: number): ArrayBuffer;
  /** Older builds of the addon lack it (and do not survive a mapped file that shrinks). */
  faults?: ArrayBuffer;
  crc32c(data: Uint8Array, crc: number, start: number, end: number): number;
  dupFd(fd: number): number;
  /** Older builds of the addon lack it. */
  lockFile?(fd: number): boolean;
}

const ADDON_PATH = join(import.meta.dirname, "..", "..", "native", "build", "cairn_native.node");

function load(): Addon | undefined {
  if (process.env.CAIRN_NO_NATIVE === "1" || !existsSync(ADDON_PATH)) return undefined;
  return createRequire(import.meta.url)(ADDON_PATH) as Addon;
}

const addon = load();

/**
 * Why the addon is not loaded (for the node's start-up warning), or null when it is: turned off
 * by CAIRN_NO_NATIVE=1, or not built at `ADDON_PATH` (no C compiler at install).
 */
export const nativeAddonMissing: string | null =
  addon !== undefined
    ? null
    : process.env.CAIRN_NO_NATIVE === "1"
      ? "turned off by CAIRN_NO_NATIVE=1"
      : `not built: ${ADDON_PATH} does not exist (npm install found no C compiler)`;

/**
 * Maps the first `length` bytes of the open file `fd` read-only, as a Buffer over the mapping;
 * undefined where the addon is not loaded (or is older than `mappedFaults`). The mapping lives
 * while the Buffer or any view of it is reachable (the garbage collector unmaps it), so a view
 * never outlives its memory; `fd` may be closed at once. Throws an Error with code
 * CAIRN_ERR_MMAP when mmap fails.
 *
 * A read of a page the file lost since (it shrank; or the disk failed to read it) raises
 * SIGBUS: the addon's handler maps a page of zeros there and counts it in `mappedFaults` with
 * `id`, and the read goes on, reading zeros. A caller must compare `mappedFaults[0]` before and
 * after each operation that reads mapped bytes and discard its result if it moved; and it must
 * hand out no view of a mapping (whose reader nobody would check): copies only.
 */
export const mapFile: ((fd: number, length: number, id: number) => Buffer) | undefined =
  addon?.faults === undefined
    ? undefined
    : (fd, length, id) => Buffer.from(addon.mapFile(fd, length, id));

/** This thread's faults in mapped files: see `mapFile`. */
export interface MappedFaults {
  /** `[0]`: the pages repaired so far (read it with Atomics.load: the signal handler writes it). */
  readonly counts: Int32Array;
  /** The id of the mapping of the last. */
  readonly id: number;
  /** Its offset in the file. */
  readonly offset: number;
}

export const mappedFaults: MappedFaults | undefined =
  addon?.faults === undefined
    ? undefined
    : ((memory: ArrayBuffer): MappedFaults => {
        const ints = new Int32Array(memory, 0, 2);
        const offset = new Float64Array(memory, 8, 1);
        return {
          counts: ints,
          get id() {
            return ints[1] as number;
          },
          get offset() {
            return offset[0] as number;
          },
        };
      })(addon.faults);

/**
 * CRC32C of `data[start, end)` continuing from `crc`, with the CPU's CRC32C instruction where it
 * has one (slicing-by-8 in C otherwise); undefined where the addon is not loaded. Arguments are
 * not checked beyond a TypeError: call it through crc32c.ts.
 */
export const crc32cNative: Addon["crc32c"] | undefined = addon?.crc32c;

/**
 * A new close-on-exec descriptor for the open file (here, a socket) `fd` refers to; undefined
 * where the addon is not loaded. A shard worker hands an accepted connection to another this way
 * (src/api/worker-tunnel.ts): it closes its own socket, the other wraps the copy. Throws an Error
 * with code CAIRN_ERR_DUP when the system refuses (EMFILE, say).
 */
export const dupFd: Addon["dupFd"] | undefined = addon?.dupFd;

/**
 * Takes an exclusive, non-blocking flock(2) on the open file `fd`: true when taken, false when
 * another open file description holds it; undefined where the addon (or this function of it) is
 * not loaded. The kernel drops the lock when the descriptor is closed or the process ends.
 * Throws an Error with code CAIRN_ERR_FLOCK on another failure (e.g. a file system without
 * locks).
 */
export const lockFile: ((fd: number) => boolean) | undefined = addon?.lockFile?.bind(addon);

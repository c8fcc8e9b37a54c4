/**
 * How long the calling thread has waited for a core: Linux's scheduler statistics
 * (`/proc/thread-self/schedstat`, its second field: nanoseconds runnable but not running, since
 * the thread started). The WAL subtracts it from a blocking write's wall time to judge the disk
 * (Wal#judgeBlockingWrite): on a loaded machine a write whose disk was done in 0.3 ms returns
 * 3 ms later, once its thread gets a core back, and that is not a slow disk.
 */
import { closeSync, openSync, readSync } from "node:fs";

/** Milliseconds the thread that made it has waited for a core, in all (it only grows). */
export type RunDelayClock = () => number;

const SCHEDSTAT = "/proc/thread-self/schedstat";

/** This thread's clock, once made (module state is per thread: a worker has its own). */
let threadClock: RunDelayClock | null | undefined;

/**
 * A clock of the calling thread's run-queue wait, or null where the kernel does not give one
 * (not Linux, no `/proc`, a kernel without scheduler statistics). Reads the thread it is made
 * on: call it on the thread that will read it. One clock a thread, whose file stays open for
 * the thread's life; one `pread` a reading (~3 µs).
 */
export function threadRunDelayClock(): RunDelayClock | null {
  if (threadClock === undefined) threadClock = openRunDelayClock();
  return threadClock;
}

function openRunDelayClock(): RunDelayClock | null {
  if (process.platform !== "linux") return null;
  let fd: number;
  try {
    fd = openSync(SCHEDSTAT, "r");
  } catch {
    return null;
  }
  const buf = Buffer.alloc(96);
  // Nanoseconds so far, or null: a failed read (it never should, once one worked) reads as no
  // wait since the last one.
  const readNs = (): number | null => {
    try {
      return parseSecondField(buf, readSync(fd, buf, 0, buf.length, 0));
    } catch {
      return null;
    }
  };
  const first = readNs();
  if (first === null) {
    closeSync(fd);
    return null;
  }
  let last = first;
  return () => {
    const ns = readNs();
    if (ns !== null && ns > last) last = ns;
    return last / 1e6;
  };
}

/** The second space-separated decimal field of `buf[0, n)`, or null when there is none. */
export function parseSecondField(buf: Uint8Array, n: number): number | null {
  let i = 0;
  while (i < n && buf[i] !== 0x20) i++;
  i++;
  let value = 0;
  let digits = 0;
  for (; i < n; i++) {
    const c = buf[i] as number;
    if (c < 0x30 || c > 0x39) break;
    value = value * 10 + (c - 0x30);
    digits++;
  }
  return digits === 0 ? null : value;
}

/**
 * `cairn backup` and `cairn restore`: every key of a range, with its value, to a checksummed file
 * (backup-file.ts) and back into a cluster, through the KV service like any client.
 */
import { constants, createWriteStream, rmSync } from "node:fs";
import { type FileHandle, mkdtemp, open, rm } from "node:fs/promises";
import { constants as osConstants, tmpdir } from "node:os";
import { join } from "node:path";
import { pipeline } from "node:stream/promises";
import {
  type CairnClient,
  DeadlineExceededError,
  IndeterminateWriteError,
  type ScanRange,
  UnavailableError,
  VersionConflictError,
} from "../client/index.ts";
import {
  BackupChangedError,
  BackupDamagedError,
  type BackupEntry,
  type BackupHeader,
  type BackupReader,
  type BackupTotals,
  type BackupTrace,
  BackupWriter,
  fileSink,
  openBackup,
  streamSink,
} from "./backup-file.ts";
import {
  b64,
  type CommandOptions,
  describeSkipped,
  EXIT,
  expectPositionals,
  GLOBAL_HELP,
  InputError,
  intFlag,
  printable,
  RANGE_OPTIONS,
  rangeOf,
  runCommand,
  UsageError,
  writeJson,
} from "./common.ts";
import { inParallel } from "./in-parallel.ts";
import { type Io, PROCESS_IO, PROCESS_STDOUT } from "./io.ts";

/** How often a long command says how far it got (stderr). */
const PROGRESS_MS = 2_000;
/** Attempts of a restore's write whose outcome was unknown (rewriting the same value is safe). */
const RESTORE_ATTEMPTS = 3;
/**
 * Entries a batch of a restore's readings (or about 4 MiB of them): the writing one compares each
 * batch with the checking one's before it writes any of it, which keeps two numbers a batch.
 */
const RESTORE_BATCH = 4096;
/**
 * Key and value bytes of a restore's writes in flight at most (a larger entry is written alone):
 * `--concurrency` alone let 64 values of up to 64 MiB, and their messages, be held at once.
 */
const RESTORE_IN_FLIGHT_BYTES = 64 * 1024 * 1024;

export const BACKUP_HELP = `Usage: cairn backup FILE|- [--prefix P | --from A --to B] [options]

Writes every key (or those of a range) with its value to FILE, a checksummed file that
'cairn restore' loads into any cluster (any size, shard count or build). FILE must not exist:
the backup goes to FILE.partial, which is synced and linked as FILE once whole, and removed if
the backup fails. FILE's file system must allow hard links (not FAT, some FUSE mounts): that is
checked before the backup starts (exit 2 if not). "-" writes it to standard output instead
(to compress it or send it on; a backup cut short there lacks its end record, which restore
refuses), and the summary to standard error; if the reader closes standard output before the
backup is whole, it says so and exits 141 (as a process killed by SIGPIPE); if a write to it
fails otherwise (a full disk), exit 5. Progress goes to stderr every 2 s.

What a backup holds: every write acknowledged before it started, and no deleted key; the
keys are read a page at a time (each page a linearizable scan), so a write made while it runs
may or may not be in it, key by key: it is not one point in time. For a point-in-time copy,
stop the writers while it runs. With --serializable it holds what one replica of each shard
had applied, which may lag the last writes.

Options:
  --prefix P             keys starting with P
  --from A               first key (inclusive)
  --to B                 end key (exclusive)
  --serializable         read one replica of each shard without a quorum check (may be
                         stale; still works when a shard lost its quorum: docs/operations.md,
                         "Lost a quorum")
  --skip-unavailable     with --serializable: a shard none of whose replicas answers is left
                         out instead of failing the backup; the file records which (a partial
                         backup: 'cairn restore --check' names them) and a warning says so
  --page-size N          keys a page (default 1000, 1–10000)
${GLOBAL_HELP}
--timeout bounds each page's read (retries included), not the whole backup.

Examples:
  cairn backup /backups/cairn-2026-12-02.bak
  cairn backup users.bak --prefix user/
  cairn backup - | gzip > /backups/cairn.bak.gz
`;

export const RESTORE_HELP = `Usage: cairn restore FILE|- [--overwrite] [--concurrency N] [--check] [options]

Writes every key of a backup made by 'cairn backup' into the cluster (each key gets a new
version). The whole file is checked first (every record's checksum, the key order, the end
record that counts them): a damaged or cut-short file is refused before anything is written.
"-" reads the backup from standard input, copied first to a temporary file (in TMPDIR, removed
after, and when SIGINT, SIGTERM or SIGHUP stops the restore: exit 130, 143, 129; a TMPDIR
without room for it stops the restore there, exit 5) so that it can be checked whole before the
first write; so is a FILE that is a pipe (<(gunzip -c FILE.gz), /dev/stdin). FILE is opened
once and read twice, to check it and then to write it: a FILE overwritten in place in between
is refused where it differs from what was checked (exit 2): before the first write if it is
another backup, else before any key that differs is written.
Unless --overwrite is given, the cluster must hold no key in the backup's range: restore into
a new cluster, or a range emptied first; each key is then written only where it is absent, so a
key written while the restore runs is left as it is (exit 4). Progress goes to stderr every 2 s.

A restore that stops (a node unavailable, a key or value larger than this cluster's limits)
says how many keys it wrote and exits with the error's code; run it again with --overwrite to
finish: writing a key's value again is harmless.

Options:
  --overwrite            write even where the range holds keys: a key in the backup gets its
                         value; keys that are not in the backup are left as they are
  --concurrency N        writes in flight (default 64, 1–256), of 64 MiB of keys and
                         values at most (a larger one is written alone)
  --check                only read and check the file, and say what it holds: no node is
                         reached, nothing is written (exit 2 if it is damaged)
${GLOBAL_HELP}
--timeout bounds each write (retries included), not the whole restore.

Examples:
  cairn restore /backups/cairn-2026-12-02.bak --endpoints 10.0.0.5:7447
  cairn restore users.bak --overwrite
  cairn restore --check /backups/cairn-2026-12-02.bak
  gunzip -c /backups/cairn.bak.gz | cairn restore -
`;

export const BACKUP_OPTIONS = {
  ...RANGE_OPTIONS,
  serializable: { type: "boolean" },
  "skip-unavailable": { type: "boolean" },
  "page-size": { type: "string" },
} as const satisfies CommandOptions;

export function backup(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "backup",
    BACKUP_HELP,
    BACKUP_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals, client }) => {
      expectPositionals(positionals, ["FILE"]);
      const path = positionals[0] as string;
      const pageSize = intFlag(values, "page-size", 1000, 1, 10_000);
      const consistency = values["serializable"] === true ? "serializable" : "linearizable";
      const skipUnavailable = values["skip-unavailable"] === true;
      if (skipUnavailable && consistency !== "serializable")
        throw new UsageError(
          "--skip-unavailable needs --serializable: a linearizable backup reads every shard",
        );
      // The header keeps the range as base64: keys are bytes.
      const range = Object.fromEntries(
        Object.entries(rangeOf(values)).map(([k, v]) => [k, b64(new TextEncoder().encode(v))]),
      ) as BackupHeader["range"];
      const created = new Date();
      const started = performance.now();
      // "-": the backup goes to standard output, and what is said of it to standard error.
      const toStdout = path === "-";
      if (toStdout && io.stdout.isTTY === true)
        throw new UsageError("a backup is binary: redirect standard output, or name a FILE");
      // A failed write to the process's standard output then leaves the backup incomplete,
      // which main.ts says (it is the summary's otherwise).
      if (toStdout && io.stdout === PROCESS_IO.stdout) PROCESS_STDOUT.carriesBackup = true;
      const sink = toStdout
        ? streamSink(io.stdout)
        : await fileSink(path).catch((e: Error) => {
            throw new InputError(e.message);
          });
      const writer = new BackupWriter(sink, {
        created: created.toISOString(),
        range,
        consistency,
      });
      const progress = every(PROGRESS_MS, () => {
        io.stderr.write(
          `cairn backup: ${writer.records} keys, ${mib(writer.bytes)} so far (${secondsSince(started)} s)\n`,
        );
      });
      let totals: BackupTotals;
      // The shards any page left out: a key of one may be missing from all of the backup.
      const skipped = new Set<number>();
      try {
        for await (const page of client().scanPages(scanRangeOf(range), {
          pageSize,
          consistency,
          ...(skipUnavailable ? { skipUnavailableShards: true } : {}),
        })) {
          for (const it of page.items) await writer.add(it.key, it.value);
          for (const id of page.skippedShards) skipped.add(id);
          progress();
        }
        totals = await writer.finish([...skipped].sort((a, b) => a - b));
      } catch (err) {
        await writer.abort();
        // A shard without a quorum fails every linearizable read of it, for good if its
        // replicas are lost; what survives is still readable from one replica.
        const hint =
          'a shard may have lost its quorum: if its replicas are lost for good, --serializable reads what the surviving replicas hold (docs/operations.md, "Lost a quorum")';
        if (consistency === "linearizable" && err instanceof UnavailableError)
          throw new UnavailableError(`${err.message}; ${hint}`, err.grpcCode, err);
        if (consistency === "linearizable" && err instanceof DeadlineExceededError)
          throw new DeadlineExceededError(`${err.message}; ${hint}`, err);
        if (!skipUnavailable && err instanceof UnavailableError)
          throw new UnavailableError(
            `${err.message}; if a shard's replicas are lost for good, --skip-unavailable backs up the others (docs/operations.md, "Lost a quorum")`,
            err.grpcCode,
            err,
          );
        throw err;
      }
      const took = secondsSince(started);
      const left = totals.skippedShards;
      if (left.length > 0)
        io.stderr.write(
          `cairn backup: WARNING: a partial backup, without the keys of ${describeSkipped(left)}: no replica of them answered (their keys are lost unless a node holding them comes back)\n`,
        );
      const summary =
        globals.output === "json"
          ? `${JSON.stringify({ file: path, keys: totals.records, bytes: totals.bytes, seconds: took, skipped_shards: left })}\n`
          : `backed up ${totals.records} keys (${mib(totals.bytes)}) to ${toStdout ? "standard output" : path} in ${took} s${left.length > 0 ? `; ${left.length} shards left out` : ""}\n`;
      (toStdout ? io.stderr : io.stdout).write(summary);
      return EXIT.ok;
    },
  );
}

export const RESTORE_OPTIONS = {
  overwrite: { type: "boolean" },
  concurrency: { type: "string" },
  check: { type: "boolean" },
} as const satisfies CommandOptions;

export function restore(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "restore",
    RESTORE_HELP,
    RESTORE_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals, client }) => {
      expectPositionals(positionals, ["FILE"]);
      const concurrency = intFlag(values, "concurrency", 64, 1, 256);
      return fromFileOrStdin(positionals[0] as string, io, async (file, name) => {
        const started = performance.now();
        // The whole file is read and checked before the first write.
        const checking = await opened(file, name, null);
        let header: BackupHeader;
        let trace: BackupTrace | null;
        try {
          for await (const batch of checking.entries(RESTORE_BATCH)) void batch;
          header = checking.header;
          trace = checking.trace;
        } catch (err) {
          throw asInputError(err, "nothing was written");
        } finally {
          await checking.close();
        }
        if (trace === null) throw new Error(`${name} was read to its end without its totals`);
        const { totals } = trace;
        const left = totals.skippedShards;
        if (values["check"] === true) {
          if (globals.output === "json")
            writeJson(io, {
              file: name,
              ...header,
              records: totals.records,
              bytes: totals.bytes,
              skipped_shards: left,
            });
          else
            io.stdout.write(
              `${name}: ${left.length > 0 ? "a partial" : "a whole"} backup of ${totals.records} keys (${mib(totals.bytes)}), ${describeRange(header)}, made ${header.created}${left.length > 0 ? `; without the keys of ${describeSkipped(left)} of the cluster it was made from (no replica of them answered)` : ""}\n`,
            );
          return EXIT.ok;
        }
        if (left.length > 0)
          io.stderr.write(
            `cairn restore: WARNING: ${name} is a partial backup, without the keys of ${describeSkipped(left)} of the cluster it was made from\n`,
          );
        if (values["overwrite"] !== true) {
          const held = await client().scan(scanRangeOf(header.range), { limit: 1 });
          const first = held.items[0];
          if (first !== undefined) {
            io.stderr.write(
              `cairn restore: the cluster holds keys in the backup's range (the first: ${printable(first.key)}); nothing was written. Restore into an empty cluster, or pass --overwrite\n`,
            );
            return EXIT.conflict;
          }
        }
        let written = 0;
        let bytes = 0;
        const progress = every(PROGRESS_MS, () => {
          io.stderr.write(
            `cairn restore: ${written} of ${totals.records} keys, ${mib(bytes)} (${secondsSince(started)} s)\n`,
          );
        });
        const c = client();
        const overwrite = values["overwrite"] === true;
        // The file checked, through the same handle, and compared with the reading that checked
        // it: one overwritten in place since is refused where it differs, before any of its
        // entries that differ is written (its header: before the first write).
        const writing = await opened(file, name, trace);
        try {
          await inParallel(
            writing,
            { concurrency, maxBytes: RESTORE_IN_FLIGHT_BYTES },
            async (e) => {
              try {
                await putAgainIfUnknown(c, e, overwrite);
              } catch (err) {
                if (err instanceof VersionConflictError)
                  io.stderr.write(
                    `cairn restore: the cluster holds ${printable(e.key)} now, written since the check; it was left as it is\n`,
                  );
                throw err;
              }
              written++;
              bytes += e.key.length + e.value.length;
              progress();
            },
          );
        } catch (err) {
          io.stderr.write(
            err instanceof BackupChangedError
              ? `cairn restore: stopped after writing ${written} of ${totals.records} keys, each as checked; ${name} is not the backup checked any more: see what it holds ('cairn restore --check') before running it again with --overwrite\n`
              : `cairn restore: stopped after writing ${written} of ${totals.records} keys; run it again with --overwrite to finish\n`,
          );
          throw asInputError(err, null);
        } finally {
          await writing.close();
        }
        const took = secondsSince(started);
        if (globals.output === "json")
          writeJson(io, { file: name, keys: written, bytes, seconds: took });
        else
          io.stdout.write(`restored ${written} keys (${mib(bytes)}) from ${name} in ${took} s\n`);
        return EXIT.ok;
      });
    },
  );
}

/** The signals that stop a restore while it holds its copy of standard input (fromFileOrStdin). */
const STOP_SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP"] as const;

/**
 * Runs `body` on the backup `arg` names, opened once: a restore reads it twice (to check it,
 * then to write it), and opening its path again for the second read wrote whatever was there
 * by then (a backup renamed over it since the check: its keys, its range never checked) and
 * found a pipe drained (`/dev/stdin`, `<(gunzip -c …)`: a whole backup refused as cut short).
 * A regular file is read through the one handle (one overwritten in place between the readings
 * is refused where it differs: restore compares them); standard input ("-") and any other file (a
 * pipe, a device) are first copied to a temporary file (in TMPDIR), removed after, and on
 * SIGINT, SIGTERM or SIGHUP, which then end the process (exit 128 + the signal's number).
 * `name` is what messages call it.
 */
async function fromFileOrStdin<T>(
  arg: string,
  io: Io,
  body: (file: FileHandle, name: string) => Promise<T>,
): Promise<T> {
  const name = arg === "-" ? "standard input" : arg;
  const given =
    arg === "-"
      ? null
      : await open(arg, constants.O_RDONLY).catch((e: NodeJS.ErrnoException) => {
          throw new InputError(`${arg} cannot be read: ${e.code ?? e.message}`);
        });
  try {
    if (given !== null && (await given.stat()).isFile()) return await body(given, name);
    const dir = await mkdtemp(join(tmpdir(), "cairn-restore-"));
    // Killed by a signal, the process ran no finally: the copy of the backup stayed in TMPDIR
    // (one each restore interrupted). It is removed then too, and the process exits as the
    // signal would have ended it.
    const onSignal = (signal: NodeJS.Signals): void => {
      rmSync(dir, { recursive: true, force: true });
      process.exit(128 + osConstants.signals[signal]);
    };
    // (SIGHUP: the terminal closed, an SSH session dropped.)
    for (const s of STOP_SIGNALS) process.on(s, onSignal);
    try {
      const path = join(dir, "stdin.bak");
      const reading: NodeJS.ReadableStream =
        given === null ? io.stdin : given.createReadStream({ autoClose: false });
      const writing = createWriteStream(path, { mode: 0o600 });
      // The stream that failed first (the pipeline then ends the other with its error).
      let failed: "reading" | "writing" | null = null;
      reading.once("error", () => (failed ??= "reading"));
      writing.once("error", () => (failed ??= "writing"));
      await pipeline(reading, writing).catch((e: NodeJS.ErrnoException) => {
        // The copy's own failure (TMPDIR full) is this machine's, not the input's: it was
        // said as "standard input cannot be read: ENOSPC", exit 2, of a backup that was whole.
        if (failed === "writing")
          throw new Error(
            `cannot write its copy of ${name} in ${dir}: ${e.code ?? e.message} (set TMPDIR to a directory with room for the backup)`,
          );
        throw new InputError(`${name} cannot be read: ${e.code ?? e.message}`);
      });
      const copy = await open(path, constants.O_RDONLY);
      try {
        return await body(copy, name);
      } finally {
        await copy.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
      // Only now: a signal while rm runs still removes the copy.
      for (const s of STOP_SIGNALS) process.removeListener(s, onSignal);
    }
  } finally {
    await given?.close();
  }
}

/**
 * Opens the backup to read it from its first byte: to check it (`same` null), or to write it
 * (`same`: the checking reading's trace, which it must match); nothing was written yet, which the
 * message of an unreadable, damaged or changed file says (an input error, exit 2).
 */
async function opened(
  file: FileHandle,
  name: string,
  same: BackupTrace | null,
): Promise<BackupReader> {
  return openBackup(file, name, same).catch((e: Error) => {
    if (e instanceof BackupDamagedError || e instanceof BackupChangedError)
      throw asInputError(e, "nothing was written");
    const code = (e as NodeJS.ErrnoException).code;
    throw new InputError(code === undefined ? e.message : `${name} cannot be read: ${code}`);
  });
}

/**
 * A damaged or changed backup as an input error (exit 2), with `then` (what was written) after
 * its message; any other error as it is.
 */
function asInputError(err: unknown, then: string | null): unknown {
  if (!(err instanceof BackupDamagedError || err instanceof BackupChangedError)) return err;
  return new InputError(then === null ? err.message : `${err.message}; ${then}`);
}

/**
 * Writes an entry; a write whose outcome is unknown (a timeout after it was sent, a broken
 * connection) is written again: the same value under the same key, so applying it twice leaves
 * what applying it once would. Without `overwrite` each write is one only if the key is absent
 * (the emptiness check comes before the writes: a key written since is not replaced), and a key
 * that holds this very value after an attempt whose outcome was unknown is this write's own.
 */
async function putAgainIfUnknown(
  c: CairnClient,
  e: BackupEntry,
  overwrite: boolean,
): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await c.put(e.key, e.value, overwrite ? {} : { expectedVersion: ABSENT });
      return;
    } catch (err) {
      if (err instanceof VersionConflictError && attempt > 1) {
        const held = await c.get(e.key);
        if (held !== null && Buffer.compare(held.value, e.value) === 0) return;
      }
      if (!(err instanceof IndeterminateWriteError) || attempt >= RESTORE_ATTEMPTS) throw err;
    }
  }
}

/** The expected version of a key that must not exist (compare-and-set). */
const ABSENT = { index: 0, term: 0 };

/** The backup's range and how it was read, for a person. */
function describeRange(header: BackupHeader): string {
  const show = (base64: string | undefined, otherwise: string): string =>
    base64 === undefined ? otherwise : printable(Buffer.from(base64, "base64"));
  const { prefix, start, end } = header.range;
  const range =
    prefix !== undefined
      ? `keys starting with ${show(prefix, "")}`
      : start !== undefined || end !== undefined
        ? `keys from ${show(start, "the first")} up to ${show(end, "the last")}`
        : "every key";
  return `${range}, read ${header.consistency}`;
}

function scanRangeOf(range: BackupHeader["range"]): ScanRange {
  const dec = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, "base64"));
  if (range.prefix !== undefined) return { prefix: dec(range.prefix) };
  return {
    ...(range.start === undefined ? {} : { start: dec(range.start) }),
    ...(range.end === undefined ? {} : { end: dec(range.end) }),
  };
}

/** A function that runs `f` when at least `ms` passed since it last did. */
function every(ms: number, f: () => void): () => void {
  let last = performance.now();
  return () => {
    const now = performance.now();
    if (now - last < ms) return;
    last = now;
    f();
  };
}

function mib(bytes: number): string {
  return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
}

/** Seconds since `since` (performance.now()), to a tenth. */
function secondsSince(since: number): number {
  return Math.round((performance.now() - since) / 100) / 10;
}

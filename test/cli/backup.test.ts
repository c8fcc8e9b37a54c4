/**
 * `cairn backup` and `cairn restore` end to end, between real server processes: a store's keys
 * (binary, empty and large values) go to a file and into a new node byte for byte; a damaged
 * file, a non-empty target and a cluster whose limits refuse a value are refused with what was
 * written said, and nothing changed where nothing may change.
 */
import assert from "node:assert/strict";
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { once } from "node:events";
import {
  closeSync,
  copyFileSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { restore } from "../../src/cli/backup-commands.ts";
import { type BackupHeader, BackupWriter } from "../../src/cli/backup-file.ts";
import { CairnClient, type KeyValue } from "../../src/client/index.ts";
import { crc32c } from "../../src/storage/common/crc32c.ts";
import {
  CAIRN,
  cleanEnv,
  ROOT,
  runCairn,
  type ServerProcess,
  startServer,
} from "../support/server-process.ts";
import { runInProcess } from "../support/cli-run.ts";

let dir: string;
let source: ServerProcess;
let target: ServerProcess;

const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const LARGE = Buffer.alloc(512 * 1024, 0xab);
/** What the source holds: 30 keys under bk/ (one binary, one empty value, one large), one outside. */
const STORED: ReadonlyArray<[Uint8Array, Uint8Array]> = [
  ...Array.from({ length: 27 }, (_, i): [Uint8Array, Uint8Array] => [
    enc(`bk/${String(i).padStart(2, "0")}`),
    enc(`value ${i}`),
  ]),
  [new Uint8Array([0x62, 0x6b, 0x2f, 0xff, 0x00, 0x01]), new Uint8Array([0, 1, 2, 255])],
  [enc("bk/empty"), new Uint8Array(0)],
  [enc("bk/large"), LARGE],
  [enc("other"), enc("outside the prefix")],
];

/** `cairn args` with a pipe to its standard input: the process, and its end. */
function spawnWithStdin(args: readonly string[]): {
  proc: ChildProcessWithoutNullStreams;
  done: Promise<{ code: number | null; out: string; err: string }>;
} {
  const proc = spawn(CAIRN, [...args], { cwd: ROOT, env: cleanEnv(), stdio: "pipe" });
  let out = "";
  let err = "";
  proc.stdout.on("data", (d: Buffer) => (out += d.toString("latin1")));
  proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
  const done = new Promise<{ code: number | null; out: string; err: string }>((resolve) =>
    proc.once("close", (code) => resolve({ code, out, err })),
  );
  return { proc, done };
}

/**
 * A backup file built byte by byte (the format of src/cli/backup-file.ts, every checksum right)
 * whose records need not lie in its header's range, as BackupWriter would not write.
 */
function forgedBackup(
  range: Record<string, string>,
  entries: ReadonlyArray<[string, string]>,
): Buffer {
  const json = Buffer.from(
    JSON.stringify({ created: new Date().toISOString(), range, consistency: "linearizable" }),
  );
  const head = Buffer.alloc(16);
  head.write("CAIRNBAK", 0, "latin1");
  head.writeUInt32BE(1, 8);
  head.writeUInt32BE(json.length, 12);
  let crc = crc32c(json);
  const u32 = (n: number): Buffer => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(n);
    return b;
  };
  const parts = [head, json, u32(crc)];
  let bytes = 0;
  for (const [k, v] of entries) {
    const rec = Buffer.alloc(9);
    rec[0] = 1;
    rec.writeUInt32BE(Buffer.byteLength(k), 1);
    rec.writeUInt32BE(Buffer.byteLength(v), 5);
    const body = Buffer.concat([rec, Buffer.from(k), Buffer.from(v)]);
    crc = crc32c(body, crc);
    parts.push(body, u32(crc));
    bytes += Buffer.byteLength(k) + Buffer.byteLength(v);
  }
  const end = Buffer.alloc(17);
  end[0] = 2;
  end.writeBigUInt64BE(BigInt(entries.length), 1);
  end.writeBigUInt64BE(BigInt(bytes), 9);
  parts.push(end, u32(crc32c(end, crc)));
  return Buffer.concat(parts);
}

const cli = (server: ServerProcess, args: readonly string[]) =>
  runCairn(["--endpoints", server.rpc, ...args]);

async function everything(server: ServerProcess): Promise<Array<[string, string]>> {
  const c = new CairnClient({ endpoints: [server.rpc] });
  try {
    const { items } = await c.scan({});
    return items.map((kv: KeyValue) => [
      Buffer.from(kv.key).toString("hex"),
      Buffer.from(kv.value).toString("hex"),
    ]);
  } finally {
    c.close();
  }
}

/** A backup's bytes: `entries` under `header`, a partial backup when `skipped` names shards. */
async function backupBytes(
  header: BackupHeader,
  entries: ReadonlyArray<[string, Uint8Array]>,
  skipped: readonly number[],
): Promise<Buffer> {
  const path = join(dir, `made-${made++}.bak`);
  const w = await BackupWriter.create(path, header);
  for (const [k, v] of entries) await w.add(enc(k), v);
  await w.finish(skipped);
  return readFileSync(path);
}
let made = 0;

/**
 * \`cairn restore FILE args\` in this process, against `server`, FILE overwritten in place (the
 * same inode, as \`cp other.bak FILE\` does) with `swapped` when the restore warns that FILE is a
 * partial backup: after its check of the whole file, before its second reading, which it writes.
 */
async function restoreSwapped(
  server: ServerProcess,
  file: string,
  swapped: Buffer,
  args: readonly string[] = [],
): Promise<{ code: number; out: string; err: string; swaps: number }> {
  let swaps = 0;
  const { code, out, err } = await runInProcess(
    restore,
    [file, "--endpoints", server.rpc, ...args],
    {
      onStderr: (text) => {
        if (!text.includes("is a partial backup")) return;
        const inode = statSync(file).ino;
        writeFileSync(file, swapped);
        assert.equal(statSync(file).ino, inode, "overwritten in place");
        swaps++;
      },
    },
  );
  return { code, out, err, swaps };
}

/** The keys `server` holds under `prefix`, with their values. */
async function keysUnder(server: ServerProcess, prefix: string): Promise<Array<[string, string]>> {
  const c = new CairnClient({ endpoints: [server.rpc] });
  try {
    const { items } = await c.scan({ prefix: enc(prefix) });
    return items.map((kv: KeyValue) => [
      Buffer.from(kv.key).toString(),
      Buffer.from(kv.value).toString("hex").slice(0, 16),
    ]);
  } finally {
    c.close();
  }
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "cairn-backup-"));
  [source, target] = await Promise.all([
    startServer({ dataDir: join(dir, "source") }),
    startServer({ dataDir: join(dir, "target") }),
  ]);
  const c = new CairnClient({ endpoints: [source.rpc] });
  try {
    for (const [k, v] of STORED) await c.put(k, v);
  } finally {
    c.close();
  }
});

after(async () => {
  await Promise.all([source.stop(), target.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

describe("cairn backup and restore", () => {
  it("backs up every key, refuses to replace a file, and restores into a new node byte for byte", async () => {
    const file = join(dir, "all.bak");
    const backup = await cli(source, ["backup", file]);
    assert.equal(backup.code, 0, backup.err);
    assert.match(backup.out, /^backed up 31 keys \(0\.5 MiB\) to .*all\.bak in [\d.]+ s\n$/);

    const again = await cli(source, ["backup", file]);
    assert.equal(again.code, 2);
    assert.match(again.err, /exists; a backup never replaces a file/);

    // A damaged copy is refused before anything is written.
    const damaged = join(dir, "damaged.bak");
    copyFileSync(file, damaged);
    const bytes = readFileSync(damaged);
    bytes[bytes.length - 100] = (bytes[bytes.length - 100] as number) ^ 0xff;
    writeFileSync(damaged, bytes);
    const check = await runCairn(["restore", "--check", file]);
    assert.equal(check.code, 0, check.err);
    assert.match(
      check.out,
      /all\.bak: a whole backup of 31 keys \(0\.5 MiB\), every key, read linearizable, made 20\d\d-/,
    );
    const checkDamaged = await runCairn(["restore", "--check", damaged]);
    assert.equal(checkDamaged.code, 2);
    assert.match(checkDamaged.err, /checksum does not match/);
    const refused = await cli(target, ["restore", damaged]);
    assert.equal(refused.code, 2);
    assert.match(
      refused.err,
      /is not a whole backup: .*checksum does not match.*nothing was written/,
    );
    assert.deepEqual(await everything(target), [], "the target is still empty");

    const restore = await cli(target, ["restore", file, "--output", "json"]);
    assert.equal(restore.code, 0, restore.err);
    const summary = JSON.parse(restore.out) as { keys: number; bytes: number };
    assert.equal(summary.keys, 31);
    assert.deepEqual(await everything(target), await everything(source));
  });

  it("restores only into an empty range unless --overwrite, which puts the backup's values back", async () => {
    const file = join(dir, "prefix.bak");
    const backup = await cli(source, ["backup", file, "--prefix", "bk/", "--output", "json"]);
    assert.equal(backup.code, 0, backup.err);
    assert.equal((JSON.parse(backup.out) as { keys: number }).keys, 30);
    const check = await runCairn(["restore", "--check", file]);
    assert.match(
      check.out,
      /a whole backup of 30 keys .*, keys starting with bk\/, read linearizable/,
    );

    // The target holds the keys already (the test before): refused, nothing changed.
    const c = new CairnClient({ endpoints: [target.rpc] });
    try {
      await c.put("bk/05", "changed on the target");
      await c.put("bk/zz", "only on the target");
      const before = await everything(target);
      const refused = await cli(target, ["restore", file]);
      assert.equal(refused.code, 4);
      assert.match(
        refused.err,
        /holds keys in the backup's range \(the first: bk\/00\); nothing was written/,
      );
      assert.deepEqual(await everything(target), before);

      const overwrite = await cli(target, ["restore", file, "--overwrite", "--concurrency", "3"]);
      assert.equal(overwrite.code, 0, overwrite.err);
      assert.match(overwrite.out, /^restored 30 keys/);
      assert.equal(await c.getString("bk/05"), "value 5");
      assert.equal(await c.getString("bk/zz"), "only on the target", "keys not in the backup stay");
    } finally {
      c.close();
    }
  });

  it("a restore that a write stops says how far it got; keys before the refused one are written", async () => {
    // A backup of another cluster, whose limits took a 2 MiB value this one refuses (1 MiB).
    const file = join(dir, "larger-limits.bak");
    const w = await BackupWriter.create(file, {
      created: new Date().toISOString(),
      range: { prefix: Buffer.from("stop/").toString("base64") },
      consistency: "linearizable",
    });
    await w.add(enc("stop/a"), enc("1"));
    await w.add(enc("stop/b"), enc("2"));
    await w.add(enc("stop/c"), Buffer.alloc(2 * 1024 * 1024, 1));
    await w.add(enc("stop/d"), enc("4"));
    await w.finish();
    const r = await cli(target, ["restore", file, "--concurrency", "1"]);
    assert.equal(r.code, 2, r.err);
    assert.match(r.err, /value is 2097152 bytes; the limit is 1048576 bytes/);
    assert.match(r.err, /stopped after writing 2 of 4 keys; run it again with --overwrite/);
    const c = new CairnClient({ endpoints: [target.rpc] });
    try {
      assert.equal(await c.getString("stop/b"), "2");
      assert.equal(await c.get("stop/c"), null);
      assert.equal(await c.get("stop/d"), null);
    } finally {
      c.close();
    }
  });

  it("a backup to standard output whose reader closes it early fails, saying so (exit 141)", async () => {
    // As \`cairn backup - | head -c 100\` or a compressor that died: it exited 0, silent, and the
    // cut-short backup looked made (an audit, 2026-12-05).
    const backup = spawnWithStdin(["--endpoints", source.rpc, "backup", "-", "--page-size", "1"]);
    backup.proc.stdout.once("data", () => backup.proc.stdout.destroy());
    const b = await backup.done;
    assert.equal(b.code, 141, b.err);
    assert.match(b.err, /closed it before the backup was whole: the backup is incomplete/);
  });

  it("a backup to standard output that cannot be written fails, saying so (exit 5, no stack)", async () => {
    // `cairn backup - > FILE` on a full disk: it died on the write error with its stack, exit 1
    // (documented as "not found").
    const full = openSync("/dev/full", "w");
    try {
      const proc = spawn(CAIRN, ["--endpoints", source.rpc, "backup", "-"], {
        cwd: ROOT,
        env: cleanEnv(),
        stdio: ["ignore", full, "pipe"],
      });
      let err = "";
      proc.stderr?.on("data", (d: Buffer) => (err += d.toString()));
      const [code] = (await once(proc, "close")) as [number | null];
      assert.equal(code, 5, err);
      assert.match(
        err,
        /cairn backup: standard output failed \(ENOSPC\): the backup is incomplete/,
      );
      assert.doesNotMatch(err, /\n\s+at /, "no stack trace");
    } finally {
      closeSync(full);
    }
  });

  it("a backup to FILE whose summary cannot be written says no more than that: the backup is whole", async () => {
    // Its standard output carries only the summary, written once FILE is whole: a closed pipe
    // there exited 141 and a full disk 5, both saying "the backup is incomplete", of a backup
    // that was made (a script then removed or redid it).
    const closed = join(dir, "summary-closed.bak");
    const backup = spawnWithStdin(["--endpoints", source.rpc, "backup", closed, "--prefix", "bk/"]);
    backup.proc.stdout.destroy();
    const b = await backup.done;
    assert.equal(b.code, 0, b.err);
    assert.doesNotMatch(b.err, /incomplete/);
    const check = await cli(target, ["restore", "--check", closed]);
    assert.equal(check.code, 0, check.err);
    assert.match(check.out, /a whole backup of 30 keys/);

    const onFull = join(dir, "summary-full.bak");
    const full = openSync("/dev/full", "w");
    try {
      const proc = spawn(CAIRN, ["--endpoints", source.rpc, "backup", onFull, "--prefix", "bk/"], {
        cwd: ROOT,
        env: cleanEnv(),
        stdio: ["ignore", full, "pipe"],
      });
      let err = "";
      proc.stderr?.on("data", (d: Buffer) => (err += d.toString()));
      const [code] = (await once(proc, "close")) as [number | null];
      assert.equal(code, 5, err);
      assert.match(err, /cairn backup: standard output failed \(ENOSPC\)/);
      assert.doesNotMatch(err, /incomplete/);
    } finally {
      closeSync(full);
    }
    const checkFull = await cli(target, ["restore", "--check", onFull]);
    assert.equal(checkFull.code, 0, checkFull.err);
    assert.match(checkFull.out, /a whole backup of 30 keys/);
  });

  it("backs up to standard output and restores from standard input (a pipe); a cut stream is refused", async () => {
    const backup = spawnWithStdin(["--endpoints", source.rpc, "backup", "-", "--prefix", "bk/"]);
    const restore = spawnWithStdin(["--endpoints", target.rpc, "restore", "-", "--overwrite"]);
    const bytes: Buffer[] = [];
    backup.proc.stdout.on("data", (d: Buffer) => bytes.push(d));
    backup.proc.stdout.pipe(restore.proc.stdin);
    const [b, r] = await Promise.all([backup.done, restore.done]);
    assert.equal(b.code, 0, b.err);
    assert.match(b.err, /backed up 30 keys \(0\.5 MiB\) to standard output/);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /^restored 30 keys \(0\.5 MiB\) from standard input/);

    const whole = Buffer.concat(bytes);
    const cut = spawnWithStdin(["--endpoints", target.rpc, "restore", "-", "--overwrite"]);
    cut.proc.stdin.end(whole.subarray(0, whole.length - 10));
    const refused = await cut.done;
    assert.equal(refused.code, 2);
    assert.match(
      refused.err,
      /standard input is not a whole backup: .*cut short.*nothing was written/,
    );
  });

  it("restores from a path that is a pipe (/dev/stdin, <(gunzip -c …)), read once", async () => {
    // The restore opened the path twice, to check and then to write: a pipe's second opening
    // found it drained, and a whole backup was refused as "cut short (at byte 0)" after its
    // check had passed.
    // bash's process substitution: the path is /dev/fd/N, a pipe. (A child's standard input
    // from spawn is a socket, which /dev/stdin cannot open.)
    const r = spawn(
      "bash",
      [
        "-c",
        '"$0" --endpoints "$1" restore <(cat "$2") --overwrite',
        CAIRN,
        target.rpc,
        join(dir, "prefix.bak"),
      ],
      { cwd: ROOT, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] },
    );
    let out = "";
    let err = "";
    r.stdout.on("data", (d: Buffer) => (out += d.toString()));
    r.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const code = await new Promise((resolve) => r.once("close", resolve));
    assert.equal(code, 0, err);
    assert.match(out, /^restored 30 keys \(0\.5 MiB\) from \/dev\/fd\/\d+ in/);
  });

  it("a file whose records lie outside its header's range is refused: a restore without --overwrite never writes over live keys", async () => {
    // The emptiness check reads only the header's range (here: keys under empty/, none held);
    // the records name a key outside it that the target holds. The restore overwrote it, exit 0.
    const c = new CairnClient({ endpoints: [target.rpc] });
    try {
      await c.put("live/k", "precious");
      const file = join(dir, "outside-range.bak");
      writeFileSync(
        file,
        forgedBackup({ prefix: Buffer.from("empty/").toString("base64") }, [["live/k", "forged"]]),
      );
      const check = await runCairn(["restore", "--check", file]);
      assert.equal(check.code, 2, check.out);
      assert.match(check.err, /record 1's key is outside the backup's range/);
      const r = await cli(target, ["restore", file]);
      assert.equal(r.code, 2, r.out);
      assert.match(r.err, /outside the backup's range.*nothing was written/);
      assert.equal(await c.getString("live/k"), "precious");
    } finally {
      c.close();
    }
  });

  it("bad arguments are usage errors, naming the problem", async () => {
    for (const [args, want] of [
      [["backup"], /missing FILE/],
      [
        ["backup", join(dir, "x.bak"), "--prefix", "a", "--from", "b"],
        /--prefix cannot be combined/,
      ],
      [
        ["backup", join(dir, "x.bak"), "--page-size", "0"],
        /--page-size must be an integer from 1 to 10000/,
      ],
      [
        ["backup", join(dir, "x.bak"), "--skip-unavailable"],
        /--skip-unavailable needs --serializable/,
      ],
      [["restore", join(dir, "missing.bak")], /missing\.bak cannot be read: ENOENT/],
      [
        ["restore", join(dir, "all.bak"), "--concurrency", "1000"],
        /--concurrency must be an integer from 1 to 256/,
      ],
    ] as const) {
      const r = await cli(source, args);
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.err}`);
      assert.match(r.err, want);
    }
  });
});

describe("cairn restore of a file overwritten in place between its check and its writes", () => {
  // A restore reads FILE twice through one handle: to check it (checksums, end record, range,
  // totals), then, after the check that the cluster holds no key in its range, to write it. Each
  // reading checked its own checksums, and nothing compared the second with the first: a FILE
  // overwritten in place in between (\`cp other.bak FILE\`: the same inode) with another valid
  // backup was written, its range never checked against the cluster, its totals never shown.
  const header = (prefix: string): BackupHeader => ({
    created: new Date().toISOString(),
    range: { prefix: Buffer.from(prefix).toString("base64") },
    consistency: "serializable",
  });
  const small = (prefix: string): Array<[string, Uint8Array]> =>
    ["1", "2", "3"].map((k) => [`${prefix}${k}`, enc(`checked ${k}`)]);

  it("another backup put in its place is refused before the first write (exit 2)", async () => {
    const file = join(dir, "swap-a.bak");
    writeFileSync(file, await backupBytes(header("swap-a/"), small("swap-a/"), [7]));
    const other = await backupBytes(header("swap-b/"), small("swap-b/"), [7]);
    const r = await restoreSwapped(target, file, other);
    assert.equal(r.swaps, 1);
    assert.equal(r.code, 2, r.err);
    assert.match(
      r.err,
      /swap-a\.bak changed since it was checked: its header is not the one checked \(another backup\?\) \(at byte 0\); nothing was written\n$/,
    );
    assert.doesNotMatch(r.err, /stopped after writing/);
    assert.deepEqual(await keysUnder(target, "swap-a/"), []);
    assert.deepEqual(
      await keysUnder(target, "swap-b/"),
      [],
      "the file put in its place was not written",
    );
  });

  it("the same backup with a value changed is refused before any key of it is written", async () => {
    const file = join(dir, "swap-c.bak");
    const h = header("swap-c/");
    writeFileSync(file, await backupBytes(h, small("swap-c/"), [7]));
    const changed = small("swap-c/").map(([k, v]): [string, Uint8Array] =>
      k.endsWith("2") ? [k, enc("changed 2")] : [k, v],
    );
    // The same header, byte for byte; every checksum right.
    const r = await restoreSwapped(target, file, await backupBytes(h, changed, [7]));
    assert.equal(r.swaps, 1);
    assert.equal(r.code, 2, r.err);
    assert.match(
      r.err,
      /stopped after writing 0 of 3 keys, each as checked; .*swap-c\.bak is not the backup checked any more/,
    );
    assert.match(
      r.err,
      /swap-c\.bak changed since it was checked: what follows record 0, up to the end, is not what was checked \(at byte \d+\)\n$/,
    );
    assert.deepEqual(await keysUnder(target, "swap-c/"), []);
  });

  it("a larger one changed past its first batch is written only as far as it was checked (exit 2)", async () => {
    // Eight values of 1000 KiB: the first batch of a restore's readings ends at about 4 MiB, after
    // five. The seventh is changed: the five checked are written, the changed batch is not.
    const file = join(dir, "swap-d.bak");
    const h = header("swap-d/");
    const entries = Array.from({ length: 8 }, (_, i): [string, Uint8Array] => [
      `swap-d/${i + 1}`,
      Buffer.alloc(1000 * 1024, i + 1),
    ]);
    writeFileSync(file, await backupBytes(h, entries, [7]));
    const changed = entries.map(([k, v], i): [string, Uint8Array] =>
      i === 6 ? [k, Buffer.alloc(v.length, 0xee)] : [k, v],
    );
    const r = await restoreSwapped(target, file, await backupBytes(h, changed, [7]), [
      "--concurrency",
      "2",
    ]);
    assert.equal(r.swaps, 1);
    assert.equal(r.code, 2, r.err);
    assert.match(r.err, /stopped after writing 5 of 8 keys, each as checked/);
    assert.match(
      r.err,
      /swap-d\.bak changed since it was checked: what follows record 5, up to the end, is not what was checked/,
    );
    assert.deepEqual(
      await keysUnder(target, "swap-d/"),
      entries.slice(0, 5).map(([k, v]) => [k, Buffer.from(v).toString("hex").slice(0, 16)]),
      "the checked batch only, never the changed value",
    );
  });

  it("a file overwritten in place with the same bytes is restored whole", async () => {
    const file = join(dir, "swap-e.bak");
    const bytes = await backupBytes(header("swap-e/"), small("swap-e/"), [7]);
    writeFileSync(file, bytes);
    const r = await restoreSwapped(target, file, bytes);
    assert.equal(r.swaps, 1);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /^restored 3 keys/);
    assert.equal((await keysUnder(target, "swap-e/")).length, 3);
  });
});

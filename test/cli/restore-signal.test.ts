/**
 * `cairn restore -` copies standard input to a temporary file (in TMPDIR) before it checks it: a
 * restore interrupted there (Ctrl-C, SIGTERM, a terminal closed) removes that copy and exits as the signal would
 * (128 + its number); a copy that cannot be written (TMPDIR full) is said to be that, not standard
 * input unreadable. No node is needed: the copy is made before any is reached.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { BackupWriter } from "../../src/cli/backup-file.ts";
import { CAIRN, cleanEnv, ROOT } from "../support/server-process.ts";
import { mountTmpfs, tmpfsSkip, unmount } from "../support/tmpfs.ts";

let dir: string;
let backup: Buffer;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "cairn-restore-signal-"));
  const path = join(dir, "whole.bak");
  const w = await BackupWriter.create(path, {
    created: "2026-12-02T00:00:00.000Z",
    range: {},
    consistency: "linearizable",
  });
  for (let i = 0; i < 100; i++)
    await w.add(Buffer.from(`k${String(i).padStart(3, "0")}`), Buffer.alloc(100, i));
  await w.finish();
  backup = readFileSync(path);
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** Whether `d` holds a restore's copy of standard input (cairn-restore-*\/stdin.bak). */
const holdsCopy = (d: string): boolean =>
  readdirSync(d).some((e) => e.startsWith("cairn-restore-") && existsSync(join(d, e, "stdin.bak")));

describe("cairn restore - interrupted", () => {
  for (const [signal, code] of [
    ["SIGTERM", 143],
    ["SIGINT", 130],
    // A terminal closed under it (an SSH session that drops).
    ["SIGHUP", 129],
  ] as const) {
    it(`by ${signal} while it copies standard input removes its copy (exit ${code})`, async () => {
      // Killed, it ran no finally: the copy stayed in TMPDIR, one a restore interrupted.
      const tmp = mkdtempSync(join(dir, `tmp-${signal}-`));
      const proc = spawn(CAIRN, ["--endpoints", "127.0.0.1:1", "restore", "-"], {
        cwd: ROOT,
        // No compile cache: TMPDIR holds only what the restore puts there.
        env: cleanEnv({ TMPDIR: tmp, NODE_DISABLE_COMPILE_CACHE: "1" }),
        stdio: ["pipe", "pipe", "pipe"],
      });
      let err = "";
      proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
      const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
        proc.once("close", (c, s) => resolve({ code: c, signal: s })),
      );
      try {
        // Half the backup, standard input left open: the copy waits for the rest.
        proc.stdin.write(backup.subarray(0, backup.length >> 1));
        const deadline = Date.now() + 20_000;
        while (!holdsCopy(tmp)) {
          assert.ok(
            Date.now() < deadline,
            `no copy of standard input in TMPDIR within 20 s: ${err}`,
          );
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        proc.kill(signal);
        const exit = await done;
        assert.deepEqual(readdirSync(tmp, { recursive: true }), [], "TMPDIR left as it was");
        assert.deepEqual(exit, { code, signal: null }, err);
      } finally {
        proc.kill("SIGKILL");
        await done;
      }
    });
  }
});

describe("cairn restore of a FILE that is no regular file", () => {
  it("one that cannot be read is said to be that (exit 2), not its copy", async () => {
    // A directory opens, is no regular file, and is copied to TMPDIR: its read fails (EISDIR),
    // and the pipeline ends the copy's write with that same error.
    const proc = spawn(CAIRN, ["restore", "--check", dir], {
      cwd: ROOT,
      env: cleanEnv({ TMPDIR: dir, NODE_DISABLE_COMPILE_CACHE: "1" }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let err = "";
    proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const [code] = (await once(proc, "close")) as [number | null];
    assert.equal(code, 2, err);
    assert.match(err, /cannot be read: EISDIR/);
  });
});

describe("cairn restore - with TMPDIR full", () => {
  it(
    "says its copy of standard input cannot be written there, and removes it (exit 5)",
    { skip: tmpfsSkip },
    async () => {
      // A backup larger than what TMPDIR holds (`gunzip -c big.bak.gz | cairn restore -` with a
      // small /tmp): the failed write of the copy was reported as "standard input cannot be read:
      // ENOSPC", exit 2, as a file restore cannot use, of a backup that was whole.
      const tmp = mountTmpfs("64k");
      try {
        const proc = spawn(CAIRN, ["restore", "--check", "-"], {
          cwd: ROOT,
          env: cleanEnv({ TMPDIR: tmp, NODE_DISABLE_COMPILE_CACHE: "1" }),
          stdio: ["pipe", "pipe", "pipe"],
        });
        let err = "";
        proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
        proc.stdin.on("error", () => undefined); // the restore may stop before reading it all
        proc.stdin.end(Buffer.concat(Array<Buffer>(12).fill(backup)));
        const [code] = (await once(proc, "close")) as [number | null];
        assert.equal(code, 5, err);
        assert.match(err, /cannot write its copy of standard input in .*: ENOSPC/);
        assert.doesNotMatch(err, /cannot be read/);
        assert.deepEqual(readdirSync(tmp), [], "the copy removed");
      } finally {
        unmount(tmp);
      }
    },
  );
});

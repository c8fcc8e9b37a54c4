/**
 * `cairn restore -` copies standard input to a temporary file (in TMPDIR) before it checks it: a
 * restore interrupted there (Ctrl-C, SIGTERM, a terminal closed) removes that copy and exits as the signal would
 * (128 + its number). No node is needed: the copy is made before any is reached.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { BackupWriter } from "../../src/cli/backup-file.ts";
import { CAIRN, cleanEnv, ROOT } from "../support/server-process.ts";

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

/**
 * `npm start`, as the README runs it: a SIGTERM to npm (what a supervisor or a terminal's
 * Ctrl-C sends to the process it started) must stop the server, not leave it running
 * re-parented to pid 1.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, it } from "node:test";
import { cleanEnv, ROOT } from "../support/server-process.ts";

/** True once nothing accepts a connection on `address` any more (bounded wait). */
async function closesWithin(address: string, ms: number): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (performance.now() < deadline) {
    const answered = await fetch(`http://${address}/health/quick`, {
      signal: AbortSignal.timeout(1000),
    }).then(
      () => true,
      () => false,
    );
    if (!answered) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

describe("npm start", () => {
  it("stops the server when npm gets SIGTERM", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-npm-start-"));
    const npm = spawn(
      "npm",
      [
        "start",
        "--",
        "--data-dir",
        join(dir, "data"),
        "--rpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
      ],
      { cwd: ROOT, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] },
    );
    let stderr = "";
    npm.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    try {
      const http = await new Promise<string>((resolve, reject) => {
        createInterface({ input: npm.stdout }).on("line", (line) => {
          if (!line.includes('"node started"')) return;
          resolve((JSON.parse(line) as { fields: { http_addr: string } }).fields.http_addr);
        });
        npm.once("exit", (code) => reject(new Error(`npm start exited ${code}: ${stderr}`)));
      });
      const npmExited = new Promise((r) => npm.once("exit", r));
      npm.kill("SIGTERM");
      await npmExited;
      assert.ok(await closesWithin(http, 15_000), `the server on ${http} still answers`);
    } finally {
      if (npm.exitCode === null) npm.kill("SIGKILL");
      await rm(dir, { recursive: true, force: true });
    }
  });
});

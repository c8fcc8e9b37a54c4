/**
 * SIGHUP (the terminal closed, an SSH session dropped) stops `cairn serve` as SIGTERM does: it
 * drains, logs, exits 0. Seen failing: Node.js's default action for SIGHUP ended the process at
 * once (exit 129, killed by the signal), with no drain and no log line.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { connect } from "../support/grpc-client.ts";
import { startServer } from "../support/server-process.ts";

/** The fields of the first log record with `message`, or undefined. */
function record(lines: readonly string[], message: string): Record<string, unknown> | undefined {
  for (const line of lines) {
    try {
      const rec = JSON.parse(line) as { message?: string; fields?: Record<string, unknown> };
      if (rec.message === message) return rec.fields ?? {};
    } catch {
      // not a log record
    }
  }
  return undefined;
}

describe("SIGHUP on cairn serve", () => {
  for (const [setting, env] of [
    ["", {}],
    [" (shard_workers 2)", { CAIRN_SHARD_WORKERS: "2" }],
  ] as const) {
    it(`drains the node, logs "shutting down" and exits 0, a second SIGHUP included${setting}`, async () => {
      const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-hangup-"));
      try {
        const server = await startServer({ dataDir: dir, env });
        const c = connect(server.rpc);
        try {
          await c.call(c.kv, "Put", { key: Buffer.from("k"), value: Buffer.from("v") });
        } finally {
          c.close();
        }
        // A hangup often brings two: the process's own, and its shell's passing it on.
        server.proc.kill("SIGHUP");
        server.proc.kill("SIGHUP");
        assert.deepEqual(await server.exited, { code: 0, signal: null });
        assert.equal(record(server.lines, "shutting down")?.["signal"], "SIGHUP");
        assert.ok(record(server.lines, "node stopped") !== undefined, "the drain ended");
        // What was acknowledged before the signal is there after it.
        const again = await startServer({ dataDir: dir, env });
        const d = connect(again.rpc);
        try {
          const got = await d.call(d.kv, "Get", { key: Buffer.from("k") });
          assert.equal((got["value"] as Buffer).toString(), "v");
        } finally {
          d.close();
          assert.deepEqual(await again.stop("SIGTERM"), { code: 0, signal: null });
        }
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
});

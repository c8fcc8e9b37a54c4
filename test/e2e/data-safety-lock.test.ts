/**
 * One server per data directory (issue 51, item 1), on real processes: a second `cairn serve` on
 * a directory another one serves exits 1 naming the directory and the holder's pid, and the
 * first goes on serving; with shard workers too; with and without the native addon (flock, or
 * the pid-file fallback, which takes over the lock of a holder killed with SIGKILL).
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { startExpectingExit } from "../support/failed-start.ts";
import { connect } from "../support/grpc-client.ts";
import { type ServerProcess, startServer } from "../support/server-process.ts";

let root: string;

async function putGet(server: ServerProcess, key: string): Promise<void> {
  const c = connect(server.rpc);
  try {
    await c.call(c.kv, "Put", { key: Buffer.from(key), value: Buffer.from("v") });
    const got = await c.call(c.kv, "Get", { key: Buffer.from(key) });
    assert.equal((got["value"] as Buffer).toString(), "v");
  } finally {
    c.close();
  }
}

function assertLocked(
  failed: Awaited<ReturnType<typeof startExpectingExit>>,
  dir: string,
  holder: ServerProcess,
): void {
  assert.equal(failed.code, 1, failed.stderr);
  assert.equal(failed.errorCode, "CAIRN_ERR_DATA_DIR_LOCKED", failed.lines.join("\n"));
  assert.match(failed.stderr, new RegExp(`data directory ${dir} is in use`));
  assert.match(failed.stderr, new RegExp(`pid ${holder.proc.pid}\\b`));
}

describe("one server per data directory", () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "cairn-e2e-lock-"));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  for (const [name, env] of [
    ["flock (native addon)", {}],
    ["pid file (no addon)", { CAIRN_NO_NATIVE: "1" }],
    ["shard workers", { CAIRN_SHARD_WORKERS: "2" }],
  ] as const) {
    it(`refuses a second server on a served directory: ${name}`, async () => {
      const dir = await mkdtemp(join(root, "d-"));
      const first = await startServer({ dataDir: dir, env });
      try {
        await putGet(first, "a");
        assertLocked(await startExpectingExit({ dataDir: dir, env }), dir, first);
        // ... also when the second one locks the other way.
        const other = "CAIRN_NO_NATIVE" in env ? {} : { CAIRN_NO_NATIVE: "1" };
        assertLocked(await startExpectingExit({ dataDir: dir, env: other }), dir, first);
        // The first one still serves, its WAL intact.
        await putGet(first, "b");
      } finally {
        assert.equal((await first.stop()).code, 0);
      }
      // Released at the stop: the directory starts again, and holds both keys.
      const again = await startServer({ dataDir: dir, env });
      try {
        await putGet(again, "c");
      } finally {
        await again.stop();
      }
    });
  }

  it("takes over the lock of a holder killed with SIGKILL (pid-file fallback)", async () => {
    const dir = await mkdtemp(join(root, "d-"));
    const env = { CAIRN_NO_NATIVE: "1" };
    const first = await startServer({ dataDir: dir, env });
    first.proc.kill("SIGKILL");
    await first.exited;
    const second = await startServer({ dataDir: dir, env });
    try {
      const takeover = second.lines.find((l) => l.includes("took over the data directory's lock"));
      assert.ok(takeover !== undefined, second.lines.join("\n"));
      assert.match(takeover, new RegExp(`"previous_pid":${first.proc.pid}\\b`));
      await putGet(second, "k");
    } finally {
      await second.stop();
    }
  });
});

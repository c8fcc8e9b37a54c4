/**
 * A flood of large Puts against the real server process (issue 9, bug 5): the node-wide byte
 * budget for waiting requests (limits.max_pending_bytes) refuses what it cannot hold with a
 * retryable RESOURCE_EXHAUSTED, its memory stays bounded, and it keeps answering.
 *
 * The flood offers far more than the budget at once (FLOOD × 1 MiB in flight): without the
 * budget the node queued every request, and its peak RSS grew with the flood.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { connect, grpcError } from "../support/grpc-client.ts";
import { startServer } from "../support/server-process.ts";

const FLOOD = 1200;
const VALUE = Buffer.alloc(1024 * 1024, 7);
const BUDGET = 4 * 1024 * 1024;
const WAL_CACHE = 32 * 1024 * 1024;

/** A /proc/<pid>/status field in MiB (VmRSS now, VmHWM the peak). */
function memoryMiB(pid: number, field: "VmRSS" | "VmHWM"): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8")
    .split("\n")
    .find((l) => l.startsWith(`${field}:`));
  assert.ok(line !== undefined, `${field} in /proc/${pid}/status`);
  return Number(/(\d+)\s*kB/.exec(line)?.[1]) / 1024;
}

describe("a flood of large Puts (real server process)", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-overload-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it(
    "is refused past the byte budget with RESOURCE_EXHAUSTED, RSS stays bounded, the node answers",
    {
      timeout: 120_000,
    },
    async () => {
      const server = await startServer({
        dataDir: dir,
        env: {
          CAIRN_LIMITS_MAX_PENDING_BYTES: String(BUDGET),
          CAIRN_STORAGE_WAL_CACHE_BYTES: String(WAL_CACHE),
          CAIRN_STORAGE_MEMTABLE_BUDGET_BYTES: String(WAL_CACHE),
          CAIRN_LIMITS_MAX_VALUE_BYTES: String(2 * 1024 * 1024),
          CAIRN_LIMITS_MAX_MESSAGE_BYTES: String(4 * 1024 * 1024),
          // A sweep for requests still arriving every 5 s (a quarter of it), so that sweeps
          // run during the flood: the sweep's table once kept every request it saw alive until
          // the next one (peak RSS +827 and +858 MiB at 20 s, against ~340), which a CI run
          // showed at the default. Requests the flood queues on the connection longer than this
          // are cut, retryably, as too slow.
          CAIRN_RPC_REQUEST_RECEIVE_TIMEOUT_MS: "20000",
        },
      });
      const c = connect(server.rpc);
      try {
        const pid = server.proc.pid;
        assert.ok(pid !== undefined);
        await c.call(c.kv, "Put", { key: Buffer.from("warm"), value: Buffer.from("up") });
        const before = memoryMiB(pid, "VmRSS");

        const flood = Promise.allSettled(
          Array.from({ length: FLOOD }, (_, i) =>
            c.call(c.kv, "Put", { key: Buffer.from(`big-${i}`), value: VALUE }, 60_000),
          ),
        );
        // In the middle of the flood the node still answers its probes (over HTTP: a gRPC call on
        // the client's connection would queue behind the flood's bytes in the client itself).
        // The deadline covers this process too, which frames the whole flood meanwhile: on a CI
        // machine running other test files beside it, 10 s was once not enough for both.
        const probe = await fetch(`http://${server.http}/health/quick`, {
          signal: AbortSignal.timeout(30_000),
        });
        assert.equal(probe.status, 200);
        const results = await flood;
        const refused = results.flatMap((r) =>
          r.status === "rejected" ? [grpcError(r.reason)] : [],
        );
        const written = FLOOD - refused.length;
        assert.ok(refused.length > 0, "the flood went past the budget");
        assert.ok(written > 0, "the budget admits writes during the flood");
        for (const err of refused) {
          assert.equal(err.code, status.RESOURCE_EXHAUSTED, err.details);
          assert.ok(
            ["CAIRN_ERR_BACKPRESSURE", "CAIRN_ERR_REQUEST_TOO_SLOW"].includes(
              String(err.metadata.get("cairn-error-code")[0]),
            ),
            err.details,
          );
        }
        // 1,200 MiB offered; the node holds at most its budgets of it (4 MiB waiting, 32 MiB of
        // memtables, 32 MiB of log cache) plus gRPC's receive buffers and garbage not yet
        // collected: whatever is offered, 330 MiB on one day, 440–650 MiB on another (the peak
        // grew by 455–650 with 800 offered, 440–471 with 1,200, on 2026-12-05; a CI run failed
        // a bound of 480 at 800 offered). Before the byte budget (and with the default 512 MiB
        // memtable and log budgets) 600 MiB offered grew it by 760 MiB: growth in proportion to
        // the flood, which this bound (720 MiB) still catches.
        const grew = memoryMiB(pid, "VmHWM") - before;
        assert.ok(
          grew < FLOOD * 0.6,
          `peak RSS grew by ${grew.toFixed(0)} MiB during the flood (${refused.length} refused)`,
        );

        // It still answers, and what it acknowledged is there.
        const got = await c.call(c.kv, "Get", { key: Buffer.from("warm") });
        assert.equal((got["value"] as Buffer).toString(), "up");
        const firstWritten = results.findIndex((r) => r.status === "fulfilled");
        const item = await c.call(c.kv, "Get", { key: Buffer.from(`big-${firstWritten}`) });
        assert.equal((item["value"] as Buffer).length, VALUE.length);
      } finally {
        c.close();
        server.proc.kill("SIGTERM");
        await server.exited;
      }
    },
  );
});

/**
 * One node per node id (issue 51, item 6), on real processes: on a running three-node cluster, a
 * fourth process started with `--node-id n2` on another address and an empty data directory is
 * a new incarnation of a live, reachable member: it exits 1 with CAIRN_ERR_DUPLICATE_NODE_ID
 * naming the conflict, and the real n2 is not evicted (no CAIRN_ERR_LOST_STATE; it keeps
 * serving). Two live nodes with one id are reported at ERROR by SWIM.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  type ClusterNode,
  freePort,
  LocalCluster,
  retryingKv,
} from "../support/cluster-process.ts";
import type { Clients } from "../support/grpc-client.ts";
import { cleanEnv, type ServerProcess, spawnCairn } from "../support/server-process.ts";

let root: string;

function running(n: ClusterNode): { server: ServerProcess; client: Clients } {
  assert.ok(n.server !== null && n.client !== null, `${n.id} is not running`);
  return { server: n.server, client: n.client };
}

describe("a second node with a running member's node id", () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "cairn-e2e-dup-"));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("is refused and exits 1; the real member keeps serving", async () => {
    const cluster = await LocalCluster.create(root, 3, { CAIRN_CLUSTER_TOTAL_SHARDS: "16" });
    try {
      await cluster.startAll();
      await cluster.ready();
      const n2 = cluster.node("n2");
      await retryingKv(running(n2).client, "Put", {
        key: Buffer.from("k"),
        value: Buffer.from("v1"),
      });

      const port = await freePort();
      const impostor = spawnCairn(
        [
          "serve",
          "--node-id",
          "n2",
          "--data-dir",
          join(root, "impostor"),
          "--rpc-addr",
          `127.0.0.1:${port}`,
          "--http-addr",
          "127.0.0.1:0",
          "--seed-nodes",
          cluster.seeds,
        ],
        cleanEnv({ CAIRN_CLUSTER_TOTAL_SHARDS: "16" }),
      );
      let out = "";
      impostor.stdout?.on("data", (d: Buffer) => (out += d.toString()));
      const code = await new Promise<number | null>((resolve, reject) => {
        const timer = setTimeout(() => {
          impostor.kill("SIGKILL");
          reject(new Error(`the impostor did not exit within 60 s:\n${out}`));
        }, 60_000);
        impostor.once("exit", (c) => {
          clearTimeout(timer);
          resolve(c);
        });
      });
      assert.equal(code, 1, out);
      // SWIM may report the two live n2s at ERROR (same code) before the join is refused, so
      // look for the refusal among every such line, not the first.
      const duplicates = out
        .split("\n")
        .filter((l) => l.includes('"code":"CAIRN_ERR_DUPLICATE_NODE_ID"') && l.includes('"ERROR"'));
      const refusal = new RegExp(`node id n2 belongs to a live member at ${n2.rpc}`);
      assert.ok(
        duplicates.some((l) => refusal.test(l)),
        `no refusal naming ${n2.rpc} among:\n${duplicates.join("\n")}\n---\n${out}`,
      );

      // The real n2 was not evicted: still running, never told it lost its state, serving.
      const { server, client } = running(n2);
      assert.equal(server.proc.exitCode, null);
      assert.ok(!server.lines.some((l) => l.includes("CAIRN_ERR_LOST_STATE")));
      await retryingKv(client, "Put", { key: Buffer.from("k"), value: Buffer.from("v2") });
      const got = await retryingKv(running(cluster.node("n1")).client, "Get", {
        key: Buffer.from("k"),
      });
      assert.equal((got["value"] as Buffer).toString(), "v2");
    } finally {
      await cluster.killAll();
    }
  });
});

/**
 * swim_cluster_size counts the cluster's members: a node started after the founding counts
 * once the meta group has admitted it (design.md §5.2), and /health lists each member with its
 * state in the cluster. Before the founding, the first seed tells clients why it serves nothing,
 * on every shard worker's connections.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { eventually, LocalCluster } from "../support/cluster-process.ts";
import { connect, grpcError } from "../support/grpc-client.ts";

async function gauge(http: string, name: string): Promise<number> {
  const text = await (await fetch(`http://${http}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return Number(line?.split(" ")[1]);
}

describe("swim_cluster_size (real processes)", () => {
  it(
    "counts a node started after the founding once it is admitted",
    { timeout: 120_000 },
    async () => {
      const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-size-"));
      // Four addresses; the first three found the cluster (bootstrap_expect 3), n4 comes later.
      const cluster = await LocalCluster.create(dir, 4);
      try {
        // The first seed alone says why it serves nothing: it waits to found the cluster (it
        // used to say it was asking to be admitted).
        const first = await cluster.start("n1");
        const c = first.client;
        assert.ok(c !== null);
        await eventually("n1 says it waits to found the cluster", async () => {
          try {
            await c.call(c.kv, "Put", { key: Buffer.from("k"), value: Buffer.from("v") });
            return false;
          } catch (err) {
            const e = grpcError(err);
            assert.equal(e.code, status.UNAVAILABLE, e.details);
            assert.equal(e.metadata.get("cairn-error-code")[0], "CAIRN_ERR_NOT_MEMBER");
            return /the first seed, which founds the cluster, and has not yet: waiting for members: 1 of bootstrap_expect 3 seen/.test(
              e.details,
            );
          }
        });
        await Promise.all(["n2", "n3"].map((id) => cluster.start(id)));
        await cluster.ready();
        await cluster.start("n4");
        const n1 = cluster.node("n1").server;
        assert.ok(n1 !== null);
        await eventually("n1 lists n4 as a member", async () => {
          const report = (await (await fetch(`http://${n1.http}/health`)).json()) as {
            nodes: { id: string; state: string; member_state?: string }[];
          };
          const n4 = report.nodes.find((m) => m.id === "n4");
          return n4?.state === "alive" && n4.member_state !== undefined;
        });
        await eventually(
          "swim_cluster_size counts n4",
          async () => (await gauge(n1.http, "swim_cluster_size")) === 4,
        );
      } finally {
        await cluster.killAll();
        await rm(dir, { recursive: true, force: true });
      }
    },
  );

  it(
    "a first seed of two shard workers says why it serves nothing on every connection, whichever worker took it",
    { timeout: 120_000 },
    async () => {
      // Worker 0 runs the founding; a client whose connection the kernel gave worker 1 read that
      // the node was asking its seeds to admit it, for as long as the founding waited.
      const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-size-workers-"));
      const cluster = await LocalCluster.create(dir, 3, { CAIRN_SHARD_WORKERS: "2" });
      try {
        const n1 = await cluster.start("n1");
        const refusal = async (): Promise<string> => {
          // A channel of its own each: a connection of its own, which either worker may take.
          const c = connect(n1.rpc, { "grpc.use_local_subchannel_pool": 1 });
          try {
            await c.call(c.kv, "Put", { key: Buffer.from("k"), value: Buffer.from("v") });
            return "served";
          } catch (err) {
            const e = grpcError(err);
            assert.equal(e.code, status.UNAVAILABLE, e.details);
            return `${String(e.metadata.get("cairn-error-code")[0])}: ${e.details}`;
          } finally {
            c.close();
          }
        };
        const founding =
          /^CAIRN_ERR_NOT_MEMBER: .*the first seed, which founds the cluster, and has not yet: waiting for members: 1 of bootstrap_expect 3 seen/;
        await eventually("n1 says it waits to found the cluster", async () =>
          founding.test(await refusal()),
        );
        // 16 connections: the kernel gives them all to worker 0 once in 2^15 runs.
        for (let i = 0; i < 16; i++) assert.match(await refusal(), founding, `connection ${i}`);
      } finally {
        await cluster.killAll();
        await rm(dir, { recursive: true, force: true });
      }
    },
  );
});

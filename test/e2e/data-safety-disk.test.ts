/**
 * A full disk (issue 51, item 7), on a real process and a small tmpfs: the node that fills it
 * stops, its log naming the WAL file and the cause; a restart on the full disk exits 1 with
 * CAIRN_ERR_DISK_FULL naming data_dir (not CAIRN_ERR_INTERNAL and a bare ENOSPC); once space is
 * freed (a larger tmpfs) it starts with every acknowledged write, the torn tail a full disk may
 * leave described as such. That is with the reserve off; with it (`storage.min_free_bytes`,
 * src/node/disk-reserve.ts) the node refuses Puts before the disk is full and keeps serving
 * reads and Deletes, and takes Puts again once space is freed. In a cluster, where each leader
 * looks at its own disk and the members fill together, no node stops either; a member whose
 * disk fills alone hands its leaderships to members with room, so that no Put is refused.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { rmSync, statfsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { startExpectingExit } from "../support/failed-start.ts";
import {
  clusterView,
  eventually,
  healthReport,
  retryingKv,
  withLocalCluster,
} from "../support/cluster-process.ts";
import { type Clients, connect, grpcError } from "../support/grpc-client.ts";
import { metricValue, runCairn, startServer } from "../support/server-process.ts";
import { mountTmpfs, mountTmpfsOn, tmpfsSkip, unmount } from "../support/tmpfs.ts";

const mounts: string[] = [];

describe("a full disk", () => {
  after(() => {
    for (const m of mounts) unmount(m);
  });

  it(
    "refuses Puts under storage.min_free_bytes, serves reads and Deletes, takes Puts once space is freed",
    { skip: tmpfsSkip },
    async () => {
      const mount = mountTmpfs("40m");
      mounts.push(mount);
      // Another program's file on the same disk: removed later to give the node room.
      const ballast = join(mount, "ballast");
      writeFileSync(ballast, Buffer.alloc(8 * 1024 * 1024, 1));
      const dir = join(mount, "data");
      const env = { CAIRN_STORAGE_MIN_FREE_BYTES: "12MiB" };
      let server = await startServer({ dataDir: dir, env });
      let c = connect(server.rpc);
      const value = (i: number): Buffer => Buffer.alloc(16_384, i % 251);
      try {
        // Written until refused: 40 MiB less the ballast and the reserve leaves room for about
        // 20 MiB of the WAL and the tables; 10,000 Puts would be 160 MiB.
        let refusal: unknown = null;
        let acked = 0;
        for (let i = 0; i < 10_000 && refusal === null; i++) {
          try {
            await c.call(c.kv, "Put", { key: Buffer.from(`k${i}`), value: value(i) });
            acked++;
          } catch (err) {
            refusal = err;
          }
        }
        assert.ok(refusal !== null, "every Put was taken");
        assert.ok(acked > 100, `only ${acked} Puts taken before the refusal`);
        const e = grpcError(refusal);
        assert.equal(e.code, 8, e.details); // RESOURCE_EXHAUSTED
        assert.equal(e.metadata.get("cairn-error-code")[0], "CAIRN_ERR_DISK_FULL");
        assert.match(
          e.details,
          new RegExp(
            `the disk of data_dir ${dir} has .* MiB available, under storage.min_free_bytes \\(12\\.0 MiB\\)`,
          ),
        );
        // Still serving, every acknowledged write there.
        assert.equal(server.proc.exitCode, null);
        for (let i = 0; i < acked; i++) {
          const got = await c.call(c.kv, "Get", { key: Buffer.from(`k${i}`) });
          assert.deepEqual(got["value"], value(i), `k${i}`);
        }
        await c.call(c.kv, "Delete", { key: Buffer.from("k0") });
        const gone = await c.call(c.kv, "Get", { key: Buffer.from("k0") });
        assert.equal(gone["found"], false);
        assert.equal(await metricValue(server, "cairn_disk_puts_refused"), 1);
        assert.ok((await metricValue(server, "cairn_disk_available_bytes")) < 12 * 1024 * 1024);
        const health = await healthReport(server.http);
        assert.equal(health.status, "degraded");
        assert.equal(health.puts_refused, true);
        assert.ok(server.lines.some((l) => l.includes("under storage.min_free_bytes")));
        // The command line says why, and that nothing was written.
        const cli = await runCairn(["--endpoints", server.rpc, "put", "cli-key", "v"]);
        assert.equal(cli.code, 5, cli.err);
        assert.match(cli.err, /^cairn put: the disk of data_dir .* Puts are refused/);

        // Restarted on that disk, it serves, and refuses Puts from the first.
        c.close();
        assert.equal((await server.stop()).code, 0);
        server = await startServer({ dataDir: dir, env });
        c = connect(server.rpc);
        await assert.rejects(
          c.call(c.kv, "Put", { key: Buffer.from("k1"), value: Buffer.from("x") }),
          (err) => grpcError(err).metadata.get("cairn-error-code")[0] === "CAIRN_ERR_DISK_FULL",
        );
        const k1 = await c.call(c.kv, "Get", { key: Buffer.from("k1") });
        assert.deepEqual(k1["value"], value(1));

        rmSync(ballast);
        await eventually(
          "Puts taken again once space was freed",
          async () => {
            await c.call(c.kv, "Put", { key: Buffer.from("after"), value: Buffer.from("room") });
            return true;
          },
          10_000,
        );
        assert.equal(await metricValue(server, "cairn_disk_puts_refused"), 0);
        const after = await healthReport(server.http);
        assert.equal(after.status, "healthy");
        assert.equal(after.puts_refused, undefined);
        assert.ok(server.lines.some((l) => l.includes("has room again: Puts are taken")));
      } finally {
        c.close();
      }
      assert.equal((await server.stop()).code, 0);
    },
  );

  it(
    "a member whose disk fills by itself hands its leaderships to members with room: no Put refused",
    { skip: tmpfsSkip },
    async () => {
      const env = { CAIRN_CLUSTER_TOTAL_SHARDS: "16" };
      await withLocalCluster("disk-alone", 3, env, async (cluster) => {
        const [n1] = cluster.nodes;
        assert.ok(n1);
        cluster.nodeEnv = (id) => (id === "n1" ? { CAIRN_STORAGE_MIN_FREE_BYTES: "16MiB" } : {});
        mountTmpfsOn(n1.dataDir, "48m");
        try {
          await cluster.startAll();
          await cluster.ready();
          const [c1, c2] = cluster.nodes.map((n) => n.client);
          assert.ok(c1 && c2);
          const value = Buffer.alloc(1024, 7);
          const acked: string[] = [];
          const put = async (c: Clients, key: string): Promise<void> => {
            await c.call(c.kv, "Put", { key: Buffer.from(key), value });
            acked.push(key);
          };
          const ledBy = async (node: string): Promise<number> =>
            (await clusterView(c2)).shards.filter((s) => s.leader === node).length;
          // Every shard created, n1 leading its share.
          for (let i = 0; i < 64; i++) await put(c2, `a${i}`);
          await eventually("n1 leads shards", async () => (await ledBy("n1")) > 0, 15_000);

          // Another program's file leaves n1 under its reserve; n2 and n3 have room.
          const ballast = join(n1.dataDir, "ballast");
          const room = statfsSync(n1.dataDir);
          const free = room.bavail * room.bsize;
          writeFileSync(ballast, Buffer.alloc(free - 8 * 1024 * 1024, 1));
          await eventually(
            "n1 reported its disk full and leads no shard",
            async () => {
              const view = await clusterView(c2);
              const me = view.nodes.find((n) => n.id === "n1");
              return me?.disk_full === true && view.shards.every((s) => s.leader !== "n1");
            },
            20_000,
          );
          assert.ok(n1.server);
          assert.equal(await metricValue(n1.server, "cairn_disk_puts_refused"), 1);
          // Every Put is taken, through n1 too (each forwarded to a leader with room).
          for (let i = 0; i < 200; i++) await put(i % 2 === 0 ? c1 : c2, `b${i}`);
          // An operator cannot hand a leadership back to n1 while it is full.
          const shard = (await clusterView(c2)).shards[0];
          assert.ok(shard);
          await assert.rejects(
            c2.call(c2.admin, "TransferLeader", { shard_id: shard.id, node_id: "n1" }),
            (err) => /n1 reported its disk full/.test(grpcError(err).details),
          );

          // Room again: n1 takes its leaderships back.
          rmSync(ballast);
          await eventually(
            "n1 leads shards again",
            async () => {
              const view = await clusterView(c2);
              return (
                view.nodes.find((n) => n.id === "n1")?.disk_full !== true &&
                view.shards.some((s) => s.leader === "n1")
              );
            },
            20_000,
          );
          // Read back as a client reads: n1 is taking its leaderships back meanwhile, and a Get
          // forwarded during a transfer is refused UNAVAILABLE, retryably (seen once in CI).
          for (const key of acked) {
            const got = await retryingKv(c1, "Get", { key: Buffer.from(key) });
            assert.deepEqual(got["value"], value, key);
          }
          await cluster.stopAll();
        } finally {
          await cluster.killAll();
          unmount(n1.dataDir);
        }
      });
    },
  );

  it(
    "a cluster whose disks fill refuses Puts on every node and loses no node",
    { skip: tmpfsSkip },
    async () => {
      const env = { CAIRN_CLUSTER_TOTAL_SHARDS: "16", CAIRN_STORAGE_MIN_FREE_BYTES: "16MiB" };
      await withLocalCluster("disk-reserve", 3, env, async (cluster) => {
        const mounted: string[] = [];
        try {
          for (const n of cluster.nodes) {
            mountTmpfsOn(n.dataDir, "48m");
            mounted.push(n.dataDir);
          }
          await cluster.startAll();
          await cluster.ready();
          const [c1, c2, c3] = cluster.nodes.map((n) => n.client);
          assert.ok(c1 && c2 && c3);
          const value = (i: number): Buffer => Buffer.alloc(16_384, i % 251);
          // Written through n1 (forwarded to each shard's leader) until the last 30 Puts were
          // all refused: every leader's disk is under the reserve. 6,000 Puts would be 94 MiB.
          const acked: number[] = [];
          let refusedInARow = 0;
          let lastRefusal = "";
          for (let i = 0; i < 6_000 && refusedInARow < 30; i++) {
            try {
              await c1.call(c1.kv, "Put", { key: Buffer.from(`k${i}`), value: value(i) });
              acked.push(i);
              refusedInARow = 0;
            } catch (err) {
              const e = grpcError(err);
              assert.equal(e.metadata.get("cairn-error-code")[0], "CAIRN_ERR_DISK_FULL", e.details);
              lastRefusal = e.details;
              refusedInARow++;
            }
          }
          assert.equal(refusedInARow, 30, `Puts still taken after ${acked.length}`);
          assert.ok(acked.length > 100, `only ${acked.length} Puts taken`);
          assert.match(lastRefusal, /under storage\.min_free_bytes \(16\.0 MiB\)/);
          for (const n of cluster.nodes) {
            assert.equal(n.server?.proc.exitCode, null, `${n.id} is running`);
            assert.equal(
              await metricValue(n.server, "cairn_disk_puts_refused"),
              1,
              `${n.id} refuses Puts`,
            );
          }
          // Every Put acknowledged is there, through any node (every tenth through n2 and n3),
          // read as a client does: retried while a shard's leadership moves (each node hands
          // its leaderships to replicas whose disk has room as it finds its own full, and the
          // others are not yet known full: CI saw a Get meet "not the leader (leader unknown)").
          for (const i of acked) {
            const through: Clients[] = i % 10 === 0 ? [c1, c2, c3] : [c1];
            for (const [at, c] of through.entries()) {
              const got = await retryingKv(c, "Get", { key: Buffer.from(`k${i}`) });
              assert.equal(got["found"], true, `k${i} through n${at + 1}`);
              assert.deepEqual(got["value"], value(i), `k${i} through n${at + 1}`);
            }
          }
          await retryingKv(c2, "Delete", { key: Buffer.from("k1") });
          const gone = await retryingKv(c3, "Get", { key: Buffer.from("k1") });
          assert.equal(gone["found"], false);
          await cluster.stopAll();
        } finally {
          await cluster.killAll();
          for (const dir of mounted) unmount(dir);
        }
      });
    },
  );

  it(
    "stops naming the WAL file, refuses to restart on the full disk naming data_dir",
    { skip: tmpfsSkip },
    async () => {
      const mount = mountTmpfs("3m");
      mounts.push(mount);
      const dir = join(mount, "data");
      // The reserve off: the disk fills (the reserve's own test is below).
      const noReserve = { CAIRN_STORAGE_MIN_FREE_BYTES: "0" };
      const server = await startServer({ dataDir: dir, env: noReserve });
      const c = connect(server.rpc);
      const acked = new Map<string, number>();
      try {
        for (let i = 0; ; i++) {
          const key = `k${i}`;
          await c.call(c.kv, "Put", {
            key: Buffer.from(key),
            value: Buffer.alloc(16_384, i % 251),
          });
          acked.set(key, i % 251);
        }
      } catch {
        // The disk is full: the write failed and the node stops.
      } finally {
        c.close();
      }
      assert.equal((await server.exited).code, 1);
      const fatal = server.lines.find((l) => l.includes("fatal storage or consistency error"));
      assert.ok(fatal !== undefined, server.lines.join("\n"));
      assert.match(
        fatal,
        new RegExp(`WAL write or sync to ${dir}/wal/\\d+\\.wal failed: no space left on device`),
      );
      assert.ok(acked.size > 0);

      const refused = await startExpectingExit({ dataDir: dir, env: noReserve });
      assert.equal(refused.code, 1, refused.stderr);
      assert.equal(refused.errorCode, "CAIRN_ERR_DISK_FULL", refused.lines.join("\n"));
      assert.match(
        refused.stderr,
        new RegExp(`data_dir ${dir}: .*(the disk is full|disk is full)`),
      );

      // More room: everything acknowledged is there.
      execFileSync("mount", ["-o", "remount,size=16m", mount], { stdio: "ignore" });
      const again = await startServer({ dataDir: dir, env: noReserve });
      const c2 = connect(again.rpc);
      try {
        const torn = again.lines.find((l) => l.includes("torn write"));
        if (torn !== undefined) assert.match(torn, /failed write, such as on a full disk/);
        for (const [key, byte] of acked) {
          const got = await c2.call(c2.kv, "Get", { key: Buffer.from(key) });
          assert.deepEqual(got["value"], Buffer.alloc(16_384, byte), key);
        }
      } finally {
        c2.close();
        await again.stop();
      }
    },
  );
});

/**
 * A 3-node cluster with TLS between its peers (issue 54; src/common/peer-tls.ts), on real
 * processes on loopback. One cluster, several checks, in order:
 *
 * - clients with mutual TLS (a client CA of their own, beside the peers' CA) write through every
 *   node (the others forward to the leaders), read linearizably and scan through every node;
 * - the `cairn` CLI connects with --cacert, --cert and --key;
 * - a peer's call whose certificate names another node (an impostor with a certificate the peer
 *   CA signed for n9, calling as n2) is refused PERMISSION_DENIED, and one with a client's
 *   certificate too; both counted as refused peer calls;
 * - a node SIGKILLed, written past and its shards' logs compacted, then restarted: it catches up
 *   by snapshot (over TLS), and every replica holds every acknowledged write;
 * - a cleartext node joining the TLS cluster is refused with a clear error on its side (the TLS
 *   nodes' GOAWAY INADEQUATE_SECURITY text) and a log line on theirs, and the cluster stays
 *   healthy.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, it } from "node:test";
import { Client, credentials, Metadata, type ServiceError } from "@grpc/grpc-js";
import { shardForKey } from "../../src/cluster/index.ts";
import {
  acknowledgedPuts,
  eventually,
  everyReplicaHolds,
  freePort,
  LocalCluster,
} from "../support/cluster-process.ts";
import type { Clients } from "../support/grpc-client.ts";
import { CAIRN, cleanEnv, ROOT, startServer } from "../support/server-process.ts";
import { clusterCerts, nodeCert, refusedCertificates } from "../support/tls-certs.ts";

const TOTAL_SHARDS = 1024;
const dir = mkdtempSync(join(tmpdir(), "cairn-e2e-cluster-tls-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A unary call of the peers' service, as node `as`, over TLS with the given certificate. */
function peerCall(
  address: string,
  ca: string,
  cert: { cert: string; key: string },
  as: string,
): Promise<ServiceError | null> {
  const client = new Client(
    address,
    credentials.createSsl(readFileSync(ca), readFileSync(cert.key), readFileSync(cert.cert)),
    { "grpc.ssl_target_name_override": "localhost", "grpc.use_local_subchannel_pool": 1 },
  );
  const metadata = new Metadata();
  metadata.set("cairn-peer", as);
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      "/cairn.v1.Raft/ReadIndex",
      (b: Buffer) => b,
      (b: Buffer) => b,
      Buffer.alloc(0),
      metadata,
      { deadline: Date.now() + 5000 },
      (err: ServiceError | null) => {
        client.close();
        resolve(err);
      },
    );
  });
}

describe("a 3-node cluster with peer TLS", () => {
  it(
    "serves, forwards, snapshots and restarts over TLS; refuses impostors and cleartext nodes",
    { timeout: 300_000 },
    async () => {
      const certs = clusterCerts(dir, ["n1", "n2", "n3"]);
      const { peerCa, alice } = certs;
      const impostor = nodeCert(dirname(peerCa), "n9");
      const cluster = await LocalCluster.create(dir, 3);
      cluster.useTls(certs);
      try {
        // One after another: three node processes starting at once on a loaded 2-core machine
        // can take longer than a start's 30 s each.
        for (const n of cluster.nodes) await cluster.start(n.id);
        await cluster.ready(60_000);
        const { acknowledged, put } = acknowledgedPuts();
        const via = (i: number): Clients => cluster.nodes[i % 3]?.client as Clients;

        // Writes through every node: two of three forward each to its shard's leader.
        for (let i = 0; i < 30; i++)
          await put(via(i), `key-${String(i).padStart(2, "0")}`, `v${i}`);
        for (let i = 0; i < 3; i++) {
          const c = via(i);
          for (const key of ["key-00", "key-13", "key-29"]) {
            const got = await c.call(c.kv, "Get", { key: Buffer.from(key) });
            assert.equal(
              (got["value"] as Buffer).toString(),
              acknowledged.get(key),
              `${key} via n${i + 1}`,
            );
          }
          const scan = await c.call(c.kv, "Scan", {
            start: Buffer.from("key-"),
            end: Buffer.from("key."),
            limit: 100,
          });
          const keys = (scan["items"] as { key: Buffer }[]).map((it) => it.key.toString());
          assert.equal(keys.length, 30, `a scan through n${i + 1}`);
        }

        // The CLI, with mutual TLS.
        const cli = spawnSync(
          CAIRN,
          [
            "--endpoints",
            cluster.node("n2").rpc,
            "--cacert",
            peerCa,
            "--cert",
            alice.cert,
            "--key",
            alice.key,
            "get",
            "key-07",
          ],
          { cwd: ROOT, env: cleanEnv(), encoding: "utf8", timeout: 30_000 },
        );
        assert.equal(cli.status, 0, cli.stderr);
        assert.equal(cli.stdout.trim(), "v7");

        // An impostor: a certificate the peer CA signed, for n9, calling as n2. And a client's.
        const n1 = cluster.node("n1");
        const before = await refusedCertificates(n1.server?.http);
        const asN2 = await peerCall(n1.rpc, peerCa, impostor, "n2");
        assert.equal(asN2?.code, 7, String(asN2)); // PERMISSION_DENIED
        assert.match(asN2?.details ?? "", /names \["n9".*not node "n2"/);
        const asClient = await peerCall(n1.rpc, peerCa, alice, "n2");
        assert.equal(asClient?.code, 7, String(asClient));
        assert.match(asClient?.details ?? "", /not signed by this node's tls.peer_ca_file/);
        assert.equal(await refusedCertificates(n1.server?.http), before + 2);
        // As itself, n9 passes the certificate check and meets the membership one instead.
        const asN9 = await peerCall(n1.rpc, peerCa, impostor, "n9");
        assert.doesNotMatch(asN9?.details ?? "", /certificate/);

        // n3 killed, writes past it, its shards' logs compacted: it catches up by snapshot.
        await cluster.stop("n3", "SIGKILL");
        const c1 = cluster.node("n1").client as Clients;
        const c2 = cluster.node("n2").client as Clients;
        for (let i = 0; i < 20; i++) await put(i % 2 === 0 ? c1 : c2, `during-${i}`, `d${i}`);
        const shards = new Set(
          [...acknowledged.keys()].map((k) => shardForKey(Buffer.from(k), TOTAL_SHARDS)),
        );
        for (const c of [c1, c2]) {
          for (const shard of shards) await c.call(c.admin, "SnapshotShard", { shard_id: shard });
        }
        const back = await cluster.start("n3");
        await cluster.ready(60_000);
        await eventually(
          "n3 installs a leader's snapshot",
          async () =>
            back.server?.lines.some((l) => l.includes("installed from the leader's snapshot")) ===
            true,
          60_000,
        );
        await put(back.client as Clients, "after-restart", "ok");
        await everyReplicaHolds(cluster, acknowledged);

        // A cleartext node joining: refused with a clear error on its side, the cluster unharmed.
        const port = await freePort();
        const plain = await startServer({
          dataDir: join(dir, "n4"),
          args: [
            "--node-id",
            "n4",
            "--rpc-addr",
            `127.0.0.1:${port}`,
            "--seed-nodes",
            cluster.seeds,
          ],
        });
        try {
          await eventually(
            "n4 says TLS is on at one end only",
            async () =>
              plain.lines.some(
                (l) => l.includes("TLS is on at one end only") && l.includes("TLS only"),
              ),
            60_000,
          );
          await eventually(
            "a TLS node logs the cleartext connection",
            async () =>
              cluster
                .running()
                .some((n) =>
                  n.server?.lines.some((l) => l.includes("a cleartext connection reached")),
                ),
            30_000,
          );
          assert.equal(plain.proc.exitCode, null, "n4 still runs");
          await put(c1, "after-cleartext", "ok");
          for (const n of cluster.running()) {
            assert.equal((await fetch(`http://${n.server?.http}/health/quick`)).status, 200);
          }
        } finally {
          await plain.stop("SIGKILL");
        }
        await everyReplicaHolds(cluster, acknowledged);
        for (const n of cluster.running()) {
          const errors = (n.server?.lines ?? []).filter((l) => l.includes('"level":"ERROR"'));
          assert.deepEqual(errors, [], `${n.id} logged no error`);
        }
        await cluster.stopAll();
      } catch (err) {
        for (const n of cluster.running()) {
          process.stderr.write(`--- ${n.id}\n${(n.server?.lines ?? []).slice(-30).join("\n")}\n`);
        }
        throw err;
      } finally {
        await cluster.killAll();
      }
    },
  );
});

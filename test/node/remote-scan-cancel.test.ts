/**
 * A linearizable Scan whose client cancels its call cancels the ScanShards calls its node sent
 * to peers: src/node/node.ts builds the Scanner's `remoteScan` hook, which hands the scan's
 * `cut` to GrpcTransport.scanShards. The transport's half and the Scanner's half are tested on
 * their own (test/replication/raft-service.test.ts, multi-raft.test.ts); this tests the glue,
 * on real nodes talking over loopback.
 *
 * n1 and n2 run in this process (CairnNode.start, as `cairn serve` starts a node), n3 is a
 * `cairn serve` process. Two replicas a shard. A shard placed on n2 then n3 (rank order) is
 * one a Scan through n1 asks n2 for (ScanShards); n3 leads it. With n3 paused (SIGSTOP), n2's
 * read barrier for it waits for n3's read index, which does not come. The client cancels its
 * Scan: n2 must see its ScanShards call cancelled and stop waiting then (ReadCancelledError),
 * not at the call's deadline. n2's share is watched where its Raft service hands it to its
 * store: MultiRaft.scanShards, called through the node's `store` on every call, wrapped here.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type ClientUnaryCall, type ServiceError, status } from "@grpc/grpc-js";
import { shardForKey } from "../../src/cluster/index.ts";
import type { ClusterView } from "../../src/cluster/view.ts";
import { loadConfig } from "../../src/config/index.ts";
import { CairnNode } from "../../src/node/node.ts";
import { silentLogger } from "../../src/ops/index.ts";
import type { ScanPage } from "../../src/replication/index.ts";
import { type Clients, connect } from "../support/grpc-client.ts";
import { freePort } from "../support/ports.ts";
import { type ServerProcess, startServer } from "../support/server-process.ts";

const TOTAL_SHARDS = 64;
/** Every node's settings (n1 and n2 read them as `cairn serve` reads its environment). */
const ENV: Readonly<Record<string, string>> = {
  CAIRN_CLUSTER_TOTAL_SHARDS: String(TOTAL_SHARDS),
  CAIRN_CLUSTER_REPLICATION_FACTOR: "2",
  CAIRN_CLUSTER_BOOTSTRAP_EXPECT: "3",
  // No replica or leadership moves: shards stay where they were created, led where put.
  CAIRN_CLUSTER_REBALANCE_MAX_MOVES: "0",
  CAIRN_CLUSTER_REBALANCE_TOLERANCE: "65536",
  CAIRN_SHUTDOWN_DRAIN_TIMEOUT_MS: "0",
};
/** The Scan's deadline: how long n2's share would wait, were its call not cancelled. */
const SCAN_DEADLINE_MS = 10_000;
/** How soon after the client's cancel n2's share must have ended: well before the deadline. */
const PROMPT_MS = 2_000;

/** `wait`, or a rejection naming `what` after `timeoutMs`. */
function within<T>(what: string, timeoutMs: number, wait: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not within ${timeoutMs} ms: ${what}`)), timeoutMs);
  });
  return Promise.race([wait, late]).finally(() => clearTimeout(timer));
}

/** What `pick` gives of the first view of `node` it gives something of (views come on change). */
function viewUntil<T>(
  node: CairnNode,
  what: string,
  pick: (view: ClusterView) => T | undefined,
  timeoutMs = 30_000,
): Promise<T> {
  let unsubscribe = (): void => {};
  const found = new Promise<T>((resolve) => {
    let done = false;
    unsubscribe = node.views.subscribe((view) => {
      const value = done ? undefined : pick(view);
      if (value === undefined) return;
      done = true;
      resolve(value);
    });
  });
  return within(what, timeoutMs, found).finally(() => unsubscribe());
}

/** Admin.TransferLeader of `shard` to node `to`, through the node at `via`. */
async function transferLeader(via: string, shard: number, to: string): Promise<void> {
  const admin = connect(via);
  try {
    const reply = await admin.call(admin.admin, "TransferLeader", { shard_id: shard, node_id: to });
    assert.equal(reply["leader"], to, `shard ${shard}'s leader`);
  } finally {
    admin.close();
  }
}

/** A ScanShards call as n2's store got it: its shards, and how and when (performance.now()) it ended. */
interface Share {
  readonly ids: readonly number[];
  readonly ended: Promise<{ at: number; outcome: ScanPage | Error }>;
}

describe("a linearizable Scan through a node, cancelled by its client", () => {
  let dir: string;
  let n1: CairnNode | undefined;
  let n2: CairnNode | undefined;
  let n3: ServerProcess | undefined;
  /** n1's, n2's and n3's RPC addresses. */
  let addresses: string[] = [];
  let client: Clients | undefined;
  /** Told of each ScanShards call n2's store gets. */
  let arrived: (share: Share) => void = () => {};

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-remote-scan-cancel-"));
    addresses = [];
    for (let i = 0; i < 3; i++) addresses.push(`127.0.0.1:${await freePort()}`);
    const seeds = addresses.join(",");
    const start = (id: string, rpc: string): Promise<CairnNode> =>
      CairnNode.start(
        loadConfig({
          env: ENV,
          flags: {
            "node-id": id,
            "data-dir": join(dir, id),
            "rpc-addr": rpc,
            "http-addr": "127.0.0.1:0",
            "seed-nodes": seeds,
          },
        }),
        silentLogger,
      );
    const [a1, a2, a3] = addresses as [string, string, string];
    [n1, n2, n3] = await Promise.all([
      start("n1", a1),
      start("n2", a2),
      startServer({
        dataDir: join(dir, "n3"),
        args: ["--node-id", "n3", "--rpc-addr", a3, "--seed-nodes", seeds],
        env: ENV,
      }),
    ]);
    const first = n1;
    await viewUntil(first, "the cluster founded on n1, n2 and n3", (v) =>
      v.cluster_id !== "" &&
      ["n1", "n2", "n3"].every((id) => v.nodes.find((m) => m.id === id)?.member_state === "active")
        ? true
        : undefined,
    );
    // The meta group (all three nodes) led by n1: with n3 paused, n1's Scan syncs its meta
    // state at once.
    const metaLeader = await viewUntil(
      first,
      "the meta group's leader",
      (v) => v.shards.find((s) => s.id === 0)?.leader || undefined,
    );
    if (metaLeader !== "n1") {
      await transferLeader(a1, 0, "n1");
      await viewUntil(first, "n1 leads the meta group", (v) =>
        v.shards.find((s) => s.id === 0)?.leader === "n1" ? true : undefined,
      );
    }
    client = connect(a1);

    // n2's shares of scans, where its Raft service hands them to its store.
    const store = n2.store;
    const scanShards = store.scanShards.bind(store);
    store.scanShards = (ids, req, deadline, call) => {
      const answer = scanShards(ids, req, deadline, call);
      arrived({
        ids,
        ended: answer.then(
          (page) => ({ at: performance.now(), outcome: page }),
          (err: unknown) => ({ at: performance.now(), outcome: err as Error }),
        ),
      });
      return answer;
    };
  });

  after(async () => {
    client?.close();
    n3?.proc.kill("SIGKILL");
    await n3?.exited;
    await Promise.all([n1?.stop(), n2?.stop()]);
    await rm(dir, { recursive: true, force: true });
  });

  it("cancels the ScanShards call it sent to a peer, whose read barrier stops waiting then", async () => {
    const [one, two, c] = [n1, n2, client] as [CairnNode, CairnNode, Clients];
    // Keys into new shards until one is placed on n2 then n3 (rank order): a linearizable Scan
    // through n1 asks n2 for its keys.
    let shard = -1;
    const created = new Set<number>();
    for (let i = 0; shard < 0; i++) {
      assert.ok(created.size < TOTAL_SHARDS - 1 && i < 10_000, "no shard placed on n2 then n3");
      const key = Buffer.from(`k${i}`);
      const id = shardForKey(key, TOTAL_SHARDS);
      if (id === 0 || created.has(id)) continue;
      created.add(id);
      await c.call(c.kv, "Put", { key, value: Buffer.from("v") });
      const replicas = await viewUntil(one, `shard ${id} in n1's view`, (v) => {
        const s = v.shards.find((x) => x.id === id);
        return s !== undefined && s.replicas.length === 2 ? s.replicas : undefined;
      });
      if (replicas[0] === "n2" && replicas[1] === "n3") shard = id;
    }
    // n3 leads it (its preferred leader from now on, n2 still first-ranked): n2's read barrier
    // asks n3 for the read index, and waits for its answer.
    await transferLeader(addresses[1] as string, shard, "n3");
    await viewUntil(two, `n2 follows n3 in shard ${shard}`, (v) =>
      v.shards.find((x) => x.id === shard)?.leader === "n3" ? true : undefined,
    );
    const ranked = one.views.current().shards.find((x) => x.id === shard)?.replicas;
    assert.deepEqual(ranked, ["n2", "n3"], `shard ${shard}'s replicas in rank order`);

    const paused = n3 as ServerProcess;
    paused.proc.kill("SIGSTOP");
    try {
      const asked = new Promise<Share>((resolve) => {
        arrived = (share) => {
          if (share.ids.includes(shard)) resolve(share);
        };
      });
      let call: ClientUnaryCall | undefined;
      const scanned = new Promise<ServiceError | null>((resolve) => {
        const kv = c.kv as unknown as {
          Scan(
            req: object,
            options: object,
            cb: (err: ServiceError | null) => void,
          ): ClientUnaryCall;
        };
        call = kv.Scan(
          { start: Buffer.alloc(0), consistency: "LINEARIZABLE" },
          { deadline: Date.now() + SCAN_DEADLINE_MS },
          (err) => resolve(err),
        );
      });
      const share = await within(`n2 asked for shard ${shard}`, 5_000, asked);
      const early = await Promise.race([share.ended, Promise.resolve(null)]);
      assert.equal(early, null, "n2's share ended before the client cancelled");

      const cancelledAt = performance.now();
      call?.cancel();
      const err = await within("the client's call ended", PROMPT_MS, scanned);
      assert.equal(err?.code, status.CANCELLED);
      // n2 heard its call cancelled: its share ended then, not at the Scan's deadline.
      const { at, outcome } = await within(
        `n2's share of the Scan ended once the client cancelled (its deadline: ${SCAN_DEADLINE_MS} ms)`,
        PROMPT_MS,
        share.ended,
      );
      assert.ok(outcome instanceof Error, "n2's share answered, with n3 paused");
      assert.equal(outcome.name, "ReadCancelledError", outcome.message);
      assert.ok(at - cancelledAt < PROMPT_MS);
    } finally {
      paused.proc.kill("SIGCONT");
    }
  });
});

/**
 * The first seed's founding (ClusterState.bootstrapLoop) against a cluster that already exists:
 * a first seed restarted on a wiped (or replaced) data directory knows no cluster, and with
 * `bootstrap_expect` 1 (a cluster founded on one node and grown by joins, docs/operations.md
 * "Running a cluster") it sees enough members at once, itself, before gossip has reached any
 * other. It must ask its other seeds for their cluster id first, as it asks the members gossip
 * shows it: one that carries an id means the cluster exists, and a second one founded beside it
 * would serve its own, empty, copy of the data (split brain). A seed that does not answer (not
 * started yet) or carries no id holds nothing back. Nor may it found while another node is a
 * first seed too (nodes given their seeds in different orders): both would found, each its own
 * cluster on the same voters. The other seed is a real Meta service on loopback.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { MessageChannel } from "node:worker_threads";
import { RpcServer } from "../../src/api/index.ts";
import { ClusterViewPublisher, type MetaMember } from "../../src/cluster/index.ts";
import { loadConfig } from "../../src/config/index.ts";
import type { Membership } from "../../src/membership/index.ts";
import { ClusterState } from "../../src/node/cluster.ts";
import {
  MetaShare,
  shardCellMeta,
  shareMemberStanding,
  Sibling,
  type SiblingHandlers,
} from "../../src/node/siblings.ts";
import { CairnMetrics, type Logger, silentLogger } from "../../src/ops/index.ts";
import type { MultiRaft } from "../../src/replication/index.ts";
import { FollowerStore, LIMITS, TOTAL_SHARDS } from "../api/forward-support.ts";
import { freePort } from "../support/ports.ts";

const SELF: MetaMember = { id: "n1", rpcAddr: "127.0.0.1:7001", httpAddr: "127.0.0.1:8001" };

/**
 * A running seed's Meta service, its view carrying `clusterId` ("" : none yet) and whether it
 * advertises its own seed_nodes[0].
 */
async function seed(
  clusterId: string,
  firstSeed = false,
  incarnation = "inc-n2",
): Promise<{ address: string; server: RpcServer }> {
  const views = new ClusterViewPublisher(TOTAL_SHARDS, { minIntervalMs: 0 });
  views.setClusterId(clusterId);
  views.setFirstSeed(firstSeed);
  views.setIncarnation(incarnation);
  const server = new RpcServer({
    address: "127.0.0.1:0",
    nodeId: "n2",
    store: new FollowerStore(null),
    metrics: new CairnMetrics({ nodeId: "n2" }),
    views,
    logger: silentLogger,
    limits: LIMITS,
    maxMessageBytes: 4 * 1024 * 1024,
  });
  return { address: `127.0.0.1:${(await server.start()).port}`, server };
}

/**
 * Runs n1's founding loop once, as the first seed with `bootstrap_expect` 1 and `otherSeed` as
 * its second seed, gossip showing no member yet (or with `bootstrap_expect` 2 and gossip showing
 * n2 alive at `otherSeed`, with `alive`): resolves with "founded" when it founded the cluster,
 * else with its reason for not founding. Its seeds name it `firstSeed` (its address as written).
 */
async function firstPass(
  otherSeed: string,
  alive = false,
  firstSeed = SELF.rpcAddr,
): Promise<string> {
  const n2 = { id: "n2", rpcAddr: otherSeed, httpAddr: "127.0.0.1:8002" };
  return foundingOutcome({
    seeds: `${firstSeed},${otherSeed}`,
    bootstrapExpect: alive ? 2 : 1,
    // Founding on n1 alone at once: these passes ask seeds, not gossip (FOUNDING_LISTEN_MS).
    listenMs: 0,
    members: () => (alive ? [{ state: "alive", meta: n2 }] : []),
    firstSeed,
  });
}

/**
 * Runs n1's founding loop (ClusterState.bootstrapLoop) with these seeds, `bootstrap_expect`,
 * founding listen time and gossip members, until it founds the cluster ("founded") or logs a
 * reason not to that `decides` accepts (any, by default); resolves with that outcome. With
 * `firstSeed`, checks first that n1's view shows it is a first seed.
 */
async function foundingOutcome(o: {
  readonly seeds: string;
  readonly bootstrapExpect: number;
  readonly listenMs: number | undefined;
  readonly members: () => unknown[];
  readonly decides?: (reason: string) => boolean;
  readonly firstSeed?: string;
}): Promise<string> {
  const config = loadConfig({
    env: {
      CAIRN_NODE_ID: "n1",
      CAIRN_SEED_NODES: o.seeds,
      CAIRN_CLUSTER_BOOTSTRAP_EXPECT: String(o.bootstrapExpect),
    },
  });
  let decided: (outcome: string) => void = () => undefined;
  const decision = new Promise<string>((resolve) => (decided = resolve));
  const log: Logger = {
    ...silentLogger,
    info: (message, fields) => {
      const reason = String(fields?.["reason"]);
      if (message === "not founding the cluster" && (o.decides?.(reason) ?? true)) {
        decided(reason);
      }
    },
    child: () => log,
  };
  const views = new ClusterViewPublisher(TOTAL_SHARDS);
  const cs = new ClusterState(
    config,
    log,
    views,
    "inc-n1-wiped",
    () => undefined,
    undefined,
    undefined,
    o.listenMs,
  );
  cs.setSelf(SELF);
  if (o.firstSeed !== undefined) {
    await Promise.resolve(); // the view is rebuilt in a microtask
    assert.equal(views.current().first_seed, true, `n1 shows it is a first seed (${o.firstSeed})`);
  }
  const store = {
    foundShard: () => {
      decided("founded");
      return Promise.resolve();
    },
  } as unknown as MultiRaft;
  const membership = { members: o.members } as unknown as Membership;
  let stopped = false;
  const loop = cs.bootstrapLoop(store, membership, SELF, () => stopped);
  const outcome = await decision;
  stopped = true;
  cs.close();
  await loop;
  return outcome;
}

describe("the first seed's founding", () => {
  let running: { address: string; server: RpcServer }[] = [];
  before(() => {
    running = [];
  });
  after(async () => {
    await Promise.all(running.map((s) => s.server.close(1000)));
  });

  it(
    "does not found a second cluster when another seed already carries a cluster id",
    { timeout: 10_000 },
    async () => {
      const other = await seed("c-old");
      running.push(other);
      const outcome = await firstPass(other.address);
      assert.notEqual(outcome, "founded", "a wiped first seed founded a second cluster");
      assert.match(outcome, /c-old/);
    },
  );

  it(
    "founds when its other seeds carry no cluster id or do not answer (not started yet)",
    { timeout: 10_000 },
    async () => {
      const fresh = await seed("");
      running.push(fresh);
      assert.equal(await firstPass(fresh.address), "founded");
      assert.equal(await firstPass(`127.0.0.1:${await freePort()}`), "founded");
    },
  );

  it(
    "founds when its first seed names it in another spelling of its address",
    { timeout: 10_000 },
    async () => {
      const fresh = await seed("");
      running.push(fresh);
      // n1 advertises 127.0.0.1:7001.
      for (const first of ["[::ffff:127.0.0.1]:7001", "[::FFFF:7F00:1]:7001", "localhost:7001"]) {
        assert.equal(await firstPass(fresh.address, false, first), "founded", first);
      }
    },
  );

  it(
    "does not found while another node is a first seed too (seeds listed in different orders)",
    { timeout: 10_000 },
    async () => {
      const other = await seed("", true);
      running.push(other);
      // As a seed n1 asks, and as a member gossip shows alive: both would have founded.
      for (const alive of [false, true]) {
        const outcome = await firstPass(other.address, alive);
        assert.notEqual(outcome, "founded", "two first seeds, two clusters");
        assert.match(outcome, /same seed_nodes, in the same order/);
      }
    },
  );

  it(
    "founds when the other first seed it reaches is itself under another address",
    { timeout: 10_000 },
    async () => {
      // Its own incarnation: n1 listed twice in its seeds (a name and an address, say).
      const self = await seed("", true, "inc-n1-wiped");
      running.push(self);
      assert.equal(await firstPass(self.address), "founded");
    },
  );
});

describe("the first seed's founding when it is its joiners' only seed", () => {
  /**
   * n1, the first seed, restarted on a wiped data directory with `bootstrap_expect` 1 and no
   * other seed: the cluster founded on it and grown by joins whose members list only n1 as
   * their seed (docs/operations.md, "Running a cluster"). No seed can be asked, and gossip has
   * not reached it yet as it starts: the running members reach it only once their SWIM pings it
   * (or re-contacts its seed, every 30 s). Here gossip shows n2, a member of cluster c-old, from
   * the loop's second look on. Resolves with "founded", or with the reason that names c-old.
   */
  async function wipedOnlySeed(listenMs: number | undefined, n2Address: string): Promise<string> {
    const n2 = { id: "n2", rpcAddr: n2Address, httpAddr: "127.0.0.1:8002" };
    let looks = 0;
    return foundingOutcome({
      seeds: SELF.rpcAddr,
      bootstrapExpect: 1,
      listenMs,
      members: () => (looks++ === 0 ? [] : [{ state: "alive", meta: n2 }]),
      decides: (reason) => reason.includes("c-old"),
    });
  }

  let running: { address: string; server: RpcServer }[] = [];
  before(() => {
    running = [];
  });
  after(async () => {
    await Promise.all(running.map((s) => s.server.close(1000)));
  });

  it(
    "listens for the running cluster's members before founding it on itself alone",
    { timeout: 10_000 },
    async () => {
      const other = await seed("c-old");
      running.push(other);
      const outcome = await wipedOnlySeed(undefined, other.address);
      assert.notEqual(outcome, "founded", "a wiped first seed founded a second cluster");
      assert.match(outcome, /member n2 already carries cluster id c-old/);
    },
  );

  it("founds on itself alone once it has listened that long", { timeout: 10_000 }, async () => {
    assert.equal(await wipedOnlySeed(0, `127.0.0.1:${await freePort()}`), "founded");
  });
});

describe("the first seed's founding on a node of shard workers", () => {
  it(
    "every worker refuses its clients with worker 0's reason for not founding yet",
    { timeout: 10_000 },
    async () => {
      // Worker 0 runs the founding (and the join); worker 1 gates the clients' calls on its
      // own connections by its own ClusterState, which never ran either: a client whose
      // connection landed there read that the node was asking its seeds to admit it, while the
      // first seed was waiting for its members to found the cluster.
      const config = loadConfig({
        env: {
          CAIRN_NODE_ID: "n1",
          CAIRN_SEED_NODES: SELF.rpcAddr,
          CAIRN_CLUSTER_BOOTSTRAP_EXPECT: "3",
        },
      });
      let decided: () => void = () => undefined;
      const notFounding = new Promise<void>((resolve) => (decided = resolve));
      const log: Logger = {
        ...silentLogger,
        info: (message) => {
          if (message === "not founding the cluster") decided();
        },
        child: () => log,
      };
      const state = (logger: Logger): ClusterState =>
        new ClusterState(
          config,
          logger,
          new ClusterViewPublisher(TOTAL_SHARDS),
          "inc-n1",
          () => undefined,
          undefined,
          undefined,
          0,
        );
      const cs0 = state(log);
      const cs1 = state(silentLogger);
      cs0.setSelf(SELF);
      cs1.setSelf(SELF);
      // A later message on the same port: once it is in, so is what worker 0 sent before it.
      let marker = (): void => {};
      const handlers: SiblingHandlers = {
        serve: () => Promise.reject(new Error("not asked")),
        onView: () => {},
        onConnection: () => {},
        onMeta: () => {},
        onDecommissioned: () => {},
        onAdmission: () => {},
        onStreamAddress: () => marker(),
      };
      const { port1, port2 } = new MessageChannel();
      const to1 = new Sibling(port1, handlers, { requestTimeoutMs: 10_000 });
      const share1 = new MetaShare([null, null]);
      const to0 = new Sibling(
        port2,
        { ...handlers, onAdmission: (admission) => share1.receivedAdmission(admission) },
        { requestTimeoutMs: 10_000 },
      );
      let stopped = false;
      let loop: Promise<void> = Promise.resolve();
      try {
        // As node.ts wires each worker's ClusterState to its ShardCell.
        shareMemberStanding(
          cs0,
          shardCellMeta(new MetaShare([null, to1]), [null, to1], "inc-n1"),
          0,
        );
        shareMemberStanding(cs1, shardCellMeta(share1, [to0, null], "inc-n1"), 1);
        const store = { foundShard: () => assert.fail("founded on one of three") };
        const membership = { members: () => [] } as unknown as Membership;
        loop = cs0.bootstrapLoop(store as unknown as MultiRaft, membership, SELF, () => stopped);
        await notFounding;
        const why = cs0.notServingReason();
        assert.match(
          why ?? "",
          /the first seed, which founds the cluster, and has not yet: waiting for members: 1 of bootstrap_expect 3 seen/,
        );
        const arrived = new Promise<void>((resolve) => (marker = resolve));
        to1.shareStreamAddress("127.0.0.1:1");
        await arrived;
        assert.equal(cs1.notServingReason(), why, "worker 1 refuses with worker 0's reason");
      } finally {
        stopped = true;
        cs0.close();
        cs1.close();
        await loop;
        to0.close();
        to1.close();
      }
    },
  );
});

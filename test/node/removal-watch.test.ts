/**
 * A decommissioned member still running learns from its peers' views that it was removed, and
 * stops (src/node/removal-watch.ts, ClusterState.removalLoop). The real processes' case is in
 * test/e2e/cluster-elastic.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MessageChannel } from "node:worker_threads";
import type { CairnError } from "../../src/common/errors.ts";
import {
  ClusterViewPublisher,
  type MetaCommand,
  type MemberState,
  type MetaMember,
} from "../../src/cluster/index.ts";
import { loadConfig } from "../../src/config/index.ts";
import type { MemberView } from "../../src/membership/index.ts";
import { incarnation, memberId } from "../../src/membership/core/index.ts";
import { AWAY_CHECKS_MS, ClusterState, type MemberProbe } from "../../src/node/cluster.ts";
import { peersToAsk, REMOVAL_PROBES, removedByViews } from "../../src/node/removal-watch.ts";
import { silentLogger } from "../../src/ops/index.ts";
import {
  MetaShare,
  shardCellMeta,
  shareMemberStanding,
  Sibling,
  type SiblingHandlers,
} from "../../src/node/siblings.ts";
import { metaStateOf } from "./meta-fixtures.ts";

const view = (...members: string[]): MemberProbe => ({
  clusterId: "c1",
  incarnation: "i",
  firstSeed: false,
  members,
});

describe("removedByViews", () => {
  it("says removed only when the views that answered leave the member out, two of them at least", () => {
    assert.equal(removedByViews("n2", "c1", 3, [view("n1", "n3"), view("n1", "n3")]), true);
    assert.equal(removedByViews("n2", "c1", 3, [view("n1", "n3"), undefined, view("n3")]), true);
    // One view of three asked is not enough; one of one is.
    assert.equal(removedByViews("n2", "c1", 3, [view("n1", "n3"), undefined, undefined]), false);
    assert.equal(removedByViews("n2", "c1", 1, [view("n1")]), true);
    // A view that lists it wins.
    assert.equal(
      removedByViews("n2", "c1", 3, [view("n1", "n3"), view("n1", "n3"), view("n2")]),
      false,
    );
    // Views of another cluster, none yet, and peers that stream none say nothing.
    assert.equal(
      removedByViews("n2", "c1", 2, [
        { clusterId: "c2", members: [] },
        { clusterId: "", members: [] },
      ]),
      false,
    );
    assert.equal(removedByViews("n2", "c1", 2, [{ clusterId: "c1" }, { clusterId: "c1" }]), false);
    assert.equal(removedByViews("n2", "c1", 0, []), false);
  });

  it("asks live peers only, a few at most", () => {
    const m = (id: string, state: MemberView["state"]): MemberView => ({
      meta: { id: memberId(id), rpcAddr: `addr-${id}`, httpAddr: "", totalShards: 1024 },
      state,
      incarnation: incarnation(1),
    });
    const peers = peersToAsk("n2", [
      m("n1", "alive"),
      m("n2", "alive"),
      m("n3", "dead"),
      m("n4", "suspect"),
      m("n5", "alive"),
      m("n6", "alive"),
      m("n7", "alive"),
    ]);
    assert.equal(REMOVAL_PROBES, 3);
    assert.deepEqual(peers, [
      { id: "n1", rpcAddr: "addr-n1" },
      { id: "n5", rpcAddr: "addr-n5" },
      { id: "n6", rpcAddr: "addr-n6" },
    ]);
  });

  it("asks the members its state has serving views first, and other peers on the next turns", () => {
    const m = (id: string): MemberView => ({
      meta: { id: memberId(id), rpcAddr: `addr-${id}`, httpAddr: "", totalShards: 1024 },
      state: "alive",
      incarnation: incarnation(1),
    });
    const members = ["n1", "n3", "n4", "n5", "n6", "n7"].map(m);
    const states: Record<string, MemberState> = {
      n1: "decommissioned",
      n3: "joining",
      n4: "active",
      n6: "decommissioning",
      n7: "removed",
    };
    const ids = (turn: number): string[] =>
      peersToAsk("n2", members, (id) => states[id], turn).map((p) => p.id);
    // Active and decommissioning first, then n5 (not in its state), then joining, then gone.
    assert.deepEqual(ids(0), ["n4", "n6", "n5"]);
    assert.deepEqual(ids(1), ["n3", "n1", "n7"]);
    assert.deepEqual(ids(2), ["n4", "n6", "n5"]);
  });
});

describe("ClusterState.removalLoop", () => {
  const member = (i: number): MetaMember => ({
    id: `n${i}`,
    rpcAddr: `127.0.0.1:700${i}`,
    httpAddr: `127.0.0.1:800${i}`,
  });
  const boot: MetaCommand = {
    op: "bootstrap",
    clusterId: "c1",
    totalShards: 1024,
    replicationFactor: 3,
    members: [member(1), member(3), member(4)],
  };
  // n2 joined after the founding: it holds no replica of the meta group (shard 0).
  const joined: MetaCommand[] = [
    { op: "join", member: { ...member(2), incarnation: "inc-a" } },
    { op: "set-state", id: "n2", state: "active" },
  ];
  const config = loadConfig({
    env: { CAIRN_NODE_ID: "n2", CAIRN_SEED_NODES: "127.0.0.1:7001" },
  });
  /** Gossip with members n1 to n`count` alive. */
  const gossipOf = (count: number) => ({
    members: (): MemberView[] =>
      Array.from({ length: count }, (_, k) => k + 1).map((i) => ({
        meta: {
          id: memberId(`n${i}`),
          rpcAddr: `127.0.0.1:700${i}`,
          httpAddr: `127.0.0.1:800${i}`,
          totalShards: 1024,
        },
        state: "alive",
        incarnation: incarnation(1),
      })),
  });
  const gossip = gossipOf(4);
  function node(): { cs: ClusterState; lost: CairnError[] } {
    const lost: CairnError[] = [];
    const cs = new ClusterState(
      config,
      silentLogger,
      new ClusterViewPublisher(1024),
      "inc-a",
      (err) => lost.push(err),
    );
    return { cs, lost };
  }

  it("asks nobody while the node is a member that follows its cluster", async () => {
    const { cs, lost } = node();
    cs.applied(metaStateOf(boot, ...joined));
    let probes = 0;
    let passes = 0;
    await cs.removalLoop(gossip, () => ++passes > 5, {
      intervalMs: 1,
      probe: () => {
        probes++;
        return Promise.resolve(view("n1", "n2", "n3", "n4"));
      },
    });
    assert.equal(probes, 0);
    assert.deepEqual(lost, []);
  });

  it("after it was away for dead_after_ms (paused), an active node asks its peers' views, and stops once they show it removed", async () => {
    // n2 was paused (SIGSTOP, a frozen VM) long enough to be marked dead; its replicas were
    // re-created elsewhere and an operator removed it. Its own state, out of the meta group
    // once dead, still says active: it ran on for good, its /health/quick 200.
    const { cs, lost } = node();
    cs.applied(metaStateOf(boot, ...joined));
    const deadAfter = config.cluster.dead_after_ms;
    let t = 0;
    let calls = 0;
    let probes = 0;
    await cs.removalLoop(
      gossip,
      () => {
        calls++;
        // The second pass's wake-up: a sleep that long late.
        if (calls === 4) t += deadAfter + 1;
        return lost.length > 0 || calls > 40;
      },
      {
        intervalMs: 1,
        now: () => t,
        probe: () => {
          probes++;
          return Promise.resolve(view("n1", "n3", "n4"));
        },
      },
    );
    assert.ok(probes > 0, "it asked once it was back");
    assert.equal(lost.length, 1);
    assert.equal(lost[0]?.code, "CAIRN_ERR_NODE_REMOVED");
    assert.match(lost[0]?.message ?? "", /member n2 was removed from cluster c1/);
  });

  it("after it was away, an active node its peers' views list goes on, and stops asking a while later", async () => {
    const { cs, lost } = node();
    cs.applied(metaStateOf(boot, ...joined));
    let t = 0;
    let calls = 0;
    let probes = 0;
    let probesAtEnd = 0;
    await cs.removalLoop(
      gossip,
      () => {
        calls++;
        if (calls === 4) t += config.cluster.dead_after_ms + 1;
        // Past the checks' window (a moment, not another absence): the probes stop.
        if (calls === 20) {
          t += AWAY_CHECKS_MS + 1;
          probesAtEnd = probes;
        }
        return calls > 40;
      },
      {
        intervalMs: 1,
        now: () => t,
        probe: () => {
          probes++;
          return Promise.resolve(view("n1", "n2", "n3", "n4"));
        },
      },
    );
    assert.deepEqual(lost, []);
    assert.ok(probesAtEnd > 0, "it asked");
    assert.ok(probes <= probesAtEnd + 3, `${probes - probesAtEnd} probes past the window`);
  });

  it("stops a decommissioned node once its peers' views no longer list it, once", async () => {
    const { cs, lost } = node();
    cs.applied(
      metaStateOf(
        boot,
        ...joined,
        { op: "set-state", id: "n2", state: "decommissioning" },
        { op: "set-state", id: "n2", state: "decommissioned" },
      ),
    );
    const asked: string[][] = [];
    let pass = 0;
    const answers: Record<string, MemberProbe | undefined>[] = [
      // Decommissioned, not removed: listed.
      { n1: view("n1", "n2", "n3", "n4"), n3: view("n1", "n2", "n3", "n4"), n4: undefined },
      // One view without it, the others silent: not enough.
      { n1: view("n1", "n3", "n4"), n3: undefined, n4: undefined },
      // Removed.
      { n1: view("n1", "n3", "n4"), n3: view("n1", "n3", "n4"), n4: undefined },
    ];
    await cs.removalLoop(gossip, () => pass > 10, {
      intervalMs: 1,
      probe: (address, id) => {
        if (id === "n1") asked.push([]);
        asked.at(-1)?.push(`${id}@${address}`);
        const round = answers[Math.min(asked.length - 1, answers.length - 1)];
        if (id === "n4") pass++;
        return Promise.resolve(round?.[id]);
      },
    });
    assert.equal(asked.length, 3, "it stopped asking once it knew");
    assert.deepEqual(asked[0], ["n1@127.0.0.1:7001", "n3@127.0.0.1:7003", "n4@127.0.0.1:7004"]);
    assert.equal(lost.length, 1);
    assert.equal(lost[0]?.code, "CAIRN_ERR_NODE_REMOVED");
    assert.match(
      lost[0]?.message ?? "",
      /member n2 was removed from cluster c1 \(the views of n1, n3/,
    );
  });
  it("a node of shard workers: the workers without shard 0 stop serving too once worker 0 learns a decommission its meta replica never applied", async () => {
    // Worker 0 runs the loop that asks the peers' views; worker 1 follows worker 0's meta
    // state, which never says so either, and gates the clients' calls on its connections by
    // its own ClusterState: it went on serving them.
    const { port1, port2 } = new MessageChannel();
    const cs0 = node().cs;
    const cs1 = node().cs;
    const share1 = new MetaShare([null, null]);
    // A later message on the same port: once it is in, so is what worker 0 sent before it.
    let marker = (): void => {};
    const handlers = (onDecommissioned: () => void): SiblingHandlers => ({
      serve: () => Promise.reject(new Error("not asked")),
      onView: () => {},
      onConnection: () => {},
      onMeta: () => {},
      onDecommissioned,
      onAdmission: () => {},
      onStreamAddress: () => marker(),
    });
    const to1 = new Sibling(
      port1,
      handlers(() => {}),
      { requestTimeoutMs: 10_000 },
    );
    const to0 = new Sibling(
      port2,
      handlers(() => share1.receivedDecommissioned()),
      { requestTimeoutMs: 10_000 },
    );
    const worker0 = new MetaShare([null, to1]);
    try {
      // As node.ts wires each worker's ClusterState to its ShardCell.
      shareMemberStanding(cs0, shardCellMeta(worker0, [null, to1], "inc-a"), 0);
      shareMemberStanding(cs1, shardCellMeta(share1, [to0, null], "inc-a"), 1);
      const state = metaStateOf(boot, ...joined, {
        op: "set-state",
        id: "n2",
        state: "decommissioning",
      });
      cs0.applied(state);
      cs1.applied(state);
      const listed: MemberProbe = { ...view("n1", "n2", "n3", "n4"), decommissioned: ["n2"] };
      let passes = 0;
      await cs0.removalLoop(gossip, () => cs0.notServingReason() !== null || ++passes > 20, {
        intervalMs: 1,
        probe: () => Promise.resolve(listed),
      });
      assert.match(cs0.notServingReason() ?? "", /node n2 was decommissioned from cluster c1/);
      const arrived = new Promise<void>((resolve) => (marker = resolve));
      to1.shareStreamAddress("127.0.0.1:1");
      await arrived;
      assert.match(
        cs1.notServingReason() ?? "",
        /node n2 was decommissioned from cluster c1/,
        "worker 1 serves no requests either",
      );
      assert.notEqual(cs1.staleViewReason(), null, "nor streams its cluster view");
    } finally {
      to0.close();
      to1.close();
    }
  });

  it("learns from its peers' views a decommission it never applied (its meta replica left first), then its removal", async () => {
    // The meta leader applied n2's `decommissioned`, then removed n2's learner of the meta
    // group; n2, cut off meanwhile, never learnt that commit: its own state still says
    // decommissioning, with no replica left.
    const { cs, lost } = node();
    cs.applied(
      metaStateOf(boot, ...joined, { op: "set-state", id: "n2", state: "decommissioning" }),
    );
    assert.equal(cs.notServingReason(), null);
    const listed = (decommissioned: string[]): MemberProbe => ({
      ...view("n1", "n2", "n3", "n4"),
      decommissioned,
    });
    const answers: MemberProbe[][] = [
      // Still decommissioning in its peers' views: nothing changes.
      [view("n1", "n2", "n3", "n4"), view("n1", "n2", "n3", "n4"), view("n1", "n2", "n3", "n4")],
      // Decommissioned in one view, decommissioning in another: not yet.
      [listed(["n2"]), view("n1", "n2", "n3", "n4"), listed(["n2"])],
      // Decommissioned in every view that answered.
      // (n4 streams no view: it says nothing.)
      [listed(["n2"]), listed(["n2"]), { clusterId: "c1", incarnation: "i", firstSeed: false }],
      // Removed.
      [view("n1", "n3", "n4"), view("n1", "n3", "n4"), view("n1", "n3", "n4")],
    ];
    const refusals: (string | null)[] = [];
    let round = -1;
    let passes = 0;
    await cs.removalLoop(gossip, () => lost.length > 0 || ++passes > 20, {
      intervalMs: 1,
      probe: (_address, id) => {
        if (id === "n1") {
          round++;
          refusals.push(cs.notServingReason());
        }
        const i = ["n1", "n3", "n4"].indexOf(id);
        return Promise.resolve(answers[Math.min(round, answers.length - 1)]?.[i]);
      },
    });
    // The refusal as each round started: serving until the third round's views.
    assert.deepEqual(refusals.slice(0, 3), [null, null, null]);
    assert.match(refusals[3] ?? "", /node n2 was decommissioned from cluster c1/);
    assert.equal(round, 3, "it stopped at the views that leave it out");
    assert.equal(lost[0]?.code, "CAIRN_ERR_NODE_REMOVED");
  });

  it("learns its removal from other peers when the first it asks never answer with a view", async () => {
    // Seven members: n2 decommissioned; n1, n3 and n4, the first in id order, were decommissioned
    // after n2's state was taken (its state has them active), so they refuse views.
    const { cs, lost } = node();
    cs.applied(
      metaStateOf(
        boot,
        ...joined,
        ...[5, 6, 7].flatMap((i): MetaCommand[] => [
          { op: "join", member: { ...member(i), incarnation: `inc-${i}` } },
          { op: "set-state", id: `n${i}`, state: "active" },
        ]),
        { op: "set-state", id: "n2", state: "decommissioning" },
        { op: "set-state", id: "n2", state: "decommissioned" },
      ),
    );
    const seven = gossipOf(7);
    const refusing = new Set(["n1", "n3", "n4"]);
    const asked = new Set<string>();
    let probes = 0;
    await cs.removalLoop(seven, () => lost.length > 0 || probes > 60, {
      intervalMs: 1,
      probe: (_address, id) => {
        probes++;
        asked.add(id);
        return Promise.resolve(
          refusing.has(id)
            ? { clusterId: "c1", incarnation: "i", firstSeed: false }
            : view("n1", "n3", "n4", "n5", "n6", "n7"),
        );
      },
    });
    assert.equal(lost[0]?.code, "CAIRN_ERR_NODE_REMOVED");
    assert.ok(asked.has("n5") && asked.has("n6"), [...asked].join(", "));
  });
});

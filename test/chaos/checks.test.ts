/**
 * The chaos harness's own checks on hand-made histories: scan pages projected on keys (items
 * found, covered keys absent), serializable reads (stale is fine; a value never written, a
 * version that is not its write's, a replica going back, are not), lost acknowledged writes,
 * and the placement after a run (three distinct active replicas, one group, no move pending).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  checkRegisterHistory,
  type RegisterInput,
  type RegisterOutput,
} from "../support/linearizability.ts";
import {
  checkPlacement,
  checkSerializableReads,
  lostWrites,
  type PlacementView,
  toRegisterHistory,
} from "./checks.ts";
import type { ChaosOp, OpKind, ScanPage } from "./workload.ts";

let ids = 0;
function op(
  kind: OpKind,
  key: string | null,
  invoke: number,
  returnTime: number | null,
  input: RegisterInput | null,
  output: RegisterOutput | null,
  extra: {
    node?: string;
    outcome?: ChaosOp["outcome"];
    scan?: ScanPage;
    /** The node that served it (incarnation 1); by default, a Get answered OK by the node called. */
    servedBy?: string | null;
  } = {},
): ChaosOp {
  const outcome = extra.outcome ?? (output === null ? "info" : "ok");
  const servedBy =
    extra.servedBy !== undefined
      ? extra.servedBy
      : outcome === "ok" && (kind === "get" || kind === "get-serializable")
        ? (extra.node ?? "n1")
        : null;
  return {
    id: ids++,
    client: 0,
    node: extra.node ?? "n1",
    incarnation: 1,
    kind,
    key,
    input,
    invoke,
    returnTime,
    outcome,
    output,
    ...(extra.scan === undefined ? {} : { scan: extra.scan }),
    ...(servedBy === null ? {} : { served: { node: servedBy, incarnation: 1 } }),
  };
}

/** An acknowledged Put of `value` to key "k", at version `version`, invoked at `at` (ends at+1). */
function written(value: string, version: number, at: number): ChaosOp {
  return op(
    "put",
    "k",
    at,
    at + 1,
    { type: "put", value },
    { type: "written", version: v(version) },
  );
}

const v = (index: number) => ({ index, term: 1 });

describe("chaos checks", () => {
  it("projects a scan page on every key it covers, found or absent", () => {
    const history = toRegisterHistory(
      [
        op("put", "p/a", 0, 1, { type: "put", value: "x" }, { type: "written", version: v(1) }),
        op("scan", null, 2, 3, null, null, {
          outcome: "ok",
          scan: {
            after: null,
            upTo: "p/b",
            items: [{ key: "p/a", value: "x", version: v(1) }],
            active: ["p/a", "p/b", "p/c"],
          },
        }),
      ],
      "p/",
    );
    const reads = history.filter((o) => o.input.type === "get");
    assert.deepEqual(
      reads.map((o) => [o.key, o.output?.type]),
      [
        ["p/a", "found"],
        ["p/b", "absent"],
      ],
    );
    assert.equal(checkRegisterHistory(history).status, "ok");
  });

  it("catches a scan page that misses an acknowledged write", () => {
    const history = toRegisterHistory(
      [
        op("put", "p/b", 0, 1, { type: "put", value: "x" }, { type: "written", version: v(1) }),
        op("scan", null, 2, 3, null, null, {
          outcome: "ok",
          scan: { after: null, upTo: null, items: [], active: ["p/b"] },
        }),
      ],
      "p/",
    );
    assert.equal(checkRegisterHistory(history).status, "violation");
  });

  it("leaves failed operations and serializable reads out of the linearizability check", () => {
    const history = toRegisterHistory(
      [
        op("put", "k", 0, 1, { type: "put", value: "a" }, null, { outcome: "fail" }),
        op("get-serializable", "k", 2, 3, { type: "get" }, { type: "absent" }),
        op("put", "k", 4, null, { type: "put", value: "b" }, null),
      ],
      "",
    );
    assert.equal(history.length, 1);
    assert.equal(history[0]?.output, null);
    assert.equal(history[0]?.returnTime, null);
  });

  it("accepts stale serializable reads, but not invented, misversioned or regressing ones", () => {
    const w1 = written("a", 1, 0);
    const w2 = written("b", 2, 2);
    const stale = op(
      "get-serializable",
      "k",
      10,
      11,
      { type: "get" },
      { type: "found", value: "a", version: v(1) },
    );
    assert.deepEqual(checkSerializableReads([w1, w2, stale]), []);
    const ghost = op(
      "get-serializable",
      "k",
      10,
      11,
      { type: "get" },
      { type: "found", value: "zz", version: v(9) },
    );
    assert.match(checkSerializableReads([w1, ghost])[0]?.message ?? "", /no write wrote/);
    const wrongVersion = op(
      "get-serializable",
      "k",
      10,
      11,
      { type: "get" },
      { type: "found", value: "a", version: v(2) },
    );
    assert.match(checkSerializableReads([w1, wrongVersion])[0]?.message ?? "", /another version/);
    const failed = op("put", "k", 0, 1, { type: "put", value: "f" }, null, { outcome: "fail" });
    const readFailed = op(
      "get-serializable",
      "k",
      10,
      11,
      { type: "get" },
      { type: "found", value: "f", version: v(3) },
    );
    assert.match(checkSerializableReads([failed, readFailed])[0]?.message ?? "", /not applied/);
    const newer = op(
      "get-serializable",
      "k",
      12,
      13,
      { type: "get" },
      { type: "found", value: "b", version: v(2) },
    );
    const older = op(
      "get-serializable",
      "k",
      14,
      15,
      { type: "get" },
      { type: "found", value: "a", version: v(1) },
    );
    assert.match(checkSerializableReads([w1, w2, newer, older])[0]?.message ?? "", /back in time/);
    // On another node the older value is only stale.
    const elsewhere = op(
      "get-serializable",
      "k",
      14,
      15,
      { type: "get" },
      { type: "found", value: "a", version: v(1) },
      { node: "n2" },
    );
    assert.deepEqual(checkSerializableReads([w1, w2, newer, elsewhere]), []);
  });

  it("keys 'never back in time' on the node that served a read, not the node called (seed 207)", () => {
    // Seed 207: serializable Gets sent to n3 read version 340, then 329. Between the two, n3's
    // replica moved away; the second read was forwarded to n4, which was behind: allowed.
    const w1 = written("a", 329, 0);
    const w2 = written("b", 340, 2);
    const read = (value: string, index: number, at: number, servedBy: string | null): ChaosOp =>
      op(
        "get-serializable",
        "k",
        at,
        at + 1,
        { type: "get" },
        { type: "found", value, version: v(index) },
        { node: "n3", servedBy },
      );
    const newer = read("b", 340, 10, "n3");
    assert.deepEqual(checkSerializableReads([w1, w2, newer, read("a", 329, 12, "n4")]), []);
    // The same two reads served by one node: that node went back in time.
    const findings = checkSerializableReads([w1, w2, newer, read("a", 329, 12, "n3")]);
    assert.equal(findings.length, 1);
    assert.match(findings[0]?.message ?? "", /went back in time \(node n3, key k\)/);
    // Both served by n4 (called through n3): n4 went back in time.
    const viaN4 = checkSerializableReads([
      w1,
      w2,
      read("b", 340, 10, "n4"),
      read("a", 329, 12, "n4"),
    ]);
    assert.match(viaN4[0]?.message ?? "", /went back in time \(node n4, key k\)/);
    // A read whose serving node is unknown is left out of that check only: its value is checked.
    assert.deepEqual(checkSerializableReads([w1, w2, newer, read("a", 329, 12, null)]), []);
    const ghost = read("zz", 999, 12, null);
    assert.match(
      checkSerializableReads([w1, w2, newer, ghost])[0]?.message ?? "",
      /no write wrote/,
    );
  });

  it("names acknowledged writes the final reads do not show", () => {
    const w1 = written("a", 1, 0);
    const w2 = written("b", 2, 2);
    assert.deepEqual(lostWrites([w1, w2], new Map([["k", { value: "b", version: v(2) }]])), []);
    assert.equal(lostWrites([w1, w2], new Map([["k", { value: "a", version: v(1) }]])).length, 1);
    assert.equal(lostWrites([w1, w2], new Map([["k", null]])).length, 1);
    const del = op("delete", "k", 4, null, { type: "delete" }, null);
    assert.deepEqual(lostWrites([w1, w2, del], new Map([["k", null]])), []);
  });
});

describe("the placement after a run", () => {
  type Shard = PlacementView["shards"][number];
  const shard = (id: number, leader: string, replicas: string[], term = 5): Shard => ({
    id,
    leader,
    replicas,
    term,
  });
  /** Members n1..n4 active, with the replica counts given, in every view. */
  const view = (
    node: string,
    shards: Shard[],
    counts: Record<string, number>,
    states: Record<string, string> = {},
  ): PlacementView => ({
    node,
    nodes: Object.entries(counts).map(([id, replicas]) => ({
      id,
      member_state: states[id] ?? "active",
      replicas,
    })),
    shards,
  });
  const counts = { n1: 2, n2: 2, n3: 1, n4: 1 };
  // Shard 0 on n1, n2, n3; shard 1 on n1, n2, n4 (moved from n3, which keeps it dormant).
  const s0 = shard(0, "n1", ["n1", "n2", "n3"]);
  const s1 = shard(1, "n2", ["n1", "n2", "n4"], 7);
  const clean = (): PlacementView[] => [
    view("n1", [s0, s1], counts),
    view("n2", [s0, s1], counts),
    // n3 never learnt that it left shard 1's group: its dormant view is not a second group.
    view("n3", [s0, shard(1, "n3", ["n1", "n2", "n3"], 6)], counts),
    view("n4", [s1], counts),
  ];

  it("passes three distinct active replicas a shard, one group, the counts the groups give", () => {
    assert.deepEqual(checkPlacement(clean(), 3), []);
  });

  it("names a shard short of replicas, or with two on one node", () => {
    const views = clean();
    views[0] = view("n1", [s0, shard(1, "n1", ["n1", "n2"], 9)], counts);
    assert.match(checkPlacement(views, 3)[0]?.message ?? "", /shard 1 has replicas n1,n2/);
    views[0] = view("n1", [s0, shard(1, "n1", ["n1", "n2@b", "n2@c"], 9)], counts);
    assert.match(checkPlacement(views, 3)[0]?.message ?? "", /not 3 on distinct nodes/);
  });

  it("lets the meta group keep the voters it was founded on, down to the factor", () => {
    // Founded on five: its five voters (the allocator keeps them), or four once one was lost.
    const counts5 = { n1: 2, n2: 2, n3: 1, n4: 2, n5: 1 };
    const meta5 = shard(0, "n1", ["n1", "n2", "n3", "n4", "n5"]);
    const five = ["n1", "n2", "n3", "n4", "n5"].map((n) =>
      view(n, n === "n5" ? [meta5] : [meta5, s1], counts5),
    );
    assert.deepEqual(checkPlacement(five, 3, 5), []);
    // Founded on three, five voters is two too many (chaos seed 7400 with --nodes 5 found the
    // check asking three of a meta group founded on five).
    assert.match(
      checkPlacement(five, 3)[0]?.message ?? "",
      /shard 0 has replicas n1,n2,n3,n4,n5 .* not 3 on distinct nodes/,
    );
    const counts4 = { n1: 2, n2: 2, n3: 1, n4: 2 };
    const meta4 = shard(0, "n1", ["n1", "n2", "n4", "n4@b"]);
    assert.match(
      checkPlacement([view("n1", [meta4], counts4)], 3, 5)[0]?.message ?? "",
      /not 3 to 5 on distinct nodes/,
    );
    const meta2 = shard(0, "n1", ["n1", "n2"]);
    assert.match(
      checkPlacement([view("n1", [meta2], { n1: 1, n2: 1 })], 3, 5)[0]?.message ?? "",
      /not 3 to 5 on distinct nodes/,
    );
    // Any other shard: the factor, whatever the founding.
    const wide = shard(1, "n2", ["n1", "n2", "n3", "n4"], 7);
    assert.match(
      checkPlacement([view("n2", [wide], { n1: 1, n2: 1, n3: 1, n4: 1 })], 3, 5)[0]?.message ?? "",
      /shard 1 .* not 3 on distinct nodes/,
    );
  });

  it("names a replica on a member that is not active, and the member", () => {
    const dead = { n4: "dead" };
    const views = clean().map((v) => view(v.node, [...v.shards], counts, dead));
    const messages = checkPlacement(views, 3).map((f) => f.message);
    assert.ok(messages.some((m) => /member n4 is dead/.test(m)));
    assert.ok(messages.some((m) => /shard 1 has replicas on n4, not active/.test(m)));
  });

  it("names a move under way: the meta group's count is not the groups'", () => {
    const moving = { ...counts, n3: 2, n4: 0 };
    const views = clean().map((v) => view(v.node, [...v.shards], moving));
    const messages = checkPlacement(views, 3).map((f) => f.message);
    assert.ok(messages.some((m) => /member n3: the meta group places 2/.test(m)));
    assert.ok(messages.some((m) => /member n4: the meta group places 0/.test(m)));
  });

  it("names a member of a group that names other replicas (two groups)", () => {
    const views = clean();
    views[3] = view("n4", [shard(1, "n4", ["n2", "n3", "n4"], 6)], counts);
    assert.match(
      checkPlacement(views, 3)
        .map((f) => f.message)
        .join("\n"),
      /shard 1: n4 names replicas n2,n3,n4/,
    );
  });
});

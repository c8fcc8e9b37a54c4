import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  allocate,
  type BootstrapInput,
  BUILD_VERSION,
  decodeMetaCommand,
  encodeMetaCommand,
  type MetaCommand,
  type MetaMember,
  type MetaOutcome,
  type MetaRecord,
  MEMBER_STATES,
  MetaState,
  rendezvousReplicas,
  rendezvousWeight,
  shouldBootstrap,
  VERSION_DECOMMISSION_STAYS,
  VERSION_MOVE_ORIGIN,
  xxhash64,
} from "../../src/cluster/index.ts";
import { CairnError } from "../../src/common/errors.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

function member(id: string): MetaMember {
  return { id, rpcAddr: `${id}.example:7447`, httpAddr: `${id}.example:8080` };
}

const N1 = member("n1");
const N2 = member("n2");
const N3 = member("n3");
const N4 = member("n4");

const BOOT: MetaCommand = {
  op: "bootstrap",
  clusterId: "c-1",
  totalShards: 16,
  replicationFactor: 3,
  members: [N1, N2, N3],
};

function booted(): MetaState {
  return MetaState.empty().apply(BOOT).state;
}

/** `s` with shard 0 (founded on n1..n3) moved off n2, so that n2 may leave the cluster. */
function shardZeroOffN2(s: MetaState): MetaState {
  return s.apply({ op: "move-shard", shard: 0, from: ["n1", "n2", "n3"], nodes: ["n1", "n3"] })
    .state;
}

function keys(records: readonly MetaRecord[]): string[] {
  return records.map((r) => dec.decode(r.key));
}

/** Applies commands the way the state machine does: records written over a key-value map. */
function applyAll(cmds: readonly MetaCommand[]): { state: MetaState; stored: MetaRecord[] } {
  let state = MetaState.empty();
  const stored = new Map<string, MetaRecord>();
  for (const cmd of cmds) {
    const r = state.apply(cmd);
    state = r.state;
    for (const rec of r.records) stored.set(dec.decode(rec.key), rec);
  }
  return { state, stored: [...stored.values()] };
}

function assertMalformed(fn: () => unknown, code = "CAIRN_ERR_MALFORMED_COMMAND"): void {
  assert.throws(fn, (err: unknown) => err instanceof CairnError && err.code === code);
}

describe("meta commands: encoding", () => {
  it("round-trips every op", () => {
    const cmds: MetaCommand[] = [
      BOOT,
      { op: "create-shard", shard: 5, replicas: ["n2", "n1", "n3"] },
      { op: "set-member", member: { id: "n9", rpcAddr: "[::1]:7447", httpAddr: "10.0.0.9:80" } },
      { op: "set-disk", id: "n2", full: true },
      { op: "set-disk", id: "n2", full: false },
      { op: "set-build", id: "n2", build: 3 },
      { op: "set-version", version: 2 },
      { op: "join", member: { ...N4, incarnation: "i4", build: 2 } },
    ];
    for (const cmd of cmds) assert.deepEqual(decodeMetaCommand(encodeMetaCommand(cmd)), cmd);
  });

  it("starts with its format version and is canonical (field order does not matter)", () => {
    const a = encodeMetaCommand({ op: "create-shard", shard: 2, replicas: ["n1"] });
    const b = encodeMetaCommand({ replicas: ["n1"], shard: 2, op: "create-shard" } as MetaCommand);
    assert.equal(a[0], 1);
    assert.deepEqual(a, b);
  });

  it("refuses malformed input with CAIRN_ERR_MALFORMED_COMMAND", () => {
    const withVersion = (json: string): Uint8Array => new Uint8Array([1, ...enc.encode(json)]);
    const bad: Uint8Array[] = [
      new Uint8Array(),
      new Uint8Array([2, ...enc.encode('{"op":"set-member"}')]), // unknown version
      new Uint8Array([1, 0xff, 0xfe]), // not UTF-8
      withVersion("{"),
      withVersion("[]"),
      withVersion('{"op":"drop-table"}'),
      withVersion('{"op":"create-shard","shard":1.5,"replicas":["n1"]}'),
      withVersion('{"op":"create-shard","shard":0,"replicas":["n1"]}'),
      withVersion('{"op":"create-shard","shard":3,"replicas":["n1","n1"]}'),
      withVersion('{"op":"create-shard","shard":3,"replicas":[]}'),
      withVersion('{"op":"create-shard","shard":3,"replicas":["n1"],"extra":1}'),
      withVersion('{"op":"set-member","member":{"id":"","rpcAddr":"a:1","httpAddr":"a:2"}}'),
      withVersion('{"op":"set-member","member":{"id":"n1","rpcAddr":"a b:1","httpAddr":"a:2"}}'),
      withVersion('{"op":"set-disk","id":"n1","full":"yes"}'),
      withVersion('{"op":"set-disk","id":"","full":true}'),
      withVersion('{"op":"set-disk","id":"n1"}'),
      withVersion('{"op":"set-build","id":"n1","build":0}'),
      withVersion('{"op":"set-build","id":"n1","build":2.5}'),
      withVersion('{"op":"set-build","id":"n1","build":"2"}'),
      withVersion('{"op":"set-build","id":"","build":2}'),
      withVersion('{"op":"set-version","version":0}'),
      withVersion('{"op":"set-version","version":2147483648}'),
      withVersion('{"op":"set-version","version":2,"id":"n1"}'),
      // A member's build is its own report (set-build, or its join), never set-member's.
      withVersion(
        '{"op":"set-member","member":{"id":"n1","rpcAddr":"a:1","httpAddr":"a:2","build":2}}',
      ),
      // A member's own record says set-disk's: never through set-member, never false.
      withVersion(
        '{"op":"set-member","member":{"id":"n1","rpcAddr":"a:1","httpAddr":"a:2","diskFull":true}}',
      ),
      withVersion(
        '{"op":"set-member","member":{"id":"n1","rpcAddr":"a:1","httpAddr":"a:2","diskFull":false}}',
      ),
      withVersion(
        '{"op":"bootstrap","clusterId":"c","totalShards":0,"replicationFactor":3,"members":[]}',
      ),
      withVersion(
        JSON.stringify({ ...BOOT, members: [N1, N1] }), // the same member twice
      ),
    ];
    for (const data of bad) assertMalformed(() => decodeMetaCommand(data));
    assertMalformed(() => encodeMetaCommand({ op: "create-shard", shard: -1, replicas: ["n1"] }));
  });

  it("never throws anything but a CairnError on arbitrary bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (data) => {
        try {
          decodeMetaCommand(data);
        } catch (err) {
          assert.ok(err instanceof CairnError && err.code === "CAIRN_ERR_MALFORMED_COMMAND");
        }
      }),
    );
  });
});

describe("meta state: apply", () => {
  it("bootstraps once, recording shard 0 on the bootstrap members", () => {
    const r = MetaState.empty().apply(BOOT);
    assert.deepEqual(r.outcome, { kind: "bootstrapped", clusterId: "c-1" });
    assert.deepEqual(keys(r.records), [
      "meta/cluster",
      "meta/member/n1",
      "meta/member/n2",
      "meta/member/n3",
      "meta/shard/0000000000",
    ]);
    assert.equal(r.state.clusterId, "c-1");
    assert.equal(r.state.totalShards, 16);
    assert.equal(r.state.replicationFactor, 3);
    assert.deepEqual(r.state.shards.get(0), ["n1", "n2", "n3"]);

    const again = r.state.apply({ ...BOOT, clusterId: "c-2", members: [N4] });
    assert.deepEqual(again.outcome, { kind: "already-bootstrapped", clusterId: "c-1" });
    assert.deepEqual(again.records, []);
    assert.equal(again.state, r.state);
  });

  it("does not change the state it is applied to", () => {
    const empty = MetaState.empty();
    empty.apply(BOOT);
    assert.equal(empty.clusterId, null);
    const s = booted();
    s.apply({ op: "create-shard", shard: 1, replicas: ["n1", "n2", "n3"] });
    assert.equal(s.shards.has(1), false);
  });

  it("keeps each state's shards as they were when later states add shards", () => {
    let s = booted();
    const states = [s];
    for (const shard of [15, 3, 9, 3]) {
      s = s.apply({ op: "create-shard", shard, replicas: ["n1", "n2", "n3"] }).state;
      states.push(s);
    }
    assert.deepEqual(
      states.map((x) => [...x.shards.keys()]),
      [[0], [0, 15], [0, 3, 15], [0, 3, 9, 15], [0, 3, 9, 15]],
    );
    assert.deepEqual(
      states.map((x) => x.shards.size),
      [1, 2, 3, 4, 4],
    );
    assert.equal(states[1]?.shards.has(3), false);
    assert.equal(states[1]?.shards.get(9), undefined);
    assert.deepEqual(s.shards.get(9), ["n1", "n2", "n3"]);
    assert.deepEqual(
      [...s.shards].map(([shard]) => shard),
      [0, 3, 9, 15],
    );
  });

  it("creates a shard once: the first assignment wins", () => {
    const first = booted().apply({ op: "create-shard", shard: 7, replicas: ["n3", "n1", "n2"] });
    assert.deepEqual(first.outcome, {
      kind: "shard-created",
      shard: 7,
      replicas: ["n3", "n1", "n2"],
    });
    assert.deepEqual(keys(first.records), ["meta/shard/0000000007"]);
    const second = first.state.apply({
      op: "create-shard",
      shard: 7,
      replicas: ["n1", "n2", "n3"],
    });
    assert.deepEqual(second.outcome, {
      kind: "shard-exists",
      shard: 7,
      replicas: ["n3", "n1", "n2"],
    });
    assert.deepEqual(second.records, []);
  });

  it("rejects assignments that can never apply", () => {
    const cases: [MetaState, MetaCommand, RegExp][] = [
      [MetaState.empty(), { op: "create-shard", shard: 1, replicas: ["n1"] }, /not bootstrapped/],
      [
        booted(),
        { op: "create-shard", shard: 16, replicas: ["n1", "n2", "n3"] },
        /not in \[1, 16\)/,
      ],
      [booted(), { op: "create-shard", shard: 0, replicas: ["n1", "n2", "n3"] }, /shard 0/],
      [
        booted(),
        { op: "create-shard", shard: 1, replicas: ["n1", "n2", "n4"] },
        /n4 is not an active member/,
      ],
      [booted(), { op: "create-shard", shard: 1, replicas: ["n1", "n2"] }, /expected 3/],
      [booted(), { op: "create-shard", shard: 1, replicas: ["n1", "n1", "n2"] }, /twice/],
      [MetaState.empty(), { op: "set-member", member: N1 }, /not bootstrapped/],
    ];
    for (const [state, cmd, why] of cases) {
      const r = state.apply(cmd);
      assert.equal(r.outcome.kind, "rejected", JSON.stringify(cmd));
      assert.match((r.outcome as { reason: string }).reason, why);
      assert.deepEqual(r.records, []);
      assert.equal(r.state, state);
    }
  });

  it("asks for every member when there are fewer than the replication factor", () => {
    const s = MetaState.empty().apply({ ...BOOT, replicationFactor: 5 }).state;
    assert.equal(
      s.apply({ op: "create-shard", shard: 1, replicas: ["n1", "n2"] }).outcome.kind,
      "rejected",
    );
    const r = s.apply({ op: "create-shard", shard: 1, replicas: ["n2", "n3", "n1"] });
    assert.equal(r.outcome.kind, "shard-created");
  });

  it("adds and updates members", () => {
    const added = booted().apply({ op: "set-member", member: N4 });
    assert.deepEqual(added.outcome, { kind: "member-added", member: N4 });
    assert.deepEqual(keys(added.records), ["meta/member/n4"]);
    const moved = { ...N2, rpcAddr: "10.0.0.2:7447" };
    const updated = added.state.apply({ op: "set-member", member: moved });
    assert.deepEqual(updated.outcome, { kind: "member-updated", member: moved, previous: N2 });
    assert.deepEqual(updated.state.members.get("n2"), moved);
    const same = updated.state.apply({ op: "set-member", member: moved });
    assert.deepEqual(same.outcome, { kind: "member-unchanged", member: moved });
    assert.deepEqual(same.records, []);
    // A new member counts for the next assignments.
    const s = added.state;
    assert.equal(
      s.apply({ op: "create-shard", shard: 2, replicas: ["n4", "n1", "n2"] }).outcome.kind,
      "shard-created",
    );
  });
});

describe("meta state: incarnations", () => {
  it("records a member's incarnation, keeps it, and never replaces it", () => {
    const first = booted().apply({ op: "set-member", member: { ...N2, incarnation: "inc-a" } });
    assert.equal(first.outcome.kind, "member-updated");
    assert.equal(first.state.members.get("n2")?.incarnation, "inc-a");
    // An address update without an incarnation keeps the recorded one.
    const moved = first.state.apply({
      op: "set-member",
      member: { ...N2, rpcAddr: "10.9.9.9:7447" },
    });
    assert.equal(moved.state.members.get("n2")?.incarnation, "inc-a");
    assert.equal(moved.state.members.get("n2")?.rpcAddr, "10.9.9.9:7447");
    // A node whose data directory was wiped cannot pass for the member.
    const wiped = moved.state.apply({ op: "set-member", member: { ...N2, incarnation: "inc-b" } });
    assert.equal(wiped.outcome.kind, "rejected");
    assert.match((wiped.outcome as { reason: string }).reason, /recorded as incarnation inc-a/);
    assert.deepEqual(wiped.records, []);
    // Stored and loaded back exactly.
    const loaded = MetaState.load(moved.state.records());
    assert.ok(loaded.equals(moved.state));
    assert.equal(loaded.members.get("n2")?.incarnation, "inc-a");
  });
});

describe("meta state: rejoin and replica ids", () => {
  const withIncarnations = (): MetaState =>
    MetaState.empty().apply({
      ...BOOT,
      members: BOOT.members.map((m, i) => ({ ...m, incarnation: `inc-${i + 1}-aaaa` })),
    }).state;

  it("names each member's replicas by its incarnation, frozen into a shard's initial voters", () => {
    const s = withIncarnations();
    assert.deepEqual(s.shards.get(0), ["n1@inc1aaaa", "n2@inc2aaaa", "n3@inc3aaaa"]);
    assert.deepEqual(s.nodesOf(0), ["n1", "n2", "n3"]);
    const created = s.apply({ op: "create-shard", shard: 1, replicas: ["n3", "n1", "n2"] }).state;
    assert.deepEqual(created.shards.get(1), ["n3@inc3aaaa", "n1@inc1aaaa", "n2@inc2aaaa"]);
    // A rejoin changes the member's replica for what comes next, not the recorded voters.
    const rejoined = created.apply({ op: "rejoin", id: "n1", incarnation: "inc-9-bbbb" }).state;
    assert.equal(rejoined.replicaOf("n1"), "n1@inc9bbbb");
    assert.deepEqual(rejoined.shards.get(1), ["n3@inc3aaaa", "n1@inc1aaaa", "n2@inc2aaaa"]);
    const later = rejoined.apply({ op: "create-shard", shard: 2, replicas: ["n1", "n2", "n3"] });
    assert.deepEqual(later.state.shards.get(2), ["n1@inc9bbbb", "n2@inc2aaaa", "n3@inc3aaaa"]);
    assert.ok(MetaState.load(later.state.records()).equals(later.state));
  });

  it("retires the old incarnation on rejoin, and never takes a retired one back", () => {
    const s = withIncarnations();
    const r = s.apply({ op: "rejoin", id: "n2", incarnation: "inc-b" });
    assert.equal(r.outcome.kind, "member-updated");
    assert.deepEqual(keys(r.records), ["meta/member/n2"]);
    const n2 = r.state.members.get("n2");
    assert.equal(n2?.incarnation, "inc-b");
    assert.deepEqual(n2?.retired, ["inc-2-aaaa"]);
    assert.equal(r.state.isRetired("n2@inc2aaaa"), true);
    assert.equal(r.state.isRetired("n2@incb"), false);
    // The same incarnation again changes nothing; a retired one is refused.
    assert.equal(
      r.state.apply({ op: "rejoin", id: "n2", incarnation: "inc-b" }).outcome.kind,
      "member-unchanged",
    );
    const back = r.state.apply({ op: "rejoin", id: "n2", incarnation: "inc-2-aaaa" });
    assert.equal(back.outcome.kind, "rejected");
    assert.match((back.outcome as { reason: string }).reason, /retired/);
    // The refusal says the incarnation is retired (the proposing node stops on it), no other does.
    assert.equal((back.outcome as { retired?: true }).retired, true);
    // Unknown members, an unbootstrapped cluster and set-member cannot retire anything.
    const unknown = s.apply({ op: "rejoin", id: "n7", incarnation: "x" }).outcome;
    assert.equal(unknown.kind, "rejected");
    assert.equal((unknown as { retired?: true }).retired, undefined);
    assert.equal(
      MetaState.empty().apply({ op: "rejoin", id: "n1", incarnation: "x" }).outcome.kind,
      "rejected",
    );
    assert.equal(
      s.apply({ op: "set-member", member: { ...N2, retired: ["old"] } }).outcome.kind,
      "rejected",
    );
    // An address update keeps the retired list; all of it survives a reload.
    const moved = r.state.apply({ op: "set-member", member: { ...N2, rpcAddr: "10.1.1.1:7447" } });
    assert.deepEqual(moved.state.members.get("n2")?.retired, ["inc-2-aaaa"]);
    assert.ok(MetaState.load(moved.state.records()).equals(moved.state));
    // The command round-trips through its encoding.
    const cmd: MetaCommand = { op: "rejoin", id: "n2", incarnation: "inc-b" };
    assert.deepEqual(decodeMetaCommand(encodeMetaCommand(cmd)), cmd);
  });
});

describe("meta state: preferred leaders", () => {
  it("records a replica as a shard's preferred leader; refuses anything else", () => {
    const s = booted().apply({ op: "create-shard", shard: 3, replicas: ["n2", "n3", "n1"] }).state;
    assert.equal(s.preferredLeader(3), "n2", "the first-ranked replica by default");
    const r = s.apply({ op: "prefer-leader", shard: 3, node: "n3" });
    assert.deepEqual(r.outcome, { kind: "leader-preferred", shard: 3, node: "n3" });
    assert.deepEqual(keys(r.records), ["meta/leader/0000000003"]);
    assert.equal(r.state.preferredLeader(3), "n3");
    assert.equal(
      r.state.apply({ op: "prefer-leader", shard: 3, node: "n3" }).outcome.kind,
      "leader-unchanged",
    );
    assert.ok(MetaState.load(r.state.records()).equals(r.state));
    for (const [cmd, why] of [
      [{ op: "prefer-leader", shard: 4, node: "n1" }, /not created/],
      [{ op: "prefer-leader", shard: 3, node: "n9" }, /not a replica/],
    ] as const) {
      const out = s.apply(cmd);
      assert.equal(out.outcome.kind, "rejected");
      assert.match((out.outcome as { reason: string }).reason, why);
    }
    const cmd: MetaCommand = { op: "prefer-leader", shard: 3, node: "n3" };
    assert.deepEqual(decodeMetaCommand(encodeMetaCommand(cmd)), cmd);
  });

  it("wants a shard led on a replica with room while its preferred leader's disk is full", () => {
    let s = booted().apply({ op: "create-shard", shard: 3, replicas: ["n2", "n3", "n1"] }).state;
    s = s.apply({ op: "prefer-leader", shard: 3, node: "n3" }).state;
    const disk = (id: string, full: boolean): void => {
      s = s.apply({ op: "set-disk", id, full }).state;
    };
    assert.equal(s.leaderWanted(3), "n3", "the preferred leader");
    disk("n3", true);
    assert.equal(s.leaderWanted(3), "n2", "the first-ranked replica with room");
    assert.equal(s.preferredLeader(3), "n3", "the preference stays");
    disk("n2", true);
    assert.equal(s.leaderWanted(3), "n1");
    // A replica on a member that is leaving is no leader to want.
    const leaving = s.apply({ op: "set-state", id: "n1", state: "decommissioning" }).state;
    assert.equal(leaving.leaderWanted(3), "n3", "no replica has room: the preferred leader");
    disk("n1", true);
    assert.equal(s.leaderWanted(3), "n3", "no replica has room: the preferred leader");
    disk("n3", false);
    assert.equal(s.leaderWanted(3), "n3");
    // Not a rule of the state machine: prefer-leader's apply goes by the preference alone.
    assert.equal(
      s.apply({ op: "prefer-leader", shard: 3, node: "n3" }).outcome.kind,
      "leader-unchanged",
    );
    assert.equal(booted().leaderWanted(3), undefined, "a shard not created");
  });
});

describe("meta state: load", () => {
  it("an empty record set is the empty state", () => {
    assert.ok(MetaState.load([]).equals(MetaState.empty()));
    assert.deepEqual(MetaState.empty().records(), []);
  });

  it("refuses records that are not the image of a state", () => {
    const full = applyAll([BOOT, { op: "create-shard", shard: 3, replicas: ["n1", "n2", "n3"] }]);
    const withKey = (key: string, value: Uint8Array): MetaRecord[] => [
      ...full.stored,
      { key: enc.encode(key), value },
    ];
    const v = (json: string): Uint8Array => new Uint8Array([1, ...enc.encode(json)]);
    const bad: MetaRecord[][] = [
      withKey("meta/what", v("{}")),
      withKey("meta/shard/5", v('{"replicas":["n1"]}')), // not zero-padded
      withKey("meta/shard/0000000099", v('{"replicas":["n1"]}')), // past totalShards
      withKey("meta/shard/0000000004", v('{"replicas":["n9"]}')), // unknown replica
      withKey("meta/member/n5", v('{"id":"n6","rpcAddr":"a:1","httpAddr":"a:2"}')), // key ≠ id
      withKey("meta/cluster", v("{")),
      withKey("meta/cluster", new Uint8Array([9])),
      full.stored.filter((r) => dec.decode(r.key) !== "meta/cluster"),
      full.stored.filter((r) => dec.decode(r.key) !== "meta/shard/0000000000"),
    ];
    for (const records of bad)
      assertMalformed(() => MetaState.load(records), "CAIRN_ERR_MALFORMED_META");
  });

  it("property: loading the records apply wrote (or records()) gives back the state", () => {
    const ids = ["n1", "n2", "n3", "n4", "n5", "n6"];
    const memberArb = fc.record({
      id: fc.constantFrom(...ids),
      rpcAddr: fc.constantFrom("a:1", "b:2", "[::1]:7447"),
      httpAddr: fc.constantFrom("a:8080", "b:8080"),
    });
    const cmdArb: fc.Arbitrary<MetaCommand> = fc.oneof(
      fc.record({
        op: fc.constant("bootstrap" as const),
        clusterId: fc.constantFrom("c-1", "c-2"),
        totalShards: fc.integer({ min: 1, max: 12 }),
        replicationFactor: fc.integer({ min: 1, max: 4 }),
        members: fc.uniqueArray(memberArb, { minLength: 1, maxLength: 4, selector: (m) => m.id }),
      }),
      fc.record({
        op: fc.constant("create-shard" as const),
        shard: fc.integer({ min: 1, max: 12 }),
        replicas: fc.uniqueArray(fc.constantFrom(...ids), { minLength: 1, maxLength: 4 }),
      }),
      fc.record({ op: fc.constant("set-member" as const), member: memberArb }),
      fc.record({
        op: fc.constant("rejoin" as const),
        id: fc.constantFrom(...ids),
        incarnation: fc.constantFrom("inc-a", "inc-b", "inc-c"),
      }),
      fc.record({
        op: fc.constant("prefer-leader" as const),
        shard: fc.integer({ min: 0, max: 12 }),
        node: fc.constantFrom(...ids),
      }),
      fc.record({
        op: fc.constant("join" as const),
        member: fc.record(
          {
            id: fc.constantFrom(...ids),
            rpcAddr: fc.constant("j:1"),
            httpAddr: fc.constant("j:2"),
            incarnation: fc.constantFrom("inc-a", "inc-j"),
            build: fc.integer({ min: 1, max: 3 }),
          },
          { requiredKeys: ["id", "rpcAddr", "httpAddr", "incarnation"] },
        ),
      }),
      fc.record({
        op: fc.constant("set-build" as const),
        id: fc.constantFrom(...ids),
        build: fc.integer({ min: 1, max: 3 }),
      }),
      fc.record({
        op: fc.constant("set-version" as const),
        version: fc.integer({ min: 1, max: 3 }),
      }),
      fc.record({
        op: fc.constant("set-state" as const),
        id: fc.constantFrom(...ids),
        state: fc.constantFrom(...MEMBER_STATES),
      }),
      fc.record({
        op: fc.constant("set-disk" as const),
        id: fc.constantFrom(...ids),
        full: fc.boolean(),
      }),
      // Moves from a short list of placements, so that some match the shard's nodes.
      fc.record({
        op: fc.constant("move-shard" as const),
        shard: fc.integer({ min: 0, max: 3 }),
        from: fc.constantFrom(["n1"], ["n1", "n2"], ["n1", "n2", "n3"], ["n2", "n3", "n4"]),
        nodes: fc.constantFrom(["n1", "n2"], ["n1", "n2", "n4"], ["n2", "n3", "n4"], ["n4"]),
      }),
      fc.record({
        op: fc.constant("settle-shard" as const),
        shard: fc.integer({ min: 0, max: 3 }),
        nodes: fc.constantFrom(["n1", "n2", "n4"], ["n2", "n3", "n4"]),
      }),
    );
    fc.assert(
      fc.property(fc.array(cmdArb, { maxLength: 30 }), (cmds) => {
        const { state, stored } = applyAll(cmds);
        const loaded = MetaState.load(stored);
        assert.deepEqual(loaded.view(), state.view());
        assert.ok(loaded.equals(state));
        assert.deepEqual(MetaState.load(state.records()).view(), state.view());
        // Order of the records does not matter.
        assert.ok(MetaState.load([...stored].reverse()).equals(state));
        // What a state counts once and the next derives (replicaCounts, movingShards) is what
        // a state loaded afresh counts, at every step.
        let step = MetaState.empty();
        for (const cmd of cmds) {
          step.replicaCounts();
          step.movingShards();
          step = step.apply(cmd).state;
          const fresh = MetaState.load(step.records());
          assert.deepEqual(
            [...step.replicaCounts()].sort(),
            [...fresh.replicaCounts()].sort(),
            "replica counts",
          );
          assert.deepEqual(step.movingShards(), fresh.movingShards(), "moving shards");
        }
        // And the loaded state goes on exactly like the original.
        for (const cmd of cmds) {
          const a = state.apply(cmd);
          const b = loaded.apply(cmd);
          assert.deepEqual(a.outcome, b.outcome);
          assert.ok(a.state.equals(b.state));
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe("meta state: a member's life and shard moves (design.md §5.2)", () => {
  const N4J: MetaMember = { ...N4, incarnation: "inc4" };

  it("admits a joining node, which gets replicas only once active", () => {
    let s = booted();
    const joined = s.apply({ op: "join", member: N4J });
    assert.equal(joined.outcome.kind, "member-added");
    s = joined.state;
    assert.equal(s.stateOf("n4"), "joining");
    assert.deepEqual(s.activeMembers(), ["n1", "n2", "n3"]);
    // Joining again with the same data directory changes nothing; with another is refused.
    assert.equal(s.apply({ op: "join", member: N4J }).outcome.kind, "member-unchanged");
    const other = s.apply({ op: "join", member: { ...N4, incarnation: "x" } }).outcome;
    assert.equal(other.kind, "rejected");
    // Not placed while joining.
    const early = s.apply({ op: "create-shard", shard: 3, replicas: ["n1", "n2", "n4"] }).outcome;
    assert.match(early.kind === "rejected" ? early.reason : "", /n4 is not an active member/);
    s = s.apply({ op: "set-state", id: "n4", state: "active" }).state;
    assert.deepEqual(s.activeMembers(), ["n1", "n2", "n3", "n4"]);
    assert.equal(
      s.apply({ op: "create-shard", shard: 3, replicas: ["n1", "n2", "n4"] }).outcome.kind,
      "shard-created",
    );
  });

  it("updates the replica counts and moving shards of the state it moves from, as a fresh count gives", () => {
    let s = MetaState.empty().apply({ ...BOOT, members: [N1, N2, N3, N4] }).state;
    for (let shard = 1; shard < 8; shard++) {
      s = s.apply({ op: "create-shard", shard, replicas: ["n1", "n2", "n3"] }).state;
    }
    const check = (): void => {
      const fresh = MetaState.load(s.records());
      assert.deepEqual(new Map(s.replicaCounts()), new Map(fresh.replicaCounts()));
      assert.deepEqual(s.movingShards(), fresh.movingShards());
      assert.equal(s.fewestReplicas(), fresh.fewestReplicas());
    };
    check();
    // Moves of shards 5, 2 and 7 (n1 or n3 to n4), settled in another order; one move refused.
    const steps: MetaCommand[] = [
      { op: "move-shard", shard: 5, from: ["n1", "n2", "n3"], nodes: ["n4", "n2", "n3"] },
      { op: "move-shard", shard: 2, from: ["n1", "n2", "n3"], nodes: ["n1", "n2", "n4"] },
      { op: "move-shard", shard: 7, from: ["n1", "n2", "n3"], nodes: ["n4", "n2", "n3"] },
      { op: "move-shard", shard: 7, from: ["n1", "n2", "n3"], nodes: ["n1", "n4", "n3"] },
      { op: "settle-shard", shard: 2, nodes: ["n1", "n2", "n4"] },
      { op: "settle-shard", shard: 7, nodes: ["n4", "n2", "n3"] },
      { op: "move-shard", shard: 5, from: ["n4", "n2", "n3"], nodes: ["n4", "n1", "n3"] },
      { op: "settle-shard", shard: 5, nodes: ["n4", "n1", "n3"] },
      // A shard placed on fewer nodes, then on more again.
      { op: "move-shard", shard: 3, from: ["n1", "n2", "n3"], nodes: ["n1", "n2"] },
      { op: "settle-shard", shard: 3, nodes: ["n1", "n2"] },
      { op: "move-shard", shard: 3, from: ["n1", "n2"], nodes: ["n1", "n2", "n4"] },
    ];
    for (const cmd of steps) {
      s = s.apply(cmd).state;
      check();
    }
    assert.equal(
      [...s.replicaCounts().values()].reduce((a, b) => a + b),
      7 * 3 + s.nodesOf(0).length,
    );
    assert.deepEqual(s.movingShards(), [3]);
  });

  it("says which shards a create, a move or a settling changed; null for anything else", () => {
    let s = MetaState.empty().apply({ ...BOOT, members: [N1, N2, N3, N4] }).state;
    const cmds: MetaCommand[] = [
      { op: "create-shard", shard: 1, replicas: ["n1", "n2", "n3"] },
      { op: "create-shard", shard: 2, replicas: ["n2", "n3", "n4"] },
      { op: "move-shard", shard: 1, from: ["n1", "n2", "n3"], nodes: ["n4", "n2", "n3"] },
      { op: "settle-shard", shard: 1, nodes: ["n4", "n2", "n3"] },
      { op: "prefer-leader", shard: 2, node: "n3" },
      { op: "move-shard", shard: 2, from: ["n2", "n3", "n4"], nodes: ["n2", "n3", "n1"] },
      { op: "set-state", id: "n4", state: "decommissioning" },
      { op: "settle-shard", shard: 2, nodes: ["n2", "n3", "n1"] },
      { op: "create-shard", shard: 2, replicas: ["n1", "n2", "n3"] },
    ];
    const expected: (readonly number[] | null)[] = [[1], [2], [1], [1], null, [2], null, [2], []];
    const seen: (readonly number[] | null)[] = [];
    let older: MetaState | null = null;
    for (const cmd of cmds) {
      const next = s.apply(cmd).state;
      const changed = next.shardsChangedSince(s);
      seen.push(changed);
      // Whatever it names, every other shard is the same in both states.
      for (const shard of [0, 1, 2, 3]) {
        if (changed === null || changed.includes(shard)) continue;
        assert.equal(next.shards.get(shard), s.shards.get(shard));
        assert.equal(next.placements.get(shard), s.placements.get(shard));
        assert.deepEqual(next.nodesOf(shard), s.nodesOf(shard));
      }
      if (changed !== null) {
        assert.equal(next.members, s.members);
        assert.equal(next.leaders, s.leaders);
      }
      // Against any state but the one it was made from: unknown.
      if (older !== null && next !== s) assert.equal(next.shardsChangedSince(older), null);
      older = s;
      s = next;
    }
    assert.deepEqual(seen, expected);
    // A state loaded from records knows nothing of where it came from.
    assert.equal(MetaState.load(s.records()).shardsChangedSince(s), null);
  });

  it("counts the shards moving and those not yet on enough active members", () => {
    let s = MetaState.empty().apply({ ...BOOT, members: [N1, N2, N3, N4] }).state;
    const after = (cmd: MetaCommand): [number, number] => {
      s = s.apply(cmd).state;
      return [s.movingCount(), s.underReplicatedCount()];
    };
    // Shard 0 (the meta group, on its four founders) and the shards created are placed in full.
    assert.deepEqual(after({ op: "create-shard", shard: 1, replicas: ["n1", "n2", "n3"] }), [0, 0]);
    assert.deepEqual(after({ op: "create-shard", shard: 2, replicas: ["n2", "n3", "n4"] }), [0, 0]);
    // n4 dies: the meta group and shard 2 have a replica on it.
    assert.deepEqual(after({ op: "set-state", id: "n4", state: "dead" }), [0, 2]);
    // Shard 2's repair starts: placed on active members, it is moving until it settles.
    const repair: MetaCommand = {
      op: "move-shard",
      shard: 2,
      from: ["n2", "n3", "n4"],
      nodes: ["n2", "n3", "n1"],
    };
    assert.deepEqual(after(repair), [1, 1]);
    assert.deepEqual(after({ op: "settle-shard", shard: 2, nodes: ["n2", "n3", "n1"] }), [0, 1]);
    // A decommissioning member's replicas count too, until they move.
    assert.deepEqual(after({ op: "set-state", id: "n3", state: "decommissioning" }), [0, 3]);
    // Loaded from its records, a state counts the same.
    const loaded = MetaState.load(s.records());
    assert.deepEqual([loaded.movingCount(), loaded.underReplicatedCount()], [0, 3]);
  });

  it("counts a shard created below its factor while a member is dead (a single node's are not)", () => {
    // n3 dies in a cluster of three: a shard created now is placed on the two active members
    // only, one replica short of its factor like every shard n3 held, until a member joins.
    let s = booted().apply({ op: "create-shard", shard: 1, replicas: ["n1", "n2", "n3"] }).state;
    s = s.apply({ op: "set-state", id: "n3", state: "dead" }).state;
    assert.equal(s.underReplicatedCount(), 2);
    const created = s.apply({ op: "create-shard", shard: 2, replicas: ["n1", "n2"] });
    assert.equal(created.outcome.kind, "shard-created");
    assert.equal(created.state.underReplicatedCount(), 3);
    // A cluster founded on one member: its shards are on all the members there are.
    let one = MetaState.empty().apply({ ...BOOT, members: [N1] }).state;
    one = one.apply({ op: "create-shard", shard: 1, replicas: ["n1"] }).state;
    assert.equal(one.underReplicatedCount(), 0);
  });

  it("records a member's full disk, keeps it through an address change, drops it with its data directory", () => {
    let s = booted();
    const r = s.apply({ op: "set-disk", id: "n2", full: true });
    assert.deepEqual(r.outcome, { kind: "disk-changed", id: "n2", full: true });
    assert.deepEqual(keys(r.records), ["meta/member/n2"]);
    assert.deepEqual(JSON.parse(dec.decode(r.records[0]?.value.subarray(1))), {
      ...N2,
      diskFull: true,
    });
    s = r.state;
    assert.deepEqual(s.activeMembers(), ["n1", "n2", "n3"], "still active: it keeps its replicas");
    assert.deepEqual(s.roomyMembers(), ["n1", "n3"]);
    const again = s.apply({ op: "set-disk", id: "n2", full: true });
    assert.deepEqual(again.outcome, { kind: "disk-unchanged", id: "n2", full: true });
    assert.equal(again.state, s);
    assert.deepEqual(again.records, []);
    // The node restarts at new addresses (set-member): its disk is still full.
    s = s.apply({ op: "set-member", member: { ...N2, rpcAddr: "n2.other:7447" } }).state;
    assert.equal(s.members.get("n2")?.diskFull, true);
    assert.equal(s.members.get("n2")?.rpcAddr, "n2.other:7447");
    // Room again.
    const room = s.apply({ op: "set-disk", id: "n2", full: false });
    assert.deepEqual(room.outcome, { kind: "disk-changed", id: "n2", full: false });
    assert.equal(room.state.members.get("n2")?.diskFull, undefined);
    assert.deepEqual(room.state.roomyMembers(), ["n1", "n2", "n3"]);
    // A node that lost its data directory (rejoin) reports its new one afresh.
    s = s.apply({ op: "set-member", member: { ...N2, incarnation: "inc-1" } }).state;
    s = s.apply({ op: "set-disk", id: "n2", full: true }).state;
    s = s.apply({ op: "rejoin", id: "n2", incarnation: "inc-2" }).state;
    assert.equal(s.members.get("n2")?.diskFull, undefined);
    // Only members, and never a removed one.
    const refused = s.apply({ op: "set-disk", id: "n9", full: true }).outcome;
    assert.equal(refused.kind, "rejected");
    s = shardZeroOffN2(s.apply({ op: "set-state", id: "n2", state: "dead" }).state);
    s = s.apply({ op: "set-state", id: "n2", state: "removed" }).state;
    const gone = s.apply({ op: "set-disk", id: "n2", full: true }).outcome;
    assert.ok(gone.kind === "rejected" && gone.removed === true);
  });

  it("moves states only along a member's life, and never back from removed", () => {
    let s = booted();
    const refused = (cmd: MetaCommand): string => {
      const o = s.apply(cmd).outcome;
      return o.kind === "rejected" ? o.reason : `not refused: ${o.kind}`;
    };
    assert.match(refused({ op: "set-state", id: "n2", state: "removed" }), /cannot become/);
    assert.match(refused({ op: "set-state", id: "n9", state: "dead" }), /not a member/);
    s = s.apply({ op: "set-state", id: "n2", state: "dead" }).state;
    // Shard 0 is still on n2: it cannot be removed before its replicas move off.
    assert.match(refused({ op: "set-state", id: "n2", state: "removed" }), /still holds/);
    s = shardZeroOffN2(s);
    s = s.apply({ op: "set-state", id: "n2", state: "removed" }).state;
    assert.equal(s.stateOf("n2"), "removed");
    assert.match(refused({ op: "set-state", id: "n2", state: "active" }), /final/);
    assert.match(refused({ op: "join", member: { ...N2, incarnation: "new" } }), /removed/);
    assert.match(refused({ op: "rejoin", id: "n2", incarnation: "new" }), /removed/);
  });

  it("lets a new node under a decommissioned or removed member's id start a new life; never its old data directory", () => {
    // n2 recorded with incarnation i2; shard 0 moved off it, so it may leave.
    let s = MetaState.empty().apply({
      ...BOOT,
      members: [N1, { ...N2, incarnation: "i2" }, N3],
    }).state;
    s = shardZeroOffN2(s);
    s = s.apply({ op: "set-state", id: "n2", state: "decommissioning" }).state;
    s = s.apply({ op: "set-state", id: "n2", state: "decommissioned" }).state;
    const refusal = (st: MetaState, cmd: MetaCommand): MetaOutcome => st.apply(cmd).outcome;

    // Decommissioned: a fresh data directory (rejoin, as a node that does not know its cluster
    // offers first) joins again; its old directory changes nothing, and is told it left (it
    // may have been down while decommissioned: its own meta state still says active).
    const stale = s.apply({ op: "rejoin", id: "n2", incarnation: "i2" });
    assert.ok(
      stale.outcome.kind === "rejected" && stale.outcome.decommissioned === true,
      JSON.stringify(stale.outcome),
    );
    assert.match(stale.outcome.reason, /n2 was decommissioned .*empty data directory/);
    assert.equal(stale.state, s);
    const again = s.apply({ op: "rejoin", id: "n2", incarnation: "j2" });
    assert.equal(again.outcome.kind, "member-updated");
    assert.equal(again.state.stateOf("n2"), "joining");
    assert.equal(again.state.replicaOf("n2"), "n2@j2");
    assert.deepEqual(again.state.members.get("n2")?.retired, ["i2"]);
    assert.ok(MetaState.load(again.state.records()).equals(again.state));

    // Removed: the old directory is refused for good; a new one joins, at its own addresses.
    s = s.apply({ op: "set-state", id: "n2", state: "removed" }).state;
    const old = refusal(s, { op: "join", member: { ...N2, incarnation: "i2" } });
    assert.ok(old.kind === "rejected" && old.removed === true, JSON.stringify(old));
    assert.match(old.kind === "rejected" ? old.reason : "", /empty data directory/);
    const moved = { ...N2, rpcAddr: "10.0.0.9:7447", httpAddr: "10.0.0.9:8080", incarnation: "k2" };
    const joined = s.apply({ op: "join", member: moved });
    assert.equal(joined.outcome.kind, "member-updated");
    s = joined.state;
    assert.deepEqual(s.members.get("n2"), {
      ...moved,
      retired: ["i2"],
      state: "joining",
    });
    assert.deepEqual(s.activeMembers(), ["n1", "n3"]);
    // Its old directory stays retired in the new life; the new one is admitted once.
    const back = refusal(s, { op: "rejoin", id: "n2", incarnation: "i2" });
    assert.ok(back.kind === "rejected" && back.retired === true, JSON.stringify(back));
    assert.equal(refusal(s, { op: "join", member: moved }).kind, "member-unchanged");
    s = s.apply({ op: "set-state", id: "n2", state: "active" }).state;
    assert.deepEqual(s.activeMembers(), ["n1", "n2", "n3"]);
    assert.equal(
      refusal(s, { op: "create-shard", shard: 3, replicas: ["n1", "n2", "n3"] }).kind,
      "shard-created",
    );
    assert.deepEqual(
      s.apply({ op: "create-shard", shard: 3, replicas: ["n1", "n2", "n3"] }).state.shards.get(3),
      ["n1", "n2@k2", "n3"],
    );
  });

  it("moves a shard one node at a time, only from where it is, and settles it", () => {
    let s = booted().apply({ op: "join", member: N4J }).state;
    s = s.apply({ op: "set-state", id: "n4", state: "active" }).state;
    s = s.apply({ op: "create-shard", shard: 2, replicas: ["n1", "n2", "n3"] }).state;
    const stale = s.apply({
      op: "move-shard",
      shard: 2,
      from: ["n2", "n1", "n3"],
      nodes: ["n4", "n1", "n3"],
    }).outcome;
    assert.match(stale.kind === "rejected" ? stale.reason : "", /stale/);
    const two = s.apply({ op: "move-shard", shard: 2, from: ["n1", "n2", "n3"], nodes: ["n4"] });
    assert.equal(two.outcome.kind, "rejected");
    const moved = s.apply({
      op: "move-shard",
      shard: 2,
      from: ["n1", "n2", "n3"],
      nodes: ["n4", "n2", "n3"],
    });
    assert.deepEqual(moved.outcome, { kind: "shard-moved", shard: 2, nodes: ["n4", "n2", "n3"] });
    s = moved.state;
    assert.deepEqual(s.nodesOf(2), ["n4", "n2", "n3"]);
    assert.equal(s.isMoving(2), true);
    assert.equal(s.preferredLeader(2), "n4");
    // The initial voters stay as they were: every replica started the group alike.
    assert.deepEqual(s.shards.get(2), ["n1", "n2", "n3"]);
    assert.equal(
      s.apply({ op: "settle-shard", shard: 2, nodes: ["n2", "n3"] }).outcome.kind,
      "shard-unchanged",
    );
    s = s.apply({ op: "settle-shard", shard: 2, nodes: ["n4", "n2", "n3"] }).state;
    assert.equal(s.isMoving(2), false);
    assert.ok(MetaState.load(s.records()).equals(s));
    // n1 holds shard 0 still, so it cannot be decommissioned yet; n1 is off shard 2 though.
    s = s.apply({ op: "set-state", id: "n1", state: "decommissioning" }).state;
    const early = s.apply({ op: "set-state", id: "n1", state: "decommissioned" }).outcome;
    assert.match(early.kind === "rejected" ? early.reason : "", /shard 0|first: 0/);
  });

  it("refuses a move onto a member whose disk is nearly full, not one off it or within it", () => {
    const move = (shard: number, from: string[], nodes: string[]): MetaCommand => ({
      op: "move-shard",
      shard,
      from,
      nodes,
    });
    let s = booted().apply({ op: "join", member: N4J }).state;
    s = s.apply({ op: "set-state", id: "n4", state: "active" }).state;
    s = s.apply({ op: "create-shard", shard: 2, replicas: ["n1", "n2", "n3"] }).state;
    s = s.apply({ op: "create-shard", shard: 5, replicas: ["n2", "n3", "n4"] }).state;
    // The allocator decided this move before n4 marked its disk full; the mark committed first.
    s = s.apply({ op: "set-disk", id: "n4", full: true }).state;
    const onto = s.apply(move(2, ["n1", "n2", "n3"], ["n4", "n2", "n3"]));
    assert.equal(onto.state, s);
    assert.match(onto.outcome.kind === "rejected" ? onto.outcome.reason : "", /n4.*disk/);
    // A full member still gives replicas away, and a shard it holds may move elsewhere.
    const off = s.apply(move(5, ["n2", "n3", "n4"], ["n2", "n3", "n1"]));
    assert.equal(off.outcome.kind, "shard-moved");
    // With room again, it takes replicas.
    s = s.apply({ op: "set-disk", id: "n4", full: false }).state;
    const later = s.apply(move(2, ["n1", "n2", "n3"], ["n4", "n2", "n3"]));
    assert.equal(later.outcome.kind, "shard-moved");
  });

  it("says which members keep a replica of a shard: its nodes, and every holder of the meta group", () => {
    let s = booted().apply({ op: "join", member: N4J }).state;
    s = s.apply({ op: "create-shard", shard: 2, replicas: ["n1", "n2", "n3"] }).state;
    // A joining member copies the meta group (as a learner), and nothing else yet.
    assert.equal(s.keepsReplica("n4", 0), true);
    assert.equal(s.keepsReplica("n4", 2), false);
    s = s.apply({ op: "set-state", id: "n4", state: "active" }).state;
    s = s.apply({
      op: "move-shard",
      shard: 2,
      from: ["n1", "n2", "n3"],
      nodes: ["n4", "n2", "n3"],
    }).state;
    // A move places the shard on its new node at once, and takes it off the old one.
    assert.equal(s.keepsReplica("n4", 2), true);
    assert.equal(s.keepsReplica("n1", 2), false);
    assert.equal(s.keepsReplica("n9", 0), false);
    s = s.apply({ op: "set-state", id: "n1", state: "dead" }).state;
    // A dead member keeps the meta group's replica it has as one of its nodes, and no other.
    assert.equal(s.keepsReplica("n1", 0), true, "shard 0's nodes are n1, n2, n3 still");
    s = s.apply({
      op: "move-shard",
      shard: 0,
      from: ["n1", "n2", "n3"],
      nodes: ["n4", "n2", "n3"],
    }).state;
    assert.equal(s.keepsReplica("n1", 0), false);
  });

  it("keeps a preferred leader only while it is a replica", () => {
    let s = booted().apply({ op: "join", member: N4J }).state;
    s = s.apply({ op: "set-state", id: "n4", state: "active" }).state;
    s = s.apply({ op: "create-shard", shard: 2, replicas: ["n1", "n2", "n3"] }).state;
    s = s.apply({ op: "prefer-leader", shard: 2, node: "n3" }).state;
    s = s.apply({
      op: "move-shard",
      shard: 2,
      from: ["n1", "n2", "n3"],
      nodes: ["n1", "n2", "n4"],
    }).state;
    assert.equal(s.preferredLeader(2), "n1");
    assert.ok(MetaState.load(s.records()).equals(s));
  });
});

interface RendezvousVectors {
  description: string;
  weights: { shard: number; id: string; input_hex: string; weight: string }[];
  replicas: { shard: number; members: string[]; factor: number; replicas: string[] }[];
}

const VECTORS_FILE = join(import.meta.dirname, "testdata", "rendezvous-vectors.json");

function makeVectors(): RendezvousVectors {
  const weights: RendezvousVectors["weights"] = [];
  for (const [shard, id] of [
    [0, "n1"],
    [1, "n1"],
    [1, "n2"],
    [1023, "node-7"],
    [4294967295, "a"],
    [42, "db-3.example.com"],
  ] as const) {
    const input = new Uint8Array(4 + id.length);
    new DataView(input.buffer).setUint32(0, shard);
    input.set(enc.encode(id), 4);
    weights.push({
      shard,
      id,
      input_hex: Buffer.from(input).toString("hex"),
      weight: rendezvousWeight(shard, id).toString(16).padStart(16, "0"),
    });
  }
  const replicas: RendezvousVectors["replicas"] = [];
  const five = ["node-1", "node-2", "node-3", "node-4", "node-5"];
  for (const shard of [0, 1, 2, 3, 17, 511, 1023]) {
    replicas.push({
      shard,
      members: five,
      factor: 3,
      replicas: rendezvousReplicas(shard, five, 3),
    });
  }
  replicas.push({
    shard: 9,
    members: ["x", "y"],
    factor: 3,
    replicas: rendezvousReplicas(9, ["x", "y"], 3),
  });
  replicas.push({ shard: 9, members: five, factor: 5, replicas: rendezvousReplicas(9, five, 5) });
  return {
    description:
      "Cairn replica placement: the replicas of a shard are the members with the highest weight xxhash64(u32 big-endian shard || UTF-8 node id, seed 0), highest first; ties by the smaller id. Regenerate with UPDATE_GOLDEN=1 (review the diff: a change moves every shard).",
    weights,
    replicas,
  };
}

describe("meta state: the cluster version", () => {
  const recordsAsJson = (state: MetaState): Record<string, unknown> =>
    Object.fromEntries(
      state.records().map((r) => [dec.decode(r.key), JSON.parse(dec.decode(r.value.subarray(1)))]),
    );

  it("writes at version 1 exactly the records a build before cluster versions wrote", () => {
    let s = booted();
    s = s.apply({ op: "set-build", id: "n2", build: 1 }).state;
    s = s.apply({ op: "join", member: { ...N4, incarnation: "i4", build: 1 } }).state;
    assert.equal(s.version, 1);
    const json = recordsAsJson(s);
    assert.deepEqual(json["meta/cluster"], {
      clusterId: "c-1",
      totalShards: 16,
      replicationFactor: 3,
    });
    for (const [key, value] of Object.entries(json)) {
      if (key.startsWith("meta/member/")) assert.ok(!("build" in (value as object)), key);
    }
    // And such records load as version 1, every member's build 1.
    const loaded = MetaState.load(s.records());
    assert.equal(loaded.version, 1);
    assert.deepEqual(loaded.lowestBuild(), { id: "n1", build: 1 });
  });

  it("is raised only once every member that may serve again runs a build that has it", () => {
    let s = booted();
    const refused = s.apply({ op: "set-version", version: 2 }).outcome;
    assert.equal(refused.kind, "rejected");
    assert.match(
      refused.kind === "rejected" ? refused.reason : "",
      /member n1 runs cluster versions up to 1/,
    );
    for (const id of ["n1", "n2"]) {
      const r = s.apply({ op: "set-build", id, build: 3 });
      assert.equal(r.outcome.kind, "member-updated");
      s = r.state;
    }
    assert.deepEqual(s.lowestBuild(), { id: "n3", build: 1 });
    assert.equal(s.apply({ op: "set-version", version: 2 }).outcome.kind, "rejected");
    s = s.apply({ op: "set-build", id: "n3", build: 2 }).state;
    assert.equal(s.apply({ op: "set-build", id: "n3", build: 2 }).outcome.kind, "member-unchanged");
    assert.equal(s.apply({ op: "set-version", version: 3 }).outcome.kind, "rejected");
    const raised = s.apply({ op: "set-version", version: 2 });
    assert.deepEqual(raised.outcome, { kind: "version-changed", from: 1, to: 2 });
    s = raised.state;
    assert.equal(s.version, 2);
    assert.deepEqual(recordsAsJson(s)["meta/cluster"], {
      clusterId: "c-1",
      totalShards: 16,
      replicationFactor: 3,
      version: 2,
    });
    // Never lowered; a raise seen again changes nothing.
    for (const version of [1, 2]) {
      const again = s.apply({ op: "set-version", version });
      assert.deepEqual(again.outcome, { kind: "version-unchanged", version: 2 });
      assert.equal(again.state, s);
    }
    // What a node loads after a restart.
    const loaded = MetaState.load(s.records());
    assert.equal(loaded.version, 2);
    assert.ok(loaded.equals(s));
  });

  it("from version 2, never marks a decommissioning member dead: a decommission committed while the allocator's pass proposed dead stands", () => {
    // The allocator's pass sees n3 active and unreachable for cluster.dead_after, and proposes
    // dead; the operator's decommission commits first. At version 1 the proposal then made n3
    // dead, and active again once seen: the decommission forgotten.
    const race = (version: number): { state: MetaState; outcome: MetaOutcome } => {
      let s = booted();
      s = s.apply({ op: "join", member: { ...N4, incarnation: "i4" } }).state;
      s = s.apply({ op: "set-state", id: "n4", state: "active" }).state;
      for (const id of ["n1", "n2", "n3", "n4"]) {
        s = s.apply({ op: "set-build", id, build: BUILD_VERSION }).state;
      }
      for (let v = 2; v <= version; v++) s = s.apply({ op: "set-version", version: v }).state;
      assert.equal(s.version, version);
      const proposed = allocate({
        meta: s,
        unreachableLong: new Set(["n3"]),
        alive: new Set(["n1", "n2", "n4"]),
        caughtUp: () => true,
        maxMoves: 4,
        balanceMoves: 4,
        tolerance: 2,
      });
      assert.deepEqual(proposed, [{ op: "set-state", id: "n3", state: "dead" }]);
      s = s.apply({ op: "set-state", id: "n3", state: "decommissioning" }).state;
      const [dead] = proposed as [MetaCommand];
      return s.apply(dead);
    };
    const v2 = race(VERSION_DECOMMISSION_STAYS);
    assert.equal(v2.outcome.kind, "rejected");
    assert.match(
      v2.outcome.kind === "rejected" ? v2.outcome.reason : "",
      /n3 is decommissioning: it stays so however long it is unreachable/,
    );
    assert.equal(v2.state.stateOf("n3"), "decommissioning");
    // At version 1 (a member of an older build may still apply the log) the old rule holds.
    const v1 = race(1);
    assert.equal(v1.outcome.kind, "state-changed");
    assert.equal(v1.state.stateOf("n3"), "dead");
  });

  it("does not wait for decommissioned or removed members, and a new node under one's id brings its own build", () => {
    let s = booted();
    s = s.apply({ op: "set-member", member: { ...N3, incarnation: "i3" } }).state;
    s = s.apply({ op: "join", member: { ...N4, incarnation: "i4", build: 2 } }).state;
    s = s.apply({ op: "set-state", id: "n4", state: "active" }).state;
    for (const id of ["n1", "n2"]) s = s.apply({ op: "set-build", id, build: 2 }).state;
    // n3 (build 1) leaves: decommissioned, it holds no replica (shard 0 moves off it first).
    s = s.apply({
      op: "move-shard",
      shard: 0,
      from: ["n1", "n2", "n3"],
      nodes: ["n1", "n2", "n4"],
    }).state;
    s = s.apply({ op: "settle-shard", shard: 0, nodes: ["n1", "n2", "n4"] }).state;
    s = s.apply({ op: "set-state", id: "n3", state: "decommissioning" }).state;
    assert.equal(s.apply({ op: "set-version", version: 2 }).outcome.kind, "rejected");
    s = s.apply({ op: "set-state", id: "n3", state: "decommissioned" }).state;
    assert.deepEqual(s.lowestBuild(), { id: "n1", build: 2 });
    s = s.apply({ op: "set-version", version: 2 }).state;
    assert.equal(s.version, 2);
    // A new node under n3's id: a build without version 2 is refused, one with it joins.
    const old = s.apply({ op: "join", member: { ...N3, incarnation: "new3" } }).outcome;
    assert.equal(old.kind, "rejected");
    assert.equal(old.kind === "rejected" && old.tooOld, true);
    const joined = s.apply({ op: "join", member: { ...N3, incarnation: "new3", build: 2 } });
    assert.equal(joined.outcome.kind, "member-updated");
    assert.equal(joined.state.members.get("n3")?.build, 2);
    assert.equal(joined.state.stateOf("n3"), "joining");
  });

  it("refuses a join or a build report older than the cluster's version (CAIRN_ERR_CLUSTER_VERSION's outcome)", () => {
    let s = booted();
    for (const id of ["n1", "n2", "n3"]) s = s.apply({ op: "set-build", id, build: 2 }).state;
    s = s.apply({ op: "set-version", version: 2 }).state;
    for (const cmd of [
      { op: "join", member: { ...N4, incarnation: "i4" } },
      { op: "join", member: { ...N4, incarnation: "i4", build: 1 } },
      { op: "set-build", id: "n2", build: 1 },
    ] satisfies MetaCommand[]) {
      const r = s.apply(cmd);
      assert.equal(r.state, s, cmd.op);
      assert.equal(r.outcome.kind, "rejected");
      assert.equal(r.outcome.kind === "rejected" && r.outcome.tooOld, true);
      assert.match(
        r.outcome.kind === "rejected" ? r.outcome.reason : "",
        /cluster versions up to 1, and the cluster runs version 2/,
      );
    }
    // A member's build outlives an address change (set-member) and a wiped data directory.
    s = s.apply({ op: "set-member", member: { ...N2, rpcAddr: "10.0.0.2:7447" } }).state;
    assert.equal(s.members.get("n2")?.build, 2);
    s = s.apply({ op: "rejoin", id: "n2", incarnation: "again" }).state;
    assert.equal(s.members.get("n2")?.build, 2);
  });
});

describe("rendezvous placement", () => {
  it("matches the checked-in vectors (deterministic across processes and platforms)", () => {
    if (process.env["UPDATE_GOLDEN"] === "1")
      writeFileSync(VECTORS_FILE, `${JSON.stringify(makeVectors(), null, 2)}\n`);
    const vectors = JSON.parse(readFileSync(VECTORS_FILE, "utf8")) as RendezvousVectors;
    for (const w of vectors.weights) {
      assert.equal(rendezvousWeight(w.shard, w.id).toString(16).padStart(16, "0"), w.weight);
      // The weight is plain XXH64 of the documented bytes.
      assert.equal(xxhash64(Buffer.from(w.input_hex, "hex")), BigInt(`0x${w.weight}`));
    }
    for (const v of vectors.replicas) {
      assert.deepEqual(rendezvousReplicas(v.shard, v.members, v.factor), v.replicas);
    }
  });

  it("ranks all members, does not depend on their order, and caps at the member count", () => {
    const ids = ["n1", "n2", "n3", "n4", "n5"];
    const all = rendezvousReplicas(3, ids, 5);
    assert.deepEqual([...all].sort(), ids);
    assert.deepEqual(rendezvousReplicas(3, [...ids].reverse(), 5), all);
    assert.deepEqual(rendezvousReplicas(3, ids, 2), all.slice(0, 2));
    assert.deepEqual(rendezvousReplicas(3, ids, 9), all);
    assert.deepEqual(rendezvousReplicas(3, [], 3), []);
    assert.throws(() => rendezvousReplicas(3, ["n1", "n1"], 1), RangeError);
    assert.throws(() => rendezvousReplicas(-1, ids, 1), RangeError);
    assert.throws(() => rendezvousReplicas(1, ids, 1.5), RangeError);
  });

  it("spreads replicas and preferred leaders within ±20% of fair over 1023 shards", () => {
    for (let n = 3; n <= 7; n++) {
      const ids = Array.from({ length: n }, (_, i) => `node-${i + 1}`);
      for (const factor of [1, 3]) {
        const held = new Map<string, number>();
        const led = new Map<string, number>();
        for (let shard = 1; shard <= 1023; shard++) {
          const r = rendezvousReplicas(shard, ids, factor);
          for (const id of r) held.set(id, (held.get(id) ?? 0) + 1);
          led.set(r[0] as string, (led.get(r[0] as string) ?? 0) + 1);
        }
        const fairHeld = (1023 * Math.min(factor, n)) / n;
        for (const id of ids) {
          const share = (held.get(id) ?? 0) / fairHeld;
          assert.ok(Math.abs(share - 1) <= 0.2, `${n} members, factor ${factor}: ${id} ${share}`);
          const lead = (led.get(id) ?? 0) / (1023 / n);
          assert.ok(Math.abs(lead - 1) <= 0.2, `${n} members: ${id} leads ${lead} of fair`);
        }
      }
    }
  });

  it("removing a member changes only the shards that had it", () => {
    const ids = Array.from({ length: 7 }, (_, i) => `node-${i + 1}`);
    for (const gone of ids) {
      const rest = ids.filter((id) => id !== gone);
      for (let shard = 0; shard < 1023; shard++) {
        const before = rendezvousReplicas(shard, ids, 3);
        const after = rendezvousReplicas(shard, rest, 3);
        if (!before.includes(gone)) {
          assert.deepEqual(after, before);
        } else {
          // The others keep their order; one new member joins at the end.
          assert.deepEqual(
            after.slice(0, 2),
            before.filter((id) => id !== gone),
          );
          assert.ok(!before.includes(after[2] as string));
        }
      }
    }
  });
});

describe("shouldBootstrap", () => {
  const seeds = ["n1.example:7447", "n2.example:7447", "n3.example:7447"];
  const alive = (ms: MetaMember[], clusterId: string | null = null) =>
    ms.map((m) => ({ member: m, clusterId }));
  const input = (over: Partial<BootstrapInput> = {}): BootstrapInput => ({
    self: N1,
    seedNodes: seeds,
    bootstrapExpect: 3,
    clusterId: null,
    alive: alive([N3, N1, N2]),
    ...over,
  });

  it("the first seed bootstraps with every member it sees, sorted by id", () => {
    const d = shouldBootstrap(input({ alive: alive([N4, N3, N2]) }));
    assert.deepEqual(d.voters, [N1, N2, N3, N4]);
  });

  it("founds on at most 16 members, itself and the first others by id: the rest join", () => {
    // Founded on every member it saw, 17 pods started together gave the meta group 17 voters,
    // and a move of it (16 nodes at most) could never replace one that died (an audit).
    const many = Array.from({ length: 20 }, (_, i) => ({
      ...N1,
      id: `m${String(i).padStart(2, "0")}`,
      rpcAddr: `m${i}.example:7447`,
    }));
    const self = many[19] as MetaMember;
    const d = shouldBootstrap(input({ self, seedNodes: [self.rpcAddr], alive: alive(many) }));
    assert.equal(d.voters?.length, 16);
    assert.ok(
      d.voters?.some((m) => m.id === self.id),
      "itself among them",
    );
    assert.deepEqual(
      d.voters?.map((m) => m.id),
      [...many.slice(0, 15).map((m) => m.id), self.id],
    );
    const founded = MetaState.empty().apply({
      op: "bootstrap",
      clusterId: "c1",
      totalShards: 64,
      replicationFactor: 3,
      members: [...(d.voters ?? [])],
    });
    assert.notEqual(founded.outcome.kind, "rejected");
    const all = founded.state.nodesOf(0);
    const moved = founded.state.apply({
      op: "move-shard",
      shard: 0,
      from: all,
      nodes: all.slice(1),
    });
    assert.notEqual(moved.outcome.kind, "rejected", "the meta group can be moved");
  });

  it("says why it does not", () => {
    const cases: [BootstrapInput, RegExp][] = [
      [input({ seedNodes: [] }), /single-node/],
      [input({ self: N2 }), /not the first seed/],
      [input({ clusterId: "c-1" }), /already belongs to cluster c-1/],
      [input({ alive: alive([N1, N2]) }), /2 of bootstrap_expect 3/],
      [
        input({ alive: [...alive([N1, N2]), { member: N3, clusterId: "c-9" }] }),
        /n3 already carries cluster id c-9/,
      ],
      [
        input({ alive: [...alive([N1, N2]), { member: N3, clusterId: null, firstSeed: true }] }),
        /n3 at .* advertises its own seed_nodes\[0\] too/,
      ],
    ];
    for (const [inp, why] of cases) {
      const d = shouldBootstrap(inp);
      assert.equal(d.voters, null);
      assert.match(d.reason ?? "", why);
    }
  });

  it("is the first seed however seed_nodes[0] writes its address, and only then", () => {
    // seed_nodes[0] naming the first seed in another spelling than its advertise_rpc_addr: no
    // node took itself for the first seed, and the cluster was never founded.
    const at = (rpcAddr: string): MetaMember => ({ ...N1, rpcAddr });
    for (const [first, self] of [
      ["[::ffff:10.0.0.1]:7447", at("10.0.0.1:7447")],
      ["[::FFFF:A00:1]:7447", at("10.0.0.1:7447")],
      ["[0:0:0:0:0:0:0:1]:7447", at("[::1]:7447")],
      ["localhost:7447", at("127.0.0.1:7447")],
      ["N1.Example:7447", N1],
    ] as const) {
      const d = shouldBootstrap(input({ self, seedNodes: [first, ...seeds.slice(1)] }));
      assert.deepEqual(d.voters?.[0], self, `${first} is ${self.rpcAddr}: ${d.reason}`);
    }
    for (const first of ["[::ffff:10.0.0.2]:7447", "10.0.0.1:7448", "localhost:7447"]) {
      const d = shouldBootstrap(input({ self: at("10.0.0.1:7447"), seedNodes: [first] }));
      assert.match(d.reason ?? "", /not the first seed/, first);
    }
  });

  it("counts itself once, whether or not SWIM lists it", () => {
    assert.deepEqual(shouldBootstrap(input({ alive: alive([N2, N3]) })).voters, [N1, N2, N3]);
    assert.equal(shouldBootstrap(input({ alive: alive([N1, N1, N2]) })).voters, null);
    assert.deepEqual(shouldBootstrap(input({ bootstrapExpect: 1, alive: [] })).voters, [N1]);
  });
});

describe("a member's retired incarnations", () => {
  /** n1..n3 with incarnations, every member's build at 3, the cluster at version 3. */
  function atVersion3(): MetaState {
    let s = MetaState.empty().apply({
      op: "bootstrap",
      clusterId: "c-1",
      totalShards: 16,
      replicationFactor: 3,
      members: [N1, N2, N3].map((m) => ({ ...m, incarnation: `inc-${m.id}`, build: 3 })),
    }).state;
    s = s.apply({ op: "set-version", version: 3 }).state;
    assert.equal(s.version, 3);
    return s;
  }

  it("are bounded: a rejoin past MAX_RETIRED_INCARNATIONS is refused (CAIRN_ERR_REJOIN_LIMIT)", () => {
    // A node wiped and restarted in a loop (a pod whose volume is lost every time), or one that
    // rejoins over and over with made-up incarnations: each rejoin retired one more, for good,
    // in n2's record (rewritten whole at each change), the snapshot and every isRetired call.
    let s = atVersion3();
    let refused: MetaOutcome | null = null;
    for (let i = 0; i < 1_000 && refused === null; i++) {
      const r = s.apply({ op: "rejoin", id: "n2", incarnation: `wipe-${i}` });
      if (r.outcome.kind === "rejected") refused = r.outcome;
      s = r.state;
    }
    const retired = s.members.get("n2")?.retired ?? [];
    assert.ok(retired.length <= 100, `n2 holds ${retired.length} retired incarnations`);
    assert.ok(refused !== null && refused.kind === "rejected");
    assert.equal(refused.rejoinLimit, true);
    assert.match(refused.reason, /retired incarnations/);
    // What was retired stays retired: an old copy is still refused as one.
    const old = s.apply({ op: "rejoin", id: "n2", incarnation: "inc-n2" }).outcome;
    assert.equal(old.kind === "rejected" && old.retired, true);
    assert.deepEqual(MetaState.load(s.records()).view(), s.view());
  });

  it("are not bounded before cluster version 3 (a rule of the apply, so a version's)", () => {
    let s = booted();
    for (let i = 0; i < 102; i++) {
      s = s.apply({ op: "rejoin", id: "n2", incarnation: `wipe-${i}` }).state;
    }
    assert.equal(s.members.get("n2")?.retired?.length, 101);
  });
});

describe("meta state: a move's origin, from cluster version 5", () => {
  /** Five members at cluster version `version`; shard 1 on n1, n4, n5, which then die. */
  const twoDead = (version: number): MetaState => {
    let s = MetaState.empty().apply({
      ...BOOT,
      members: ["n1", "n2", "n3", "n4", "n5"].map(member),
    } as MetaCommand).state;
    for (const id of ["n1", "n2", "n3", "n4", "n5"]) {
      s = s.apply({ op: "set-build", id, build: BUILD_VERSION }).state;
    }
    for (let v = 2; v <= version; v++) s = s.apply({ op: "set-version", version: v }).state;
    assert.equal(s.version, version);
    s = s.apply({ op: "create-shard", shard: 1, replicas: ["n1", "n4", "n5"] }).state;
    // Shard 0, founded on all five, no longer needs n4 and n5.
    s = s.apply({
      op: "move-shard",
      shard: 0,
      from: ["n1", "n2", "n3", "n4", "n5"],
      nodes: ["n1", "n2", "n3", "n5"],
    }).state;
    s = s.apply({ op: "settle-shard", shard: 0, nodes: ["n1", "n2", "n3", "n5"] }).state;
    s = s.apply({
      op: "move-shard",
      shard: 0,
      from: ["n1", "n2", "n3", "n5"],
      nodes: ["n1", "n2", "n3"],
    }).state;
    s = s.apply({ op: "settle-shard", shard: 0, nodes: ["n1", "n2", "n3"] }).state;
    for (const id of ["n4", "n5"]) s = s.apply({ op: "set-state", id, state: "dead" }).state;
    // The allocator replaced n4; the group, with no leader, never made the move, and the next
    // pass redirected it to replace n5 too.
    s = s.apply({
      op: "move-shard",
      shard: 1,
      from: ["n1", "n4", "n5"],
      nodes: ["n1", "n3", "n5"],
    }).state;
    return s.apply({
      op: "move-shard",
      shard: 1,
      from: ["n1", "n3", "n5"],
      nodes: ["n1", "n3", "n2"],
    }).state;
  };

  it("records the nodes a move took out, and removes none of them before the move is settled", () => {
    let s = twoDead(VERSION_MOVE_ORIGIN);
    assert.deepEqual(s.placements.get(1), {
      nodes: ["n1", "n3", "n2"],
      moving: true,
      was: ["n4", "n5"],
    });
    assert.ok(MetaState.load(s.records()).equals(s), "the records keep it");
    for (const id of ["n4", "n5"]) {
      const r = s.apply({ op: "set-state", id, state: "removed" });
      assert.equal(r.outcome.kind, "rejected");
      assert.match(
        r.outcome.kind === "rejected" ? r.outcome.reason : "",
        new RegExp(`shard 1's move off member ${id} is under way`),
      );
      assert.equal(r.state, s);
    }
    s = s.apply({ op: "settle-shard", shard: 1, nodes: ["n1", "n3", "n2"] }).state;
    assert.deepEqual(s.placements.get(1), { nodes: ["n1", "n3", "n2"], moving: false });
    for (const id of ["n4", "n5"]) {
      s = s.apply({ op: "set-state", id, state: "removed" }).state;
      assert.equal(s.stateOf(id), "removed");
    }
  });

  it("before version 5, records no origin and removes such a member (the rule of the apply, so a version's)", () => {
    const s = twoDead(VERSION_MOVE_ORIGIN - 1);
    assert.deepEqual(s.placements.get(1), { nodes: ["n1", "n3", "n2"], moving: true });
    assert.equal(
      s.apply({ op: "set-state", id: "n4", state: "removed" }).outcome.kind,
      "state-changed",
    );
  });

  it("a set-state naming the state it changes from is refused once the member left it: the allocator's retry does not undo a decommission", () => {
    for (const version of [VERSION_MOVE_ORIGIN - 1, VERSION_MOVE_ORIGIN]) {
      let s = twoDead(version);
      // n4 was seen alive again: the allocator's "active from dead" commits, an operator's
      // decommission commits, then the allocator's proposal again (its outcome was unknown).
      const back: MetaCommand = { op: "set-state", id: "n4", state: "active", from: "dead" };
      s = s.apply(back).state;
      s = s.apply({ op: "set-state", id: "n4", state: "decommissioning" }).state;
      const again = s.apply(back);
      if (version >= VERSION_MOVE_ORIGIN) {
        assert.equal(again.outcome.kind, "rejected");
        assert.match(
          again.outcome.kind === "rejected" ? again.outcome.reason : "",
          /member n4 is decommissioning, not dead: the change to active is stale/,
        );
        assert.equal(again.state.stateOf("n4"), "decommissioning");
      } else {
        assert.equal(again.state.stateOf("n4"), "active", "the decommission undone");
      }
    }
  });

  it("encodes a set-state's from, and refuses one that is no member state", () => {
    const cmd: MetaCommand = { op: "set-state", id: "n2", state: "dead", from: "active" };
    assert.deepEqual(decodeMetaCommand(encodeMetaCommand(cmd)), cmd);
    const bad = new Uint8Array([
      1,
      ...enc.encode('{"op":"set-state","id":"n2","state":"dead","from":"gone"}'),
    ]);
    assertMalformed(() => decodeMetaCommand(bad));
  });

  it("refuses a stored placement whose origin is malformed", () => {
    const s = twoDead(VERSION_MOVE_ORIGIN);
    const records = s.records().map((r) => {
      if (dec.decode(r.key) !== "meta/shard/0000000001") return r;
      const value = JSON.parse(dec.decode(r.value.subarray(1))) as Record<string, unknown>;
      const bad = { ...value, was: ["n1"] }; // one of its nodes
      return {
        key: r.key,
        value: new Uint8Array([r.value[0] ?? 1, ...enc.encode(JSON.stringify(bad))]),
      };
    });
    assert.throws(() => MetaState.load(records), /bad placement/);
  });
});

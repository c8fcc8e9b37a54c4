/**
 * The meta group's commands applied by a real KvStateMachine to a real LSM engine: the state
 * survives a reopen exactly, and no client key can read or overwrite a meta record.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import fc from "fast-check";
import { type MetaCommand, type MetaMember, MetaState } from "../../src/cluster/index.ts";
import type { Entry, LogIndex, Term } from "../../src/raft/index.ts";
import { CairnError } from "../../src/common/errors.ts";
import {
  decodeMetaEntry,
  encodeCommand,
  encodeMetaEntry,
  isMetaEntry,
} from "../../src/replication/commands.ts";
import { KvStateMachine, type MetaApplyOutcome } from "../../src/replication/state-machine.ts";
import { encodeSnapshotFrames, LsmEngine, LsmEnvironment } from "../../src/storage/index.ts";
import { tempDir } from "../storage/helpers.ts";

const env = new LsmEnvironment({ workers: 1, blockCacheBytes: 1 << 20 });
after(() => env.close());

const enc = new TextEncoder();
const OPTIONS = { shardId: 0, memtableBytes: 64 * 1024 };

function member(id: string): MetaMember {
  return { id, rpcAddr: `${id}:7447`, httpAddr: `${id}:8080` };
}

const BOOT: MetaCommand = {
  op: "bootstrap",
  clusterId: "c-1",
  totalShards: 16,
  replicationFactor: 3,
  members: [member("n1"), member("n2"), member("n3")],
};

function entry(index: number, data: Uint8Array): Entry {
  return { index: index as LogIndex, term: 1 as Term, type: "normal", data };
}

/** A state machine over a fresh engine, and a way to append entries at the next index. */
async function open(dir: string, metaGroup = true) {
  const lsm = await LsmEngine.open(dir, env, OPTIONS);
  const sm = new KvStateMachine(lsm, { metaGroup });
  return { lsm, sm, next: () => sm.appliedIndex + 1 };
}

describe("meta log entries", () => {
  it("round-trip, and are told apart from KV commands by their op byte", () => {
    const data = encodeMetaEntry(BOOT);
    assert.deepEqual([data[0], data[1]], [3, 0]);
    assert.ok(isMetaEntry(data));
    assert.deepEqual(decodeMetaEntry(data), BOOT);
    const key = enc.encode("k");
    assert.ok(!isMetaEntry(encodeCommand({ op: "put", key, value: key })));
    assert.ok(!isMetaEntry(encodeCommand({ op: "delete", key })));
  });

  it("refuse malformed payloads, also when applied", async () => {
    const malformed = (err: unknown) =>
      err instanceof CairnError && err.code === "CAIRN_ERR_MALFORMED_COMMAND";
    const data = encodeMetaEntry(BOOT);
    const flagged = data.slice();
    flagged[1] = 1;
    assert.throws(() => decodeMetaEntry(flagged), malformed);
    assert.throws(() => decodeMetaEntry(new Uint8Array([3])), malformed);
    assert.throws(() => decodeMetaEntry(data.subarray(0, data.length - 1)), malformed);
    const { lsm, sm } = await open(tempDir("meta-sm"));
    await assert.rejects(sm.applyCommand(entry(1, new Uint8Array([3, 0, 1, 0x7b]))), malformed);
    assert.equal(sm.appliedIndex, 0);
    // An op of a newer build stops this one, which says what to suspect (docs/operations.md,
    // "Upgrading"), and applies nothing.
    const newer = enc.encode(JSON.stringify({ op: "set-colour", id: "n1", colour: "teal" }));
    const newerEntry = new Uint8Array([3, 0, 1, ...newer]);
    await assert.rejects(
      sm.applyCommand(entry(1, newerEntry)),
      (err: unknown) =>
        malformed(err) &&
        /unknown op "set-colour" \(written by a newer Cairn build\?/.test(String(err)),
    );
    assert.equal(sm.appliedIndex, 0);
    await lsm.close();
  });
});

describe("meta commands in shard 0's state machine", () => {
  it("applies, reports to onMeta, and reloads the same state after a reopen", async () => {
    const dir = tempDir("meta-sm");
    const { lsm, sm, next } = await open(dir);
    assert.ok(sm.meta()?.equals(MetaState.empty()));
    const seen: (MetaApplyOutcome | null)[] = [];
    sm.onMeta = (state, applied) => {
      assert.equal(state, sm.meta());
      seen.push(applied);
    };
    const cmds: MetaCommand[] = [
      BOOT,
      { op: "create-shard", shard: 3, replicas: ["n2", "n3", "n1"] },
      { op: "create-shard", shard: 3, replicas: ["n1", "n2", "n3"] }, // loses: a no-op
      { op: "set-member", member: { ...member("n2"), rpcAddr: "10.0.0.2:7447" } },
      { op: "set-member", member: member("n4") },
      { op: "create-shard", shard: 15, replicas: ["n4", "n1", "n2"] },
      { ...BOOT, clusterId: "c-2" }, // a second bootstrap: a no-op
    ];
    for (const cmd of cmds) {
      const index = next();
      // Through applyCommand, as the driver applies every entry today: null, the outcome goes
      // to onMeta.
      assert.equal(await sm.applyCommand(entry(index, encodeMetaEntry(cmd))), null);
      assert.equal(sm.appliedIndex, index);
    }
    assert.deepEqual(
      seen.map((s) => s?.outcome.kind),
      [
        "bootstrapped",
        "shard-created",
        "shard-exists",
        "member-updated",
        "member-added",
        "shard-created",
        "already-bootstrapped",
      ],
    );
    assert.deepEqual(seen[2]?.outcome, {
      kind: "shard-exists",
      shard: 3,
      replicas: ["n2", "n3", "n1"],
    });
    // applyMeta answers the outcome directly.
    const direct = await sm.applyMeta(
      entry(
        next(),
        encodeMetaEntry({ op: "create-shard", shard: 16, replicas: ["n1", "n2", "n3"] }),
      ),
    );
    assert.equal(direct?.outcome.kind, "rejected");
    const before = sm.meta();
    assert.ok(before !== null);
    assert.equal(before.clusterId, "c-1");
    assert.deepEqual(before.shards.get(0), ["n1", "n2", "n3"]);
    assert.deepEqual(before.shards.get(3), ["n2", "n3", "n1"]);
    assert.equal(before.members.get("n2")?.rpcAddr, "10.0.0.2:7447");

    await lsm.flush();
    await lsm.close();
    const again = await open(dir);
    assert.equal(again.sm.appliedIndex, 8);
    assert.deepEqual(again.sm.meta()?.view(), before.view());
    // And it goes on from there: the loaded state knows shard 3 is taken.
    const outcome = await again.sm.applyMeta(
      entry(
        again.next(),
        encodeMetaEntry({ op: "create-shard", shard: 3, replicas: ["n4", "n1", "n2"] }),
      ),
    );
    assert.equal(outcome?.outcome.kind, "shard-exists");
    await again.lsm.close();
  });

  it("skips entries already applied and rejects meta commands outside the meta group", async () => {
    const { lsm, sm, next } = await open(tempDir("meta-sm"), false);
    assert.equal(sm.meta(), null);
    assert.equal(sm.reportMeta(), null);
    const index = next();
    const r = await sm.applyMeta(entry(index, encodeMetaEntry(BOOT)));
    assert.equal(r?.outcome.kind, "rejected");
    assert.equal(sm.appliedIndex, index);
    assert.equal(await sm.applyMeta(entry(index, encodeMetaEntry(BOOT))), null);
    assert.deepEqual([...lsm.scan({})], []);
    await lsm.close();
  });

  it("reloads after the applied index is moved from outside (a snapshot install)", async () => {
    const dirA = tempDir("meta-sm");
    const a = await open(dirA);
    await a.sm.applyCommand(entry(1, encodeMetaEntry(BOOT)));
    await a.sm.applyCommand(
      entry(2, encodeMetaEntry({ op: "create-shard", shard: 1, replicas: ["n1", "n2", "n3"] })),
    );
    const b = await open(tempDir("meta-sm"));
    assert.ok(b.sm.meta()?.equals(MetaState.empty()));
    // What MultiRaft's snapshot install does: import the leader's engine, then set the index.
    async function* frames(): AsyncGenerator<Uint8Array> {
      yield* encodeSnapshotFrames(2, a.lsm.scan({ snapshot: a.lsm.snapshot() }));
    }
    await b.lsm.importSnapshot(frames());
    b.sm.appliedIndex = 2;
    assert.deepEqual(b.sm.meta()?.view(), a.sm.meta()?.view());
    let reported: MetaState | null = null;
    b.sm.onMeta = (state) => (reported = state);
    assert.deepEqual(b.sm.reportMeta()?.view(), a.sm.meta()?.view());
    assert.ok(reported !== null);
    await a.lsm.close();
    await b.lsm.close();
  });

  it("no client key reads, lists or overwrites a meta record", async () => {
    const { lsm, sm, next } = await open(tempDir("meta-sm"));
    await sm.applyCommand(entry(next(), encodeMetaEntry(BOOT)));
    const before = sm.meta()?.view();
    const internal = [...lsm.scan({})].filter(([k]) => k[0] === 0x00);
    assert.equal(internal.length, 5);
    // Keys that spell the meta records, with and without the internal prefix byte, and more.
    const tricky: Uint8Array[] = [
      enc.encode("meta/cluster"),
      enc.encode("meta/member/n1"),
      enc.encode("meta/shard/0000000000"),
      new Uint8Array([0x00, ...enc.encode("meta/cluster")]),
      new Uint8Array([0x00, ...enc.encode("meta/member/n1")]),
      new Uint8Array([0x00]),
      new Uint8Array([0x01, 0x00]),
    ];
    for (const key of tricky) assert.equal(sm.get(key), null, "no client key sees a record");
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.constantFrom(...tricky), fc.uint8Array({ minLength: 1, maxLength: 24 })),
        fc.uint8Array({ maxLength: 16 }),
        async (key, value) => {
          const put = await sm.applyCommand(
            entry(next(), encodeCommand({ op: "put", key, value })),
          );
          assert.equal(put?.type, "written");
          assert.deepEqual(Buffer.from(sm.get(key)?.value ?? []), Buffer.from(value));
          const del = await sm.applyCommand(entry(next(), encodeCommand({ op: "delete", key })));
          assert.equal(del?.type, "deleted");
          assert.equal(sm.get(key), null);
        },
      ),
      { numRuns: 200 },
    );
    for (const key of tricky) assert.equal(sm.get(key), null, "no client key sees a record");
    // A full client scan lists client keys only.
    const k = enc.encode("meta/cluster");
    await sm.applyCommand(entry(next(), encodeCommand({ op: "put", key: k, value: k })));
    const listed = [...sm.scan(new Uint8Array(), null, lsm.snapshot())];
    assert.deepEqual(
      listed.map((i) => Buffer.from(i.key)),
      [Buffer.from(k)],
    );
    // The stored records are untouched, byte for byte, and load back to the same state.
    assert.deepEqual(
      [...lsm.scan({})].filter(([key]) => key[0] === 0x00),
      internal,
    );
    assert.deepEqual(new KvStateMachine(lsm, { metaGroup: true }).meta()?.view(), before);
    await lsm.close();
  });
});

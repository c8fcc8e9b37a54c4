import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { ABSENT, MultiRaft, type MultiRaftOptions } from "../../src/replication/index.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
let dir: string;

function options(dataDir: string): MultiRaftOptions {
  return {
    nodeId: "n1",
    dataDir,
    totalShards: 16,
    tickMs: 20,
    electionTicks: 10,
    heartbeatTicks: 1,
    memtableBytes: 64 * 1024,
    blockCacheBytes: 8 * 1024 * 1024,
  };
}

describe("MultiRaft on one node", () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-mr-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  for (const fastPath of [true, false]) {
    it(`puts, gets, deletes and versions keys; compare-and-set is checked at apply (${fastPath ? "single-voter reads" : "ReadIndex reads"})`, async () => {
      const mr = await MultiRaft.open({
        ...options(join(dir, `a-${fastPath}`)),
        singleVoterReadFastPath: fastPath,
      });
      try {
        const put = await mr.put(enc.encode("k1"), enc.encode("v1"));
        assert.equal(put.type, "written");
        const v1 = put.type === "written" ? put.version : ABSENT;
        assert.ok(v1.index > 0 && v1.term > 0);
        const got = await mr.get(enc.encode("k1"), true);
        assert.equal(dec.decode(got?.value), "v1");
        assert.deepEqual(got?.version, v1);

        const stale = await mr.put(enc.encode("k1"), enc.encode("v2"), {
          index: v1.index + 100,
          term: v1.term,
        });
        assert.deepEqual(stale, { type: "precondition-failed", current: v1 });
        assert.equal(dec.decode((await mr.get(enc.encode("k1"), true))?.value), "v1");

        const cas = await mr.put(enc.encode("k1"), enc.encode("v2"), v1);
        assert.equal(cas.type, "written");
        const v2 = cas.type === "written" ? cas.version : ABSENT;
        assert.ok(v2.index > v1.index, "versions of a key only grow");

        assert.deepEqual(await mr.put(enc.encode("k1"), enc.encode("v3"), ABSENT), {
          type: "precondition-failed",
          current: v2,
        });
        assert.equal((await mr.put(enc.encode("fresh"), enc.encode("x"), ABSENT)).type, "written");

        const del = await mr.delete(enc.encode("k1"));
        assert.equal(del.type, "deleted");
        assert.equal(await mr.get(enc.encode("k1"), true), null);
        assert.deepEqual(await mr.delete(enc.encode("k1")), { type: "not-found" });
      } finally {
        await mr.close();
      }
    });
  }

  it("scans across shards in key order, in pages", async () => {
    const mr = await MultiRaft.open(options(join(dir, "b")));
    try {
      const keys = Array.from({ length: 50 }, (_, i) => `key-${String(i).padStart(3, "0")}`);
      await Promise.all(keys.map((k) => mr.put(enc.encode(k), enc.encode(`v-${k}`))));
      assert.ok(mr.shardIds().length > 4, "keys spread over several shards");
      const seen: string[] = [];
      let start = new Uint8Array(0);
      for (let page = 0; page < 10; page++) {
        const { items, more } = await mr.scan({ start, end: null, limit: 15, linearizable: true });
        seen.push(...items.map((i) => dec.decode(i.key)));
        if (!more) break;
        const last = items[items.length - 1]?.key ?? new Uint8Array(0);
        start = new Uint8Array([...last, 0]);
      }
      assert.deepEqual(seen, keys);
      const ranged = await mr.scan({
        start: enc.encode("key-010"),
        end: enc.encode("key-013"),
        limit: 100,
        linearizable: false,
      });
      assert.deepEqual(
        ranged.items.map((i) => dec.decode(i.key)),
        ["key-010", "key-011", "key-012"],
      );
    } finally {
      await mr.close();
    }
  });

  it("recovers every acknowledged write after a restart, and after a snapshot compaction", async () => {
    const data = join(dir, "c");
    let mr = await MultiRaft.open(options(data));
    const versions = new Map<string, number>();
    for (let i = 0; i < 200; i++) {
      const r = await mr.put(enc.encode(`k${i}`), enc.encode(`value-${i}`));
      if (r.type === "written") versions.set(`k${i}`, r.version.index);
    }
    const shard = mr.shardOf(enc.encode("k7"));
    const snap = await mr.snapshotShard(shard);
    assert.equal(snap.shardId, shard);
    assert.ok(snap.index > 0 && snap.term > 0);
    await mr.put(enc.encode("after-snapshot"), enc.encode("yes"));
    await mr.close();

    mr = await MultiRaft.open(options(data));
    try {
      for (let i = 0; i < 200; i++) {
        const got = await mr.get(enc.encode(`k${i}`), true);
        assert.equal(dec.decode(got?.value), `value-${i}`);
        assert.equal(got?.version.index, versions.get(`k${i}`));
      }
      assert.equal(dec.decode((await mr.get(enc.encode("after-snapshot"), true))?.value), "yes");
      // New writes after the restart get higher versions than any before.
      const r = await mr.put(enc.encode("k0"), enc.encode("again"));
      assert.ok(r.type === "written" && r.version.index > (versions.get("k0") ?? 0));
      assert.ok(mr.isShardReady(0));
    } finally {
      await mr.close();
    }
  });

  it("refuses a data directory written with more shards", async () => {
    const data = join(dir, "d");
    const mr = await MultiRaft.open(options(data));
    await mr.put(enc.encode("x"), enc.encode("y"));
    const used = mr.shardIds();
    await mr.close();
    const fewer = Math.max(...used);
    await assert.rejects(MultiRaft.open({ ...options(data), totalShards: fewer }), {
      code: "CAIRN_ERR_SHARD_COUNT_MISMATCH",
    });
  });

  it("rejects operations after close with a retryable error", async () => {
    const mr = await MultiRaft.open(options(join(dir, "e")));
    await mr.close();
    await assert.rejects(mr.put(enc.encode("a"), enc.encode("b")), {
      code: "CAIRN_ERR_SHUTTING_DOWN",
      retryable: true,
    });
  });
});

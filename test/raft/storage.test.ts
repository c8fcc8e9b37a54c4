import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { Entry } from "../../src/raft/index.ts";
import {
  decodeConfChange,
  encodeConfChange,
  logIndex,
  MemoryStorage,
  nodeId,
  term,
} from "../../src/raft/index.ts";

function entry(index: number, t: number): Entry {
  return { index: logIndex(index), term: term(t), type: "normal", data: new Uint8Array([index]) };
}

describe("MemoryStorage", () => {
  it("bootstraps a founding member with one committed conf change per member", () => {
    const s = MemoryStorage.bootstrap([nodeId("a"), nodeId("b")], [nodeId("c")]);
    assert.equal(s.lastIndex(), 3);
    assert.deepEqual(s.hardState(), { term: 1, vote: null, commit: 3 });
    const ccs = s.entries(logIndex(1), logIndex(4), Infinity).map((e) => decodeConfChange(e.data));
    assert.deepEqual(ccs, [
      { type: "add-voter", node: "a" },
      { type: "add-voter", node: "b" },
      { type: "add-learner", node: "c" },
    ]);
  });

  it("append replaces a conflicting suffix and refuses gaps", () => {
    const s = new MemoryStorage();
    s.append([entry(1, 1), entry(2, 1), entry(3, 1)]);
    s.append([entry(2, 2)]);
    assert.equal(s.lastIndex(), 2);
    assert.equal(s.term(logIndex(2)), 2);
    assert.throws(() => s.append([entry(5, 2)]), { code: "CAIRN_ERR_RAFT_LOG_GAP" });
  });

  it("entries honour the byte limit but always return at least one entry", () => {
    const s = new MemoryStorage();
    s.append([entry(1, 1), entry(2, 1), entry(3, 1)]);
    assert.equal(s.entries(logIndex(1), logIndex(4), 0).length, 1);
    assert.equal(s.entries(logIndex(1), logIndex(4), 2).length, 2);
    assert.equal(s.entries(logIndex(1), logIndex(4), Infinity).length, 3);
  });

  it("compacts behind a snapshot and reports the compaction point", () => {
    const s = MemoryStorage.bootstrap([nodeId("a")]);
    s.append([entry(2, 1), entry(3, 2), entry(4, 2)]);
    assert.throws(() => s.compact(logIndex(3)), { code: "CAIRN_ERR_RAFT_LOG_RANGE" });
    const snap = s.createSnapshot(
      logIndex(3),
      { voters: [nodeId("a")], learners: [] },
      new Uint8Array([9]),
    );
    assert.deepEqual(snap.meta, { index: 3, term: 2, conf: { voters: ["a"], learners: [] } });
    s.compact(logIndex(3));
    assert.equal(s.firstIndex(), 4);
    assert.equal(s.term(logIndex(3)), 2);
    assert.throws(() => s.term(logIndex(2)), { code: "CAIRN_ERR_RAFT_LOG_RANGE" });
    assert.throws(() => s.entries(logIndex(3), logIndex(5), Infinity), {
      code: "CAIRN_ERR_RAFT_LOG_RANGE",
    });
    assert.deepEqual(s.initialState().confState, { voters: ["a"], learners: [] });
  });

  it("a snapshot carries the configuration at its index, not today's", () => {
    const s = MemoryStorage.bootstrap([nodeId("a"), nodeId("b")]);
    const removeB: Entry = {
      index: logIndex(4),
      term: term(1),
      type: "conf-change",
      data: encodeConfChange({ type: "remove", node: nodeId("b") }),
    };
    s.append([entry(3, 1), removeB, entry(5, 1)]);
    const before = { voters: [nodeId("a"), nodeId("b")], learners: [] };
    const after = { voters: [nodeId("a")], learners: [] };
    // A driver passing the configuration of today for an earlier index is refused.
    assert.throws(() => s.createSnapshot(logIndex(3), after, new Uint8Array(0)), {
      code: "CAIRN_ERR_RAFT_LOG_CONF",
    });
    assert.deepEqual(s.createSnapshot(logIndex(3), before, new Uint8Array(0)).meta.conf, before);
    assert.deepEqual(s.confAt(logIndex(3)), before);
    assert.deepEqual(s.confAt(logIndex(4)), after);
    s.compact(logIndex(3));
    assert.deepEqual(s.createSnapshot(logIndex(5), after, new Uint8Array(0)).meta.conf, after);
    assert.throws(() => s.confAt(logIndex(2)), { code: "CAIRN_ERR_RAFT_LOG_RANGE" });
  });

  it("applySnapshot replaces the log; an older snapshot is ignored", () => {
    const s = new MemoryStorage();
    s.append([entry(1, 1), entry(2, 1)]);
    const meta = {
      index: logIndex(10),
      term: term(3),
      conf: { voters: [nodeId("a")], learners: [] },
    };
    s.applySnapshot({ meta, data: new Uint8Array() });
    assert.equal(s.firstIndex(), 11);
    assert.equal(s.lastIndex(), 10);
    s.applySnapshot({ meta: { ...meta, index: logIndex(5) }, data: new Uint8Array() });
    assert.equal(s.lastIndex(), 10);
  });

  it("clone is independent of the original", () => {
    const s = new MemoryStorage();
    s.append([entry(1, 1)]);
    const c = s.clone();
    s.append([entry(2, 1)]);
    assert.equal(c.lastIndex(), 1);
    assert.equal(s.lastIndex(), 2);
  });
});

/**
 * Batches that write nothing (the Raft index of a failed compare-and-set, a delete of an absent
 * key, a leader's no-op) still become durable with the next flush: the caller's log can then be
 * compacted past them (issue 9, bug 3).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { LsmEngine, LsmEnvironment } from "../../src/storage/index.ts";
import { bytes, tempDir } from "./helpers.ts";

describe("LSM empty batches", () => {
  it("flush makes the sequence of empty batches durable, with or without entries before them", async () => {
    const dir = tempDir("lsm-empty");
    const env = new LsmEnvironment({ blockCacheBytes: 1 << 20, workers: 1 });
    try {
      let engine = await LsmEngine.open(dir, env);
      for (let seq = 1; seq <= 3; seq++) {
        await engine.write(seq, [{ type: "put", key: bytes(`k${seq}`), value: bytes("v") }]);
      }
      for (let seq = 4; seq <= 203; seq++) await engine.write(seq, []);
      await engine.flush();
      assert.equal(engine.flushedSeq, 203);
      // Only empty batches since the last flush: no table to write, the sequence still moves.
      for (let seq = 204; seq <= 250; seq++) await engine.write(seq, []);
      await engine.flush();
      assert.equal(engine.flushedSeq, 250);
      assert.equal(
        engine.stats().filesPerLevel.reduce((a, b) => a + b, 0),
        1,
      );
      await engine.close();

      engine = await LsmEngine.open(dir, env);
      assert.equal(engine.flushedSeq, 250);
      assert.equal(Buffer.from(engine.get(bytes("k2")) ?? []).toString(), "v");
      await assert.rejects(engine.write(250, []), { code: "CAIRN_ERR_LSM_SEQUENCE" });
      await engine.write(251, []);
      await engine.close();
    } finally {
      await env.close();
    }
  });
});

/**
 * Regression tests of issue 50's bugs, each through the engine's public API where it can be
 * reached there. The model test (lsm-model.test.ts) finds most of them too; these name them.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { LsmEngine, LsmEnvironment, type LsmOptions } from "../../src/storage/lsm/index.ts";
import { tempDir } from "./helpers.ts";

const b = (s: string): Buffer => Buffer.from(s, "latin1");
const text = (v: Uint8Array | undefined): string | undefined =>
  v === undefined ? undefined : Buffer.from(v).toString("latin1");
const keyAt = (i: number): string => `k${String(i).padStart(3, "0")}`;

const env = new LsmEnvironment({ workers: 1, blockCacheBytes: 1 << 20 });
after(() => env.close());

const OPTIONS: LsmOptions = { l0CompactionTrigger: 8 };

describe("issue 50, bug 1: two partial scans of one block", () => {
  it("leave point reads and scans of that block right, tombstones and older levels included", async () => {
    const engine = await LsmEngine.open(tempDir("lsm50"), env, OPTIONS);
    // Older versions of every key in a lower level, then new ones and a delete in one block.
    await engine.write(
      1,
      Array.from({ length: 60 }, (_, i) => ({ type: "put", key: b(keyAt(i)), value: b("old") })),
    );
    await engine.compactFully();
    await engine.write(2, [
      ...Array.from({ length: 60 }, (_, i) => ({
        type: "put" as const,
        key: b(keyAt(i)),
        value: b(`new${i}`),
      })),
      { type: "delete", key: b(keyAt(30)) },
    ]);
    await engine.flush();
    assert.equal([...engine.scan({ end: b(keyAt(5)) })].length, 5);
    assert.equal([...engine.scan({ start: b(keyAt(50)) })].length, 10);
    for (let i = 0; i < 60; i++) {
      assert.equal(text(engine.get(b(keyAt(i)))), i === 30 ? undefined : `new${i}`, keyAt(i));
    }
    const range = [...engine.scan({ start: b(keyAt(20)), end: b(keyAt(40)) })];
    assert.deepEqual(
      range.map(([k]) => text(k)),
      Array.from({ length: 20 }, (_, i) => keyAt(20 + i)).filter((k) => k !== keyAt(30)),
    );
    await engine.close();
  });
});

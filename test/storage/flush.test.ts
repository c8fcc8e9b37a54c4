import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { KIND_DELETE, KIND_PUT } from "../../src/storage/lsm/format.ts";
import { TableIterator } from "../../src/storage/lsm/iterators.ts";
import { bufferSource, runFlush, tablePath } from "../../src/storage/lsm/jobs.ts";
import { Memtable } from "../../src/storage/lsm/memtable.ts";
import { tempDir } from "./helpers.ts";

type Entry = [key: string, seq: number, kind: number, value: string];

const writeArb = fc.record({
  key: fc.constantFrom("a", "b", "ab", "\x00", "\xff", "k".repeat(40)),
  sameSeq: fc.boolean(),
  del: fc.boolean(),
  len: fc.integer({ min: 0, max: 300 }),
});

/**
 * What a flush must write (LevelDB's rule, by the model): per key, per sequence the last write
 * of it, newest sequence first; a version stays while the version above it is newer than the
 * oldest reader's sequence (the newest version always stays).
 */
function expected(writes: readonly Entry[], smallestSnapshot: number): Entry[] {
  const byKey = new Map<string, Map<number, Entry>>();
  for (const w of writes) {
    const versions = byKey.get(w[0]) ?? new Map<number, Entry>();
    versions.set(w[1], w);
    byKey.set(w[0], versions);
  }
  const out: Entry[] = [];
  for (const key of [...byKey.keys()].sort()) {
    const versions = [...(byKey.get(key) as Map<number, Entry>).values()].sort(
      (x, y) => y[1] - x[1],
    );
    let above = Number.MAX_SAFE_INTEGER;
    for (const v of versions) {
      if (above > smallestSnapshot) out.push(v);
      above = v[1];
    }
  }
  return out;
}

describe("LSM flush (runFlush: a memtable's arena to a table)", () => {
  it("writes each key's versions in internal order: the last write of a batch, the versions a reader can see", () => {
    const dir = tempDir("flush");
    let number = 0;
    fc.assert(
      fc.property(
        fc.array(writeArb, { minLength: 1, maxLength: 200 }),
        fc.nat(),
        (script, snapshotPick) => {
          const mem = new Memtable();
          const writes: Entry[] = [];
          let seq = 0;
          for (const w of script) {
            if (!w.sameSeq || seq === 0) seq++;
            const value = w.del ? "" : String.fromCharCode(seq & 0xff).repeat(w.len);
            const kind = w.del ? KIND_DELETE : KIND_PUT;
            mem.put(w.key, seq, kind, Buffer.from(value, "latin1"));
            writes.push([w.key, seq, kind, value]);
          }
          const smallestSnapshot = snapshotPick % (seq + 1);
          number++;
          const built = runFlush({
            type: "flush",
            dir,
            numbers: [number],
            arena: mem.arena(),
            smallestSnapshot,
          });
          assert.equal(built.length, 1);
          const it = new TableIterator(bufferSource(tablePath(dir, number)));
          const got: Entry[] = [];
          for (it.seek(undefined, 0); it.valid; it.next()) {
            got.push([it.key, it.seq, it.kind, Buffer.from(it.value()).toString("latin1")]);
          }
          assert.deepEqual(got, expected(writes, smallestSnapshot));
          assert.equal(built[0]?.props.entries, got.length);
        },
      ),
      { numRuns: 150 },
    );
  });
});

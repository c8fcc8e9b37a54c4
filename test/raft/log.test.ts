/**
 * RaftLog (stable storage + unstable tail) against a plain array model, under random appends
 * that overwrite suffixes, persistence as a driver does it, and compaction.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { RaftLog } from "../../src/raft/log.ts";
import type { Entry } from "../../src/raft/index.ts";
import { logIndex, MemoryStorage, term } from "../../src/raft/index.ts";

type Op =
  | { kind: "append"; back: number; count: number; term: number }
  | { kind: "persist" }
  | { kind: "commit"; by: number }
  | { kind: "apply"; by: number }
  | { kind: "compact"; by: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant("append" as const),
    back: fc.nat(4),
    count: fc.integer({ min: 1, max: 4 }),
    term: fc.integer({ min: 1, max: 3 }),
  }),
  fc.record({ kind: fc.constant("persist" as const) }),
  fc.record({ kind: fc.constant("commit" as const), by: fc.nat(3) }),
  fc.record({ kind: fc.constant("apply" as const), by: fc.nat(3) }),
  fc.record({ kind: fc.constant("compact" as const), by: fc.nat(3) }),
);

/** The first entries of `entries` within `maxBytes` of payload, at least one (storage.ts). */
function withinBytes(entries: Entry[], maxBytes: number): Entry[] {
  let size = 0;
  for (let i = 0; i < entries.length; i++) {
    size += (entries[i] as Entry).data.length;
    if (i > 0 && size > maxBytes) return entries.slice(0, i);
  }
  return entries;
}

function entry(index: number, t: number): Entry {
  return {
    index: logIndex(index),
    term: term(t),
    type: "normal",
    data: new TextEncoder().encode(`${index}@${t}`),
  };
}

describe("RaftLog", () => {
  it("matches an array model through appends, persistence and compaction", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const storage = new MemoryStorage();
        const log = new RaftLog(storage);
        const model: Entry[] = []; // model[i] is the entry at index i + 1
        let maxTerm = 0;
        for (const o of ops) {
          switch (o.kind) {
            case "append": {
              // Overwrite up to `back` uncommitted entries, with a term no lower than any before.
              const from = Math.max(log.committed + 1, model.length + 1 - o.back, log.firstIndex());
              maxTerm = Math.max(maxTerm, o.term);
              const ents = Array.from({ length: o.count }, (_, i) => entry(from + i, maxTerm));
              log.append(ents);
              model.length = from - 1;
              model.push(...ents);
              break;
            }
            case "persist": {
              // What a driver does with Ready.entries, then advance().
              const unstable = log.unstableEntries();
              storage.append(unstable);
              const last = unstable[unstable.length - 1];
              if (last !== undefined) log.stableTo(last.index, last.term);
              break;
            }
            case "commit":
              log.commitTo(logIndex(Math.min(model.length, log.committed + o.by)));
              break;
            case "apply": {
              // A driver applies only what it persisted (storage.lastIndex()).
              const to = Math.min(log.committed, storage.lastIndex(), log.applied + o.by);
              if (to > log.applied) log.appliedTo(logIndex(to));
              break;
            }
            case "compact": {
              // A driver compacts what it applied, and applies only what it persisted: never
              // past the first entry still unstable, which may be about to replace what the
              // storage holds there (fast-check seed 1743046087 compacted an entry due to be
              // overwritten, and the rewrite was then dropped as already compacted).
              const unstable = log.unstableEntries()[0]?.index ?? Infinity;
              const to = Math.min(
                log.committed,
                storage.lastIndex(),
                storage.firstIndex() - 1 + o.by,
                unstable - 1,
              );
              if (to > storage.firstIndex() - 1) {
                storage.createSnapshot(
                  logIndex(to),
                  { voters: [], learners: [] },
                  new Uint8Array(),
                );
                storage.compact(logIndex(to));
              }
              break;
            }
          }
          assert.equal(log.lastIndex(), model.length);
          const first = log.firstIndex();
          const got = log.slice(first, logIndex(model.length + 1), Infinity) ?? [];
          assert.deepEqual(got, model.slice(first - 1));
          for (let i = first; i <= model.length; i++)
            assert.equal(log.term(logIndex(i)), model[i - 1]?.term);
          // Any range, cut by size: the entries span storage, the kept ones and the unstable tail.
          for (let lo = first; lo <= model.length; lo++) {
            for (const maxBytes of [0, 9, 20]) {
              const hi = logIndex(model.length + 1);
              assert.deepEqual(
                log.slice(logIndex(lo), hi, maxBytes),
                withinBytes(model.slice(lo - 1), maxBytes),
              );
            }
          }
          if (first > 1)
            assert.equal(
              log.slice(logIndex(first - 1), logIndex(model.length + 1), Infinity),
              null,
            );
        }
      }),
      { numRuns: 300 },
    );
  });

  it("findConflictByTerm returns the last index whose term is at most the given one", () => {
    const storage = new MemoryStorage();
    const log = new RaftLog(storage);
    // terms by index:   1 1 1 4 4 5 5 6 6 6
    const terms = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6];
    log.append(terms.map((t, i) => entry(i + 1, t)));
    assert.deepEqual(log.findConflictByTerm(logIndex(10), term(6)), { index: 10, term: 6 });
    assert.deepEqual(log.findConflictByTerm(logIndex(10), term(5)), { index: 7, term: 5 });
    assert.deepEqual(log.findConflictByTerm(logIndex(10), term(3)), { index: 3, term: 1 });
    assert.deepEqual(log.findConflictByTerm(logIndex(10), term(0)), { index: 0, term: 0 });
  });

  it("refuses to overwrite committed entries", () => {
    const log = new RaftLog(new MemoryStorage());
    log.append([entry(1, 1), entry(2, 1)]);
    log.commitTo(logIndex(2));
    assert.throws(() => log.append([entry(2, 2)]), { code: "CAIRN_ERR_RAFT_INVARIANT" });
    assert.throws(() => log.commitTo(logIndex(3)), { code: "CAIRN_ERR_RAFT_INVARIANT" });
  });
});

/**
 * A scan's pieces that decide alone: merging the shards' key-ordered lists. (Scans across
 * shards and nodes are exercised by multi-raft.test.ts, grpc-cluster.test.ts and the e2e tests.)
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { mergeSorted } from "../../src/replication/multi-raft-scan.ts";
import type { StoredItem } from "../../src/replication/index.ts";

const item = (key: string): StoredItem => ({
  key: Buffer.from(key),
  value: Buffer.from(`v-${key}`),
  version: { index: 1, term: 1 },
});
const keys = (items: readonly StoredItem[]): string[] =>
  items.map((i) => Buffer.from(i.key).toString());

describe("mergeSorted", () => {
  it("merges key-ordered lists into one, in byte order", () => {
    const merged = mergeSorted([
      [item("a"), item("d"), item("g")],
      [item("b"), item("e")],
      [],
      [item("c"), item("f"), item("h")],
    ]);
    assert.deepEqual(keys(merged), ["a", "b", "c", "d", "e", "f", "g", "h"]);
  });

  it("orders bytes, not strings (a longer key after its prefix, 0xff last)", () => {
    const hi = { ...item("x"), key: new Uint8Array([0xff]) };
    const merged = mergeSorted([[item("ab"), hi], [item("a")]]);
    assert.deepEqual(
      merged.map((i) => [...i.key]),
      [[0x61], [0x61, 0x62], [0xff]],
    );
  });

  it("merges nothing into nothing", () => {
    assert.deepEqual(mergeSorted([]), []);
    assert.deepEqual(mergeSorted([[], []]), []);
  });
});

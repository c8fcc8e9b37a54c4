/** The I/O threads' batches (src/api/handoff.ts): what a call's metadata and bytes become. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Metadata } from "@grpc/grpc-js";
import { BatchBuilder, metadataPairs, toMetadata } from "../../src/api/handoff.ts";

describe("hand-off batches", () => {
  it("carries application metadata, -bin values as their own bytes, and drops transport headers", () => {
    const md = new Metadata();
    md.set("user-agent", "grpc-node-js/1.14");
    md.set("grpc-accept-encoding", "identity");
    md.set("cairn-forwarded", "n2");
    md.add("x-tag", "a");
    md.add("x-tag", "b");
    const pool = Buffer.from("....payload....");
    md.set("trace-bin", pool.subarray(4, 11));
    const pairs = metadataPairs(md);
    assert.deepEqual(
      pairs?.map(([k, v]) => [k, typeof v === "string" ? v : Buffer.from(v).toString()]),
      [
        ["cairn-forwarded", "n2"],
        ["x-tag", "a"],
        ["x-tag", "b"],
        ["trace-bin", "payload"],
      ],
    );
    const bin = pairs?.find(([k]) => k === "trace-bin")?.[1] as Uint8Array;
    assert.equal(bin.buffer.byteLength, 7, "a clone of the value carries 7 bytes, not its pool");
    const back = toMetadata(pairs ?? null);
    assert.deepEqual(back.get("x-tag"), ["a", "b"]);
    assert.equal((back.get("trace-bin")[0] as Buffer).toString(), "payload");
    assert.equal(metadataPairs(new Metadata()), null, "no application metadata: null");
  });

  it("packs one turn's items into one buffer and starts empty again", async () => {
    let flushed = 0;
    const batch = new BatchBuilder(() => flushed++);
    batch.add([7, 1], Buffer.from("ab"));
    batch.add([8, 2], Buffer.alloc(0));
    batch.add([9, 3], Buffer.from("xyz"));
    const { head, body } = batch.take();
    assert.deepEqual([...head], [7, 1, 2, 8, 2, 0, 9, 3, 3]);
    assert.equal(Buffer.from(body).toString(), "abxyz");
    assert.equal(body.byteOffset, 0);
    assert.equal(body.buffer.byteLength, 5);
    assert.ok(batch.empty);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(flushed, 1, "one flush per turn, however many items");
  });
});

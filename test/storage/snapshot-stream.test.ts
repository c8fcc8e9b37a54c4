/**
 * The snapshot stream's bounds (src/storage/lsm/snapshot-stream.ts): a frame's declared length
 * is checked as soon as its 8-byte header is read, before any of its body is buffered (a peer's
 * stream, a u32 length: up to 4 GiB held for one frame), and a stream's image must be at the
 * sequence its snapshot names (expectImageSeq). The receiver's side of both, over gRPC, in
 * test/replication/snapshot-stream.test.ts and grpc-snapshot.test.ts.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import {
  decodeSnapshotStream,
  encodeSnapshotFrames,
  expectImageSeq,
  LsmEngine,
  LsmEnvironment,
  MAX_FRAME_BODY_BYTES,
  snapshotImageSeq,
} from "../../src/storage/lsm/index.ts";
import { tempDir } from "./helpers.ts";

const MIB = 1024 * 1024;
const b = (s: string): Buffer => Buffer.from(s, "latin1");

const env = new LsmEnvironment({ workers: 1, blockCacheBytes: 1 << 20 });
after(() => env.close());

/** The frame header (length, checksum) of a body of `length` bytes; the checksum is not checked before the body. */
function frameHeader(length: number): Buffer {
  const h = Buffer.alloc(8);
  h.writeUInt32LE(length, 0);
  return h;
}

/** Every item `chunks` decodes to, or the error decoding them rejects with. */
async function drain(chunks: AsyncIterable<Uint8Array>): Promise<void> {
  for await (const item of decodeSnapshotStream(chunks)) void item;
}

describe("a snapshot frame's declared length", () => {
  const header = [...encodeSnapshotFrames(7, [])][0] as Uint8Array;

  for (const [what, cut] of [
    ["alone in its chunk (the bytes after it carried to the next)", true],
    ["in a chunk with some of its body", false],
  ] as const) {
    it(`is refused at its header when over MAX_FRAME_BODY_BYTES: ${what}`, async () => {
      // A peer past the handshake sends a valid header frame, then a frame claiming 1 GiB, then
      // streams its bytes: the decoder copied them into a buffer growing as they came (160 MiB
      // fed grew the process's buffers by 397 MiB), up to 4 GiB for one frame.
      let bodyChunksAsked = 0;
      async function* stream(): AsyncGenerator<Uint8Array> {
        yield header;
        const claim = frameHeader(1 << 30);
        yield cut ? claim : Buffer.concat([claim, Buffer.alloc(4096)]);
        for (;;) {
          bodyChunksAsked++;
          yield Buffer.alloc(MIB);
        }
      }
      await assert.rejects(drain(stream()), {
        code: "CAIRN_ERR_SNAPSHOT_INVALID",
        message: new RegExp(
          `frame 1 declares a body of ${1 << 30} bytes, over the ${MAX_FRAME_BODY_BYTES}`,
        ),
      });
      assert.equal(bodyChunksAsked, 0, "no byte of its body was asked for");
    });
  }

  it("is the header's 20 bytes in the first frame", async () => {
    async function* stream(): AsyncGenerator<Uint8Array> {
      yield frameHeader(64 * MIB);
      yield Buffer.alloc(MIB);
    }
    await assert.rejects(drain(stream()), {
      code: "CAIRN_ERR_SNAPSHOT_INVALID",
      message: /frame 0 declares a body of 67108864 bytes, not the header's 20/,
    });
  });

  it("holds the largest frame a valid image has: a megabyte of entries, then the largest entry", async () => {
    // The largest key (limits.max_key_bytes at its maximum, 65,535, behind the driver's 1-byte
    // prefix) and value (limits.max_value_bytes at its maximum, 64 MiB, behind its 16-byte
    // version), after entries that leave the frame one byte short of its 1 MiB target.
    const filler = Buffer.alloc(1000, 1);
    const entries = function* (): Generator<[Uint8Array, Uint8Array]> {
      let body = 0;
      for (let i = 0; body + 1012 < MIB; i++) {
        const key = b(`a${String(i).padStart(5, "0")}`);
        yield [key, filler];
        body += 2 + key.length + 2 + filler.length;
      }
      yield [Buffer.alloc(65_536, 0x62), Buffer.alloc(64 * MIB + 16, 2)];
    };
    const frames = [...encodeSnapshotFrames(9, entries())];
    const largest = Math.max(...frames.map((f) => f.length - 8));
    assert.ok(largest > 65 * MIB, `a frame of ${largest} bytes`);
    assert.ok(largest <= MAX_FRAME_BODY_BYTES);
    let entriesSeen = 0;
    async function* stream(): AsyncGenerator<Uint8Array> {
      for (const frame of frames) {
        for (let at = 0; at < frame.length; at += MIB) yield frame.subarray(at, at + MIB);
      }
    }
    for await (const item of decodeSnapshotStream(stream()))
      if (item.kind === "entry") entriesSeen++;
    assert.ok(entriesSeen > 1000);
  });

  it("refuses an engine's import at the header, and the engine keeps its state", async () => {
    // The follower's install decodes the received file with the same decoder.
    const engine = await LsmEngine.open(tempDir("lsm-frame-bound"), env);
    try {
      await engine.write(1, [{ type: "put", key: b("mine"), value: b("1") }]);
      let bodyChunksAsked = 0;
      async function* stream(): AsyncGenerator<Uint8Array> {
        yield header;
        yield frameHeader(0xffff_ffff);
        for (;;) {
          bodyChunksAsked++;
          yield Buffer.alloc(MIB);
        }
      }
      await assert.rejects(engine.importSnapshot(stream()), {
        code: "CAIRN_ERR_SNAPSHOT_INVALID",
        message: /declares a body/,
      });
      assert.equal(bodyChunksAsked, 0);
      assert.equal(engine.failure, undefined);
      assert.deepEqual(engine.get(b("mine")), b("1"));
      assert.equal(engine.lastSeq, 1);
    } finally {
      await engine.close();
    }
  });
});

describe("expectImageSeq", () => {
  const image = Buffer.concat([...encodeSnapshotFrames(20, [[b("k"), b("v")]])]);

  it("passes an image at its sequence on as it comes, its header cut anywhere", async () => {
    assert.equal(snapshotImageSeq(image), 20);
    for (const cut of [1, 7, 27, 28, 29, image.length]) {
      async function* chunks(): AsyncGenerator<Uint8Array> {
        yield image.subarray(0, cut);
        if (cut < image.length) yield image.subarray(cut);
      }
      const passed: Uint8Array[] = [];
      for await (const chunk of expectImageSeq(chunks(), 20)) passed.push(chunk);
      assert.deepEqual(Buffer.concat(passed), image, `cut at ${cut}`);
    }
  });

  it("refuses an image at another sequence at its header, passing nothing after it on", async () => {
    for (const cut of [5, 28, image.length]) {
      let rest = false;
      async function* chunks(): AsyncGenerator<Uint8Array> {
        yield image.subarray(0, cut);
        rest = true;
        yield image.subarray(cut);
      }
      const passed: Uint8Array[] = [];
      await assert.rejects(
        (async () => {
          for await (const chunk of expectImageSeq(chunks(), 10)) passed.push(chunk);
        })(),
        { code: "CAIRN_ERR_SNAPSHOT_INVALID", message: /at sequence 20, not at 10/ },
      );
      assert.deepEqual(passed, [], `cut at ${cut}`);
      assert.equal(rest, cut < 28, `cut at ${cut}: read on only for the header's bytes`);
    }
  });

  it("passes on what is no image, for the decoder to refuse", async () => {
    assert.equal(snapshotImageSeq(b("not an image at all, but long enough")), null);
    const garbage = b("not an image at all, but long enough");
    async function* chunks(): AsyncGenerator<Uint8Array> {
      yield garbage;
    }
    const passed: Uint8Array[] = [];
    for await (const chunk of expectImageSeq(chunks(), 10)) passed.push(chunk);
    assert.deepEqual(Buffer.concat(passed), garbage);
  });
});

/** gRPC over HTTP/2 as the I/O threads speak it (src/api/grpc-wire.ts). */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { deflateSync, gzipSync } from "node:zlib";
import { status } from "@grpc/grpc-js";
import {
  deadlineOf,
  frame,
  headerPairs,
  MessageReader,
  MessageSizeGuard,
  statusFields,
  unaryMessage,
  WireError,
} from "../../src/api/grpc-wire.ts";

function wireError(fn: () => unknown): WireError {
  try {
    fn();
  } catch (err) {
    if (err instanceof WireError) return err;
    throw err;
  }
  assert.fail("no WireError");
}

describe("gRPC wire (I/O threads)", () => {
  it("reads grpc-timeout in every unit; none is no deadline, a malformed one NaN (refused)", () => {
    const now = 1_000_000;
    assert.equal(deadlineOf("2S", now), now + 2000);
    assert.equal(deadlineOf("150m", now), now + 150);
    assert.equal(deadlineOf("3M", now), now + 180_000);
    assert.equal(deadlineOf("1H", now), now + 3_600_000);
    assert.equal(deadlineOf("5000u", now), now + 5);
    assert.equal(deadlineOf("7000000n", now), now + 7);
    assert.equal(deadlineOf(undefined, now), Infinity);
    assert.ok(Number.isNaN(deadlineOf("123456789S", now)), "9 digits");
    assert.ok(Number.isNaN(deadlineOf("10x", now)));
    assert.equal(deadlineOf("12345678m", now), now + 12_345_678, "8 digits");
    for (const malformed of ["", "S", "7", "-1S", "1.5S", " 1S", "1S ", "+1S", "1s", "0x1S"]) {
      assert.ok(Number.isNaN(deadlineOf(malformed, now)), JSON.stringify(malformed));
    }
  });

  it("takes application metadata from the headers, -bin values decoded, protocol headers left", () => {
    const pairs = headerPairs([
      ":path",
      "/cairn.v1.KV/Put",
      "content-type",
      "application/grpc",
      "te",
      "trailers",
      "user-agent",
      "grpc-c++/1.51",
      "grpc-timeout",
      "1S",
      "grpc-accept-encoding",
      "identity",
      "cairn-forwarded",
      "n2",
      "trace-bin",
      `${Buffer.from("ab").toString("base64")},${Buffer.from("cd").toString("base64")}`,
      "trace-bin",
      Buffer.from("ef").toString("base64"),
    ]);
    assert.deepEqual(
      pairs?.map(([k, v]) => [k, typeof v === "string" ? v : Buffer.from(v).toString()]),
      [
        ["cairn-forwarded", "n2"],
        ["trace-bin", "ab"],
        ["trace-bin", "cd"],
        ["trace-bin", "ef"],
      ],
    );
    assert.equal(headerPairs([":path", "/x", "content-type", "application/grpc"]), null);
  });

  it("drops metadata gRPC does not allow (as grpc-js does): keys outside [0-9a-z_.-], values outside printable ASCII", () => {
    const pairs = headerPairs([
      "x-ok",
      "fine value ~",
      "x-user",
      "caf\u00e9",
      "x-tab",
      "a\tb",
      "x-del",
      "a\u007fb",
      "x+plus",
      "v",
      "x-ok.2_",
      "v2",
    ]);
    assert.deepEqual(pairs, [
      ["x-ok", "fine value ~"],
      ["x-ok.2_", "v2"],
    ]);
    assert.equal(headerPairs(["x-user", "caf\u00e9"]), null);
  });

  it("reads exactly one message of a unary request, in one chunk or several", () => {
    const msg = Buffer.from("hello");
    const framed = frame(msg);
    assert.deepEqual([...framed.subarray(0, 5)], [0, 0, 0, 0, 5]);
    assert.equal(unaryMessage([framed], undefined, 100).toString(), "hello");
    assert.equal(
      unaryMessage([framed.subarray(0, 3), framed.subarray(3)], undefined, 100).toString(),
      "hello",
    );
    assert.equal(unaryMessage([frame(Buffer.alloc(0))], undefined, 100).length, 0);
  });

  it("inflates gzip and deflate messages and refuses other encodings", () => {
    const compressed = (body: Buffer): Buffer => {
      const out = frame(body);
      out[0] = 1;
      return out;
    };
    assert.equal(unaryMessage([compressed(gzipSync("zipped"))], "gzip", 100).toString(), "zipped");
    assert.equal(
      unaryMessage([compressed(deflateSync("deflated"))], "deflate", 100).toString(),
      "deflated",
    );
    const err = wireError(() => unaryMessage([compressed(Buffer.from("x"))], "snappy", 100));
    assert.equal(err.code, status.UNIMPLEMENTED);
  });

  it("refuses a missing, partial, oversized or second message", () => {
    assert.equal(wireError(() => unaryMessage([], undefined, 100)).code, status.INTERNAL);
    const framed = frame(Buffer.from("hello"));
    assert.equal(
      wireError(() => unaryMessage([framed.subarray(0, 7)], undefined, 100)).code,
      status.INTERNAL,
    );
    assert.equal(
      wireError(() => unaryMessage([framed, framed], undefined, 100)).code,
      status.INTERNAL,
    );
    const big = wireError(() => unaryMessage([framed], undefined, 4));
    assert.equal(big.code, status.RESOURCE_EXHAUSTED);
    assert.match(big.message, /larger than max \(5 vs\. 4\)/);
  });

  it("writes statuses as grpc-js does: the message URI-encoded, metadata base64 when binary", () => {
    const only = statusFields(
      status.FAILED_PRECONDITION,
      "compare-and-set failed: 3/2 ≠ 4/2",
      [
        ["cairn-current-version", "3/2"],
        ["blob-bin", new Uint8Array([0xff, 0x00])],
      ],
      true,
    );
    assert.deepEqual(only, [
      [":status", "200"],
      ["content-type", "application/grpc+proto"],
      ["grpc-accept-encoding", "identity,deflate,gzip"],
      ["grpc-status", String(status.FAILED_PRECONDITION)],
      ["grpc-message", encodeURI("compare-and-set failed: 3/2 ≠ 4/2")],
      ["cairn-current-version", "3/2"],
      ["blob-bin", Buffer.from([0xff, 0x00]).toString("base64")],
    ]);
    assert.deepEqual(statusFields(0, "OK", null, false), [
      ["grpc-status", "0"],
      ["grpc-message", "OK"],
    ]);
  });

  it("reads a stream's messages in any split of its DATA, each as soon as it is whole", () => {
    fc.assert(
      fc.property(
        fc.array(fc.uint8Array({ maxLength: 300 }), { maxLength: 8 }),
        fc.array(fc.integer({ min: 1, max: 64 }), { minLength: 1, maxLength: 20 }),
        (messages, cuts) => {
          const wire = Buffer.concat(messages.map((m) => frame(m)));
          const reader = new MessageReader(1024);
          const got: Buffer[] = [];
          let at = 0;
          for (let i = 0; at < wire.length; i++) {
            const next = Math.min(wire.length, at + (cuts[i % cuts.length] as number));
            reader.push(wire.subarray(at, next), (m) => got.push(Buffer.from(m)));
            // Every message wholly inside what was pushed has been passed on, no other.
            let whole = 0;
            for (let end = 0; whole < messages.length; whole++) {
              end += 5 + (messages[whole] as Uint8Array).length;
              if (end > next) break;
            }
            assert.equal(got.length, whole);
            at = next;
          }
          assert.deepEqual(
            got,
            messages.map((m) => Buffer.from(m)),
          );
          assert.equal(reader.pending, false);
        },
      ),
    );
  });

  it("refuses a stream's message over the limit as soon as its prefix is in; a cut one is pending", () => {
    const reader = new MessageReader(10);
    const big = frame(new Uint8Array(11));
    reader.push(big.subarray(0, 2), () => assert.fail("no message yet"));
    const err = wireError(() => reader.push(big.subarray(2, 5), () => undefined));
    assert.equal(err.code, status.RESOURCE_EXHAUSTED);
    const cut = new MessageReader(10);
    cut.push(frame(new Uint8Array(4)).subarray(0, 7), () => assert.fail("not whole"));
    assert.equal(cut.pending, true);
  });

  it("holds a stream's first message to its own limit, the later ones to the stream's, in the same chunk", () => {
    const reader = new MessageReader(100, 4);
    const got: number[] = [];
    reader.push(Buffer.concat([frame(new Uint8Array(4)), frame(new Uint8Array(90))]), (m) =>
      got.push(m.length),
    );
    assert.deepEqual(got, [4, 90]);
    const err = wireError(() => new MessageReader(100, 4).push(frame(new Uint8Array(5)), () => 0));
    assert.equal(err.code, status.RESOURCE_EXHAUSTED);
    assert.equal(err.message, "Received message larger than max (5 vs. 4)");
  });

  it("refuses a stream's compressed message (UNIMPLEMENTED) at its prefix: nothing is inflated on the serving thread", () => {
    const body = gzipSync(Buffer.alloc(1 << 20));
    const zipped = Buffer.concat([Buffer.from([1, 0, 0, 0, 0]), body]);
    zipped.writeUInt32BE(body.length, 1);
    const reader = new MessageReader(4 << 20);
    const err = wireError(() => reader.push(zipped.subarray(0, 5), () => assert.fail("inflated")));
    assert.equal(err.code, status.UNIMPLEMENTED);
    assert.match(err.message, /compressed/);
  });

  it("guards the messages a proxied stream passes on, in any split, by their prefixes alone", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 12 }), { minLength: 1, maxLength: 6 }),
        fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 10 }),
        (sizes, cuts) => {
          const data = Buffer.concat(sizes.map((n) => frame(new Uint8Array(n))));
          const guard = new MessageSizeGuard(10);
          const over = sizes.findIndex((n) => n > 10);
          // The prefix of the first message over the limit ends at this byte.
          const limitAt =
            over < 0 ? Infinity : sizes.slice(0, over).reduce((a, n) => a + 5 + n, 0) + 5;
          let at = 0;
          let i = 0;
          while (at < data.length) {
            const end = Math.min(data.length, at + (cuts[i++ % cuts.length] as number));
            if (end >= limitAt) {
              const err = wireError(() => guard.check(data.subarray(at, end)));
              assert.equal(err.code, status.RESOURCE_EXHAUSTED);
              return;
            }
            guard.check(data.subarray(at, end));
            at = end;
          }
          assert.equal(over, -1, "a message over the limit passed");
        },
      ),
    );
  });

  it("guards a proxied stream's first message by its own limit, and says when it has passed", () => {
    const guard = new MessageSizeGuard(100, { first: 4, compressed: false });
    const first = frame(new Uint8Array(4));
    guard.check(first.subarray(0, 6));
    assert.equal(guard.firstPassed, false);
    guard.check(Buffer.concat([first.subarray(6), frame(new Uint8Array(90)).subarray(0, 5)]));
    assert.equal(guard.firstPassed, true);
    const big = wireError(() =>
      new MessageSizeGuard(100, { first: 4 }).check(frame(new Uint8Array(5))),
    );
    assert.equal(big.code, status.RESOURCE_EXHAUSTED);
    // A stream that takes no compressed message refuses one at its prefix; another passes it.
    const zipped = Buffer.from([1, 0, 0, 0, 3, 1, 2, 3]);
    const refused = wireError(() => guard.check(Buffer.concat([new Uint8Array(90), zipped])));
    assert.equal(refused.code, status.UNIMPLEMENTED);
    new MessageSizeGuard(100).check(zipped);
  });
});

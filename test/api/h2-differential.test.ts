/**
 * Differential HTTP/2: every case of h2-cases.ts sent, frame for frame, to a node:http2 server
 * (nghttp2, the reference the issue compares against) and to Cairn's front end (a real node),
 * comparing the outcome class: served, ignored (the connection lives, nothing answered), stream
 * error, connection error. Codes are not compared (the conformance suite checks Cairn's against
 * the RFC). Every intended difference is listed in DIFFERENCES with its reason; a listed
 * difference that has gone away fails too, so the list stays true.
 *
 * The node:http2 server answers like a gRPC server: a request on Meta.WatchCluster gets response
 * headers and stays open (a server stream), any other request a message and OK trailers once
 * the request has ended.
 */
import assert from "node:assert/strict";
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { NodeUnderAttack } from "../support/node-under-attack.ts";
import { CASES, type Case, observe, type Observed, WATCH } from "./h2-cases.ts";

/**
 * Cases where Cairn's outcome class differs from nghttp2's on purpose, by "§section what". Cairn
 * follows RFC 9113 where nghttp2 is lenient, or is stricter where a gRPC server may be.
 */
const ESCALATED =
  "nghttp2 makes this stream error a connection error (RFC 9113 §5.4.1 allows either); Cairn resets only the stream";
const LENIENT =
  "RFC 9113 §8.2.1 makes the request malformed (and gRPC metadata cannot carry it); node:http2's nghttp2 passes it to the application, Cairn resets the stream PROTOCOL_ERROR";

const DIFFERENCES: ReadonlyMap<string, string> = new Map([
  ["§5.1 DATA on a half-closed (remote) stream", ESCALATED],
  ["§5.1 HEADERS on a half-closed (remote) stream", ESCALATED],
  [
    "§5.1.1 a new stream with an id below one already opened",
    "RFC 9113 §5.1.1 asks for a connection error PROTOCOL_ERROR, as Cairn does; nghttp2 takes the lower id as a stream the client closed implicitly and ignores its HEADERS",
  ],
  ["§6.9 a zero increment on an open stream", ESCALATED],
  ["§6.9.1 a stream window raised past 2^31-1", ESCALATED],
  [
    "§5.3.1 HEADERS whose priority depends on its own stream (RFC 7540's PROTOCOL_ERROR, or ignored)",
    "Cairn ignores RFC 7540 priorities (RFC 9113 §5.3.2 deprecates them); nghttp2 still checks them and ends the connection",
  ],
  [
    "§6.3 PRIORITY on stream 0",
    "RFC 9113 §6.3 asks for a connection error PROTOCOL_ERROR, as Cairn does; nghttp2 (RFC 7540 priorities off) drops PRIORITY frames unread",
  ],
  [
    "§6.7 an unsolicited PING ACK (ignored)",
    "RFC 9113 §6.7 makes an ACK a reply, not an error; node:http2 ends the session (GOAWAY INTERNAL_ERROR) on a PING ACK it did not ask for, Cairn ignores it",
  ],
  [
    "§8.1 a second HEADERS without END_STREAM",
    "a malformed request: nghttp2 resets the stream, Cairn ends the connection (RFC 9113 §5.4.1 allows it; its HPACK state is intact either way)",
  ],
  ["§8.2.1 a field name with a space", LENIENT],
  ["§8.2.1 an empty field name", LENIENT],
  ["§8.2.1 a field name with a colon inside", LENIENT],
  ["§8.2.1 a field value with CR", LENIENT],
  ["§8.2.1 a field value with LF", LENIENT],
  ["§8.2.1 a field value with NUL", LENIENT],
  ["§8.2.1 a field value with leading whitespace", LENIENT],
  ["§8.2.1 a field value with trailing whitespace", LENIENT],
]);

const keyOf = (c: Case): string => `§${c.section} ${c.what}`;

function referenceServer(): http2.Http2Server {
  const server = http2.createServer({ settings: { maxConcurrentStreams: 1000 } });
  server.on("sessionError", () => undefined);
  server.on("stream", (stream, headers) => {
    stream.on("error", () => undefined);
    if (headers[":path"] === WATCH) {
      stream.respond({ ":status": 200, "content-type": "application/grpc" });
      stream.write(Buffer.from([0, 0, 0, 0, 0]));
      stream.resume();
      return;
    }
    stream.resume();
    stream.on("end", () => {
      if (stream.destroyed || stream.closed) return;
      stream.respond(
        { ":status": 200, "content-type": "application/grpc" },
        { waitForTrailers: true },
      );
      stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
      stream.end(Buffer.from([0, 0, 0, 0, 0]));
    });
  });
  return server;
}

describe(
  "HTTP/2 differential: node:http2 (nghttp2) and Cairn, case by case",
  { timeout: 300_000, concurrency: 8 },
  () => {
    // The GOAWAY grace shortened (default 1 s): every connection error waits for it to close.
    const node = new NodeUnderAttack({
      CAIRN_RPC_IO_THREADS: "0",
      CAIRN_RPC_GOAWAY_GRACE_MS: "200",
    });
    const reference = referenceServer();
    let referencePort = 0;
    before(async () => {
      await new Promise<void>((resolve) => reference.listen(0, "127.0.0.1", resolve));
      referencePort = (reference.address() as AddressInfo).port;
      await node.ensure();
    });
    after(async () => {
      reference.close();
      await node.stop();
    });

    for (const c of CASES) {
      it(keyOf(c), async () => {
        await node.ensure();
        const ours: Observed = await observe(node.port, c);
        const theirs: Observed = await observe(referencePort, c);
        const reason = DIFFERENCES.get(keyOf(c));
        const summary = `Cairn: ${ours.cls} (${ours.detail}); nghttp2: ${theirs.cls} (${theirs.detail})`;
        if (reason === undefined) {
          assert.equal(ours.cls, theirs.cls, `an unlisted difference: ${summary}`);
        } else {
          assert.notEqual(
            ours.cls,
            theirs.cls,
            `listed as a difference (${reason}), but both agree: ${summary}`,
          );
        }
      });
    }

    it("every listed difference names a case", () => {
      const keys = new Set(CASES.map(keyOf));
      assert.deepEqual(
        [...DIFFERENCES.keys()].filter((k) => !keys.has(k)),
        [],
      );
    });
  },
);

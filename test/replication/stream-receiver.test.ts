/**
 * The receiving end of a peer's Stream (stream-receiver.ts), fed frames in this process as the
 * front end hands them over (a RawStreamCall): the handshake first, its refusals, then batches
 * delivered with the sender's ids, forwarded calls and replies, and the frames that end the call.
 * Over real sockets, behind both receivers, in grpc-transport.test.ts and peer-check.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { logIndex, type Message, nodeId, type NodeId, term } from "../../src/raft/index.ts";
import type { ShardMessage } from "../../src/replication/index.ts";
import { type PeerCall, type PeerReply } from "../../src/replication/frame-codec.ts";
import {
  encodeBatchFrame,
  encodeCallFrame,
  encodeHandshakeFrame,
  encodeReplyFrame,
} from "../../src/replication/frame-encode.ts";
import type { PeerRefusalKind } from "../../src/replication/handshake.ts";
import { encodeSnapshotFrames } from "../../src/storage/index.ts";
import { type EndCall, streamReceiver } from "../../src/replication/stream-receiver.ts";
import { type LogLine, recordingLogger } from "./peer-support.ts";

const N1 = nodeId("n1");
const N2 = nodeId("n2");

function heartbeat(from: NodeId, to: NodeId, shard = 1): ShardMessage {
  const message: Message = {
    type: "heartbeat",
    from,
    to,
    term: term(3),
    commit: logIndex(9),
    readSeq: 4,
    quiesce: false,
    noReply: false,
  };
  return { shard, message };
}

function handshake(fields: { cluster?: string; from?: string; to?: string; replica?: string }) {
  return encodeHandshakeFrame({
    cluster_id: fields.cluster ?? "c1",
    from_node_id: fields.from ?? "n1",
    to_node_id: fields.to ?? "n2",
    from_replica_id: fields.replica ?? "",
  });
}

/** One call on a receiver for node n2 of cluster c1, and everything it did. */
function open(options: { handlerThrows?: boolean; callsThrow?: boolean; sender?: string } = {}) {
  const delivered: [string, ShardMessage[]][] = [];
  const failedReceives: number[] = [];
  const served: [string, PeerCall][] = [];
  const replies: [string, PeerReply][] = [];
  const refused: PeerRefusalKind[] = [];
  const lines: LogLine[] = [];
  const finished: { code: number; details: string; message: Uint8Array | null }[] = [];
  let headers = 0;
  const openCalls = new Set<EndCall>();
  const receive = streamReceiver(
    (from, messages) => {
      if (options.handlerThrows === true) throw new Error("the driver broke");
      delivered.push([from, messages]);
    },
    {
      self: N2,
      peerCheck: () => ({
        clusterId: "c1",
        self: N2,
        membership: (n) => (n === "n9" ? "removed" : "member"),
      }),
      refused: (kind) => refused.push(kind),
      calls: {
        serve(from, call) {
          if (options.callsThrow === true) throw new Error("no KV service");
          served.push([from, call]);
        },
        replied: (from, reply) => replies.push([from, reply]),
      },
      log: recordingLogger(lines),
      open: openCalls,
      metrics: {
        sent: () => undefined,
        bytesSent: () => undefined,
        received: () => undefined,
        failed: (direction) => {
          if (direction === "receive") failedReceives.push(1);
        },
      },
    },
  );
  const sink = receive({
    peer: "127.0.0.1:5555",
    sender: options.sender ?? "",
    identity: null,
    sendHeaders: () => headers++,
    finish: (code, details, message) => finished.push({ code, details, message }),
  });
  return {
    sink,
    delivered,
    served,
    replies,
    refused,
    lines,
    finished,
    openCalls,
    failedReceives: () => failedReceives.length,
    headers: () => headers,
  };
}

describe("streamReceiver", () => {
  it("accepts a handshake with response headers, then delivers each batch with the sender's ids", () => {
    const c = open();
    c.sink.message(handshake({ replica: "n1@ab" }));
    assert.equal(c.headers(), 1);
    const R1 = nodeId("n1@ab");
    const R2 = nodeId("n2@cd");
    c.sink.message(encodeBatchFrame([heartbeat(R1, N2, 1), heartbeat(R1, N2, 2)], ""));
    c.sink.message(encodeBatchFrame([heartbeat(R1, R2, 3)], R2));
    assert.deepEqual(c.delivered, [
      ["n1", [heartbeat(R1, N2, 1), heartbeat(R1, N2, 2)]],
      ["n1", [heartbeat(R1, R2, 3)]],
    ]);
    assert.equal(c.finished.length, 0, "still open");
    c.sink.end();
    assert.equal(c.finished.length, 1);
    assert.equal(c.finished[0]?.code, status.OK);
    assert.deepEqual(c.finished[0]?.message, new Uint8Array(0), "RaftStreamAck, empty");
    assert.equal(c.openCalls.size, 0);
  });

  it("the messages' `from` is the sender's node when its handshake names no replica", () => {
    const c = open();
    c.sink.message(handshake({}));
    c.sink.message(encodeBatchFrame([heartbeat(N1, N2)], ""));
    assert.deepEqual(c.delivered, [["n1", [heartbeat(N1, N2)]]]);
  });

  for (const [what, frame, code, kind] of [
    [
      "another cluster's",
      handshake({ cluster: "c2" }),
      status.FAILED_PRECONDITION,
      "other_cluster",
    ],
    ["a misaddressed", handshake({ to: "n3" }), status.FAILED_PRECONDITION, "misaddressed"],
    ["a removed member's", handshake({ from: "n9" }), status.PERMISSION_DENIED, "not_member"],
  ] as const) {
    it(`refuses ${what} handshake (${status[code]}), counted by kind, and delivers nothing after`, () => {
      const c = open();
      c.sink.message(frame);
      assert.equal(c.headers(), 0);
      assert.deepEqual(c.refused, [kind]);
      assert.equal(c.finished[0]?.code, code);
      assert.equal(c.finished[0]?.message, null);
      const line = c.lines.find((l) => l.message === "raft stream refused");
      assert.equal(line?.level, "warn");
      assert.equal(line?.fields["code"], status[code]);
      assert.ok(!JSON.stringify(line?.fields).includes("c2"), "the log names no cluster id");
      c.sink.message(encodeBatchFrame([heartbeat(N1, N2)], ""));
      assert.deepEqual(c.delivered, []);
      assert.equal(c.finished.length, 1, "finished once");
    });
  }

  it("refuses a handshake whose sender is not the node its call's cairn-peer names (PERMISSION_DENIED)", () => {
    // With peer TLS the front end checked cairn-peer against the connection's certificate: the
    // handshake must name the same node, or a certificate for n3 could speak for n1.
    const c = open({ sender: "n3" });
    c.sink.message(handshake({ from: "n1" }));
    assert.equal(c.headers(), 0);
    assert.deepEqual(c.refused, ["wrong_sender"]);
    assert.equal(c.finished[0]?.code, status.PERMISSION_DENIED);
    assert.match(c.finished[0]?.details ?? "", /names node "n1".*node "n3"/);
    c.sink.message(encodeBatchFrame([heartbeat(N1, N2)], ""));
    assert.deepEqual(c.delivered, []);
  });

  it("wants a handshake first", () => {
    const c = open();
    c.sink.message(encodeBatchFrame([heartbeat(N1, N2)], ""));
    assert.equal(c.finished[0]?.code, status.FAILED_PRECONDITION);
    assert.match(c.finished[0]?.details ?? "", /first frame must be a handshake/);
    assert.deepEqual(c.delivered, []);
  });

  it("refuses a malformed frame, a second handshake and a batch for another node's replica", () => {
    for (const [frame, details] of [
      [Buffer.from([0xff, 0xff, 0xff]), /malformed raft frame/],
      [handshake({}), /must be a batch, a call or a reply/],
      [encodeBatchFrame([heartbeat(N1, nodeId("n3@x"))], "n3@x"), /addressed to replica n3@x/],
    ] as const) {
      const c = open();
      c.sink.message(handshake({}));
      c.sink.message(frame);
      assert.equal(c.finished[0]?.code, status.INVALID_ARGUMENT);
      assert.match(c.finished[0]?.details ?? "", details);
      assert.deepEqual(c.delivered, []);
    }
  });

  it("drops a snapshot in a batch, delivering the rest: logged as a refused snapshot and counted", () => {
    // A snapshot comes over InstallSnapshot, whose receiver checks its length, checksum and
    // image (at the index its header says). One in a frame went straight to the driver, none of
    // that checked: a snapshot said to be at 10 with an image at 20 was acknowledged, and the
    // node failed at the next entry's apply. A correct sender never puts one in a frame.
    const c = open();
    c.sink.message(handshake({}));
    const image = Buffer.concat([...encodeSnapshotFrames(20, [])]);
    const snapshot: ShardMessage = {
      shard: 2,
      message: {
        type: "snapshot",
        from: N1,
        to: N2,
        term: term(3),
        snapshot: {
          meta: { index: logIndex(10), term: term(3), conf: { voters: [N1, N2], learners: [] } },
          data: image,
        },
      },
    };
    c.sink.message(encodeBatchFrame([heartbeat(N1, N2, 1), snapshot, heartbeat(N1, N2, 3)], ""));
    c.sink.message(encodeBatchFrame([snapshot], ""));
    assert.deepEqual(c.delivered, [["n1", [heartbeat(N1, N2, 1), heartbeat(N1, N2, 3)]]]);
    assert.equal(c.failedReceives(), 2);
    const refusals = c.lines.filter((l) => l.message === "raft snapshot refused");
    assert.equal(refusals.length, 2);
    assert.equal(refusals[0]?.level, "warn");
    assert.equal(refusals[0]?.fields["shard_id"], 2);
    assert.match(String(refusals[0]?.fields["details"]), /InstallSnapshot/);
    assert.deepEqual(c.finished, [], "the stream stays open");
  });

  it("hands forwarded calls and replies over with the sender's node id", () => {
    const c = open();
    c.sink.message(handshake({ replica: "n1@ab" }));
    const call = { id: 7, method: "/cairn.v1.KV/Put", timeoutMs: 900, request: Buffer.from("rq") };
    const reply = { id: 8, code: 0, details: "", response: Buffer.from("rs"), trailers: [] };
    c.sink.message(encodeCallFrame(call));
    c.sink.message(encodeReplyFrame(reply));
    assert.equal(c.served.length, 1);
    assert.equal(c.served[0]?.[0], "n1");
    assert.equal(c.served[0]?.[1].id, 7);
    assert.equal(c.served[0]?.[1].method, "/cairn.v1.KV/Put");
    assert.deepEqual(Buffer.from(c.served[0]?.[1].request ?? []), Buffer.from("rq"));
    assert.equal(c.replies[0]?.[0], "n1");
    assert.equal(c.replies[0]?.[1].id, 8);
    assert.deepEqual(c.finished, []);
  });

  it("logs a handler that throws and keeps the stream open", () => {
    const c = open({ handlerThrows: true, callsThrow: true });
    c.sink.message(handshake({}));
    c.sink.message(encodeBatchFrame([heartbeat(N1, N2)], ""));
    c.sink.message(
      encodeCallFrame({ id: 1, method: "/m", timeoutMs: 1, request: Buffer.alloc(0) }),
    );
    assert.deepEqual(
      c.lines.filter((l) => l.level === "error").map((l) => l.message),
      ["raft frame handler failed", "forwarded call handler failed"],
    );
    assert.deepEqual(c.finished, []);
  });

  it("is ended by the service's endAll while open, and forgotten once cancelled", () => {
    const c = open();
    c.sink.message(handshake({}));
    assert.equal(c.openCalls.size, 1);
    for (const end of c.openCalls) end({ code: status.UNAVAILABLE, details: "shutting down" });
    assert.deepEqual(c.finished, [
      { code: status.UNAVAILABLE, details: "shutting down", message: null },
    ]);
    c.sink.message(encodeBatchFrame([heartbeat(N1, N2)], ""));
    assert.deepEqual(c.delivered, []);

    const d = open();
    d.sink.cancelled();
    assert.equal(d.openCalls.size, 0);
    d.sink.end();
    assert.deepEqual(d.finished, [], "nothing is answered on a cancelled call");
  });
});

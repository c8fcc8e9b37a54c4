/**
 * The front end against a client that calls the peers' streaming methods (cairn.v1.Raft Stream
 * and InstallSnapshot) under a node's name it only claims (`cairn-peer` is a claim: the receiver
 * looks at who sends a call in its first message). Until that first message is whole the call is
 * held to a small bound, counted as a client's stream and request, and timed; a compressed
 * message on it is refused, never inflated. In this thread (`rpc.io_threads: 0`: Stream served
 * by its raw handler, InstallSnapshot proxied to the main thread's grpc-js server) and in an I/O
 * thread (both proxied). A peer's own calls pass, with messages up to the peers' limit sent
 * right behind their first.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { gzipSync } from "node:zlib";
import { Client, credentials, status } from "@grpc/grpc-js";
import { ConnectionSlots } from "../../src/api/connection-slots.ts";
import { DEFAULT_FRONT_END_LIMITS } from "../../src/api/handoff.ts";
import { loadRaftProto } from "../../src/api/proto.ts";
import { logIndex, nodeId, term } from "../../src/raft/index.ts";
import { encodeMessage } from "../../src/replication/codec.ts";
import { encodeCallFrame, encodeHandshakeFrame } from "../../src/replication/frame-encode.ts";
import { ownHandshake } from "../../src/replication/handshake.ts";
import {
  MAX_SNAPSHOT_CHUNK_BYTES,
  MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES,
  sendSnapshot,
  type SnapshotSendOptions,
} from "../../src/replication/snapshot-transfer.ts";
import {
  encodeBlock,
  F,
  type Field,
  frame,
  grpcMessage,
  grpcRequest,
  headerValue,
  type RawClientOptions,
  RawH2Client,
  T,
} from "../support/h2-raw.ts";
import { N1, N2, snapshotImage, snapshotMessage } from "../replication/peer-support.ts";
import { type PeerFrontEnd, startPeerFrontEnd, statusOf } from "./h2-limits-support.ts";

const STREAM = "/cairn.v1.Raft/Stream";
const INSTALL_SNAPSHOT = "/cairn.v1.Raft/InstallSnapshot";
/** The client writes every frame the front end sees, and sees its close at once. */
const PASSIVE: RawClientOptions = { passive: true, closeOnEnd: true };
/** The bound of each wait for an answer: only a failing test waits it out. */
const ANSWER_MS = 10_000;

/** n1's handshake to n2 in cluster c1, as a Stream's first message. */
const HANDSHAKE = grpcMessage(
  encodeHandshakeFrame({
    cluster_id: "c1",
    from_node_id: "n1",
    to_node_id: "n2",
    from_replica_id: "",
  }),
);

/** HEADERS opening a call of `path` as node `peer` says it is, its request not ended. */
/** A real sender's options, unpaced, cutting chunks of `chunkBytes`. */
function sendOptions(chunkBytes: number): SnapshotSendOptions {
  return {
    chunkBytes,
    limiter: { take: () => Promise.resolve() },
    stallTimeoutMs: ANSWER_MS,
    onBytes: () => undefined,
    signal: new AbortController().signal,
  };
}

function openCall(id: number, path: string, peer = "n1", extra: readonly Field[] = []): Buffer {
  return frame(
    T.HEADERS,
    F.END_HEADERS,
    id,
    encodeBlock(grpcRequest(path, [["cairn-peer", peer], ...extra])),
  );
}

/** A snapshot's header from n1 to n2 in cluster c1 (shard 1, 8 MiB announced), as a message. */
const SNAPSHOT_HEADER = grpcMessage(
  Buffer.from(
    loadRaftProto().cairn.v1.Raft.service.InstallSnapshot.requestSerialize({
      header: {
        handshake: ownHandshake("c1", N1, N1, N2),
        shard_id: 1,
        message: encodeMessage(snapshotMessage(7, new Uint8Array(0))),
        total_bytes: 8 << 20,
      },
    }),
  ),
);

/** `bytes` as DATA frames of at most 16 KiB on stream `id`, the last with END_STREAM if `end`. */
function data(id: number, bytes: Buffer, end = false): Buffer {
  const frames: Buffer[] = [];
  for (let at = 0; ; at += 16_384) {
    const last = at + 16_384 >= bytes.length;
    frames.push(frame(T.DATA, last && end ? F.END_STREAM : 0, id, bytes.subarray(at, at + 16_384)));
    if (last) return Buffer.concat(frames);
  }
}

/** A message prefix announcing `length` bytes. */
function prefix(length: number): Buffer {
  const out = Buffer.alloc(5);
  out.writeUInt32BE(length, 1);
  return out;
}

/** The status stream `id` ended with, asserted to be `code`. */
function expectStatus(
  client: RawH2Client,
  id: number,
  code: number,
): { message: string; error: string | undefined } {
  const got = statusOf(client, id);
  assert.ok(got?.code === code, `stream ${id}: ${JSON.stringify(got)}, not status ${code}`);
  return got;
}

/** The tag of the last PING sent (readAll). */
let tags = 0;

/** Resolves once the front end has read everything sent before (its ACK of a new PING). */
async function readAll(client: RawH2Client): Promise<void> {
  assert.ok(await client.roundTrip(++tags, ANSWER_MS), "the PING's ACK");
}

describe("front end: the receive limit of a snapshot's messages after its header", () => {
  it("is the size of the largest SnapshotChunk a sender makes (a data chunk of MAX_SNAPSHOT_CHUNK_BYTES), the front end's default too", () => {
    const serialize = loadRaftProto().cairn.v1.Raft.service.InstallSnapshot.requestSerialize;
    const largest = serialize({ data: Buffer.alloc(MAX_SNAPSHOT_CHUNK_BYTES) });
    assert.equal(largest.length, MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES);
    assert.equal(MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES, MAX_SNAPSHOT_CHUNK_BYTES + 5);
    // The trailer, the only other message after the header, is far smaller.
    const trailer = serialize({ trailer: { crc32c: 0xffffffff, total_bytes: 2 ** 53 - 1 } });
    assert.ok(trailer.length < 32, `${trailer.length} bytes`);
    // The front end (handoff.ts) does not import src/replication: its default is a copy.
    assert.equal(DEFAULT_FRONT_END_LIMITS.peerSnapshotMaxReceive, MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES);
  });
});

for (const ioThreads of [0, 1]) {
  describe(
    `front end: the peers' streaming calls from a caller not yet known (rpc.io_threads ${ioThreads})`,
    { timeout: 60_000 },
    () => {
      let fe: PeerFrontEnd;
      before(async () => {
        fe = await startPeerFrontEnd({ ioThreads });
      });
      after(() => fe.close());

      it("refuses a first message announced past the opening's bound at its prefix (a Stream's 64 KiB, a snapshot header's 1 MiB), not the peers' 128 MiB", async () => {
        // Before, each such call took 128 MiB: 12 of them on one connection took a node from
        // 134 MiB to 2.3 GiB in 9 s.
        const client = await RawH2Client.open(fe.port, PASSIVE);
        try {
          const announced = Buffer.concat([prefix(134_217_712), Buffer.alloc(16_000, 0x41)]);
          client.send(openCall(1, STREAM, "attacker"), data(1, announced));
          client.send(openCall(3, INSTALL_SNAPSHOT, "attacker"), data(3, announced));
          await readAll(client);
          assert.deepEqual(statusOf(client, 1), {
            code: status.RESOURCE_EXHAUSTED,
            message: "Received message larger than max (134217712 vs. 65536)",
            error: undefined,
          });
          assert.deepEqual(statusOf(client, 3), {
            code: status.RESOURCE_EXHAUSTED,
            message: "Received message larger than max (134217712 vs. 1048576)",
            error: undefined,
          });
        } finally {
          client.destroy();
        }
      });

      it("refuses a compressed message on a peer's stream (UNIMPLEMENTED), inflating nothing", async () => {
        // Cairn's peers never compress. Before, a Stream's message was inflated on the serving
        // thread, synchronously: 130 KB of gzip cost ~120 ms of it, inflated to 128 MiB.
        const client = await RawH2Client.open(fe.port, PASSIVE);
        try {
          const gzip: Field[] = [["grpc-encoding", "gzip"]];
          const zipped = grpcMessage(gzipSync(HANDSHAKE.subarray(5)), true);
          client.send(openCall(1, STREAM, "n1", gzip), data(1, zipped));
          client.send(openCall(3, INSTALL_SNAPSHOT, "n1", gzip), data(3, zipped));
          await readAll(client);
          for (const id of [1, 3]) {
            assert.match(expectStatus(client, id, status.UNIMPLEMENTED).message, /compressed/);
            // Trailers only: the handshake was never read, so never taken.
            assert.equal(client.streams.get(id)?.blocks.length, 1);
          }
        } finally {
          client.destroy();
        }
      });

      it("takes a peer's Stream whose later messages, up to the peers' limit, come right behind its handshake", async () => {
        const client = await RawH2Client.open(fe.port, PASSIVE);
        try {
          // A forwarded call of 600 KiB, far past the handshake's bound, in the handshake's DATA.
          const request = Buffer.alloc(600 << 10, 0x5a);
          const call = grpcMessage(
            encodeCallFrame({ id: 1, method: "/cairn.v1.KV/Put", timeoutMs: 1000, request }),
          );
          client.send(openCall(1, STREAM), data(1, Buffer.concat([HANDSHAKE, call]), true));
          const outcome = await client.streamDone(1, ANSWER_MS);
          assert.equal(
            headerValue(outcome?.blocks.at(-1), "grpc-status"),
            "0",
            JSON.stringify(outcome),
          );
          assert.equal(fe.calls.length, 1);
          assert.equal(fe.calls[0]?.request.length, request.length);
        } finally {
          client.destroy();
        }
      });

      it("takes a peer's snapshot whose header names a large meta group (1,200 members) and whose data chunks come right behind it", async () => {
        // The header carries the configuration: every member for the meta group's, each by its
        // replica id (a 128-character node id, '@', a 16-character tag).
        const learners = Array.from({ length: 1200 }, (_, i) =>
          nodeId(`${String(i).padStart(128, "n")}@${"t".repeat(16)}`),
        );
        const image = snapshotImage(3 << 20, 7);
        const client = new Client(`127.0.0.1:${fe.port}`, credentials.createInsecure());
        try {
          await sendSnapshot(
            client,
            ownHandshake("c1", N1, N1, N2),
            1,
            {
              type: "snapshot",
              from: N1,
              to: N2,
              term: term(2),
              snapshot: {
                meta: { index: logIndex(7), term: term(2), conf: { voters: [N1, N2], learners } },
                data: image,
              },
            },
            sendOptions(1 << 20),
          );
          const got = fe.snapshots.at(-1)?.message;
          assert.ok(got?.type === "snapshot", "the snapshot reached Raft");
          assert.equal(got.snapshot.meta.conf.learners.length, learners.length);
        } finally {
          client.close();
        }
      });

      it("holds a snapshot's messages after its header to a data chunk's (4 MiB and 5 bytes of tag and length), not the peers' 128 MiB, and takes chunks of that size", async () => {
        // The largest message a sender makes after the header: a data chunk of
        // MAX_SNAPSHOT_CHUNK_BYTES in its SnapshotChunk (the receiver refuses a larger chunk, but
        // only once the message is whole). Before, each message could be 128 MiB: a caller that
        // claims a node's name and sends a header the receiver takes had it buffered.
        const client = await RawH2Client.open(fe.port, PASSIVE);
        try {
          const over = MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES + 1;
          const body = Buffer.alloc(16_000, 0x41);
          // A header that passes the opening's bound (and the receiver: n1 is a member), then a
          // message one byte over the cap, the peers' 128 MiB, and one of exactly the cap.
          client.send(
            openCall(1, INSTALL_SNAPSHOT),
            data(1, Buffer.concat([SNAPSHOT_HEADER, prefix(over), body])),
          );
          client.send(
            openCall(3, INSTALL_SNAPSHOT),
            data(3, Buffer.concat([SNAPSHOT_HEADER, prefix(134_217_712), body])),
          );
          client.send(
            openCall(5, INSTALL_SNAPSHOT),
            data(
              5,
              Buffer.concat([SNAPSHOT_HEADER, prefix(MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES), body]),
            ),
          );
          await readAll(client);
          assert.deepEqual(statusOf(client, 1), {
            code: status.RESOURCE_EXHAUSTED,
            message: `Received message larger than max (${over} vs. ${MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES})`,
            error: undefined,
          });
          assert.deepEqual(statusOf(client, 3), {
            code: status.RESOURCE_EXHAUSTED,
            message: `Received message larger than max (134217712 vs. ${MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES})`,
            error: undefined,
          });
          assert.equal(statusOf(client, 5), null, "a message of exactly the cap goes on");
        } finally {
          client.destroy();
        }
        // A real sender cutting chunks of MAX_SNAPSHOT_CHUNK_BYTES: two messages of exactly the
        // cap and a last, shorter one, through the front end to Raft.
        const image = snapshotImage(2 * MAX_SNAPSHOT_CHUNK_BYTES + 1000, 7);
        const grpc = new Client(`127.0.0.1:${fe.port}`, credentials.createInsecure());
        try {
          await sendSnapshot(
            grpc,
            ownHandshake("c1", N1, N1, N2),
            1,
            snapshotMessage(7, image),
            sendOptions(MAX_SNAPSHOT_CHUNK_BYTES),
          );
          const got = fe.snapshots.at(-1)?.message;
          assert.ok(got?.type === "snapshot", "the snapshot reached Raft");
          assert.equal(got.snapshot.data.length, image.length);
          assert.ok(Buffer.from(got.snapshot.data).equals(image), "the data arrived intact");
        } finally {
          grpc.close();
        }
      });
    },
  );

  describe(
    `front end: a peer's call counts as a client's until its first message is whole (rpc.io_threads ${ioThreads})`,
    { timeout: 60_000 },
    () => {
      it("holds a slot of rpc.max_client_streams and its bytes in rpc.max_incoming_request_bytes until then; a member's address takes no slot", async () => {
        const slots = new ConnectionSlots(100, 0, 3, 1 << 20);
        const fe = await startPeerFrontEnd({ ioThreads, connections: slots.shared });
        const client = await RawH2Client.open(fe.port, PASSIVE);
        try {
          // Two Streams that sent all of their handshake but its last byte, and a snapshot call
          // that sent part of its header: the node's three slots.
          const head = HANDSHAKE.subarray(0, HANDSHAKE.length - 1);
          client.send(openCall(1, STREAM), data(1, head));
          client.send(openCall(3, STREAM, "attacker"), data(3, head));
          client.send(
            openCall(5, INSTALL_SNAPSHOT, "attacker"),
            data(5, Buffer.concat([prefix(100), Buffer.alloc(50)])),
          );
          await readAll(client);
          assert.equal(slots.openStreams, 3);
          assert.ok(slots.incoming >= 2 * head.length + 55, `${slots.incoming} bytes counted`);
          client.send(openCall(7, STREAM, "attacker"));
          await readAll(client);
          const refused = expectStatus(client, 7, status.RESOURCE_EXHAUSTED);
          assert.equal(refused.error, "CAIRN_ERR_STREAMS_FULL");
          assert.match(refused.message, /rpc\.max_client_streams \(3\)/);
          // Stream 1's handshake whole: the receiver takes it (every node is a member here), and
          // the call holds nothing of the clients' any more.
          const held = slots.incoming;
          client.send(data(1, HANDSHAKE.subarray(HANDSHAKE.length - 1)));
          await readAll(client);
          assert.equal(slots.openStreams, 2);
          assert.ok(slots.incoming < held, `${slots.incoming} bytes counted, ${held} before`);
          await client.until(
            (fs) => fs.some((f) => f.type === T.HEADERS && f.streamId === 1),
            "stream 1's response headers (its handshake accepted)",
          );
          assert.equal(statusOf(client, 1), null, "stream 1 goes on");
          // A member's address: clients that fill the slots must not keep a member's streams out.
          slots.setMembers(["127.0.0.1"]);
          client.send(openCall(9, STREAM), data(9, head));
          await readAll(client);
          assert.equal(slots.openStreams, 2);
          assert.equal(statusOf(client, 9), null);
        } finally {
          client.destroy();
          await fe.close();
        }
        assert.equal(slots.openStreams, 0);
        assert.equal(slots.incoming, 0);
      });

      it("answers a call whose first message is not whole within rpc.request_receive_timeout_ms RESOURCE_EXHAUSTED, and gives back what it held", async () => {
        const slots = new ConnectionSlots(100, 0, 100, 1 << 20);
        const fe = await startPeerFrontEnd({
          ioThreads,
          connections: slots.shared,
          limits: { requestReceiveTimeoutMs: 200 },
        });
        const client = await RawH2Client.open(fe.port, PASSIVE);
        try {
          client.send(openCall(1, STREAM, "attacker"), data(1, HANDSHAKE.subarray(0, 10)));
          client.send(openCall(3, INSTALL_SNAPSHOT, "attacker"), data(3, prefix(100)));
          for (const id of [1, 3]) {
            await client.streamDone(id, ANSWER_MS);
            const got = expectStatus(client, id, status.RESOURCE_EXHAUSTED);
            assert.equal(got.error, "CAIRN_ERR_REQUEST_TOO_SLOW");
          }
          await readAll(client);
          assert.equal(slots.openStreams, 0);
          assert.equal(slots.incoming, 0);
        } finally {
          client.destroy();
          await fe.close();
        }
      });
    },
  );
}

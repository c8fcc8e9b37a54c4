/**
 * The transport's connections to its peers (peer-links.ts): the backoff between streams (on a
 * virtual clock, against real sockets), what a stream's end settles, merged unreachable
 * reports, and the channels following a peer's address. Frames, budgets and refusals through
 * the whole transport are in grpc-transport.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import type { CallResult } from "../../src/api/grpc-channel.ts";
import { nodeId, type NodeId } from "../../src/raft/index.ts";
import { encodeBatchFrame } from "../../src/replication/frame-encode.ts";
import type { PeerLinks } from "../../src/replication/peer-links.ts";
import {
  eventually,
  freePort,
  heartbeat,
  type LogLine,
  N2,
  type RaftServer,
  recordingLogger,
  startRaftServer,
  testLinks,
} from "./peer-support.ts";

interface Rig {
  readonly links: PeerLinks;
  readonly lines: LogLine[];
  readonly unreachable: NodeId[];
  /** The virtual time the backoff reads (ms). */
  time: number;
  /** How often the peer's address was asked for. */
  resolved: number;
  address: string | null;
  close(): Promise<void>;
}

/** n1's links with a virtual clock, an even jitter, and a backoff of 100 ms up to 400 ms. */
function rig(): Rig {
  const lines: LogLine[] = [];
  const unreachable: NodeId[] = [];
  const state = { time: 1_000, resolved: 0, address: null as string | null };
  const { links, close } = testLinks({
    resolve: () => {
      state.resolved++;
      return state.address;
    },
    log: recordingLogger(lines),
    onUnreachable: (to) => unreachable.push(to),
    initialBackoffMs: 100,
    maxBackoffMs: 400,
    random: () => 0.5,
    now: () => state.time,
  });
  return Object.assign(state, { links, lines, unreachable, close });
}

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe("PeerLinks", () => {
  it("backs off between attempts, with equal jitter, doubling up to the cap", () => {
    const r = rig();
    const peer = r.links.link(N2);
    // The address is unknown: no stream, and no new attempt until the backoff passed.
    const expected = [
      [1_000, 1_075, 200], // 100 / 2 + 100 / 2 × 0.5
      [1_075, 1_225, 400],
      [1_225, 1_525, 400], // capped
      [1_525, 1_825, 400],
    ];
    for (const [at, retryAt, next] of expected) {
      r.time = at as number;
      const before = r.resolved;
      assert.equal(r.links.stream(peer), null);
      assert.equal(r.resolved, before + 1, "asked for the address");
      assert.equal(peer.retryAt, retryAt);
      assert.equal(peer.backoffMs, next);
      r.time = (retryAt as number) - 1;
      assert.equal(r.links.stream(peer), null);
      assert.equal(r.resolved, before + 1, "not asked again while backing off");
      assert.equal(r.links.stats(peer).state, "backoff");
    }
    assert.ok(
      r.lines.every((l) => l.level === "debug" && l.message === "raft peer address unknown"),
    );
    assert.equal(peer.streamsOpened, 0);
  });

  it("a failed stream backs off and is reported; an accepted one resets the backoff", async () => {
    const port = await freePort();
    const r = rig();
    r.address = `127.0.0.1:${port}`;
    const peer = r.links.link(N2);
    let server: RaftServer | null = null;
    try {
      const first = r.links.stream(peer);
      assert.ok(first !== null);
      assert.equal(peer.streamsOpened, 1);
      assert.equal(peer.framesSent, 1, "the handshake");
      await eventually("the failure", () => peer.streamFailures === 1);
      assert.equal(peer.stream, null);
      assert.equal(peer.retryAt, 1_075);
      assert.equal(peer.backoffMs, 200);
      assert.ok(
        r.lines.some((l) => l.level === "debug" && l.message === "raft peer stream failed"),
      );
      await eventually("reported unreachable", () => r.unreachable.length === 1);

      server = await startRaftServer(() => undefined, { clusterId: "c1", nodeId: "n2" }, r.address);
      assert.equal(r.links.stream(peer), null, "still backing off");
      // Past the backoff a new stream opens. (The channel spaces its own reconnections too, in
      // real time: an attempt within them fails at once, and backs off again.)
      let second = null;
      await eventually("accepted", () => {
        r.time = Math.max(r.time, peer.retryAt);
        second = r.links.stream(peer);
        return r.links.stats(peer).state === "connected";
      });
      assert.ok(second !== null);
      assert.equal(peer.backoffMs, 100, "reset");
      assert.equal(r.lines.filter((l) => l.message === "raft peer connected").length, 1);
      assert.equal(r.links.stream(peer), second, "the open stream is reused");

      const failures = peer.streamFailures;
      server.stop();
      server = null;
      await eventually("lost", () => peer.streamFailures === failures + 1);
      const lost = r.lines.find((l) => l.message === "raft peer stream lost");
      assert.equal(lost?.level, "warn", "a connected peer's loss is a warning");
      assert.equal(peer.wasConnected, false);
    } finally {
      await r.close();
      server?.stop();
    }
  });

  it("a stream's end settles what it owes: frames not handed over lost, calls failed", async () => {
    const port = await freePort();
    const r = rig();
    r.address = `127.0.0.1:${port}`;
    const peer = r.links.link(N2);
    try {
      const stream = r.links.stream(peer);
      assert.ok(stream !== null);
      const outcomes: boolean[] = [];
      r.links.write(peer, stream, encodeBatchFrame([heartbeat()], ""), (d) => outcomes.push(d));
      const results = new Map<number, CallResult>();
      for (const [id, left] of [
        [1, false],
        [2, true],
      ] as const) {
        stream.calls.set(id, {
          left,
          settle: (result) => {
            stream.calls.delete(id);
            results.set(id, result);
          },
        });
      }
      assert.equal(peer.framesSent, 2);
      await eventually("the stream ended", () => peer.stream === null && results.size === 2);
      assert.deepEqual(outcomes, [false]);
      for (const [id, result] of results) {
        assert.equal(result.code, status.UNAVAILABLE);
        assert.equal(result.details, "the stream to n2 ended before it answered");
        assert.equal(result.sent, id === 2, "sent only when some of its bytes left");
      }
      await eventually("in flight released", () => stream.inFlightBytes === 0);
    } finally {
      await r.close();
    }
  });

  it("merges the unreachable reports of a turn, never reports from inside the drop, nor once closing", async () => {
    const r = rig();
    const n2 = r.links.link(N2);
    const n3 = r.links.link(nodeId("n3"));
    r.links.drop(n2, 10);
    r.links.drop(n2, 0);
    r.links.drop(n3, 5);
    assert.deepEqual(r.unreachable, []);
    r.links.countDropped(n2, 7);
    await nextTurn();
    assert.deepEqual(r.unreachable, ["n2", "n3"]);
    assert.deepEqual(
      [n2.framesDropped, n2.bytesDropped, n3.framesDropped, n3.bytesDropped],
      [3, 17, 1, 5],
    );
    r.links.drop(n2, 0);
    await nextTurn();
    assert.deepEqual(r.unreachable, ["n2", "n3", "n2"]);
    r.links.drop(n2, 0);
    await r.close();
    await nextTurn();
    assert.equal(r.unreachable.length, 3);
  });

  it("keeps a peer's channels while its address holds, and makes new ones when it moves", async () => {
    const r = rig();
    const peer = r.links.link(N2);
    try {
      const channel = r.links.channel(peer, "127.0.0.1:1001");
      const client = r.links.client(peer, "127.0.0.1:1001");
      assert.equal(r.links.channel(peer, "127.0.0.1:1001"), channel);
      assert.equal(r.links.client(peer, "127.0.0.1:1001"), client);
      const moved = r.links.channel(peer, "127.0.0.1:1002");
      assert.notEqual(moved, channel);
      assert.equal(moved.address, "127.0.0.1:1002");
      assert.notEqual(r.links.client(peer, "127.0.0.1:1002"), client);
      assert.equal(r.links.link(N2), peer, "one link per node");
      assert.deepEqual(
        [...r.links.links()].map((l) => l.id),
        ["n2"],
      );
    } finally {
      await r.close();
    }
  });
});

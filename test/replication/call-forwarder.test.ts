/**
 * Client calls forwarded over the peer streams (call-forwarder.ts): a real stream to a real
 * receiver, whose node answers through the forwarder's receiveReply as its own stream back
 * would. What refuses a call before it is sent, whose answer counts, the frame limit, close().
 * Forwarding end to end (a follower's Put reaching the leader's KV service and back) is in
 * test/api/peer-forward.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { CallCut, IntMap } from "../../src/common/index.ts";
import { nodeId } from "../../src/raft/index.ts";
import { CallForwarder } from "../../src/replication/call-forwarder.ts";
import type { PeerCall, PeerReply } from "../../src/replication/index.ts";
import type {
  PeerLinks,
  PeerLinksOptions,
  PeerStream,
  StreamCall,
} from "../../src/replication/peer-links.ts";
import {
  eventually,
  type LogLine,
  type RaftServer,
  recordingLogger,
  startRaftServer,
  testLinks,
} from "./peer-support.ts";
import { deadlineClock } from "../../src/common/deadline-clock.ts";
import { stepWallClock } from "../support/wall-clock.ts";

interface Rig {
  readonly forwarder: CallForwarder;
  readonly server: RaftServer;
  /** The calls that reached node n2. */
  readonly served: PeerCall[];
  readonly lines: LogLine[];
  readonly links: ReturnType<typeof testLinks>;
  close(): Promise<void>;
}

/** n1's forwarder to a receiver for node n2 that takes calls and answers none by itself. */
async function rig(options: Partial<PeerLinksOptions> = {}): Promise<Rig> {
  const served: PeerCall[] = [];
  const server = await startRaftServer(() => undefined, {
    clusterId: "c1",
    nodeId: "n2",
    calls: { serve: (_from, call) => served.push(call), replied: () => undefined },
  });
  const lines: LogLine[] = [];
  const log = recordingLogger(lines);
  const links = testLinks({
    resolve: (n) => (n === "n2" ? server.address : null),
    log,
    ...options,
  });
  const forwarder = new CallForwarder(links.links, log);
  return {
    forwarder,
    server,
    served,
    lines,
    links,
    async close() {
      forwarder.close();
      await links.close();
      server.stop();
    },
  };
}

function answer(id: number, code = status.OK): PeerReply {
  return {
    id,
    code,
    details: code === status.OK ? "" : "refused",
    response: Buffer.from(`answer ${id}`),
    trailers: [["cairn-leader", "n3"]],
  };
}

/**
 * Links to n2 whose one stream is open and takes every frame, but hands none to the connection:
 * the peer's flow-control window is used up (a paused or overloaded leader that stopped
 * reading). A frame written stays queued on the stream and leaves once the window opens.
 */
function stalledLinks(): { links: PeerLinks; queued: Buffer[] } {
  const queued: Buffer[] = [];
  const stream = {
    calls: new IntMap<StreamCall>(),
    owed: new IntMap<(delivered: boolean) => void>(),
    inFlightBytes: 0,
    accepted: true,
  } as unknown as PeerStream;
  const link = { id: nodeId("n2") };
  const links = {
    maxFrameBytes: 1024 * 1024,
    link: () => link,
    stream: () => stream,
    overBudget: () => false,
    countDropped: () => undefined,
    write: (_peer: unknown, _stream: unknown, frame: Buffer) => queued.push(frame),
  } as unknown as PeerLinks;
  return { links, queued };
}

const HOUR = 3_600_000;
const soon = (): number => deadlineClock() + 5_000;

describe("CallForwarder", () => {
  it("answers a call with the reply of its id, from the node it went to only", async () => {
    const r = await rig();
    try {
      const pending = r.forwarder.call("n2", "/cairn.v1.KV/Put", Buffer.from("put"), {
        deadline: soon(),
      });
      await eventually("the call reached n2", () => r.served.length === 1);
      const call = r.served[0];
      assert.ok(call !== undefined);
      assert.equal(call.method, "/cairn.v1.KV/Put");
      assert.deepEqual(Buffer.from(call.request), Buffer.from("put"));
      assert.ok(call.timeoutMs > 4_000 && call.timeoutMs <= 5_000, "the time left travels");
      r.forwarder.receiveReply("n3", answer(call.id)); // not the node it went to: ignored
      r.forwarder.receiveReply("n2", answer(call.id + 1000)); // no such call: ignored
      r.forwarder.receiveReply("n2", answer(call.id));
      r.forwarder.receiveReply("n2", answer(call.id, status.INTERNAL)); // late: ignored
      const result = await pending;
      assert.equal(result.code, status.OK);
      assert.deepEqual(result.message, Buffer.from(`answer ${call.id}`));
      assert.deepEqual(result.trailers, [["cairn-leader", "n3"]]);
      assert.equal(result.sent, true);
    } finally {
      await r.close();
    }
  });

  it("a restarted node never takes an answer owed to the process before it", async () => {
    // n1 forwards a call to n2 and dies before the answer (a write waiting for its quorum);
    // n1 restarts, a new forwarder, and forwards another call. n2 answers the old call on its
    // stream to n1, which the new process now holds: that answer must not settle the new call
    // (chaos seed 800: both ids were 1, and a Delete got another key's put-if outcome).
    const before = await rig();
    const dying = before.forwarder.call("n2", "/cairn.v1.KV/Put", Buffer.from("old"), {
      deadline: soon(),
    });
    await eventually("the old call reached n2", () => before.served.length === 1);
    const old = before.served[0];
    assert.ok(old !== undefined);
    await before.close();
    assert.equal((await dying).code, status.UNAVAILABLE);
    const after = await rig();
    try {
      const pending = after.forwarder.call("n2", "/cairn.v1.KV/Delete", Buffer.from("new"), {
        deadline: soon(),
      });
      await eventually("the new call reached n2", () => after.served.length === 1);
      const call = after.served[0];
      assert.ok(call !== undefined);
      after.forwarder.receiveReply("n2", answer(old.id, status.FAILED_PRECONDITION));
      after.forwarder.receiveReply("n2", answer(call.id));
      const result = await pending;
      assert.equal(result.code, status.OK);
      assert.deepEqual(result.message, Buffer.from(`answer ${call.id}`));
    } finally {
      await after.close();
    }
  });

  it("a refusal keeps its status and details, with no message", async () => {
    const r = await rig();
    try {
      const pending = r.forwarder.call("n2", "/cairn.v1.KV/Put", Buffer.alloc(0), {
        deadline: soon(),
      });
      await eventually("the call reached n2", () => r.served.length === 1);
      r.forwarder.receiveReply("n2", answer(r.served[0]?.id ?? 0, status.UNAVAILABLE));
      const result = await pending;
      assert.deepEqual(
        [result.code, result.details, result.message, result.sent],
        [status.UNAVAILABLE, "refused", null, true],
      );
    } finally {
      await r.close();
    }
  });

  it("refuses, unsent, a call already cut, past its deadline, to a node it cannot reach, or over the frame limit", async () => {
    const r = await rig({ maxFrameBytes: 200 });
    try {
      const cut = new CallCut();
      cut.cut();
      const cases = [
        ["n2", 10, { deadline: soon(), cut }, status.CANCELLED, /cancelled before it was sent/],
        [
          "n2",
          10,
          { deadline: deadlineClock() - 1 },
          status.DEADLINE_EXCEEDED,
          /before it was sent/,
        ],
        ["n9", 10, { deadline: soon() }, status.UNAVAILABLE, /no stream to n9/],
        ["n2", 300, { deadline: soon() }, status.UNAVAILABLE, /over its budget/],
      ] as const;
      for (const [to, bytes, options, code, details] of cases) {
        const result = await r.forwarder.call(to, "/cairn.v1.KV/Put", Buffer.alloc(bytes), options);
        assert.equal(result.code, code);
        assert.match(result.details, details);
        assert.equal(result.sent, false);
      }
      const n2 = r.links.links.stats(r.links.links.link(nodeId("n2")));
      assert.equal(n2.framesDropped, 1, "the frame over the limit counted");
      assert.equal(n2.framesSent, 1, "the handshake only");
    } finally {
      await r.close();
    }
    assert.equal(r.served.length, 0, "nothing reached n2");
  });

  it("fails a call at its deadline, or when cut, outcome unknown once its bytes left", async () => {
    const r = await rig();
    try {
      const cut = new CallCut();
      const late = r.forwarder.call("n2", "/cairn.v1.KV/Put", Buffer.alloc(0), {
        deadline: deadlineClock() + 150,
      });
      const cancelled = r.forwarder.call("n2", "/cairn.v1.KV/Get", Buffer.alloc(0), {
        deadline: soon(),
        cut,
      });
      await eventually("both reached n2", () => r.served.length === 2);
      cut.cut();
      const c = await cancelled;
      assert.deepEqual([c.code, c.details, c.sent], [status.CANCELLED, "cancelled", true]);
      const l = await late;
      assert.deepEqual(
        [l.code, l.details, l.sent],
        [status.DEADLINE_EXCEEDED, "deadline exceeded", true],
      );
    } finally {
      await r.close();
    }
  });

  it("a call cut or past its deadline while its frame waits on a live stream may still reach the peer: sent", async () => {
    // Its bytes are queued on the stream, not withdrawn: they leave once the peer reads again,
    // and a write it carries applies. "Not sent" told a forwarded Put's client NOT_LEADER, not
    // applied, and the client's retry applied it a second time.
    const { links, queued } = stalledLinks();
    const forwarder = new CallForwarder(links, recordingLogger([]));
    try {
      const cut = new CallCut();
      const cancelled = forwarder.call("n2", "/cairn.v1.KV/Put", Buffer.alloc(0), {
        deadline: soon(),
        cut,
      });
      const late = forwarder.call("n2", "/cairn.v1.KV/Put", Buffer.alloc(0), {
        deadline: deadlineClock() + 100,
      });
      assert.equal(queued.length, 2, "both frames are on the stream");
      cut.cut();
      const c = await cancelled;
      assert.deepEqual([c.code, c.sent], [status.CANCELLED, true]);
      const l = await late;
      assert.deepEqual([l.code, l.sent], [status.DEADLINE_EXCEEDED, true]);
    } finally {
      forwarder.close();
    }
  });

  it("a step of the wall clock moves no deadline: a call in flight is answered, one due fails on time", async () => {
    // NTP stepping the clock, `date -s`: a forwarded Put waiting for its leader's answer failed
    // DEADLINE_EXCEEDED at the next sweep after a step forward of its time left, its outcome
    // unknown to the client.
    const r = await rig();
    let undo = (): void => undefined;
    try {
      const waiting = r.forwarder.call("n2", "/cairn.v1.KV/Put", Buffer.alloc(0), {
        deadline: deadlineClock() + 10_000,
      });
      await eventually("the call reached n2", () => r.served.length === 1);
      undo = stepWallClock(HOUR);
      const t0 = performance.now();
      // A call due in 300 ms fails then, not sooner, and the sweeps that ended it saw the first.
      const due = await r.forwarder.call("n2", "/cairn.v1.KV/Get", Buffer.alloc(0), {
        deadline: deadlineClock() + 300,
      });
      assert.equal(due.code, status.DEADLINE_EXCEEDED);
      assert.ok(performance.now() - t0 >= 290, "not ended early");
      const id = r.served[0]?.id ?? 0;
      r.forwarder.receiveReply("n2", answer(id));
      const result = await waiting;
      assert.equal(result.code, status.OK, result.details);
      assert.deepEqual(result.message, Buffer.from(`answer ${id}`));
    } finally {
      undo();
      await r.close();
    }
  });

  it("close() fails the calls waiting and refuses those after; a reply after is dropped", async () => {
    const r = await rig();
    const pending = r.forwarder.call("n2", "/cairn.v1.KV/Put", Buffer.alloc(0), {
      deadline: soon(),
    });
    await eventually("the call reached n2", () => r.served.length === 1);
    await r.close();
    const result = await pending;
    assert.deepEqual(
      [result.code, result.details, result.sent],
      [status.UNAVAILABLE, "the peer transport closed", true],
    );
    const after = await r.forwarder.call("n2", "/cairn.v1.KV/Put", Buffer.alloc(0), {
      deadline: soon(),
    });
    assert.deepEqual([after.code, after.sent], [status.UNAVAILABLE, false]);
    r.forwarder.reply("n2", answer(1));
    assert.ok(!r.lines.some((l) => l.message === "answer to a forwarded call dropped"));
  });

  it("drops an answer it cannot send, logged at debug and counted", async () => {
    const r = await rig();
    try {
      r.forwarder.reply("n9", answer(7));
      const line = r.lines.find((l) => l.message === "answer to a forwarded call dropped");
      assert.equal(line?.level, "debug");
      assert.deepEqual(line?.fields, { peer: "n9", call: 7 });
      assert.equal(r.links.links.link(nodeId("n9")).framesDropped, 1);
    } finally {
      await r.close();
    }
  });
});

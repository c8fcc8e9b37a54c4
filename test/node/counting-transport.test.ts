import { test } from "node:test";
import assert from "node:assert/strict";
import { countingTransport } from "../../src/node/counting-transport.ts";
import { CairnMetrics } from "../../src/ops/index.ts";
import { logIndex, nodeId, term } from "../../src/raft/index.ts";
import type { RaftTransport, ShardMessage } from "../../src/replication/index.ts";

function heartbeat(shard: number, to: string): ShardMessage {
  const message = {
    type: "heartbeat",
    from: nodeId("n1"),
    to: nodeId(to),
    term: term(1),
    commit: logIndex(0),
    readSeq: 0,
    quiesce: false,
    noReply: false,
  } as const;
  return { shard, message };
}

test("the counting transport passes each frame and each flush to the transport it wraps, in order", () => {
  const calls: string[] = [];
  const inner: RaftTransport = {
    send: (to, messages) => calls.push(`send ${to} ${messages.length}`),
    flush: () => calls.push("flush"),
  };
  const metrics = new CairnMetrics({ nodeId: "n1" });
  const counting = countingTransport(inner, metrics);
  counting.send(nodeId("n2"), [heartbeat(1, "n2"), heartbeat(2, "n2")]);
  // What the driver does before a blocking WAL write: without the flush reaching the
  // transport, the appends of the round wait behind the write.
  counting.flush();
  counting.send(nodeId("n3"), [heartbeat(1, "n3")]);
  assert.deepEqual(calls, ["send n2 2", "flush", "send n3 1"]);
});

test("the counting transport counts frames, messages and heartbeats per peer node", async () => {
  const metrics = new CairnMetrics({ nodeId: "n1" });
  const counting = countingTransport({ send: () => undefined, flush: () => undefined }, metrics);
  counting.send(nodeId("n2"), [heartbeat(1, "n2"), heartbeat(2, "n2")]);
  counting.send(nodeId("n2"), [heartbeat(3, "n2")]);
  const text = await metrics.registry.metrics();
  assert.match(text, /cairn_raft_frames_sent_total\{[^}]*peer="n2"[^}]*\} 2/);
  assert.match(text, /cairn_raft_messages_sent_total\{[^}]*peer="n2"[^}]*\} 3/);
  assert.match(text, /cairn_raft_heartbeats_sent_total\{[^}]*peer="n2"[^}]*\} 3/);
});

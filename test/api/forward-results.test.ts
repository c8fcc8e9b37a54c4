/**
 * The Forwarder on its own (no server, no socket): what it makes of the results its `peerCall`
 * gives, the caller's call a HandedCall as the front end hands one over. What a peer answers is
 * hostile until validated, and a forward's outcome must be told right: "not applied" only when
 * it is true, and never "outcome unknown" when nothing left this node.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Metadata, type ServerUnaryCall, type ServiceDefinition, status } from "@grpc/grpc-js";
import { Forwarder } from "../../src/api/forward.ts";
import type { CallResult } from "../../src/api/grpc-channel.ts";
import { HandedCall } from "../../src/api/io-threads.ts";
import { ERROR_CODE_KEY, LEADER_HINT_KEY } from "../../src/api/wire.ts";
import { type CallCut, deadlineClock } from "../../src/common/index.ts";
import { nodeId } from "../../src/raft/index.ts";
import { proto } from "./forward-support.ts";

const KV = proto.cairn.v1.KV.service as ServiceDefinition;

/** A client's Put as the front end hands it to the handlers (the parts they use), due in `ms`. */
function putCall(ms = 5_000): ServerUnaryCall<unknown, unknown> {
  return new HandedCall(
    { key: Buffer.from("k"), value: Buffer.from("v") },
    new Metadata(),
    deadlineClock() + ms,
    "127.0.0.1:1",
    "/cairn.v1.KV/Put",
  ) as unknown as ServerUnaryCall<unknown, unknown>;
}

interface Sent {
  readonly leader: string;
  readonly cut: CallCut;
  answer(result: CallResult): void;
}

/** A Forwarder whose peer calls wait in `sent` until answered; every key in shard 3. */
function forwarder(): {
  f: Forwarder;
  sent: Sent[];
  tell: (leader: string) => void;
} {
  const sent: Sent[] = [];
  let listener: ((shard: number, leader: string | null) => void) | null = null;
  const f = new Forwarder(
    {
      nodeId: "n9",
      addressOf: (id) => `${id}.invalid:7447`,
      leaderChangeGraceMs: 0,
      leaders: {
        shardOf: () => 3,
        watch: (l) => {
          listener = l;
          return () => undefined;
        },
      },
      peerCall: (leader, _path, _request, { cut }) =>
        new Promise<CallResult>((resolve) => sent.push({ leader, cut, answer: resolve })),
    },
    KV,
    4 * 1024 * 1024,
  );
  const tell = (leader: string): void => {
    assert.ok(listener !== null);
    (listener as (shard: number, leader: string | null) => void)(3, leader);
  };
  return { f, sent, tell };
}

describe("a forward's result", () => {
  it("a peer's answer whose trailers grpc-js refuses is still an answer (never a rejection)", async () => {
    const { f, sent } = forwarder();
    const forwarded = f.forwardTo("Put", nodeId("n1"), putCall());
    assert.ok(forwarded !== null);
    assert.equal(sent.length, 1);
    // A key with capitals and a space, a value with a newline: not metadata grpc-js takes.
    sent[0]?.answer({
      code: status.UNAVAILABLE,
      details: "busy",
      message: null,
      trailers: [
        ["Bad Key", "x"],
        ["cairn-error-code", "CAIRN_ERR_BACKPRESSURE"],
        ["x-odd", "a\nb"],
      ],
      sent: true,
    });
    const r = await forwarded;
    assert.equal(r.ok, false);
    if (r.ok) return;
    assert.equal(r.error.code, status.UNAVAILABLE);
    // The pairs grpc-js takes are relayed, the others dropped.
    assert.equal(r.error.metadata?.get(ERROR_CODE_KEY)[0], "CAIRN_ERR_BACKPRESSURE");
    assert.equal(r.error.metadata?.get(LEADER_HINT_KEY)[0], "n1");
    assert.deepEqual(r.error.metadata?.get("x-odd"), []);
    f.close();
  });
});

/**
 * A step of the wall clock (NTP stepping it at boot, a VM resumed on another host, `date -s`)
 * changes no duration the node measures: its timeouts, budgets and backoffs run on the monotonic
 * clock. Each test steps `Date.now` by an hour (test/support/wall-clock.ts) in the middle of one,
 * against the real front end and channel on loopback.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import * as grpc from "@grpc/grpc-js";
import { GrpcChannel } from "../../src/api/grpc-channel.ts";
import { freePort } from "../support/cluster-process.ts";
import { bytesMethod } from "../support/grpc-client.ts";
import {
  encodeBlock,
  F,
  frame,
  grpcMessage,
  grpcRequest,
  type RawClientOptions,
  RawH2Client,
  T,
  u32,
  unaryCall,
} from "../support/h2-raw.ts";
import { stepWallClock } from "../support/wall-clock.ts";
import { startFrontEnd, type TestFrontEnd, UNARY } from "./h2-limits-support.ts";
import { deadlineClock } from "../../src/common/deadline-clock.ts";

const HOUR = 3_600_000;
const BODY = Buffer.from("hello");
const PASSIVE: RawClientOptions = { passive: true, closeOnEnd: true };

/** A unary request's HEADERS and the first part of its message: the rest is still to come. */
function halfRequest(id: number): { head: Buffer; rest: Buffer } {
  const message = grpcMessage(BODY);
  return {
    head: Buffer.concat([
      frame(T.HEADERS, F.END_HEADERS, id, encodeBlock(grpcRequest(UNARY))),
      frame(T.DATA, 0, id, message.subarray(0, 3)),
    ]),
    rest: frame(T.DATA, F.END_STREAM, id, message.subarray(3)),
  };
}

describe("a wall clock step: the front end's timeouts", { timeout: 60_000 }, () => {
  it("a step forward ends nothing early: a request still arriving and an idle connection live out their timeouts", async () => {
    // Sweeps every second; each delay below outlasts one, and the timers run in order of
    // expiry on this thread, so a sweep has seen the request and the connection before the
    // step, and another sweep runs after it.
    const fe = await startFrontEnd({
      limits: { requestReceiveTimeoutMs: 4000, idleTimeoutMs: 4000 },
    });
    const arriving = await RawH2Client.open(fe.port, PASSIVE);
    const idle = await RawH2Client.open(fe.port, PASSIVE);
    let undo = (): void => undefined;
    try {
      idle.send(unaryCall(1, UNARY, BODY));
      assert.equal((await idle.grpcOutcome(1)).grpcStatus, grpc.status.OK);
      const { head, rest } = halfRequest(1);
      arriving.send(head);
      await delay(1100);
      undo = stepWallClock(HOUR);
      await delay(1100);
      arriving.send(rest);
      const outcome = await arriving.grpcOutcome(1);
      assert.equal(outcome.grpcStatus, grpc.status.OK, JSON.stringify(outcome));
      assert.equal(idle.goAway, null, "the idle connection is still open");
      idle.send(unaryCall(3, UNARY, BODY));
      assert.equal((await idle.grpcOutcome(3)).grpcStatus, grpc.status.OK);
    } finally {
      undo();
      arriving.destroy();
      idle.destroy();
      await fe.close();
    }
  });

  it("a step back disarms no timeout: a slow request and an idle connection are still ended on time", async () => {
    const fe = await startFrontEnd({
      limits: { requestReceiveTimeoutMs: 1000, idleTimeoutMs: 1000 },
    });
    const slow = await RawH2Client.open(fe.port, PASSIVE);
    const idle = await RawH2Client.open(fe.port, PASSIVE);
    let undo = (): void => undefined;
    try {
      idle.send(unaryCall(1, UNARY, BODY));
      assert.equal((await idle.grpcOutcome(1)).grpcStatus, grpc.status.OK);
      slow.send(halfRequest(1).head);
      await delay(400); // past the first sweep (every 250 ms): both are seen before the step
      undo = stepWallClock(-HOUR);
      // Ended after their 1 s; an hour unless the timeouts run on the monotonic clock.
      assert.ok(await slow.waitFor(() => slow.streams.get(1)?.ended === true, 5000), "cut");
      const outcome = await slow.grpcOutcome(1);
      assert.equal(outcome.grpcStatus, grpc.status.RESOURCE_EXHAUSTED, JSON.stringify(outcome));
      assert.match(outcome.message ?? "", /request_receive_timeout_ms/);
      assert.ok(await idle.waitFor(() => idle.goAway !== null, 5000), "GOAWAY to the idle one");
    } finally {
      undo();
      slow.destroy();
      idle.destroy();
      await fe.close();
    }
  });
});

describe("a wall clock step: the Rapid Reset budget", { timeout: 30_000 }, () => {
  let fe: TestFrontEnd;
  before(async () => {
    fe = await startFrontEnd({ limits: { maxResetsPerSecond: 10 } });
  });
  after(() => fe.close());

  it("a step back does not spend a budget refilled since: the connection serves on", async () => {
    const client = await RawH2Client.open(fe.port, PASSIVE);
    let undo = (): void => undefined;
    try {
      const resets = (first: number, count: number): Buffer[] =>
        Array.from({ length: count }, (_, i) => [
          unaryCall(first + 2 * i, UNARY, BODY),
          frame(T.RST_STREAM, 0, first + 2 * i, u32(0x8)),
        ]).flat();
      // The whole budget, then a call that shows the connection still serves.
      client.send(...resets(1, 10), unaryCall(21, UNARY, BODY));
      assert.equal((await client.grpcOutcome(21)).grpcStatus, grpc.status.OK);
      undo = stepWallClock(-HOUR);
      await delay(1200); // the bucket refills at 10 a second: full again
      client.send(...resets(23, 5), unaryCall(33, UNARY, BODY));
      const outcome = await client.grpcOutcome(33);
      assert.equal(outcome.grpcStatus, grpc.status.OK, JSON.stringify(outcome));
      assert.equal(client.goAway, null);
    } finally {
      undo();
      client.destroy();
    }
  });
});

describe("a wall clock step: the channel's reconnect backoff", { timeout: 30_000 }, () => {
  it("a step back within a backoff: the server is tried again after the backoff, not an hour later", async () => {
    const port = await freePort();
    const backoff = 200;
    const c = new GrpcChannel(`127.0.0.1:${port}`, {
      maxMessageBytes: 1 << 20,
      reconnectBackoffMs: backoff,
    });
    const server = new grpc.Server();
    let undo = (): void => undefined;
    try {
      const refused = await c.unary("/test.Peer/Echo", Buffer.from("x"), {
        deadline: deadlineClock() + 10_000,
      });
      assert.equal(refused.code, grpc.status.UNAVAILABLE);
      assert.match(refused.details, /ECONNREFUSED/);
      undo = stepWallClock(-HOUR);
      server.addService(
        { Echo: bytesMethod("test.Peer", "Echo", false) },
        {
          Echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) =>
            cb(null, call.request),
        },
      );
      await new Promise<number>((resolve, reject) =>
        server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err, p) =>
          err === null ? resolve(p) : reject(err),
        ),
      );
      // The backoff is what is tested: waiting it out is the behaviour, not a guess.
      await delay(backoff + 50);
      const back = await c.unary("/test.Peer/Echo", Buffer.from("again"), {
        deadline: deadlineClock() + 10_000,
      });
      assert.equal(back.code, grpc.status.OK, back.details);
      assert.equal(String(back.message), "again");
    } finally {
      undo();
      c.destroy();
      server.forceShutdown();
    }
  });
});

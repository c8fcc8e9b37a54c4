/**
 * The streaming methods a client may call (Meta.WatchCluster, the health service's Watch, server
 * reflection v1 and v1alpha), over real gRPC on loopback through the node's front end, which
 * proxies them to the main thread's grpc-js server: a request whose bytes are no message of the
 * method's type is the client's mistake, answered as a unary call's is (INVALID_ARGUMENT with
 * CAIRN_ERR_INVALID_ARGUMENT), not INTERNAL "Error deserializing request" without a code (what
 * grpc-js answers for its decoder's throw); and the node serves the next call. A health or
 * reflection request that protobufjs would read but protobuf's wire rules refuse (strict-wire.ts)
 * is refused the same way, unary health Check too, as every other service's is.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { ERROR_CODE_KEY, RpcServer } from "../../src/api/index.ts";
import { ClusterViewPublisher } from "../../src/cluster/index.ts";
import { CairnMetrics, silentLogger } from "../../src/ops/index.ts";
import { FollowerStore, LIMITS, TOTAL_SHARDS } from "./forward-support.ts";
import {
  grpcMessage,
  grpcRequest,
  headerValue,
  pbBytes,
  RawH2Client,
  requestFrames,
  type StreamOutcome,
  unaryCall,
} from "../support/h2-raw.ts";

const WATCH_CLUSTER = "/cairn.v1.Meta/WatchCluster";
const HEALTH_CHECK = "/grpc.health.v1.Health/Check";
const HEALTH_WATCH = "/grpc.health.v1.Health/Watch";
const REFLECTION = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
const REFLECTION_ALPHA = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
const STREAMING = [WATCH_CLUSTER, HEALTH_WATCH, REFLECTION, REFLECTION_ALPHA];

/** Bodies protobufjs cannot decode as any message (the wire rules refuse them too). */
const MALFORMED: [string, Buffer][] = [
  ["a tag cut short", Buffer.from([0x80])],
  ["field 15 of wire type 7, which does not exist", Buffer.from([0x7f])],
];

/** ServerReflectionRequest{list_services: ""}: field 7, a string. */
const LIST_SERVICES = pbBytes(7, Buffer.alloc(0));

const ANSWER_MS = 10_000;

let server: RpcServer;
let port: number;

before(async () => {
  const views = new ClusterViewPublisher(TOTAL_SHARDS, { minIntervalMs: 0 });
  views.setMembers([{ id: "n1", rpc_addr: "n1:1", http_addr: "n1:2", state: "alive" }]);
  server = new RpcServer({
    address: "127.0.0.1:0",
    nodeId: "n1",
    store: new FollowerStore("n1"),
    metrics: new CairnMetrics({ nodeId: "n1" }),
    views,
    logger: silentLogger,
    limits: LIMITS,
    maxMessageBytes: 4 * 1024 * 1024,
  });
  port = (await server.start()).port;
});

after(async () => {
  await server.close(1000);
});

/** The status block's grpc-status, grpc-message and cairn-error-code of an ended stream. */
function ending(outcome: StreamOutcome | null): {
  status: number | null;
  message: string | undefined;
  code: string | undefined;
  rst: number | null;
} {
  const block = outcome?.blocks.find((b) => headerValue(b, "grpc-status") !== undefined);
  const grpcStatus = headerValue(block, "grpc-status");
  const message = headerValue(block, "grpc-message");
  return {
    status: grpcStatus === undefined ? null : Number(grpcStatus),
    message: message === undefined ? undefined : decodeURIComponent(message),
    code: headerValue(block, ERROR_CODE_KEY),
    rst: outcome?.rst ?? null,
  };
}

describe("a streaming call whose request does not decode", () => {
  it("is refused INVALID_ARGUMENT with CAIRN_ERR_INVALID_ARGUMENT, each method, and the node serves the next call", async () => {
    const client = await RawH2Client.open(port);
    const wrong: string[] = [];
    try {
      let id = 1;
      for (const path of STREAMING) {
        for (const [what, body] of MALFORMED) {
          client.send(unaryCall(id, path, body));
          const got = ending(await client.streamDone(id, ANSWER_MS));
          id += 2;
          const escaped = path.replaceAll(".", "\\.");
          if (
            got.status !== status.INVALID_ARGUMENT ||
            got.code !== "CAIRN_ERR_INVALID_ARGUMENT" ||
            !new RegExp(`not a valid ${escaped} message`).test(got.message ?? "")
          ) {
            wrong.push(`${path}, ${what}: ${JSON.stringify(got)}`);
          }
        }
      }
      assert.deepEqual(wrong, [], "every malformed request is refused as the client's mistake");
      assert.equal(client.goAway, null, "the connection is kept");

      // The node, and the connection, serve each method's well-formed call.
      const answered = async (path: string, body: Buffer): Promise<number> => {
        const at = id;
        id += 2;
        client.send(unaryCall(at, path, body));
        const stream = (): StreamOutcome | undefined => client.streams.get(at);
        assert.ok(
          await client.waitFor(
            () => (stream()?.dataBytes ?? 0) > 0 || stream()?.ended === true,
            ANSWER_MS,
          ),
          `${path} answers`,
        );
        return stream()?.dataBytes ?? 0;
      };
      assert.ok((await answered(WATCH_CLUSTER, Buffer.alloc(0))) > 0, "a view");
      assert.ok((await answered(HEALTH_WATCH, Buffer.alloc(0))) > 0, "a health status");
      assert.ok((await answered(REFLECTION, LIST_SERVICES)) > 0, "the services");
    } finally {
      client.destroy();
    }
  });

  it("on a reflection stream: the requests before it are answered, then the call ends INVALID_ARGUMENT", async () => {
    const client = await RawH2Client.open(port);
    try {
      let id = 1;
      for (const path of [REFLECTION, REFLECTION_ALPHA]) {
        // One request's answer, for its size.
        client.send(unaryCall(id, path, LIST_SERVICES));
        const one = await client.streamDone(id, ANSWER_MS);
        id += 2;
        assert.equal(ending(one).status, status.OK);
        const answer = one?.dataBytes ?? 0;
        assert.ok(answer > 0);
        const body = Buffer.concat([
          grpcMessage(LIST_SERVICES),
          grpcMessage(LIST_SERVICES),
          grpcMessage((MALFORMED[1] as [string, Buffer])[1]),
          grpcMessage(LIST_SERVICES),
        ]);
        client.send(requestFrames(id, grpcRequest(path), body));
        const outcome = await client.streamDone(id, ANSWER_MS);
        id += 2;
        const got = ending(outcome);
        assert.equal(got.status, status.INVALID_ARGUMENT, `${path}: ${JSON.stringify(got)}`);
        assert.equal(got.code, "CAIRN_ERR_INVALID_ARGUMENT", path);
        assert.equal(
          outcome?.dataBytes,
          2 * answer,
          `${path}: the two requests before it answered`,
        );
      }
    } finally {
      client.destroy();
    }
  });
});

/**
 * Bodies protobufjs reads as a message (field 0 skipped, a varint 0 taken as an empty string, a
 * string decoded lossily) but protobuf's wire rules refuse (strict-wire.ts), per request type:
 * grpc.health.v1.HealthCheckRequest (service = 1) and ServerReflectionRequest (list_services = 7).
 */
const BREAKS_RULES: Readonly<Record<string, [string, Buffer, RegExp][]>> = {
  health: [
    ["field number 0", Buffer.from([0x00, 0x00]), /field number 0 at byte 0/],
    ["a string tagged varint", Buffer.from([0x08, 0x00]), /field 1 \(service\) comes varint/],
    ["a string not UTF-8", Buffer.from([0x0a, 0x02, 0xc3, 0x28]), /service: not UTF-8/],
  ],
  reflection: [
    ["field number 0", Buffer.from([0x00, 0x00, 0x3a, 0x00]), /field number 0 at byte 0/],
    ["a string tagged varint", Buffer.from([0x38, 0x00]), /field 7 \(list_services\) comes varint/],
    ["a string not UTF-8", Buffer.from([0x3a, 0x02, 0xc3, 0x28]), /list_services: not UTF-8/],
  ],
};

describe("a health or reflection request that breaks protobuf's wire rules", () => {
  it("is refused INVALID_ARGUMENT with CAIRN_ERR_INVALID_ARGUMENT, as every other service's is", async () => {
    const client = await RawH2Client.open(port);
    const wrong: string[] = [];
    try {
      let id = 1;
      const cases: [string, string][] = [
        [HEALTH_CHECK, "health"],
        [HEALTH_WATCH, "health"],
        [REFLECTION, "reflection"],
        [REFLECTION_ALPHA, "reflection"],
      ];
      for (const [path, kind] of cases) {
        for (const [what, body, rule] of BREAKS_RULES[kind] ?? []) {
          const at = id;
          id += 2;
          client.send(unaryCall(at, path, body));
          // Ended, or answered: a health Watch taken as well-formed streams its status on.
          const stream = (): StreamOutcome | undefined => client.streams.get(at);
          assert.ok(
            await client.waitFor(
              () => stream()?.ended === true || (stream()?.dataBytes ?? 0) > 0,
              ANSWER_MS,
            ),
            `${path} answers`,
          );
          const got = ending(stream() ?? null);
          if (
            (stream()?.dataBytes ?? 0) > 0 ||
            got.status !== status.INVALID_ARGUMENT ||
            got.code !== "CAIRN_ERR_INVALID_ARGUMENT" ||
            !rule.test(got.message ?? "")
          ) {
            wrong.push(
              `${path}, ${what}: ${JSON.stringify({ ...got, data: stream()?.dataBytes })}`,
            );
          }
        }
      }
      assert.deepEqual(wrong, [], "every request breaking the rules refused");
      assert.equal(client.goAway, null, "the connection is kept");
      // The well-formed check is answered as before: SERVING (a status, 2 bytes, in a message).
      client.send(unaryCall(id, HEALTH_CHECK, Buffer.alloc(0)));
      const ok = await client.streamDone(id, ANSWER_MS);
      assert.equal(ending(ok).status, status.OK);
      assert.ok((ok?.dataBytes ?? 0) > 0);
    } finally {
      client.destroy();
    }
  });
});

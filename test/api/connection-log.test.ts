/**
 * The lines a node logs for the connections its front end ends or refuses (src/api/server.ts,
 * ConnectionLog): any client causes one a connection, so each kind is rate-limited. Before,
 * one client opening connections that each sent a byte of TLS to the cleartext port, or a header
 * block in too many CONTINUATION frames, had the node write a WARN line for every one (1,800 a
 * second from one process).
 */
import assert from "node:assert/strict";
import { connect } from "node:net";
import { after, before, describe, it } from "node:test";
import { RpcServer } from "../../src/api/index.ts";
import { ClusterViewPublisher } from "../../src/cluster/index.ts";
import { CairnMetrics, createLogger } from "../../src/ops/index.ts";
import { FollowerStore, LIMITS, TOTAL_SHARDS } from "./forward-support.ts";
import { encodeBlock, F, frame, grpcRequest, RawH2Client, T } from "../support/h2-raw.ts";

interface Line {
  readonly level: string;
  readonly message: string;
  readonly fields: Record<string, unknown>;
}

const lines: Line[] = [];
let server: RpcServer;
let port: number;

before(async () => {
  const logger = createLogger({
    sink: { write: (line: string) => lines.push(JSON.parse(line) as Line) },
  });
  server = new RpcServer({
    address: "127.0.0.1:0",
    nodeId: "n1",
    store: new FollowerStore("n1"),
    metrics: new CairnMetrics({ nodeId: "n1" }),
    views: new ClusterViewPublisher(TOTAL_SHARDS, { minIntervalMs: 0 }),
    logger,
    limits: LIMITS,
    maxMessageBytes: 4 * 1024 * 1024,
  });
  port = (await server.start()).port;
});

after(async () => {
  await server.close(1000);
});

/** Opens a connection, sends `bytes`, and resolves once the node has closed it. */
function sendAndWaitClose(bytes: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.write(bytes));
    socket.on("error", () => undefined); // a reset is a close too
    socket.on("close", () => resolve());
    socket.setTimeout(10_000, () => {
      socket.destroy();
      reject(new Error("the node did not close the connection within 10 s"));
    });
  });
}

const count = (message: RegExp): Line[] => lines.filter((l) => message.test(l.message));

describe("the log of connections a client makes the node end", () => {
  it("50 connections speaking TLS to the cleartext port: at most 10 lines, not 50", async () => {
    // A TLS record header (handshake, TLS 1.0): the front end knows it for TLS at once.
    const hello = Buffer.from([0x16, 0x03, 0x01, 0x00, 0x05]);
    for (let i = 0; i < 50; i++) await sendAndWaitClose(hello);
    const logged = count(/spoke cleartext to this TLS port, or TLS to this cleartext one/);
    assert.ok(logged.length >= 1, "the first is logged");
    assert.ok(logged.length <= 10, `${logged.length} lines for 50 connections`);
    assert.ok(
      logged.every((l) => l.level === "WARN" && l.fields["code"] === "CAIRN_ERR_TLS_MISMATCH"),
    );
  });

  it("50 connections past a limit (a header block in 17 CONTINUATIONs): at most 10 lines", async () => {
    // Together, each closed by the client once it has the GOAWAY: the node's grace for a
    // client to close after one (1 s) would otherwise spread them past the log's window.
    const ended = await Promise.all(
      Array.from({ length: 50 }, async () => {
        const client = await RawH2Client.open(port);
        try {
          client.send(frame(T.HEADERS, 0, 1, Buffer.alloc(0)));
          for (let k = 0; k < 16; k++) client.send(frame(T.CONTINUATION, 0, 1, Buffer.alloc(0)));
          client.send(frame(T.CONTINUATION, F.END_HEADERS, 1, encodeBlock(grpcRequest("/x.Y/Z"))));
          return await client.waitFor(() => client.goAway !== null, 10_000);
        } finally {
          client.destroy();
        }
      }),
    );
    assert.ok(ended.every(Boolean), "every connection got its GOAWAY");
    const logged = count(/a gRPC client went past a limit; its connection was ended/);
    assert.ok(logged.length >= 1, "the first is logged");
    assert.ok(logged.length <= 10, `${logged.length} lines for 50 connections`);
    assert.ok(logged.every((l) => l.fields["code"] === "CAIRN_ERR_CONNECTION_LIMIT"));
  });
});

/**
 * The client's retry rules against an in-process fake KV service whose answers the test scripts:
 * writes are retried only when the failure proves they were not applied; a write that times out is
 * indeterminate and sent exactly once.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import {
  Metadata,
  Server,
  ServerCredentials,
  type ServiceError,
  status,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { loadCairnProto } from "../../src/api/index.ts";
import {
  CairnClient,
  IndeterminateWriteError,
  UnavailableError,
  VersionConflictError,
} from "../../src/client/index.ts";

type Answer = "ok" | "hang" | { code: status; cairn?: string; details?: string; current?: string };

let script: Answer[] = [];
let calls = 0;
let server: Server;
let address = "";

function answer(
  callback: (err: Partial<ServiceError> | null, res?: unknown) => void,
  ok: unknown,
): void {
  calls++;
  const a = script.shift() ?? "ok";
  if (a === "hang") return;
  if (a === "ok") return callback(null, ok);
  const metadata = new Metadata();
  if (a.cairn !== undefined) metadata.set("cairn-error-code", a.cairn);
  if (a.current !== undefined) metadata.set("cairn-current-version", a.current);
  callback({ code: a.code, details: a.details ?? "scripted", metadata });
}

before(async () => {
  const { proto } = loadCairnProto();
  server = new Server();
  const impl: UntypedServiceImplementation = {
    Put: (_call: unknown, cb: (e: Partial<ServiceError> | null, r?: unknown) => void) =>
      answer(cb, { version: { index: 7, term: 2 } }),
    Get: (_call: unknown, cb: (e: Partial<ServiceError> | null, r?: unknown) => void) =>
      answer(cb, { found: true, value: Buffer.from("v"), version: { index: 7, term: 2 } }),
    Delete: (_call: unknown, cb: (e: Partial<ServiceError> | null, r?: unknown) => void) =>
      answer(cb, { deleted: true, version: { index: 8, term: 2 } }),
    Scan: (_call: unknown, cb: (e: Partial<ServiceError> | null, r?: unknown) => void) =>
      answer(cb, { items: [], next_page_token: Buffer.alloc(0) }),
  };
  server.addService(proto.cairn.v1.KV.service, impl);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) =>
      err === null ? resolve(p) : reject(err),
    ),
  );
  address = `127.0.0.1:${port}`;
});

after(() => server.forceShutdown());

function client(timeoutMs = 2000): CairnClient {
  return new CairnClient({ endpoints: [address], timeoutMs, routing: false, initialBackoffMs: 1 });
}

describe("client retries", () => {
  it("retries a put refused before apply (not leader, proposal lost, backpressure)", async () => {
    script = [
      { code: status.UNAVAILABLE, cairn: "CAIRN_ERR_NOT_LEADER" },
      { code: status.UNAVAILABLE, cairn: "CAIRN_ERR_PROPOSAL_LOST" },
      { code: status.RESOURCE_EXHAUSTED, cairn: "CAIRN_ERR_BACKPRESSURE" },
    ];
    calls = 0;
    const c = client();
    assert.deepEqual(await c.put("k", "v"), { index: 7, term: 2 });
    assert.equal(calls, 4);
    c.close();
  });

  it("never retries a put whose failure does not prove it unapplied: indeterminate", async () => {
    script = [{ code: status.UNAVAILABLE, details: "Connection dropped" }];
    calls = 0;
    const c = client();
    await assert.rejects(c.put("k", "v"), IndeterminateWriteError);
    assert.equal(calls, 1);
    c.close();
  });

  it("reports a put that timed out as indeterminate, sent once", async () => {
    script = ["hang"];
    calls = 0;
    const c = client(300);
    await assert.rejects(c.put("k", "v"), IndeterminateWriteError);
    assert.equal(calls, 1);
    c.close();
  });

  it("retries a read on any UNAVAILABLE", async () => {
    script = [
      { code: status.UNAVAILABLE, details: "Connection dropped" },
      { code: status.UNAVAILABLE, cairn: "CAIRN_ERR_NOT_LEADER" },
    ];
    calls = 0;
    const c = client();
    assert.equal(await c.getString("k"), "v");
    assert.equal(calls, 3);
    c.close();
  });

  it("gives up within the deadline with UnavailableError", async () => {
    script = Array.from({ length: 1000 }, () => ({
      code: status.UNAVAILABLE,
      cairn: "CAIRN_ERR_NOT_LEADER",
    }));
    const c = client(200);
    const t0 = Date.now();
    await assert.rejects(c.get("k"), UnavailableError);
    assert.ok(Date.now() - t0 < 2000);
    script = [];
    c.close();
  });

  it("maps a CAS mismatch to VersionConflictError with the current version", async () => {
    script = [
      {
        code: status.FAILED_PRECONDITION,
        cairn: "CAIRN_ERR_VERSION_MISMATCH",
        current: "12/3",
      },
    ];
    calls = 0;
    const c = client();
    const err = await c.delete("k", { expectedVersion: { index: 1, term: 1 } }).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(err instanceof VersionConflictError);
    assert.deepEqual(err.current, { index: 12, term: 3 });
    assert.equal(calls, 1);
    c.close();
  });
});

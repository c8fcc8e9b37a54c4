/**
 * End to end, against the real `cairn serve` process and a plain grpc-js client built from
 * proto/: KV semantics, bad input (nothing changes), Admin, Meta and the standard health service.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  Client,
  credentials,
  loadPackageDefinition,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";
import { protoPath as healthProtoPath } from "grpc-health-check";
import { type Clients, connect, grpcError, type Reply } from "../support/grpc-client.ts";
import { type ServerProcess, startServer } from "../support/server-process.ts";

const b = (s: string): Buffer => Buffer.from(s);
let dir: string;
let server: ServerProcess;
let c: Clients;

// Three times: gRPC served by an I/O thread (rpc.io_threads 1), by the main thread (the
// default), and by three shard workers (shard_workers 3), where a call whose shard another
// worker owns is handed to it: the one connection here lands on one worker, and the keys' shards
// are spread over all three.
for (const [setting, env] of [
  ["rpc.io_threads 1", { CAIRN_RPC_IO_THREADS: "1" }],
  ["rpc.io_threads 0", { CAIRN_RPC_IO_THREADS: "0" }],
  ["shard_workers 3", { CAIRN_SHARD_WORKERS: "3" }],
] as const) {
  describe(`KV over gRPC, end to end (${setting})`, () => {
    before(async () => {
      dir = await mkdtemp(join(tmpdir(), "cairn-e2e-kv-"));
      server = await startServer({ dataDir: dir, env });
      c = connect(server.rpc);
    });

    after(async () => {
      c.close();
      const exit = await server.stop("SIGTERM");
      await rm(dir, { recursive: true, force: true });
      assert.deepEqual(exit, { code: 0, signal: null }, "a clean shutdown exits 0");
    });

    it("puts, gets and deletes with versions", async () => {
      const put = await c.call(c.kv, "Put", { key: b("alpha"), value: b("one") });
      const version = put["version"] as { index: number; term: number };
      assert.ok(version.index > 0 && version.term > 0);
      const got = await c.call(c.kv, "Get", { key: b("alpha") });
      assert.equal(got["found"], true);
      assert.equal((got["value"] as Buffer).toString(), "one");
      assert.deepEqual(got["version"], version);
      const serializable = await c.call(c.kv, "Get", {
        key: b("alpha"),
        consistency: "SERIALIZABLE",
      });
      assert.equal((serializable["value"] as Buffer).toString(), "one");

      const put2 = await c.call(c.kv, "Put", { key: b("alpha"), value: b("two") });
      assert.ok(
        (put2["version"] as { index: number }).index > version.index,
        "a key's versions grow",
      );

      const del = await c.call(c.kv, "Delete", { key: b("alpha") });
      assert.equal(del["deleted"], true);
      assert.equal((await c.call(c.kv, "Get", { key: b("alpha") }))["found"], false);
      assert.equal((await c.call(c.kv, "Delete", { key: b("alpha") }))["deleted"], false);
    });

    it("compare-and-set: the expected version must match; a mismatch changes nothing", async () => {
      const v1 = (await c.call(c.kv, "Put", { key: b("cas"), value: b("v1") }))["version"] as Reply;
      const wrong = { index: (v1["index"] as number) + 7, term: v1["term"] };
      const err = grpcError(
        await c
          .call(c.kv, "Put", { key: b("cas"), value: b("bad"), expected_version: wrong })
          .catch((e: unknown) => e),
      );
      assert.equal(err.code, status.FAILED_PRECONDITION);
      assert.equal(err.metadata.get("cairn-current-version")[0], `${v1["index"]}/${v1["term"]}`);
      assert.equal(
        ((await c.call(c.kv, "Get", { key: b("cas") }))["value"] as Buffer).toString(),
        "v1",
      );

      const ok = await c.call(c.kv, "Put", { key: b("cas"), value: b("v2"), expected_version: v1 });
      assert.ok(ok["version"]);
      // {0, 0}: create only if absent.
      const exists = grpcError(
        await c
          .call(c.kv, "Put", {
            key: b("cas"),
            value: b("x"),
            expected_version: { index: 0, term: 0 },
          })
          .catch((e: unknown) => e),
      );
      assert.equal(exists.code, status.FAILED_PRECONDITION);
      await c.call(c.kv, "Put", {
        key: b("cas-new"),
        value: b("x"),
        expected_version: { index: 0, term: 0 },
      });
      const delWrong = grpcError(
        await c
          .call(c.kv, "Delete", { key: b("cas"), expected_version: wrong })
          .catch((e: unknown) => e),
      );
      assert.equal(delWrong.code, status.FAILED_PRECONDITION);
      assert.equal((await c.call(c.kv, "Get", { key: b("cas") }))["found"], true);
    });

    it("rejects bad input with INVALID_ARGUMENT naming the limit, and changes nothing", async () => {
      await c.call(c.kv, "Put", { key: b("guarded"), value: b("original") });
      const cases: [string, Reply, RegExp][] = [
        ["Put", { key: Buffer.alloc(0), value: b("x") }, /key must not be empty/],
        ["Get", { key: Buffer.alloc(0) }, /key must not be empty/],
        ["Delete", { key: Buffer.alloc(0) }, /key must not be empty/],
        [
          "Put",
          { key: Buffer.alloc(4097, 1), value: b("x") },
          /limit is 4096 bytes \(limits.max_key_bytes\)/,
        ],
        [
          "Put",
          { key: b("guarded"), value: Buffer.alloc(1024 * 1024 + 1, 1) },
          /limit is 1048576 bytes \(limits.max_value_bytes\)/,
        ],
        [
          "Put",
          { key: b("guarded"), value: b("x"), expected_version: { index: 5, term: 0 } },
          /expected_version/,
        ],
        ["Scan", { prefix: b("a"), start: b("a") }, /either prefix or start\/end/],
        ["Scan", { start: b("b"), end: b("a") }, /start must sort before end/],
        ["Scan", { limit: 10_001 }, /at most 10000/],
        ["Scan", { page_token: b("garbage") }, /page_token/],
        // Enum values the schema does not define are refused, not read as the default.
        ["Get", { key: b("guarded"), consistency: 7 }, /consistency is 7/],
        ["Get", { key: b("guarded"), consistency: 0xffffffff }, /consistency is -1/],
        ["Scan", { consistency: 7 }, /consistency is 7/],
      ];
      for (const [method, req, message] of cases) {
        const err = grpcError(await c.call(c.kv, method, req).catch((e: unknown) => e));
        assert.equal(
          err.code,
          status.INVALID_ARGUMENT,
          `${method} ${JSON.stringify(Object.keys(req))}: ${err.details}`,
        );
        assert.match(err.details, message);
      }
      const got = await c.call(c.kv, "Get", { key: b("guarded") });
      assert.equal((got["value"] as Buffer).toString(), "original");
      // The client's mistakes are counted as `invalid`, not as the server's `error`.
      const metrics = await (await fetch(`http://${server.http}/metrics`)).text();
      const count = (status: string): number =>
        [
          ...metrics.matchAll(
            new RegExp(`^kv_requests_total\\{[^}]*status="${status}"\\} (\\S+)$`, "gm"),
          ),
        ]
          .map((m) => Number(m[1]))
          .reduce((a, x) => a + x, 0);
      assert.equal(count("error"), 0, "no request counted as the server's error");
      assert.ok(count("invalid") >= cases.length, `${count("invalid")} invalid requests counted`);
    });

    it("refuses a request past limits.max_message_bytes with INVALID_ARGUMENT naming the limit", async () => {
      // design.md §2: a request-size limit broken is INVALID_ARGUMENT with a message naming the
      // limit, as for a key or a value; sent whole, and gzip-compressed to a few KiB that
      // inflate past it.
      await c.call(c.kv, "Put", { key: b("sized"), value: b("original") });
      const zipped = connect(server.rpc, { "grpc.default_compression_algorithm": 2 });
      try {
        for (const [how, client] of [
          ["whole", c],
          ["gzip", zipped],
        ] as const) {
          const err = grpcError(
            await client
              .call(client.kv, "Put", { key: b("sized"), value: Buffer.alloc(5 * 1024 * 1024, 7) })
              .catch((e: unknown) => e),
          );
          assert.equal(err.code, status.INVALID_ARGUMENT, `${how}: ${err.details}`);
          assert.match(err.details, /the limit is 4194304 bytes \(limits\.max_message_bytes\)/);
          assert.deepEqual(err.metadata.get("cairn-error-code"), ["CAIRN_ERR_INVALID_ARGUMENT"]);
        }
      } finally {
        zipped.close();
      }
      const got = await c.call(c.kv, "Get", { key: b("sized") });
      assert.equal((got["value"] as Buffer).toString(), "original");
      // A streaming call's request likewise (Meta.WatchCluster): it was RESOURCE_EXHAUSTED.
      const raw = new Client(server.rpc, credentials.createInsecure());
      try {
        const watch = raw.makeServerStreamRequest(
          "/cairn.v1.Meta/WatchCluster",
          (m: Buffer) => m,
          (m: Buffer) => m,
          Buffer.alloc(5 * 1024 * 1024, 0),
        );
        const err = await new Promise<ServiceError>((resolve) => {
          watch.on("data", () => undefined);
          watch.on("error", resolve);
        });
        assert.equal(err.code, status.INVALID_ARGUMENT, `WatchCluster: ${err.details}`);
        assert.match(err.details, /the limit is 4194304 bytes \(limits\.max_message_bytes\)/);
      } finally {
        raw.close();
      }
    });

    it("scans in key order across shards, by range, prefix and pages", async () => {
      const keys = Array.from({ length: 40 }, (_, i) => `scan/${String(i).padStart(2, "0")}`);
      await Promise.all(keys.map((k) => c.call(c.kv, "Put", { key: b(k), value: b(`v:${k}`) })));
      const seen: string[] = [];
      let token: Buffer = Buffer.alloc(0);
      for (let page = 0; page < 10; page++) {
        const res = await c.call(c.kv, "Scan", {
          prefix: b("scan/"),
          limit: 15,
          page_token: token,
        });
        const items = res["items"] as { key: Buffer; value: Buffer }[];
        assert.ok(items.length <= 15);
        seen.push(...items.map((i) => i.key.toString()));
        token = res["next_page_token"] as Buffer;
        if (token.length === 0) break;
      }
      assert.deepEqual(seen, keys);
      const ranged = await c.call(c.kv, "Scan", { start: b("scan/10"), end: b("scan/13") });
      assert.deepEqual(
        (ranged["items"] as { key: Buffer }[]).map((i) => i.key.toString()),
        ["scan/10", "scan/11", "scan/12"],
      );
    });

    it("Admin.SnapshotShard compacts a shard; TransferLeader answers clearly on one node", async () => {
      const snap = await c.call(c.admin, "SnapshotShard", { shard_id: 0 });
      assert.equal(snap["shard_id"], 0);
      assert.ok((snap["index"] as number) > 0);
      const stream = (
        c.meta as unknown as {
          WatchCluster: (r: Reply) => NodeJS.EventEmitter & { cancel(): void };
        }
      ).WatchCluster({});
      stream.on("error", () => {}); // the cancellation below ends the stream with CANCELLED
      const view = await new Promise<Reply>((resolve) => stream.once("data", resolve));
      stream.cancel();
      const active = new Set((view["shards"] as Reply[]).map((s) => s["id"] as number));
      const idle = [...Array(1024).keys()].find((id) => !active.has(id));
      const notActive = grpcError(
        await c.call(c.admin, "SnapshotShard", { shard_id: idle }).catch((e: unknown) => e),
      );
      assert.equal(notActive.code, status.FAILED_PRECONDITION);
      assert.match(notActive.details, /not active on this node/);
      const outOfRange = grpcError(
        await c.call(c.admin, "SnapshotShard", { shard_id: 5000 }).catch((e: unknown) => e),
      );
      assert.equal(outOfRange.code, status.INVALID_ARGUMENT);
      const transfer = grpcError(
        await c
          .call(c.admin, "TransferLeader", { shard_id: 0, node_id: "n2" })
          .catch((e: unknown) => e),
      );
      assert.equal(transfer.code, status.INVALID_ARGUMENT);
      assert.match(transfer.details, /single-node cluster has no other replica/);
      const self = await c.call(c.admin, "TransferLeader", { shard_id: 0, node_id: "n1" });
      assert.equal(self["leader"], "n1");
    });

    it("Meta.WatchCluster streams the full view first", async () => {
      const stream = (
        c.meta as unknown as {
          WatchCluster: (r: Reply) => NodeJS.EventEmitter & { cancel(): void };
        }
      ).WatchCluster({});
      const view = await new Promise<Reply>((resolve, reject) => {
        stream.once("data", resolve);
        stream.once("error", reject);
      });
      stream.cancel();
      assert.equal(view["total_shards"], 1024);
      assert.deepEqual(
        (view["nodes"] as Reply[]).map((n) => [n["id"], n["rpc_addr"], n["state"]]),
        [["n1", server.rpc, "alive"]],
      );
      const shard0 = (view["shards"] as Reply[]).find((s) => s["id"] === 0);
      assert.equal(shard0?.["leader"], "n1");
    });

    it("serves grpc.health.v1", async () => {
      const health = loadPackageDefinition(
        loadSync(healthProtoPath, { keepCase: true, enums: String }),
      ) as unknown as {
        grpc: {
          health: {
            v1: {
              Health: new (
                a: string,
                c: unknown,
              ) => { Check: (r: Reply, cb: (e: unknown, r: Reply) => void) => void; close(): void };
            };
          };
        };
      };
      const client = new health.grpc.health.v1.Health(server.rpc, credentials.createInsecure());
      const res = await new Promise<Reply>((resolve, reject) =>
        client.Check({ service: "cairn.v1.KV" }, (e, r) => (e ? reject(e) : resolve(r))),
      );
      client.close();
      assert.equal(res["status"], "SERVING");
    });
  });
}

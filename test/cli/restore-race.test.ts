/**
 * `cairn restore` without --overwrite against a key written after its emptiness check: an
 * in-process fake KV service stands for the cluster, and another writer's Put lands between the
 * check (the Scan) and the restore's writes. The restore must leave that key as it is.
 */
import assert from "node:assert/strict";
import { mkdtempSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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
import { restore } from "../../src/cli/backup-commands.ts";
import { BackupWriter } from "../../src/cli/backup-file.ts";
import { type CliRun, runInProcess } from "../support/cli-run.ts";

type Cb = (err: Partial<ServiceError> | null, res?: unknown) => void;
interface Version {
  index: number;
  term: number;
}

let dir: string;
let server: Server;
let address = "";
/** The fake cluster's keys (as latin1 strings), with their values and versions. */
const store = new Map<string, { value: Buffer; version: Version }>();
let nextIndex = 1;
/** Runs once the restore's emptiness check (its Scan) was answered: the other writer. */
let afterScan: (() => void) | null = null;
/** Keys whose next Put is applied, then answered as a dropped connection (outcome unknown). */
const applyThenDrop = new Set<string>();

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "cairn-restore-race-"));
  const { proto } = loadCairnProto();
  server = new Server();
  const impl: UntypedServiceImplementation = {
    Put: (
      call: {
        request: { key: Buffer; value: Buffer; expected_version?: Version | null };
      },
      cb: Cb,
    ) => {
      const { key, value, expected_version: expected } = call.request;
      const held = store.get(key.toString("latin1"));
      if (expected !== null && expected !== undefined) {
        const same =
          held === undefined
            ? Number(expected.index) === 0
            : Number(expected.index) === held.version.index;
        if (!same) {
          const md = new Metadata();
          md.set("cairn-error-code", "CAIRN_ERR_VERSION_MISMATCH");
          if (held !== undefined)
            md.set("cairn-current-version", `${held.version.index}/${held.version.term}`);
          return cb({
            code: status.FAILED_PRECONDITION,
            details: "version mismatch",
            metadata: md,
          });
        }
      }
      const version = { index: nextIndex++, term: 1 };
      store.set(key.toString("latin1"), { value: Buffer.from(value), version });
      if (applyThenDrop.delete(key.toString("latin1")))
        return cb({ code: status.UNAVAILABLE, details: "Connection dropped" });
      cb(null, { version });
    },
    Get: (call: { request: { key: Buffer } }, cb: Cb) => {
      const held = store.get(call.request.key.toString("latin1"));
      cb(null, held === undefined ? { found: false } : { found: true, ...held });
    },
    Delete: (_call: unknown, cb: Cb) => cb({ code: status.UNIMPLEMENTED, details: "no" }),
    Scan: (call: { request: { prefix: Buffer; limit: number } }, cb: Cb) => {
      const prefix = call.request.prefix.toString("latin1");
      const items = [...store.keys()]
        .filter((k) => k.startsWith(prefix))
        .sort()
        .slice(0, call.request.limit)
        .map((k) => ({ key: Buffer.from(k, "latin1"), ...store.get(k) }));
      cb(null, { items, next_page_token: Buffer.alloc(0), skipped_shards: [] });
      const then = afterScan;
      afterScan = null;
      then?.();
    },
  };
  server.addService(proto.cairn.v1.KV.service, impl);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) =>
      err === null ? resolve(p) : reject(err),
    ),
  );
  address = `127.0.0.1:${port}`;
});

after(() => {
  server.forceShutdown();
  rmSync(dir, { recursive: true, force: true });
});

function run(args: readonly string[]): Promise<CliRun> {
  return runInProcess(restore, [...args, "--endpoints", address]);
}

describe("cairn restore without --overwrite", () => {
  it("leaves a key written after its emptiness check as it is, and says so (exit 4)", async () => {
    // The check found the range empty; the restore then wrote every key of the backup with a
    // plain Put, over the other writer's race/b (exit 0): the range was not empty any more.
    const file = join(dir, "race.bak");
    const w = await BackupWriter.create(file, {
      created: new Date().toISOString(),
      range: { prefix: Buffer.from("race/").toString("base64") },
      consistency: "linearizable",
    });
    for (const k of ["race/a", "race/b", "race/c"]) await w.add(Buffer.from(k), Buffer.from("old"));
    await w.finish();
    afterScan = () => {
      store.set("race/b", {
        value: Buffer.from("theirs"),
        version: { index: nextIndex++, term: 1 },
      });
    };
    const r = await run([file, "--concurrency", "1"]);
    assert.equal(store.get("race/b")?.value.toString(), "theirs", "the other writer's value stays");
    assert.equal(r.code, 4, r.err);
    assert.match(r.err, /race\/b/);
    assert.equal(store.get("race/a")?.value.toString(), "old");
  });

  it("writes the file it checked, not another one put at its path since the check", async () => {
    // The restore opened the path again for its writes: a backup renamed over it after the check
    // (a rotation script's \`mv new.bak latest.bak\`) was written instead, its range never
    // checked, and the checked one's keys were never written, exit 0 ("restored 1 keys").
    store.clear();
    const backupOf = async (path: string, key: string, value: string): Promise<void> => {
      const w = await BackupWriter.create(path, {
        created: new Date().toISOString(),
        range: { prefix: Buffer.from(key.slice(0, key.indexOf("/") + 1)).toString("base64") },
        consistency: "linearizable",
      });
      await w.add(Buffer.from(key), Buffer.from(value));
      await w.finish();
    };
    const file = join(dir, "latest.bak");
    const other = join(dir, "other.bak");
    await backupOf(file, "checked/a", "checked");
    await backupOf(other, "elsewhere/x", "never checked");
    afterScan = () => renameSync(other, file);
    const r = await run([file]);
    assert.equal(r.code, 0, r.err);
    assert.equal(store.get("checked/a")?.value.toString(), "checked");
    assert.equal(store.has("elsewhere/x"), false, "the file put in its place was not read");
  });

  it("a retry of its own write that had been applied is no conflict", async () => {
    // An attempt whose outcome was unknown and applied, then sent again: the key now holds
    // the restore's own value, which is not another writer's.
    store.clear();
    const file = join(dir, "own.bak");
    const w = await BackupWriter.create(file, {
      created: new Date().toISOString(),
      range: { prefix: Buffer.from("own/").toString("base64") },
      consistency: "linearizable",
    });
    await w.add(Buffer.from("own/a"), Buffer.from("mine"));
    await w.finish();
    applyThenDrop.add("own/a");
    const r = await run([file]);
    assert.equal(r.code, 0, r.err);
    assert.equal(store.get("own/a")?.value.toString(), "mine");
    assert.equal(applyThenDrop.size, 0, "the first attempt was applied, its answer lost");
  });
});

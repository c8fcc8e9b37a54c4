/**
 * A full disk (issue 51, item 7), on a real process and a small tmpfs: the node that fills it
 * stops, its log naming the WAL file and the cause; a restart on the full disk exits 1 with
 * CAIRN_ERR_DISK_FULL naming data_dir (not CAIRN_ERR_INTERNAL and a bare ENOSPC); once space is
 * freed (a larger tmpfs) it starts with every acknowledged write, the torn tail a full disk may
 * leave described as such.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { startExpectingExit } from "../support/failed-start.ts";
import { connect } from "../support/grpc-client.ts";
import { startServer } from "../support/server-process.ts";
import { mountTmpfs, tmpfsSkip, unmount } from "../support/tmpfs.ts";

const mounts: string[] = [];

describe("a full disk", () => {
  after(() => {
    for (const m of mounts) unmount(m);
  });

  it(
    "stops naming the WAL file, refuses to restart on the full disk naming data_dir",
    { skip: tmpfsSkip },
    async () => {
      const mount = mountTmpfs("3m");
      mounts.push(mount);
      const dir = join(mount, "data");
      const server = await startServer({ dataDir: dir });
      const c = connect(server.rpc);
      const acked = new Map<string, number>();
      try {
        for (let i = 0; ; i++) {
          const key = `k${i}`;
          await c.call(c.kv, "Put", {
            key: Buffer.from(key),
            value: Buffer.alloc(16_384, i % 251),
          });
          acked.set(key, i % 251);
        }
      } catch {
        // The disk is full: the write failed and the node stops.
      } finally {
        c.close();
      }
      assert.equal((await server.exited).code, 1);
      const fatal = server.lines.find((l) => l.includes("fatal storage or consistency error"));
      assert.ok(fatal !== undefined, server.lines.join("\n"));
      assert.match(
        fatal,
        new RegExp(`WAL write or sync to ${dir}/wal/\\d+\\.wal failed: no space left on device`),
      );
      assert.ok(acked.size > 0);

      const refused = await startExpectingExit({ dataDir: dir });
      assert.equal(refused.code, 1, refused.stderr);
      assert.equal(refused.errorCode, "CAIRN_ERR_DISK_FULL", refused.lines.join("\n"));
      assert.match(
        refused.stderr,
        new RegExp(`data_dir ${dir}: .*(the disk is full|disk is full)`),
      );

      // More room: everything acknowledged is there.
      execFileSync("mount", ["-o", "remount,size=16m", mount], { stdio: "ignore" });
      const again = await startServer({ dataDir: dir });
      const c2 = connect(again.rpc);
      try {
        const torn = again.lines.find((l) => l.includes("torn write"));
        if (torn !== undefined) assert.match(torn, /failed write, such as on a full disk/);
        for (const [key, byte] of acked) {
          const got = await c2.call(c2.kv, "Get", { key: Buffer.from(key) });
          assert.deepEqual(got["value"], Buffer.alloc(16_384, byte), key);
        }
      } finally {
        c2.close();
        await again.stop();
      }
    },
  );
});

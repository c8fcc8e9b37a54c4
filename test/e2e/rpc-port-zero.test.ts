/**
 * `rpc_addr` on port 0: the node serves gRPC (TCP) and SWIM (UDP) on one port number, so the
 * port it picks must be free for both. Linux picks a TCP bind's port among the odd numbers of
 * the ephemeral range, without looking at UDP: in a namespace whose odd UDP ports are all taken,
 * a node that bound gRPC first failed every start ("address ... is already in use (rpc_addr)").
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { netns, netnsSkip, type NetNs } from "../support/netns.ts";
import { runCairn, startServer } from "../support/server-process.ts";

const RANGE: [number, number] = [40000, 40099];
const ODD: number[] = [];
for (let p = RANGE[0] + 1; p <= RANGE[1]; p += 2) ODD.push(p);

describe("rpc_addr on port 0", { skip: netnsSkip }, () => {
  let ns: NetNs;
  let dir: string;
  before(async () => {
    ns = await netns(RANGE, ODD);
    dir = await mkdtemp(join(tmpdir(), "cairn-port-zero-"));
  });
  after(async () => {
    await ns.close();
    await rm(dir, { recursive: true, force: true });
  });

  for (const workers of [1, 2]) {
    it(`takes a port free for TCP and UDP (${workers} shard worker${workers > 1 ? "s" : ""})`, async () => {
      // What the kernel gives a TCP listener on port 0 here is taken for UDP.
      const tcp = Number(
        execFileSync("nsenter", [
          `--net=/proc/${ns.pid}/ns/net`,
          "--",
          process.execPath,
          "-e",
          `const s = require("node:net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });`,
        ]).toString(),
      );
      assert.ok(ODD.includes(tcp), `TCP's port 0 gave ${tcp} here, not a held odd port`);

      const server = await startServer({
        dataDir: join(dir, `w${workers}`),
        args: ["--rpc-addr", "127.0.0.1:0", "--shard-workers", String(workers)],
        netnsPid: ns.pid,
      });
      try {
        const port = Number(server.rpc.slice(server.rpc.lastIndexOf(":") + 1));
        assert.ok(port >= RANGE[0] && port <= RANGE[1] && !ODD.includes(port), server.rpc);
        const put = await runCairn(["--endpoints", server.rpc, "put", "k", "v"], ns.pid);
        assert.equal(put.code, 0, put.err);
        const get = await runCairn(["--endpoints", server.rpc, "get", "k"], ns.pid);
        assert.equal(get.code, 0, get.err);
        assert.equal(get.out.trim(), "v");
      } finally {
        const exit = await server.stop();
        assert.equal(exit.code, 0, server.stderr());
      }
    });
  }
});

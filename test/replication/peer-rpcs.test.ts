/**
 * The unary calls a node makes of its peers (peer-rpcs.ts) against a real receiver: where a
 * call goes, what it refuses before sending, the cluster id as it is at each call, and an
 * answer that does not match its question. The answering side's refusals, and what they look
 * like here, are in raft-service.test.ts; the read-index batching in read-index.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type ServiceError, status } from "@grpc/grpc-js";
import { nodeId } from "../../src/raft/index.ts";
import { PeerRpcs } from "../../src/replication/peer-rpcs.ts";
import type { TermCheck } from "../../src/replication/index.ts";
import { startRaftServer, testLinks } from "./peer-support.ts";

const N1 = nodeId("n1");
const N2 = nodeId("n2");
const CHECKS: TermCheck[] = [
  { shard: 1, term: 4, replica: "n2@ab" },
  { shard: 2, term: 5, replica: "n2@ab" },
];

describe("PeerRpcs", () => {
  it("calls a replica's node, with the cluster id as it is at each call", async () => {
    const asked: TermCheck[][] = [];
    const server = await startRaftServer(() => undefined, {
      clusterId: "c1",
      nodeId: "n2",
      confirmTerms: (checks) => {
        asked.push([...checks]);
        return checks.map((c) => c.term > 4);
      },
    });
    const links = testLinks({ resolve: (n) => (n === "n2" ? server.address : null) });
    let clusterId = "c2";
    const rpcs = new PeerRpcs(links.links, () => clusterId, N1, links.closing.signal);
    try {
      await assert.rejects(rpcs.confirmTerms(nodeId("n2@ab"), CHECKS, 5_000), {
        code: status.FAILED_PRECONDITION,
      });
      clusterId = "c1";
      assert.deepEqual(await rpcs.confirmTerms(nodeId("n2@ab"), CHECKS, 5_000), [false, true]);
      assert.deepEqual(asked, [CHECKS]);
    } finally {
      await links.close();
      server.stop();
    }
  });

  it("refuses at once a peer whose address is not known, and every call once closing", async () => {
    const links = testLinks();
    const rpcs = new PeerRpcs(links.links, "c1", N1, links.closing.signal);
    await assert.rejects(rpcs.proposeMeta(N2, new Uint8Array([1]), 5_000), {
      message: "the address of n2 is not known",
    });
    await assert.rejects(rpcs.readIndex(nodeId("n3@x"), [1], [0], 5_000), {
      message: "the address of n3 is not known",
    });
    await links.close();
    await assert.rejects(rpcs.confirmTerms(N2, CHECKS, 5_000), {
      message: "the transport is closed",
    });
  });

  it("takes an answer with another number of term checks than asked for an error", async () => {
    const server = await startRaftServer(() => undefined, {
      clusterId: "c1",
      nodeId: "n2",
      confirmTerms: () => [true],
    });
    const links = testLinks({ resolve: () => server.address });
    const rpcs = new PeerRpcs(links.links, "c1", N1, links.closing.signal);
    try {
      await assert.rejects(rpcs.confirmTerms(N2, CHECKS, 5_000), {
        message: "1 answers to 2 term checks from n2",
      });
    } finally {
      await links.close();
      server.stop();
    }
  });

  it("sends a read index call with this node's replica as the voucher, and its results in order", async () => {
    const vouchers: string[] = [];
    const server = await startRaftServer(() => undefined, {
      clusterId: "c1",
      nodeId: "n2",
      readIndex: (shard, voucher) => {
        vouchers.push(`${shard}:${voucher?.replica ?? "-"}@${voucher?.term ?? 0}`);
        return Promise.resolve(shard * 10);
      },
    });
    const links = testLinks({ resolve: () => server.address });
    const rpcs = new PeerRpcs(links.links, "c1", nodeId("n1@ab"), links.closing.signal);
    try {
      const results = await rpcs.readIndex(N2, [3, 1], [7, 0], 5_000);
      assert.deepEqual(
        results.map((r) => [r.index, r.error_code]),
        [
          [30, ""],
          [10, ""],
        ],
      );
      assert.deepEqual(vouchers.sort(), ["1:-@0", "3:n1@ab@7"]);
    } finally {
      await links.close();
      server.stop();
    }
  });

  it("a failed call rejects as grpc-js reports one: code, details, trailers", async () => {
    const server = await startRaftServer(() => undefined, { clusterId: "c1", nodeId: "n2" });
    const links = testLinks({ resolve: () => server.address });
    const rpcs = new PeerRpcs(links.links, "c1", N1, links.closing.signal);
    try {
      await assert.rejects(
        rpcs.proposeMeta(N2, new Uint8Array([1]), 5_000),
        (err: ServiceError) => {
          assert.ok(err instanceof Error);
          assert.equal(err.code, status.UNIMPLEMENTED);
          assert.equal(err.message, `${status.UNIMPLEMENTED} UNIMPLEMENTED: ${err.details}`);
          assert.equal(typeof err.metadata.get, "function");
          return true;
        },
      );
    } finally {
      await links.close();
      server.stop();
    }
  });
});

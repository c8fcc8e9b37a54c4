/**
 * Meta.WatchCluster of a node whose view stopped following its cluster (decommissioned: the
 * RpcServer's staleViewReason), over real gRPC on loopback: the watch is refused, or ended,
 * UNAVAILABLE with CAIRN_ERR_NOT_MEMBER; and a node probing who runs at that address
 * (probeMember: the duplicate node id check of a join under the member's id) still learns the
 * member's incarnation from the refusal's trailers, so a running decommissioned node keeps its
 * id from being taken.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { type ClientReadableStream, credentials, type ServiceError, status } from "@grpc/grpc-js";
import { ERROR_CODE_KEY, RpcServer } from "../../src/api/index.ts";
import { ClusterViewPublisher } from "../../src/cluster/index.ts";
import { probeMember } from "../../src/node/cluster.ts";
import { CairnMetrics, silentLogger } from "../../src/ops/index.ts";
import { FollowerStore, LIMITS, proto, TOTAL_SHARDS } from "./forward-support.ts";
import {
  encodeBlock,
  F,
  frame,
  grpcMessage,
  grpcRequest,
  RawH2Client,
  type StreamOutcome,
  T,
} from "../support/h2-raw.ts";

const views = new ClusterViewPublisher(TOTAL_SHARDS, { minIntervalMs: 0 });
let stale: string | null = null;
let server: RpcServer;
let address: string;

before(async () => {
  views.setClusterId("cluster-a");
  views.setIncarnation("inc-1");
  // n1 decommissioned: what a decommissioning member's removal watch reads (removal-watch.ts).
  views.setMembers(
    (["decommissioned", "active"] as const).map((member_state, i) => ({
      id: `n${i + 1}`,
      rpc_addr: `n${i + 1}:1`,
      http_addr: `n${i + 1}:2`,
      state: "alive",
      member_state,
    })),
  );
  server = new RpcServer({
    address: "127.0.0.1:0",
    nodeId: "n2",
    store: new FollowerStore("n1"),
    metrics: new CairnMetrics({ nodeId: "n2" }),
    views,
    logger: silentLogger,
    limits: LIMITS,
    maxMessageBytes: 4 * 1024 * 1024,
    staleViewReason: () => stale,
  });
  address = `127.0.0.1:${(await server.start()).port}`;
});

after(async () => {
  await server.close(1000);
});

/** A watch's views (ids of their clusters) and how it ended. */
function watch(): {
  readonly views: string[];
  readonly first: Promise<void>;
  readonly ended: Promise<ServiceError>;
  readonly cancel: () => void;
} {
  const client = new proto.cairn.v1.Meta(address, credentials.createInsecure());
  const call = client.WatchCluster({}) as ClientReadableStream<{ cluster_id: string }>;
  const seen: string[] = [];
  let firstView: () => void = () => undefined;
  const first = new Promise<void>((resolve) => (firstView = resolve));
  call.on("data", (v: { cluster_id: string }) => {
    seen.push(v.cluster_id);
    firstView();
  });
  const ended = new Promise<ServiceError>((resolve) => {
    call.on("error", (err: ServiceError) => {
      client.close();
      resolve(err);
    });
  });
  return { views: seen, first, ended, cancel: () => call.cancel() };
}

describe("Meta.WatchCluster of a node whose view stopped following its cluster", () => {
  it("streams views while the node follows its cluster, and probeMember reads its incarnation", async () => {
    const w = watch();
    await w.first;
    assert.deepEqual(w.views, ["cluster-a"]);
    w.cancel();
    assert.equal((await w.ended).code, status.CANCELLED);
    assert.deepEqual(await probeMember(address, "n2"), {
      clusterId: "cluster-a",
      incarnation: "inc-1",
      firstSeed: false,
      members: ["n1", "n2"],
      decommissioned: ["n1"],
    });
  });

  it(
    "ends an open watch once the node is decommissioned, and refuses new ones, naming why",
    { timeout: 10_000 },
    async () => {
      const open = watch();
      await open.first;
      stale = "node n2 was decommissioned from cluster cluster-a: watch another node";
      views.setIncarnation("inc-1b"); // any change publishes a view: the watch ends on it
      try {
        for (const ended of [await open.ended, await watch().ended]) {
          assert.equal(ended.code, status.UNAVAILABLE);
          assert.equal(ended.metadata.get(ERROR_CODE_KEY)[0], "CAIRN_ERR_NOT_MEMBER");
          assert.match(ended.details, /n2 was decommissioned/);
        }
        assert.deepEqual(open.views, ["cluster-a"], "no view after the node left");
        // The member still runs here: a probe for a join under its id must see it.
        assert.deepEqual(await probeMember(address, "n2"), {
          clusterId: "cluster-a",
          incarnation: "inc-1b",
          firstSeed: false,
        });
      } finally {
        stale = null;
        views.setIncarnation("inc-1");
      }
    },
  );
});

describe("Meta.WatchCluster of a watcher that does not read", () => {
  it(
    "gets the latest view when it reads again, not every view since",
    { timeout: 30_000 },
    async () => {
      // Views of ~20 KB (200 members), 300 of them while the watcher reads nothing: past the
      // front end's 1 MiB for the stream and the windows, each view written regardless waited in
      // the server's buffer (6 MB here; a view up to ten times a second while a cluster changes).
      const VIEWS = 300;
      const members = Array.from({ length: 200 }, (_, i) => ({
        id: `member-${String(i).padStart(3, "0")}`,
        rpc_addr: `a-rather-long-host-name-for-member-${i}.example.internal:7447`,
        http_addr: `a-rather-long-host-name-for-member-${i}.example.internal:8080`,
        state: "alive" as const,
      }));
      const client = new proto.cairn.v1.Meta(address, credentials.createInsecure());
      const call = client.WatchCluster({}) as ClientReadableStream<{ incarnation: string }>;
      const seen: string[] = [];
      let onView = (): void => undefined;
      call.on("data", (v: { incarnation: string }) => {
        seen.push(v.incarnation);
        onView();
      });
      call.on("error", () => undefined); // cancelled below
      try {
        await new Promise<void>((resolve) => (onView = resolve));
        call.pause();
        views.setMembers(members);
        for (let i = 1; i <= VIEWS; i++) {
          views.setIncarnation(`burst-${i}`);
          // One view a turn: each is published, and written, on its own.
          await new Promise((resolve) => setImmediate(resolve));
        }
        const before = seen.length;
        const last = new Promise<void>((resolve) => {
          onView = () => {
            if (seen.at(-1) === `burst-${VIEWS}`) resolve();
          };
        });
        call.resume();
        await last;
        const got = seen.length - before;
        assert.ok(got < VIEWS / 2, `${got} of ${VIEWS} views delivered: none was skipped`);
      } finally {
        call.cancel();
        client.close();
        views.setMembers(
          ["n1", "n2"].map((id) => ({
            id,
            rpc_addr: `${id}:1`,
            http_addr: `${id}:2`,
            state: "alive",
          })),
        );
        views.setIncarnation("inc-1");
      }
    },
  );
});

describe("Meta.WatchCluster with a deadline a year off", () => {
  it("streams views: the deadline is kept, not passed at once", async () => {
    // grpc-js's server timed it with setTimeout, which fires at once past 2^31-1 ms: a watch
    // asked to last 347 days (as grpc-go sends long timeouts) ended DEADLINE_EXCEEDED at once.
    const port = Number(address.split(":")[1]);
    const client = await RawH2Client.open(port);
    try {
      client.send(
        frame(
          T.HEADERS,
          F.END_HEADERS,
          1,
          encodeBlock(grpcRequest("/cairn.v1.Meta/WatchCluster", [["grpc-timeout", "30000000S"]])),
        ),
        frame(T.DATA, F.END_STREAM, 1, grpcMessage(Buffer.alloc(0))),
      );
      const stream = (): StreamOutcome | undefined => client.streams.get(1);
      assert.ok(
        await client.waitFor(
          () => (stream()?.dataBytes ?? 0) > 0 || stream()?.ended === true,
          10_000,
        ),
        "a view or an end",
      );
      const first = stream()?.dataBytes ?? 0;
      assert.ok(first > 0, `the first view arrived (${JSON.stringify(stream()?.blocks)})`);
      // The next view comes on the same stream, still open.
      views.setIncarnation("inc-year");
      assert.ok(
        await client.waitFor(
          () => (stream()?.dataBytes ?? 0) > first || stream()?.ended === true,
          10_000,
        ),
        "the next view or an end",
      );
      assert.equal(stream()?.ended, false, `ended: ${JSON.stringify(stream()?.blocks)}`);
    } finally {
      client.destroy();
      views.setIncarnation("inc-1");
    }
  });
});

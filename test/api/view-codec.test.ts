import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { MethodDefinition, ServiceDefinition } from "@grpc/grpc-js";
import fc from "fast-check";
import { loadCairnProto } from "../../src/api/proto.ts";
import { sharedViewEncoder, withSharedViewEncoder } from "../../src/api/view-codec.ts";
import {
  type ClusterView,
  ClusterViewPublisher,
  type MemberView,
  type ShardView,
} from "../../src/cluster/index.ts";

type AnyMethod = MethodDefinition<unknown, unknown>;

const slowMeta = loadCairnProto().proto.cairn.v1.Meta.service as ServiceDefinition;
const slow = slowMeta["WatchCluster"] as AnyMethod;
const shared = (): AnyMethod => withSharedViewEncoder(slowMeta)["WatchCluster"] as AnyMethod;

const text = fc.string({
  maxLength: 12,
  unit: fc.constantFrom("a", "z", "0", ":", "é", "日", "🙂"),
});
const u64 = fc.oneof(fc.nat(300), fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }));
const member: fc.Arbitrary<MemberView> = fc.record(
  {
    id: text,
    rpc_addr: text,
    http_addr: text,
    state: fc.constantFrom("alive", "suspect", "dead", "left"),
    member_state: fc.constantFrom("joining", "active", "decommissioning", "dead", ""),
    replicas: fc.nat(1024),
    build: fc.nat(5),
  },
  { requiredKeys: ["id", "rpc_addr", "http_addr", "state"] },
);
const shard: fc.Arbitrary<ShardView> = fc.record({
  id: fc.nat(1023),
  leader: text,
  replicas: fc.array(text, { maxLength: 5 }),
  term: u64,
});
const view: fc.Arbitrary<ClusterView> = fc.record({
  epoch: u64,
  nodes: fc.array(member, { maxLength: 6 }),
  shards: fc.array(shard, { maxLength: 40 }),
  total_shards: fc.nat(4096),
  cluster_id: text,
  incarnation: text,
  cluster_version: fc.nat(5),
  first_seed: fc.boolean(),
});

describe("WatchCluster's shared view encoder", () => {
  it("writes protobufjs's bytes for any view, which decode to the view", () => {
    const method = shared();
    fc.assert(
      fc.property(view, (v) => {
        const bytes = method.responseSerialize(v);
        assert.deepEqual(bytes, slow.responseSerialize(v));
        const decoded = slow.responseDeserialize(bytes) as ClusterView;
        assert.equal(decoded.epoch, v.epoch);
        assert.equal(decoded.first_seed, v.first_seed);
        assert.deepEqual(
          decoded.shards.map((s) => ({ ...s })),
          v.shards.map((s) => ({ ...s, replicas: [...s.replicas] })),
        );
        assert.deepEqual(
          decoded.nodes.map((n) => n.id),
          v.nodes.map((n) => n.id),
        );
      }),
      { numRuns: 300 },
    );
  });

  it("writes protobufjs's bytes for views made from one another, unchanged shards kept", () => {
    // The publisher's way: each view keeps the shard objects that did not change, so the
    // encoder reuses runs of them; a shard replaced, added or dropped anywhere must show.
    const edit = fc.oneof(
      fc.record({ op: fc.constant("set" as const), at: fc.nat(), shard }),
      fc.record({ op: fc.constant("insert" as const), at: fc.nat(), shard }),
      fc.record({ op: fc.constant("drop" as const), at: fc.nat() }),
    );
    fc.assert(
      fc.property(
        view,
        fc.array(shard, { maxLength: 150 }),
        fc.array(fc.array(edit, { maxLength: 4 }), { maxLength: 12 }),
        (base, start, steps) => {
          const method = shared();
          let shards = start;
          for (const step of [[], ...steps]) {
            shards = shards.slice();
            for (const e of step) {
              const at = shards.length === 0 ? 0 : e.at % shards.length;
              if (e.op === "set" && shards.length > 0) shards[at] = e.shard;
              else if (e.op === "insert") shards.splice(at, 0, e.shard);
              else if (e.op === "drop") shards.splice(at, 1);
            }
            const v = { ...base, shards };
            assert.deepEqual(method.responseSerialize(v), slow.responseSerialize(v));
          }
        },
      ),
      // No shrinking: a failure here shrinks for many minutes over nested arrays.
      { numRuns: 200, endOnFailure: true },
    );
  });

  it("encodes a view once for every watcher, and a new view with its changed shards", () => {
    const publisher = new ClusterViewPublisher(8, { minIntervalMs: 0 });
    const method = shared();
    // The same encoder over a counting protobufjs: which shards does it encode?
    const encoded: number[] = [];
    const counted = sharedViewEncoder((value) => {
      const shards = (value as { shards?: ShardView[] }).shards;
      for (const s of shards ?? []) encoded.push(s.id);
      return slow.responseSerialize(value);
    });
    publisher.setShard({ id: 1, leader: "n1", replicas: ["n1", "n2", "n3"], term: 2 });
    publisher.setShard({ id: 5, leader: "n2", replicas: ["n1", "n2", "n3"], term: 4 });
    return new Promise<void>((resolve) => {
      queueMicrotask(() => {
        const first = publisher.current();
        const once = method.responseSerialize(first);
        // A second watcher of the same view gets the very same buffer: nothing encoded again.
        assert.equal(method.responseSerialize(first), once);
        counted(first);
        counted(first);
        assert.deepEqual(encoded, [1, 5]);
        publisher.setShard({ id: 5, leader: "n3", replicas: ["n1", "n2", "n3"], term: 5 });
        queueMicrotask(() => {
          const second = publisher.current();
          assert.notEqual(second, first);
          const bytes = method.responseSerialize(second);
          assert.deepEqual(bytes, slow.responseSerialize(second));
          // Only the shard that changed is encoded again.
          assert.deepEqual(counted(second), bytes);
          assert.deepEqual(encoded, [1, 5, 5]);
          const decoded = slow.responseDeserialize(bytes) as ClusterView;
          assert.deepEqual(
            decoded.shards.map((s) => [s.id, s.leader, s.term]),
            [
              [1, "n1", 2],
              [5, "n3", 5],
            ],
          );
          resolve();
        });
      });
    });
  });
});

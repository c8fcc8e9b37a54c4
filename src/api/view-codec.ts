/**
 * The encoder of Meta.WatchCluster's ClusterView, shared by every watcher. A view is sent whole
 * (src/cluster/view.ts) and protobufjs encoded it once per watcher, 1,024 shards each time: during
 * a rebalance (a view every 100 ms) that was 7–9 % of a watched node's CPU per watcher. Here a
 * view is encoded once, however many watch it, and a shard once, however many views hold it: the
 * publisher keeps an unchanged shard's object from one view to the next, so a view costs the
 * shards that changed, the runs of 32 shards holding them, and one copy of the runs.
 *
 * The bytes are protobufjs's own: it writes ClusterView's fields in field-number order (epoch,
 * nodes, shards, total_shards, cluster_id, incarnation, cluster_version, first_seed), so the view is its
 * encoding of the fields before `shards`, each shard's `shards` field as protobufjs writes it
 * for a view holding only that shard, and its encoding of the fields after. `test/api/view-codec.test.ts` checks the
 * bytes against protobufjs's for the whole view.
 */
import type { MethodDefinition, ServiceDefinition } from "@grpc/grpc-js";
import type { ClusterView, ShardView } from "../cluster/index.ts";

type Serialize = (value: unknown) => Buffer;

/** Shards per cached run of a view's `shards` field (sharedViewEncoder). */
const RUN = 32;

/** `serialize` (protobufjs's ClusterView encoder) made to encode each view and shard once. */
export function sharedViewEncoder(serialize: Serialize): (view: ClusterView) => Buffer {
  const views = new WeakMap<ClusterView, Buffer>();
  const shards = new WeakMap<ShardView, Buffer>();
  const shardField = (shard: ShardView): Buffer => {
    let field = shards.get(shard);
    if (field === undefined) {
      field = serialize({ shards: [shard] });
      shards.set(shard, field);
    }
    return field;
  };
  // The last view's runs of RUN shards, each with the shard objects it was made of: a view
  // copies the runs no shard of which changed (joining 1,024 fields again for every view was
  // most of a watched node's encoding during a rebalance, a view every 100 ms).
  const runs: { readonly of: readonly ShardView[]; readonly bytes: Buffer }[] = [];
  const runAt = (all: readonly ShardView[], r: number): Buffer => {
    const start = r * RUN;
    const end = Math.min(start + RUN, all.length);
    const was = runs[r];
    if (was !== undefined && was.of.length === end - start) {
      let same = true;
      for (let i = start; i < end && same; i++) same = was.of[i - start] === all[i];
      if (same) return was.bytes;
    }
    const of = all.slice(start, end);
    const bytes = Buffer.concat(of.map(shardField));
    runs[r] = { of, bytes };
    return bytes;
  };
  return (view) => {
    const cached = views.get(view);
    if (cached !== undefined) return cached;
    const parts: Buffer[] = [serialize({ epoch: view.epoch, nodes: view.nodes })];
    const count = Math.ceil(view.shards.length / RUN);
    for (let r = 0; r < count; r++) parts.push(runAt(view.shards, r));
    runs.length = count;
    parts.push(
      serialize({
        total_shards: view.total_shards,
        cluster_id: view.cluster_id,
        incarnation: view.incarnation,
        cluster_version: view.cluster_version,
        first_seed: view.first_seed,
      }),
    );
    const out = Buffer.concat(parts);
    views.set(view, out);
    return out;
  };
}

/**
 * cairn.v1.Meta's definition with WatchCluster's responses encoded by `sharedViewEncoder`: its
 * handler writes the publisher's view objects as they are (never copies), which is what lets the
 * encoder know a view or a shard it has seen.
 */
export function withSharedViewEncoder(meta: ServiceDefinition): ServiceDefinition {
  const watch = meta["WatchCluster"] as MethodDefinition<unknown, unknown> | undefined;
  if (watch === undefined) return meta;
  const encode = sharedViewEncoder(watch.responseSerialize);
  return {
    ...meta,
    WatchCluster: {
      ...watch,
      responseSerialize: (view: unknown) => encode(view as ClusterView),
    },
  };
}

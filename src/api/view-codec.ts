/**
 * The encoder of Meta.WatchCluster's ClusterView, shared by every watcher. A view is sent whole
 * (src/cluster/view.ts) and protobufjs encoded it once per watcher, 1,024 shards each time: during
 * a rebalance (a view every 100 ms) that was 7–9 % of a watched node's CPU per watcher. Here a
 * view is encoded once, however many watch it, and a shard once, however many views hold it: the
 * publisher keeps an unchanged shard's object from one view to the next, so a view costs the
 * shards that changed plus one copy.
 *
 * The bytes are protobufjs's own: it writes ClusterView's fields in field-number order (epoch,
 * nodes, shards, total_shards, cluster_id, incarnation), so the view is its encoding of the
 * fields before `shards`, each shard's `shards` field as protobufjs writes it for a view holding
 * only that shard, and its encoding of the fields after. `test/api/view-codec.test.ts` checks the
 * bytes against protobufjs's for the whole view.
 */
import type { MethodDefinition, ServiceDefinition } from "@grpc/grpc-js";
import type { ClusterView, ShardView } from "../cluster/index.ts";

type Serialize = (value: unknown) => Buffer;

/** `serialize` (protobufjs's ClusterView encoder) made to encode each view and shard once. */
export function sharedViewEncoder(serialize: Serialize): (view: ClusterView) => Buffer {
  const views = new WeakMap<ClusterView, Buffer>();
  const shards = new WeakMap<ShardView, Buffer>();
  return (view) => {
    const cached = views.get(view);
    if (cached !== undefined) return cached;
    const parts: Buffer[] = [serialize({ epoch: view.epoch, nodes: view.nodes })];
    for (const shard of view.shards) {
      let field = shards.get(shard);
      if (field === undefined) {
        field = serialize({ shards: [shard] });
        shards.set(shard, field);
      }
      parts.push(field);
    }
    parts.push(
      serialize({
        total_shards: view.total_shards,
        cluster_id: view.cluster_id,
        incarnation: view.incarnation,
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

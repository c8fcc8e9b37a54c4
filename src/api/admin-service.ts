/** The Admin service: shard snapshots (with log compaction) and leadership transfer. */
import type { sendUnaryData, ServerUnaryCall, UntypedServiceImplementation } from "@grpc/grpc-js";
import type { Logger } from "../ops/index.ts";
import { InvalidArgumentError, toServiceError } from "./errors.ts";
import type { SnapshotShardRequest__Output } from "./generated/cairn/v1/SnapshotShardRequest.ts";
import type { SnapshotShardResponse } from "./generated/cairn/v1/SnapshotShardResponse.ts";
import type { TransferLeaderRequest__Output } from "./generated/cairn/v1/TransferLeaderRequest.ts";
import type { TransferLeaderResponse } from "./generated/cairn/v1/TransferLeaderResponse.ts";
import type { AdminStore } from "./store.ts";

/**
 * Cluster mode: Admin.TransferLeader through the meta group (src/node/cluster.ts,
 * transferLeadership), answering the new leader's node.
 */
export type LeadershipTransfer = (id: number, to: string) => Promise<string>;

export function adminService(
  store: AdminStore,
  log: Logger,
  transfer?: LeadershipTransfer,
): UntypedServiceImplementation {
  return {
    SnapshotShard(
      call: ServerUnaryCall<SnapshotShardRequest__Output, SnapshotShardResponse>,
      callback: sendUnaryData<SnapshotShardResponse>,
    ) {
      const id = call.request.shard_id;
      store.snapshotShard(id).then(
        (r) => {
          log.info("shard snapshot taken", {
            shard_id: r.shardId,
            index: r.index,
            term: r.term,
            size_bytes: r.sizeBytes,
          });
          callback(null, {
            shard_id: r.shardId,
            index: r.index,
            term: r.term,
            size_bytes: r.sizeBytes,
          });
        },
        (err: unknown) => callback(toServiceError(err), null),
      );
    },

    TransferLeader(
      call: ServerUnaryCall<TransferLeaderRequest__Output, TransferLeaderResponse>,
      callback: sendUnaryData<TransferLeaderResponse>,
    ) {
      const { shard_id: id, node_id: to } = call.request;
      const run = async (): Promise<TransferLeaderResponse> => {
        if (to === "")
          throw new InvalidArgumentError("node_id must name the replica to lead the shard");
        if (transfer !== undefined) return { shard_id: id, leader: await transfer(id, to) };
        const info = store.shardInfo(id);
        if (info !== null && info.leader === to) return { shard_id: id, leader: to };
        if (info !== null && !info.voters.includes(to)) {
          throw new InvalidArgumentError(
            `shard ${id} has no replica on node ${JSON.stringify(to)}; its replicas are ${info.voters.join(", ")}` +
              (info.voters.length === 1
                ? " (a single-node cluster has no other replica to lead)"
                : ""),
          );
        }
        await store.transferLeader(id, to);
        return { shard_id: id, leader: store.shardInfo(id)?.leader ?? "" };
      };
      run().then(
        (r) => callback(null, r),
        (err: unknown) => callback(toServiceError(err), null),
      );
    },
  };
}

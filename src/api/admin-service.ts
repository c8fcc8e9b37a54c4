/**
 * The Admin service: shard snapshots (with log compaction), leadership transfer, and in cluster
 * mode a member's decommission (and its cancelling), removal and standing.
 */
import type {
  sendUnaryData,
  ServerUnaryCall,
  ServiceError,
  UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { callDeadline } from "../common/index.ts";
import { CairnError } from "../common/errors.ts";
import type { Logger } from "../ops/index.ts";
import { InternalErrorLog, InvalidArgumentError, toServiceError } from "./errors.ts";
import type { SnapshotShardRequest__Output } from "./generated/cairn/v1/SnapshotShardRequest.ts";
import type { SnapshotShardResponse } from "./generated/cairn/v1/SnapshotShardResponse.ts";
import type { TransferLeaderRequest__Output } from "./generated/cairn/v1/TransferLeaderRequest.ts";
import type { TransferLeaderResponse } from "./generated/cairn/v1/TransferLeaderResponse.ts";
import type { NodeRequest__Output } from "./generated/cairn/v1/NodeRequest.ts";
import type { NodeStatus } from "./generated/cairn/v1/NodeStatus.ts";
import type { AdminStore } from "./store.ts";

/**
 * Admin.TransferLeader run elsewhere than on `store`, answering the new leader's node: in cluster
 * mode through the meta group (src/node/cluster.ts, transferLeadership); with shard workers on
 * the worker that owns the shard (src/node/siblings.ts), waited for until the call's `deadline`
 * at most (on deadlineClock(); the transfer, handed over, goes on there).
 */
export type LeadershipTransfer = (id: number, to: string, deadline?: number) => Promise<string>;

/** A member's standing, as Admin's member calls answer it. */
export interface NodeStanding {
  readonly state: string;
  /** Shards the meta group still places on the node. */
  readonly replicas: number;
}

/** Admin's member calls in cluster mode (src/node/members-admin.ts). */
export interface MemberAdmin {
  decommission(node: string): Promise<NodeStanding>;
  remove(node: string): Promise<NodeStanding>;
  recommission(node: string): Promise<NodeStanding>;
  /** Changes nothing. */
  standing(node: string): Promise<NodeStanding>;
}

export function adminService(
  store: AdminStore,
  log: Logger,
  transfer?: LeadershipTransfer,
  members?: MemberAdmin,
): UntypedServiceImplementation {
  const internalErrors = new InternalErrorLog(log);
  const fail = (method: string, err: unknown): Partial<ServiceError> => {
    const answer = toServiceError(err);
    internalErrors.maybeLog(method, err, answer);
    return answer;
  };
  return {
    SnapshotShard(
      call: ServerUnaryCall<SnapshotShardRequest__Output, SnapshotShardResponse>,
      callback: sendUnaryData<SnapshotShardResponse>,
    ) {
      const id = call.request.shard_id;
      // Handed to the shard worker that owns the shard, it is waited for until its client gives
      // up at most, as a KV call is (the snapshot is taken there all the same).
      store.snapshotShard(id, callDeadline(call)).then(
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
        (err: unknown) => callback(fail("SnapshotShard", err), null),
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
        const deadline = callDeadline(call);
        const leader = await (transfer ?? ((i, t) => transferInPlace(store, i, t)))(
          id,
          to,
          deadline,
        );
        return { shard_id: id, leader };
      };
      run().then(
        (r) => callback(null, r),
        (err: unknown) => callback(fail("TransferLeader", err), null),
      );
    },

    DecommissionNode: memberHandler("DecommissionNode", (m, id) => m.decommission(id)),
    RemoveNode: memberHandler("RemoveNode", (m, id) => m.remove(id)),
    RecommissionNode: memberHandler("RecommissionNode", (m, id) => m.recommission(id)),
    GetNode: memberHandler("GetNode", (m, id) => m.standing(id), false),
  };

  /** A member call's handler: `run` on the member named by the request (memberCall). */
  function memberHandler(
    method: string,
    run: (m: MemberAdmin, node: string) => Promise<NodeStanding>,
    logged = true,
  ) {
    return (
      call: ServerUnaryCall<NodeRequest__Output, NodeStatus>,
      callback: sendUnaryData<NodeStatus>,
    ): void => memberCall(method, call.request.node_id, run, callback, logged);
  }

  function memberCall(
    method: string,
    node: string,
    run: (m: MemberAdmin, node: string) => Promise<NodeStanding>,
    callback: sendUnaryData<NodeStatus>,
    logged = true,
  ): void {
    const answer = async (): Promise<NodeStatus> => {
      if (members === undefined) {
        throw new CairnError(
          "CAIRN_ERR_PRECONDITION",
          "a single node has no members to decommission, recommission, remove or look up (this node runs without seed nodes)",
        );
      }
      if (node === "") throw new InvalidArgumentError("node_id must name a member");
      const standing = await run(members, node);
      if (logged)
        log.info(`${method}: ${node} is ${standing.state}`, {
          node,
          state: standing.state,
          replicas: standing.replicas,
        });
      return { node_id: node, state: standing.state, replicas: standing.replicas };
    };
    answer().then(
      (r) => callback(null, r),
      (err: unknown) => callback(fail(method, err), null),
    );
  }
}

/**
 * Admin.TransferLeader without a meta group (a single node, or a shard worker's own shards):
 * the store's group hands its leadership to `to`; answers the leader after.
 */
export async function transferInPlace(store: AdminStore, id: number, to: string): Promise<string> {
  store.checkShardId(id);
  const info = store.shardInfo(id);
  // A shard with state here is open (reopened at start). One without has no leader to move,
  // as in a cluster (transferLeadership); asking the store would create it on the spot.
  if (info === null) {
    throw new CairnError(
      "CAIRN_ERR_SHARD_NOT_ACTIVE",
      `shard ${id} is not active on this node (it holds no data); it has no leader to move`,
    );
  }
  if (info.leader === to) return to;
  if (!info.voters.includes(to)) {
    throw new InvalidArgumentError(
      `shard ${id} has no replica on node ${JSON.stringify(to)}; its replicas are ${info.voters.join(", ")}` +
        (info.voters.length === 1 ? " (a single-node cluster has no other replica to lead)" : ""),
    );
  }
  await store.transferLeader(id, to);
  return store.shardInfo(id)?.leader ?? "";
}

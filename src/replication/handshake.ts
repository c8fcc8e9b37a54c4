/**
 * The identity a peer call opens with ({cluster id, from, to}: a Stream's handshake, an
 * InstallSnapshot's header), and the receiver's one rule for it.
 */
import type { RaftHandshake__Output } from "../api/generated/cairn/v1/RaftHandshake.ts";
import { nodeOfReplica } from "../cluster/index.ts";
import type { NodeId } from "../raft/index.ts";

/**
 * Why node `self`, in cluster `ours` ("" while it does not know its id), refuses a call opening
 * with `hs`, or null when it accepts it. Two known cluster ids that differ never talk; an end
 * that does not know its id yet is accepted. The call must be addressed to `self`, from another
 * node (and its replica id, when given, of that node).
 */
export function handshakeRefusal(
  hs: RaftHandshake__Output,
  ours: string,
  self: NodeId,
): string | null {
  if (hs.cluster_id !== ours && hs.cluster_id !== "" && ours !== "") {
    return `cluster id mismatch: this node is in cluster ${JSON.stringify(ours)}, the sender in ${JSON.stringify(hs.cluster_id)}`;
  }
  if (hs.to_node_id !== self) {
    return `node id mismatch: this node is ${JSON.stringify(self)}, the sender addressed ${JSON.stringify(hs.to_node_id)}`;
  }
  if (hs.from_node_id === "" || hs.from_node_id === self) {
    return `invalid sender node id ${JSON.stringify(hs.from_node_id)}`;
  }
  if (hs.from_replica_id !== "" && nodeOfReplica(hs.from_replica_id) !== hs.from_node_id) {
    return `sender replica ${JSON.stringify(hs.from_replica_id)} is not of node ${JSON.stringify(hs.from_node_id)}`;
  }
  return null;
}

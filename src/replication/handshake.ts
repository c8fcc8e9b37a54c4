/**
 * Who may call a node's peers' service (cairn.v1.Raft): the identity a peer call opens with
 * ({cluster id, from, to}: a Stream's handshake, an InstallSnapshot's header; for a unary call
 * the request's cluster id and the `cairn-peer` metadata), and the receiver's rules for it.
 *
 * Not authentication by itself: a cluster's id and its members' ids are given to any client by
 * Meta.WatchCluster, so anyone who asks can pass. What it keeps out is a stock client, a node of
 * another cluster, a member removed for good, and a node unknown here that names no cluster (one
 * unknown that names it may have joined while this node was away: peerRefusal). With peer TLS (`tls.peer_ca_file`) the front
 * end takes a peer's call only on a connection whose certificate names the node its `cairn-peer`
 * metadata names (src/common/peer-tls.ts), and a handshake must name that same node as its
 * sender (senderRefusal): the sender is then the certificate's.
 */
import { status } from "@grpc/grpc-js";
import type { RaftHandshake__Output } from "../api/generated/cairn/v1/RaftHandshake.ts";
import { nodeOfReplica } from "../cluster/index.ts";
import { isNodeId } from "../config/schema.ts";
import type { NodeId } from "../raft/index.ts";

/**
 * A node's cluster id, or a function returning it as it is now: "" while the node has not yet
 * learnt it (a new node before the meta group's bootstrap reached it). Two ends whose ids are
 * both known and differ never talk; an end that does not know its id yet is accepted.
 */
export type ClusterIdSource = string | (() => string);

export function currentClusterId(source: ClusterIdSource): string {
  return typeof source === "string" ? source : source();
}

/**
 * The identity this node opens a call to node `to` with (a Stream's handshake, an
 * InstallSnapshot's header): its cluster id as it is now, and its replica id when that is not
 * its node id.
 */
export function ownHandshake(
  clusterId: ClusterIdSource,
  self: NodeId,
  replica: NodeId,
  to: NodeId,
): RaftHandshake__Output {
  return {
    cluster_id: currentClusterId(clusterId),
    from_node_id: self,
    to_node_id: to,
    from_replica_id: replica === self ? "" : replica,
  };
}

/**
 * What this node's meta state says of a node: a current member, a member removed for good, or
 * a node it does not know. A node it does not know may be a member that joined after the state
 * here was applied (this node was down or cut off meanwhile), and the meta group's log that
 * would tell may be that member's to send: it may lead the meta group now.
 */
export type PeerMembership = "member" | "removed" | "unknown";

/** What a node checks a peer's call against. */
export interface PeerCheck {
  /**
   * This node's cluster id; "" while it does not know it (a new node before the founding reached
   * it, or one whose data directory was wiped; a member whose shard 0 is being refilled knows it
   * from its data directory's record, src/node/cluster-id.ts): it then holds no cluster state, and the calls
   * the founding and its rejoin need come from nodes it cannot check, so any other node passes.
   */
  readonly clusterId: string;
  readonly self: NodeId;
  /**
   * What this node's meta state says of `node` (PeerMembership), asked only once the cluster id
   * is known. Absent: every node is a member (a service with no meta state, in tests).
   */
  readonly membership?: (node: string) => PeerMembership;
}

/** Why a peer's call is refused; `kind` labels the refusal in metrics. */
export interface PeerRefusal {
  readonly code: status;
  readonly reason: string;
  readonly kind: PeerRefusalKind;
}

export type PeerRefusalKind =
  "no_sender" | "not_member" | "no_cluster_id" | "other_cluster" | "misaddressed" | "wrong_sender";

/**
 * Why a call whose handshake names `from` as its sender is refused when its `cairn-peer`
 * metadata (what the front end checked the connection's certificate against) names `sender`, or
 * null when they agree ("" `sender`: a call with no metadata, served without the front end).
 */
export function senderRefusal(from: string, sender: string): PeerRefusal | null {
  if (sender === "" || sender === from) return null;
  return {
    code: status.PERMISSION_DENIED,
    reason: `the handshake names node ${JSON.stringify(from)} as its sender, and the call's cairn-peer metadata node ${JSON.stringify(sender)}`,
    kind: "wrong_sender",
  };
}

/**
 * Why node `check.self` refuses a call from node `from` naming cluster `theirs`, or null when it
 * takes it. A node that knows its cluster takes calls only from its other members
 * (PERMISSION_DENIED), naming its cluster; a member that does not know the id yet (a founding
 * voter the bootstrap has not reached, a member whose data directory was wiped) may send ""
 * unless the call `needsClusterId` (one only a node with shards makes: ReadIndex, ConfirmTerms,
 * ScanShards). A node this node's meta state does not know is taken when it names this
 * cluster: it is a member that joined since (the state here is behind), and refusing it could
 * keep the state here behind for good (a member restarted after a join in its absence refused
 * the new member, which led the meta group, and so never learnt of it: chaos seed 103). A node
 * removed for good, or unknown and naming no cluster, is refused. Two known cluster ids that
 * differ are a configuration mistake (FAILED_PRECONDITION, the sender says so to its
 * operator). Reasons never carry a cluster id.
 */
export function peerRefusal(
  from: string,
  theirs: string,
  check: PeerCheck,
  needsClusterId: boolean,
): PeerRefusal | null {
  if (from === "" || from === check.self) {
    return {
      code: status.PERMISSION_DENIED,
      reason: `the call does not name another node of the cluster as its sender (${from === "" ? "none" : "this node itself"})`,
      kind: "no_sender",
    };
  }
  if (!isNodeId(from)) {
    // No node has such an id (node_id's format): a caller's invention, up to the frame's 64 KiB,
    // taken as a member that joined while this node's state was behind, and echoed whole in
    // refusals and log lines.
    return {
      code: status.PERMISSION_DENIED,
      reason: `the call's sender ${shownId(from)} is not a node id`,
      kind: "no_sender",
    };
  }
  const ours = check.clusterId;
  if (ours === "") return null;
  if (theirs !== "" && theirs !== ours) {
    return {
      code: status.FAILED_PRECONDITION,
      reason: "cluster id mismatch: the sender is in another cluster than this node",
      kind: "other_cluster",
    };
  }
  const membership = check.membership?.(from) ?? "member";
  if (membership === "removed" || (membership === "unknown" && theirs !== ours)) {
    return {
      code: status.PERMISSION_DENIED,
      reason: `node ${JSON.stringify(from)} is not a member of this node's cluster`,
      kind: "not_member",
    };
  }
  if (theirs === "" && needsClusterId) {
    return {
      code: status.PERMISSION_DENIED,
      reason: "the call names no cluster id; this call is only taken from a member that knows it",
      kind: "no_cluster_id",
    };
  }
  return null;
}

/**
 * Why `check.self` refuses a call opening with `hs`, or null when it accepts it: peerRefusal's
 * rules for its sender, and the call must be addressed to `self` (its replica id, when given,
 * of the sender's node).
 */
export function handshakeRefusal(hs: RaftHandshake__Output, check: PeerCheck): PeerRefusal | null {
  if (hs.to_node_id !== check.self) {
    return {
      code: status.FAILED_PRECONDITION,
      reason: `node id mismatch: this node is ${JSON.stringify(check.self)}, the sender addressed ${shownId(hs.to_node_id)}`,
      kind: "misaddressed",
    };
  }
  if (hs.from_replica_id !== "" && nodeOfReplica(hs.from_replica_id) !== hs.from_node_id) {
    return {
      code: status.FAILED_PRECONDITION,
      reason: `sender replica ${shownId(hs.from_replica_id)} is not of node ${shownId(hs.from_node_id)}`,
      kind: "misaddressed",
    };
  }
  return peerRefusal(hs.from_node_id, hs.cluster_id, check, false);
}

/**
 * An id a caller sent, as a refusal shows it: quoted, or only its length past what any node or
 * replica id holds (a forged one of up to 64 KiB was echoed whole in every refusal and its log
 * line).
 */
export function shownId(id: string): string {
  return id.length <= 200 ? JSON.stringify(id) : `(an id of ${id.length} characters)`;
}

/**
 * Trailing metadata keys of the RPC contract (docs/errors.md). Shared by the server (errors.ts)
 * and the client library; this module imports nothing, so clients can use it without loading
 * the server.
 */
export const LEADER_HINT_KEY = "cairn-leader";
export const CURRENT_VERSION_KEY = "cairn-current-version";
export const ERROR_CODE_KEY = "cairn-error-code";
/**
 * Trailing metadata of every successful Put, Get and Delete: the id of the node whose state
 * machine answered it. That is the node called, or, when the call was forwarded (forward.ts),
 * the node it was forwarded to: the forwarding node relays that node's trailer. A client that
 * checks what serializable reads promise per node (docs/operations.md) keys them on this id.
 */
export const SERVED_BY_KEY = "cairn-served-by";
/**
 * Trailing metadata of a Meta.WatchCluster refused by a node whose view no longer follows its
 * cluster (decommissioned, meta-service.ts): the cluster id and the data directory incarnation
 * its views carry, so that a node probing who runs at an address (src/node/cluster.ts,
 * probeMember) still learns that this member runs.
 */
export const CLUSTER_ID_KEY = "cairn-cluster-id";
/**
 * Trailing metadata of a CAIRN_ERR_NOT_MEMBER answer from a node that has left its cluster for
 * good (decommissioned or removed), value "true": it will refuse every request again, so a
 * client asks another node, and gives up at once when it knows no other.
 */
export const LEFT_CLUSTER_KEY = "cairn-left-cluster";
export const INCARNATION_KEY = "cairn-incarnation";
/**
 * Request metadata set by a node that forwards a KV call to the shard's leader (forward.ts). A
 * node that receives a call carrying it never forwards it again: forwarding takes one hop.
 */
export const FORWARDED_KEY = "cairn-forwarded";
/**
 * Request metadata on a peer's snapshot stream to a node that runs shard workers: the worker that
 * holds the snapshot's shard, to which the worker that accepted the call proxies it.
 */
export const SHARD_WORKER_KEY = "cairn-shard-worker";
/**
 * Request metadata on every call of the peers' service (cairn.v1.Raft): the calling node's id.
 * A node's front end refuses a peer method's call without it (PERMISSION_DENIED); the service
 * then takes a unary call only from a member of the node's cluster naming its cluster id
 * (src/replication/handshake.ts). Without TLS it authenticates nothing: Meta.WatchCluster gives
 * both ids to any client (docs/architecture.md). With peer TLS the front end takes it only when
 * the connection's certificate names that node (src/common/peer-tls.ts).
 */
export const PEER_KEY = "cairn-peer";
/**
 * Request metadata the front end puts on every call it proxies to a node thread's own grpc-js
 * server on loopback (the streaming calls): the process's internal key, random at each start.
 * That server refuses a call without it (UNAUTHENTICATED): its port takes only its own front
 * end's calls, which the front end checked (TLS, tokens, peers), not a local user's.
 */
export const INTERNAL_KEY = "cairn-internal-key";

/**
 * The details grpc-js gives an UNAVAILABLE call that never reached a server (no connection could
 * be established), so the request was not sent. Only meaningful when the status carries no
 * `cairn-error-code` (a Cairn server always sets one).
 */
export const CONNECT_FAILURE_DETAILS =
  /No connection established|ECONNREFUSED|connect E|Name resolution failed|DNS resolution failed/i;

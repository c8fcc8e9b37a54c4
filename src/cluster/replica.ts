/**
 * Replica ids: who a node is inside a Raft group. A node's replicas carry the incarnation of its
 * data directory (src/node/incarnation.ts) in their id, `<node id>@<tag>`, so that a node whose
 * data directory was wiped is a new replica in every group, never the old one that forgot what
 * it promised (votes, acknowledged entries). The tag is the first 64 bits of the incarnation's
 * random id. A member recorded without an incarnation (tests, single-node mode) is its node id.
 *
 * '@' cannot appear in a node id (the configuration's node_id rule), so the node of a replica is
 * everything before it.
 */

const SEPARATOR = "@";
const TAG_CHARS = 16;

/** The replica id of node `node` while its data directory is incarnation `incarnation`. */
export function replicaIdOf(node: string, incarnation: string | undefined): string {
  if (incarnation === undefined) return node;
  return `${node}${SEPARATOR}${incarnationTag(incarnation)}`;
}

/** The node a replica id belongs to. */
export function nodeOfReplica(replica: string): string {
  const at = replica.indexOf(SEPARATOR);
  return at < 0 ? replica : replica.slice(0, at);
}

function incarnationTag(incarnation: string): string {
  return incarnation.replace(/[^A-Za-z0-9]/g, "").slice(0, TAG_CHARS);
}

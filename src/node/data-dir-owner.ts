/**
 * Whose a data directory is: which node's (its node-id record), and whether a cluster member's.
 *
 * The node a data directory belongs to. Its WAL and its replicas are that node's: started under
 * another `node_id`, a single node failed a second later on an internal invariant (its groups'
 * only voter had another name), and a cluster member ran for good refusing its peers' streams
 * ("node id mismatch") while the member whose data it held was marked dead and its replicas
 * re-created elsewhere. The first start records the id in `<data_dir>/node-id`, and a later start
 * under another is refused before anything is opened, naming both (as shard-count.ts does for
 * total_shards). A directory written before the record existed is recorded with the id it is
 * started with.
 */
import { join } from "node:path";
import { CairnError } from "../common/errors.ts";
import { writeFileDurably } from "../storage/index.ts";
import { readRecord } from "./data-dir.ts";
import { holdsData } from "./shard-count.ts";

const RECORD = "node-id";
/** A cluster member's incarnation (src/node/incarnation.ts): a single node has none. */
const INCARNATION = "incarnation";

export class NodeIdMismatchError extends CairnError {
  constructor(dataDir: string, recorded: string, configured: string) {
    super(
      "CAIRN_ERR_NODE_ID_MISMATCH",
      `data directory ${dataDir} belongs to node ${recorded}, but node_id is ${configured}: start it with --node-id ${recorded} (its log and replicas are ${recorded}'s), or start ${configured} on an empty data directory`,
    );
    this.name = "NodeIdMismatchError";
  }
}

/**
 * Checks that `dataDir` (which exists) belongs to `nodeId`, and records the id when the
 * directory holds no record yet, or a record with nothing written under it (a first start that
 * failed before it opened its storage).
 */
export async function checkNodeId(dataDir: string, nodeId: string): Promise<void> {
  const path = join(dataDir, RECORD);
  const recorded = (await readRecord(path))?.trim() ?? null;
  if (recorded === nodeId) return;
  if (recorded !== null && (await holdsData(dataDir))) {
    throw new NodeIdMismatchError(dataDir, recorded, nodeId);
  }
  await writeFileDurably(path, `${nodeId}\n`);
}

/**
 * Checks that `dataDir` is started in the mode it was written in: a cluster member's (it holds
 * an incarnation, src/node/incarnation.ts) with `cluster.seed_nodes`, a single node's without.
 * Switched, a member's directory ran as a single node and stopped on an internal invariant (its
 * groups' other voters unknown), and a single node's failed to found a cluster ("shard 0 is
 * already open here"). A directory that holds no data yet may start either way.
 */
export async function checkMode(dataDir: string, cluster: boolean): Promise<void> {
  const member = (await readRecord(join(dataDir, INCARNATION))) !== null;
  if (member === cluster || !(await holdsData(dataDir))) return;
  throw new CairnError(
    "CAIRN_ERR_MODE_MISMATCH",
    member
      ? `data directory ${dataDir} belongs to a cluster member, but cluster.seed_nodes is empty: start it with its cluster's seed nodes (as a single node it would wait for ever on peers it does not know)`
      : `data directory ${dataDir} was written by a single node (no cluster.seed_nodes), which cannot join or found a cluster: start it as a single node, and move its keys into a cluster with cairn backup and cairn restore`,
  );
}

/**
 * The node a data directory belongs to. Its WAL and its replicas are that node's: started under
 * another `node_id`, a single node failed a second later on an internal invariant (its groups'
 * only voter had another name), and a cluster member ran for good refusing its peers' streams
 * ("node id mismatch") while the member whose data it held was marked dead and its replicas
 * re-created elsewhere. The first start records the id in `<data_dir>/node-id`, and a later start
 * under another is refused before anything is opened, naming both (as shard-count.ts does for
 * total_shards). A directory written before the record existed is recorded with the id it is
 * started with.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { CairnError } from "../common/errors.ts";
import { writeFileDurably } from "../storage/index.ts";
import { holdsData } from "./shard-count.ts";

const RECORD = "node-id";

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
  let recorded: string | null = null;
  try {
    recorded = (await readFile(path, "utf8")).trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  if (recorded === nodeId) return;
  if (recorded !== null && (await holdsData(dataDir))) {
    throw new NodeIdMismatchError(dataDir, recorded, nodeId);
  }
  await writeFileDurably(path, `${nodeId}\n`);
}

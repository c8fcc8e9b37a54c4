/**
 * The cluster id a member's data directory belongs to, recorded outside shard 0
 * (`<data_dir>/cluster-id`), as meta-voters.ts records the meta group's voters.
 *
 * A node takes a peer's call naming another cluster id than its own only while it knows none
 * (handshake.ts: a new node before the founding reaches it, a wiped one). It knows its id from
 * the meta state in shard 0, so a member whose shard 0 directory was lost (moved aside as
 * corrupt, corrupt-shard.ts; removed, refill.ts) knew none until its peers refilled it, and took
 * anything meanwhile: a node of another cluster (a seed list or an address pointing at the wrong
 * cluster) could feed it Raft messages and snapshots for shard 0 or any other shard, and have it
 * join that cluster or mix its data into this one's. With the record, such a node names its own
 * cluster in its handshakes and refuses another's while shard 0 is refilled (ClusterState's
 * peerClusterId).
 *
 * The record is written once the node knows its cluster (a founding, a join or a restart that
 * loads the meta state: directories from before the record get one at their next start), by the
 * node holding shard 0 (worker 0 with shard workers). It never changes: a data directory belongs
 * to one cluster for good. Two lines: the id, then `crc32c <8 hex digits>` of the first line; a
 * record that does not check (bit rot) is taken as none, as before it existed.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { crc32c, writeFileDurably } from "../storage/index.ts";

/** The record's file name, in the data directory. */
export const CLUSTER_ID_FILE = "cluster-id";

const CHECKSUM = /^crc32c ([0-9a-f]{8})$/;

function checksumOf(line: string): string {
  return (crc32c(Buffer.from(line)) >>> 0).toString(16).padStart(8, "0");
}

/**
 * The cluster id `dataDir` records: "" for none (no record yet), null for a record that does
 * not check (torn or damaged).
 */
export async function readClusterIdRecord(dataDir: string): Promise<string | null> {
  let text: string;
  try {
    text = await readFile(join(dataDir, CLUSTER_ID_FILE), "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return "";
    throw err;
  }
  const [id, check, end] = text.split("\n");
  const sum = CHECKSUM.exec(check ?? "");
  if (id === undefined || id === "" || end !== "" || sum === null || sum[1] !== checksumOf(id))
    return null;
  return id;
}

/** Records `clusterId` as `dataDir`'s cluster, durably (a crash leaves the old file or the new). */
export async function writeClusterIdRecord(dataDir: string, clusterId: string): Promise<void> {
  await writeFileDurably(
    join(dataDir, CLUSTER_ID_FILE),
    `${clusterId}\ncrc32c ${checksumOf(clusterId)}\n`,
  );
}

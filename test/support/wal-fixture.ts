/**
 * Writes a data directory whose shard 0 has a long, committed but unapplied Raft log, as a node
 * leaves behind when it is killed before flushing: the next start must replay it all. Used to
 * observe a node while it recovers (its health probes answer 503 until shard 0 has a leader).
 */
import { join } from "node:path";
import { encodeConfChange, nodeId } from "../../src/raft/index.ts";
import { encodeCommand } from "../../src/replication/commands.ts";
import { WAL_CONF_CHANGE, WAL_NORMAL } from "../../src/replication/wal-storage.ts";
import { Wal, type WalEntry } from "../../src/storage/index.ts";

export async function writeReplayFixture(
  dataDir: string,
  node: string,
  entries: number,
): Promise<void> {
  const wal = await Wal.open(join(dataDir, "wal"));
  const value = new Uint8Array(200).fill(7);
  const batch: WalEntry[] = [
    {
      term: 1,
      index: 1,
      type: WAL_CONF_CHANGE,
      data: encodeConfChange({ type: "add-voter", node: nodeId(node) }),
    },
  ];
  for (let i = 2; i <= entries; i++) {
    batch.push({
      term: 1,
      index: i,
      type: WAL_NORMAL,
      data: encodeCommand({ op: "put", key: new TextEncoder().encode(`fixture-${i}`), value }),
    });
    if (batch.length === 10_000) {
      wal.append([{ kind: "entries", shard: 0, entries: batch.splice(0) }]);
    }
  }
  wal.append([
    { kind: "entries", shard: 0, entries: batch },
    { kind: "hard-state", shard: 0, state: { term: 1, vote: node, commit: entries } },
  ]);
  await wal.sync();
  await wal.close();
}

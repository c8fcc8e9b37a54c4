/**
 * Child process of the WAL crash test: a deterministic workload of appends, hard states and
 * compactions over 8 shards with tiny segments (rotations and deletions all the time), one sync
 * per step. After each sync resolves it prints "a <step>": everything up to that step is
 * acknowledged. Not a test file itself.
 */
import { Wal } from "../../src/storage/wal/index.ts";
import { walStep } from "./wal-workload.ts";

const [dir, countText] = process.argv.slice(2) as [string, string];
const wal = await Wal.open(dir, { segmentBytes: 2048 });
for (let step = 1; step <= Number(countText); step++) {
  walStep(wal, step);
  await wal.sync();
  process.stdout.write(`a ${step}\n`);
}
await wal.close();

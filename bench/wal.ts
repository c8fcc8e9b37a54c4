/**
 * `npm run bench:wal [-- --seconds S] [--json]`
 *
 * 256 concurrent writers spread over 64 shards append 200-byte entries to the WAL; each writer
 * waits for its sync before appending again, so group commit is what makes it fast. In the same
 * run and directory it measures the raw rate of the disk for the same work: batches of the same
 * size (the WAL's observed entries per fsync), framed records written with one write + one
 * fdatasync per batch. Rounds alternate raw/WAL to share disk noise. Goal: WAL ≥ 80% of raw.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { open } from "node:fs/promises";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { Wal } from "../src/storage/wal/index.ts";

const WRITERS = 256;
const SHARDS = 64;
const ENTRY_BYTES = 200;
/** Framing + header of one WAL record: what the raw baseline writes per entry too. */
const RECORD_OVERHEAD = 32;

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "5" },
    rounds: { type: "string", default: "2" },
    json: { type: "boolean", default: false },
    dir: { type: "string" },
    "segment-mib": { type: "string", default: "64" },
  },
});
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const base = mkdtempSync(join(values.dir ?? tmpdir(), "cairn-bench-wal-"));

interface Rate {
  entries: number;
  fsyncs: number;
  elapsed: number;
}

async function runWal(dir: string): Promise<Rate> {
  const wal = await Wal.open(dir, { segmentBytes: Number(values["segment-mib"]) * 1024 * 1024 });
  const payload = new Uint8Array(ENTRY_BYTES).fill(7);
  let running = true;
  const timer = setTimeout(() => {
    running = false;
  }, seconds * 1000);
  let entries = 0;
  const startSyncs = wal.stats().syncs;
  const start = performance.now();
  const writer = async (w: number): Promise<void> => {
    const shard = w % SHARDS;
    while (running) {
      const index = wal.lastIndex(shard) + 1;
      wal.append([
        { kind: "entries", shard, entries: [{ term: 1, index, type: 0, data: payload }] },
      ]);
      await wal.sync();
      entries++;
      // Keep memory bounded the way the driver will: compact what is applied and flushed.
      if (index % 1024 === 0) wal.compact(shard, index - 512);
    }
  };
  await Promise.all(Array.from({ length: WRITERS }, (_, w) => writer(w)));
  clearTimeout(timer);
  const elapsed = (performance.now() - start) / 1000;
  const fsyncs = wal.stats().syncs - startSyncs;
  await wal.close();
  return { entries, fsyncs, elapsed };
}

async function runRaw(dir: string, batch: number): Promise<Rate> {
  const handle = await open(join(dir, "raw.log"), "w");
  const buf = Buffer.alloc(batch * (ENTRY_BYTES + RECORD_OVERHEAD), 7);
  const deadline = performance.now() + seconds * 1000;
  const start = performance.now();
  let position = 0;
  let fsyncs = 0;
  while (performance.now() < deadline) {
    await handle.write(buf, 0, buf.length, position);
    await handle.datasync();
    position += buf.length;
    fsyncs++;
  }
  const elapsed = (performance.now() - start) / 1000;
  await handle.close();
  return { entries: fsyncs * batch, fsyncs, elapsed };
}

const walRates: Rate[] = [];
const rawRates: Rate[] = [];
try {
  for (let r = 0; r < rounds; r++) {
    const w = await runWal(join(base, `wal-${r}`));
    walRates.push(w);
    const batch = Math.max(1, Math.round(w.entries / w.fsyncs));
    rawRates.push(await runRaw(base, batch));
  }
} finally {
  rmSync(base, { recursive: true, force: true });
}

const sum = (rs: Rate[], f: (r: Rate) => number): number => rs.reduce((a, r) => a + f(r), 0);
const walEntries = sum(walRates, (r) => r.entries) / sum(walRates, (r) => r.elapsed);
const walFsyncs = sum(walRates, (r) => r.fsyncs) / sum(walRates, (r) => r.elapsed);
const rawEntries = sum(rawRates, (r) => r.entries) / sum(rawRates, (r) => r.elapsed);
const rawFsyncs = sum(rawRates, (r) => r.fsyncs) / sum(rawRates, (r) => r.elapsed);
const result = {
  writers: WRITERS,
  shards: SHARDS,
  entryBytes: ENTRY_BYTES,
  seconds,
  rounds,
  cpu: cpus()[0]?.model ?? "unknown",
  wal: { entriesPerSec: Math.round(walEntries), fsyncsPerSec: Math.round(walFsyncs) },
  raw: { entriesPerSec: Math.round(rawEntries), fsyncsPerSec: Math.round(rawFsyncs) },
  entriesPerFsync: Math.round(walEntries / walFsyncs),
  ratio: Number((walEntries / rawEntries).toFixed(3)),
  goalMet: walEntries / rawEntries >= 0.8,
};
if (values.json) {
  console.log(JSON.stringify(result));
} else {
  console.log(
    `wal  ${result.wal.entriesPerSec} entries/s  ${result.wal.fsyncsPerSec} fsyncs/s  (${result.entriesPerFsync} entries per fsync)`,
  );
  console.log(`raw  ${result.raw.entriesPerSec} entries/s  ${result.raw.fsyncsPerSec} fsyncs/s`);
  console.log(`ratio wal/raw ${result.ratio} (goal ≥ 0.8: ${result.goalMet ? "met" : "NOT met"})`);
}

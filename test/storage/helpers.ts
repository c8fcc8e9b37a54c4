import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after } from "node:test";
import type { Wal, WalEntry } from "../../src/storage/wal/index.ts";

const created: string[] = [];

// One hook per test file, registered when the file imports this module (at top level): hooks
// registered from inside a running test are not reliably run for every test shape.
after(() => {
  for (const dir of created.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A fresh directory under the OS temp dir, removed when the test file finishes. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), `cairn-${prefix}-`));
  created.push(dir);
  return dir;
}

export function bytes(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

/** A WAL entry of term `term` at `index` whose data is `text` (default `e<index>`). */
export function entry(index: number, term: number, text = `e${index}`): WalEntry {
  return { index, term, type: 0, data: bytes(text) };
}

/** The WAL segment files in `dir`, oldest first. */
export function segmentFiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((n) => n.endsWith(".wal"))
    .sort()
    .map((n) => join(dir, n));
}

/** Shard `shard`'s log in `wal` as `index@term:text` lines. */
export function texts(wal: Wal, shard: number): string[] {
  const decoder = new TextDecoder();
  return wal
    .entries(shard, wal.firstIndex(shard), wal.lastIndex(shard) + 1)
    .map((e) => `${e.index}@${e.term}:${decoder.decode(e.data)}`);
}

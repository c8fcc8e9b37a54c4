import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after } from "node:test";

/** A fresh directory under the OS temp dir, removed when the test file finishes. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), `cairn-${prefix}-`));
  after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function bytes(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

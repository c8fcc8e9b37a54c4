import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after } from "node:test";

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

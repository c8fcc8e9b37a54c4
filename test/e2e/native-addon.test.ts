/**
 * The node says at start when it runs without the native addon (slower JavaScript paths): the
 * install's warning scrolls away, the server's log is where an operator looks.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { startServer } from "../support/server-process.ts";

interface Line {
  level: string;
  message: string;
  fields: Record<string, unknown>;
}

async function startLines(env: Record<string, string>): Promise<Line[]> {
  const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-native-"));
  try {
    const server = await startServer({ dataDir: dir, env });
    const exit = await server.stop("SIGTERM");
    assert.deepEqual(exit, { code: 0, signal: null });
    return server.lines.map((l) => JSON.parse(l) as Line);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe("the native addon at start", () => {
  it("logs a WARN naming the reason and the way back when the node runs without it", async () => {
    const lines = await startLines({ CAIRN_NO_NATIVE: "1" });
    const warn = lines.find((l) => /native addon/.test(l.message));
    assert.ok(warn !== undefined, "a line about the native addon");
    assert.equal(warn.level, "WARN");
    assert.match(String(warn.fields["reason"]), /CAIRN_NO_NATIVE=1/);
  });
});

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  connectionBound,
  nodeConnectionSlots,
  openFileLimit,
  RESERVED_DESCRIPTORS,
} from "../../src/node/open-files.ts";
import { loadConfig } from "../../src/config/index.ts";
import { createLogger } from "../../src/ops/index.ts";

const LIMITS = `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            20000                65536                files
Max locked memory         8388608              8388608              bytes
`;

describe("openFileLimit", () => {
  it("reads the soft limit from /proc/self/limits", () => {
    assert.equal(
      openFileLimit(() => LIMITS),
      20000,
    );
  });

  it("is null when unlimited, absent or unreadable", () => {
    assert.equal(
      openFileLimit(() => LIMITS.replace("20000  ", "unlimited")),
      null,
    );
    assert.equal(
      openFileLimit(() => "Limit Soft Hard\n"),
      null,
    );
    assert.equal(
      openFileLimit(() => {
        throw new Error("ENOENT");
      }),
      null,
    );
  });

  it("reads this process's own limit on Linux", { skip: process.platform !== "linux" }, () => {
    const limit = openFileLimit();
    assert.ok(limit === null || limit > 0);
  });
});

describe("connectionBound", () => {
  it("keeps the configured bound when the limit leaves room for it", () => {
    assert.deepEqual(connectionBound(10_000, 65_536), { limit: 10_000, lowered: false });
    assert.deepEqual(connectionBound(10_000, 10_000 + RESERVED_DESCRIPTORS), {
      limit: 10_000,
      lowered: false,
    });
    assert.deepEqual(connectionBound(10_000, null), { limit: 10_000, lowered: false });
  });

  it("lowers it to what the storage's descriptors leave", () => {
    assert.deepEqual(connectionBound(10_000, 10_000 + RESERVED_DESCRIPTORS - 1), {
      limit: 9_999,
      lowered: true,
    });
    assert.deepEqual(connectionBound(20_000, 20_000), {
      limit: 20_000 - RESERVED_DESCRIPTORS,
      lowered: true,
    });
  });

  it("leaves a quarter of a limit below the storage's needs, and never fewer than 16", () => {
    assert.deepEqual(connectionBound(10_000, 1024), { limit: 256, lowered: true });
    assert.deepEqual(connectionBound(10_000, 600), { limit: 150, lowered: true });
    assert.deepEqual(connectionBound(10_000, 40), { limit: 16, lowered: true });
    assert.deepEqual(connectionBound(100, 1024), { limit: 100, lowered: false });
  });
});

describe("nodeConnectionSlots", () => {
  function capture(): { log: ReturnType<typeof createLogger>; lines: string[] } {
    const lines: string[] = [];
    const log = createLogger({ level: "info", fields: {}, sink: { write: (l) => lines.push(l) } });
    return { log, lines };
  }

  it("warns, naming the limit to set, when it takes fewer than configured", () => {
    const config = loadConfig({ flags: { "rpc-max-connections": "2000" } });
    assert.equal(config.rpc.max_connections, 2000);
    const { log, lines } = capture();
    const slots = nodeConnectionSlots(config, log, 1024);
    assert.equal(slots.limit, 256);
    assert.equal(lines.length, 1);
    const fields = (JSON.parse(lines[0] as string) as { fields: Record<string, unknown> }).fields;
    assert.equal(fields["code"], "CAIRN_ERR_OPEN_FILE_LIMIT");
    assert.equal(fields["connections_taken"], 256);
    assert.match(String(fields["hint"]), new RegExp(`at least ${2000 + RESERVED_DESCRIPTORS}`));
  });

  it("says nothing when the limit leaves room", () => {
    const config = loadConfig();
    const { log, lines } = capture();
    assert.equal(nodeConnectionSlots(config, log, 65_536).limit, 10_000);
    assert.deepEqual(lines, []);
  });
});

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  descriptorPlan,
  OTHER_DESCRIPTORS,
  openFileLimit,
  planNodeDescriptors,
  TABLE_FILES,
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

describe("descriptorPlan", () => {
  it("gives the tables and the connections all they want when the limit allows", () => {
    const full = { tableFiles: TABLE_FILES, connections: 10_000, lowered: false };
    assert.deepEqual(descriptorPlan(10_000, 65_536), full);
    assert.deepEqual(descriptorPlan(10_000, 10_000 + TABLE_FILES + OTHER_DESCRIPTORS), full);
    assert.deepEqual(descriptorPlan(10_000, null), full);
  });

  it("short of descriptors, splits what is left: connections at most half", () => {
    // 8192 − 512 = 7680: 3840 each.
    assert.deepEqual(descriptorPlan(10_000, 8192), {
      tableFiles: 3840,
      connections: 3840,
      lowered: true,
    });
    // One short of the full plan: the tables keep 4096, the connections lose one.
    assert.deepEqual(descriptorPlan(10_000, 10_000 + TABLE_FILES + OTHER_DESCRIPTORS - 1), {
      tableFiles: TABLE_FILES,
      connections: 9_999,
      lowered: true,
    });
    // Few connections configured: the tables take the rest.
    assert.deepEqual(descriptorPlan(100, 1024), {
      tableFiles: 412,
      connections: 100,
      lowered: true,
    });
    assert.deepEqual(descriptorPlan(10_000, 1024), {
      tableFiles: 256,
      connections: 256,
      lowered: true,
    });
  });

  it("never gives fewer than 64 tables and 16 connections", () => {
    assert.deepEqual(descriptorPlan(10_000, 600), {
      tableFiles: 64,
      connections: 24,
      lowered: true,
    });
    assert.deepEqual(descriptorPlan(10_000, 40), {
      tableFiles: 64,
      connections: 16,
      lowered: true,
    });
  });

  it("never uses more than the limit beside the others' reserve, above the minimums", () => {
    for (let limit = 700; limit < 20_000; limit += 97) {
      for (const configured of [16, 500, 10_000]) {
        const p = descriptorPlan(configured, limit);
        assert.ok(
          p.tableFiles + p.connections + OTHER_DESCRIPTORS <= limit,
          `${limit} ${configured}`,
        );
        assert.ok(p.connections <= configured && p.tableFiles <= TABLE_FILES);
      }
    }
  });
});

describe("planNodeDescriptors", () => {
  function capture(): { log: ReturnType<typeof createLogger>; lines: string[] } {
    const lines: string[] = [];
    const log = createLogger({ level: "info", fields: {}, sink: { write: (l) => lines.push(l) } });
    return { log, lines };
  }

  it("warns, naming the limit to set, when it keeps fewer than it wants", () => {
    const config = loadConfig({
      flags: { "rpc-max-connections": "2000", "rpc-max-connections-per-ip": "50" },
    });
    const { log, lines } = capture();
    const { slots, plan } = planNodeDescriptors(config, log, 1024);
    assert.equal(slots.limit, 256);
    assert.equal(slots.perAddress, 50);
    assert.equal(plan.tableFiles, 256);
    assert.equal(lines.length, 1);
    const fields = (JSON.parse(lines[0] as string) as { fields: Record<string, unknown> }).fields;
    assert.equal(fields["code"], "CAIRN_ERR_OPEN_FILE_LIMIT");
    assert.equal(fields["connections_taken"], 256);
    assert.equal(fields["table_files"], 256);
    assert.match(
      String(fields["hint"]),
      new RegExp(`at least ${2000 + TABLE_FILES + OTHER_DESCRIPTORS}`),
    );
  });

  it("says nothing when the limit leaves room", () => {
    const config = loadConfig();
    const { log, lines } = capture();
    const { slots, plan } = planNodeDescriptors(config, log, 65_536);
    assert.equal(slots.limit, 10_000);
    assert.equal(plan.tableFiles, TABLE_FILES);
    assert.deepEqual(lines, []);
  });
});

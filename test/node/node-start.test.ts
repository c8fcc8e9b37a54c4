/**
 * A node whose start fails releases what it opened (src/node/node.ts): `cairn serve` returns
 * once the start failed and the process exits when nothing is left open, so a handle left
 * behind keeps a refused node running for ever instead of exiting 1.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { loadConfig } from "../../src/config/index.ts";
import { CairnNode } from "../../src/node/node.ts";
import { silentLogger } from "../../src/ops/index.ts";
import { tempDir } from "../storage/helpers.ts";

const udpSockets = (): number =>
  process.getActiveResourcesInfo().filter((r) => r === "UDPWrap").length;

describe("a node's failed start", () => {
  it("closes SWIM's socket reserved for rpc_addr's port 0 when membership cannot start", async () => {
    const dir = tempDir("node-start");
    const keyFile = join(tempDir("node-start-keys"), "gossip.key");
    writeFileSync(keyFile, `${randomBytes(32).toString("base64")}\n`);
    const config = loadConfig({
      env: {},
      flags: {
        "data-dir": dir,
        "node-id": "n1",
        "rpc-addr": "127.0.0.1:0",
        "http-addr": "127.0.0.1:0",
        "seed-nodes": "127.0.0.1:1",
        "gossip-key-file": keyFile,
      },
    });
    // The key file no longer reads well by the time membership starts (rewritten meanwhile,
    // during the storage's recovery): the start fails, after SWIM's socket was bound for port 0.
    writeFileSync(keyFile, "not a key\n");
    const before = udpSockets();
    await assert.rejects(CairnNode.start(config, silentLogger), /gossip\.key/);
    assert.equal(udpSockets(), before, "a UDP socket left open after the failed start");
  });
});

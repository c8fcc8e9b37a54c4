/**
 * cluster.gossip_key_file and cluster.gossip_plaintext (src/config/load.ts checkGossipKeys,
 * src/common/gossip-keys.ts): their forms, a bad key file refused at start naming the line (never
 * a key), and gossip_plaintext refused without keys.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { loadConfig } from "../../src/config/index.ts";
import { configRefusal } from "../support/config-refusal.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-gossip-config-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const key = randomBytes(32).toString("base64");
const good = join(dir, "gossip.key");
writeFileSync(good, `# a comment\n${key}\n`);

describe("cluster.gossip_key_file configuration", () => {
  it("is unset by default, and taken from YAML, the environment and the flag", () => {
    const plain = loadConfig({ env: {} }).cluster;
    assert.equal(plain.gossip_key_file, undefined);
    assert.equal(plain.gossip_plaintext, "refuse");
    const yaml = join(dir, "c.yaml");
    writeFileSync(yaml, `cluster:\n  gossip_key_file: ${good}\n  gossip_plaintext: send\n`);
    const fromYaml = loadConfig({ env: {}, configPath: yaml }).cluster;
    assert.equal(fromYaml.gossip_key_file, good);
    assert.equal(fromYaml.gossip_plaintext, "send");
    const fromEnv = loadConfig({
      env: { CAIRN_CLUSTER_GOSSIP_KEY_FILE: good, CAIRN_CLUSTER_GOSSIP_PLAINTEXT: "accept" },
    }).cluster;
    assert.equal(fromEnv.gossip_key_file, good);
    assert.equal(fromEnv.gossip_plaintext, "accept");
    assert.equal(
      loadConfig({ env: {}, flags: { "gossip-key-file": good } }).cluster.gossip_key_file,
      good,
    );
  });

  it("refuses a key file that cannot be used, naming the line and never the key", () => {
    const bad = join(dir, "bad.key");
    writeFileSync(bad, `${key}\n${key.slice(0, 40)}\n`);
    const message = configRefusal({ CAIRN_CLUSTER_GOSSIP_KEY_FILE: bad });
    assert.match(
      message,
      /cluster\.gossip_key_file \(from env CAIRN_CLUSTER_GOSSIP_KEY_FILE\): .*bad\.key: line 2 is not a key/,
    );
    assert.ok(!message.includes(key.slice(0, 40)), "a key quoted");
    assert.match(
      configRefusal({ CAIRN_CLUSTER_GOSSIP_KEY_FILE: join(dir, "missing.key") }),
      /cluster\.gossip_key_file .*cannot be read: ENOENT/,
    );
  });

  it("refuses gossip_plaintext without a key file, and a value it does not know", () => {
    assert.match(
      configRefusal({ CAIRN_CLUSTER_GOSSIP_PLAINTEXT: "accept" }),
      /cluster\.gossip_plaintext \(from env CAIRN_CLUSTER_GOSSIP_PLAINTEXT\): needs cluster\.gossip_key_file/,
    );
    assert.match(
      configRefusal({
        CAIRN_CLUSTER_GOSSIP_KEY_FILE: good,
        CAIRN_CLUSTER_GOSSIP_PLAINTEXT: "maybe",
      }),
      /cluster\.gossip_plaintext .*must be one of refuse, accept, send/,
    );
  });
});

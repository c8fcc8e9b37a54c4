import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { after, describe, it } from "node:test";
import { parse as parseYaml } from "yaml";
import { CairnError } from "../../src/common/index.ts";
import {
  CONFIG_FLAG_OPTIONS,
  CONFIG_KEYS,
  ConfigError,
  formatHostPort,
  isUnspecifiedHost,
  loadConfig,
  parseBytes,
  parseHostPort,
  sameAddress,
} from "../../src/config/index.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-config-"));
after(() => rmSync(dir, { recursive: true, force: true }));

let fileNo = 0;
function yamlFile(text: string): string {
  const p = join(dir, `cairn-${fileNo++}.yaml`);
  writeFileSync(p, text);
  return p;
}

function configError(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected ConfigError, got ${String(err)}`);
    assert.ok(err instanceof CairnError);
    assert.equal(err.code, "CAIRN_ERR_CONFIG");
    return err;
  }
  assert.fail("expected a ConfigError");
}

describe("loadConfig", () => {
  it("gives the documented defaults with no file, environment or flags", () => {
    const c = loadConfig({ env: {} });
    assert.equal(c.node_id, "node-1");
    assert.equal(c.rpc_addr, "127.0.0.1:7447");
    assert.equal(c.http_addr, "127.0.0.1:8080");
    assert.equal(c.advertise_rpc_addr, "127.0.0.1:7447");
    assert.equal(c.advertise_http_addr, "127.0.0.1:8080");
    assert.equal(c.data_dir, "./data");
    assert.deepEqual(c.cluster, {
      seed_nodes: [],
      total_shards: 1024,
      replication_factor: 3,
      bootstrap_expect: 3,
      dead_after_ms: 300_000,
      disk_full_percent: 95,
      max_joining: 8,
      gossip_key_file: undefined,
      gossip_plaintext: "refuse",
      rebalance: {
        max_moves: 4,
        moves_per_minute: 120,
        tolerance: 2,
        rate_bytes_per_sec: 4 * 1024 * 1024,
      },
    });
    assert.equal(c.telemetry.prometheus.enabled, true);
    assert.equal(c.log.level, "info");
    assert.deepEqual(c.limits, {
      max_key_bytes: 4096,
      max_value_bytes: 1024 * 1024,
      max_message_bytes: 4 * 1024 * 1024,
      max_pending_bytes: 128 * 1024 * 1024,
    });
    assert.deepEqual(c.raft, {
      tick_ms: 100,
      election_ticks: 10,
      heartbeat_ticks: 2,
      snapshot_rate_bytes_per_sec: 64 * 1024 * 1024,
      quiesce: true,
    });
    assert.deepEqual(c.storage, {
      memtable_bytes: 4 * 1024 * 1024,
      block_cache_bytes: 256 * 1024 * 1024,
      memtable_budget_bytes: 512 * 1024 * 1024,
      wal_cache_bytes: 512 * 1024 * 1024,
      min_free_bytes: 512 * 1024 * 1024,
    });
    assert.equal(c.shutdown.drain_timeout_ms, 10_000);
    assert.equal(c.shard_workers, 1);
  });

  it("is deeply frozen", () => {
    const c = loadConfig({ env: {} });
    assert.ok(Object.isFrozen(c));
    assert.ok(Object.isFrozen(c.cluster));
    assert.ok(Object.isFrozen(c.cluster.seed_nodes));
    assert.ok(Object.isFrozen(c.telemetry.prometheus));
  });

  it("applies defaults < file < environment < flags", () => {
    const path = yamlFile(
      "node_id: from-file\nrpc_addr: 127.0.0.1:9001\nhttp_addr: 127.0.0.1:9002\n" +
        "data_dir: /file\ncluster:\n  seed_nodes: [10.0.0.1:7447]\n  total_shards: 128\n",
    );
    const env = {
      CAIRN_RPC_ADDR: "127.0.0.1:9101",
      CAIRN_DATA_DIR: "/env",
      CAIRN_NODE_ID: "from-env",
    };
    const c = loadConfig({ env, flags: { config: path, "node-id": "from-flag" } });
    assert.equal(c.node_id, "from-flag"); // flag beats env and file
    assert.equal(c.rpc_addr, "127.0.0.1:9101"); // env beats file
    assert.equal(c.data_dir, "/env");
    assert.equal(c.http_addr, "127.0.0.1:9002"); // file beats default
    assert.equal(c.cluster.total_shards, 128);
    assert.deepEqual(c.cluster.seed_nodes, ["10.0.0.1:7447"]);
    assert.equal(c.cluster.replication_factor, 3); // default
  });

  it("finds the file through CAIRN_CONFIG, and --config beats it", () => {
    const a = yamlFile("node_id: a\n");
    const b = yamlFile("node_id: b\n");
    assert.equal(loadConfig({ env: { CAIRN_CONFIG: a } }).node_id, "a");
    assert.equal(loadConfig({ env: { CAIRN_CONFIG: a }, flags: { config: b } }).node_id, "b");
    assert.equal(loadConfig({ env: { CAIRN_CONFIG: a }, configPath: b }).node_id, "b");
  });

  it("reads CAIRN_SEED_NODES as a comma list; empty means single node", () => {
    const path = yamlFile("cluster:\n  seed_nodes: ['10.0.0.1:7447']\n");
    const seeds = loadConfig({ env: { CAIRN_SEED_NODES: "10.0.0.2:7447, [fd00::1]:7447" } });
    assert.deepEqual(seeds.cluster.seed_nodes, ["10.0.0.2:7447", "[fd00::1]:7447"]);
    const single = loadConfig({ configPath: path, env: { CAIRN_SEED_NODES: "" } });
    assert.deepEqual(single.cluster.seed_nodes, []);
    const flag = loadConfig({ flags: { "seed-nodes": "a.example:7447,b.example:7447" } });
    assert.deepEqual(flag.cluster.seed_nodes, ["a.example:7447", "b.example:7447"]);
  });

  it("treats other empty environment variables as unset", () => {
    assert.equal(loadConfig({ env: { CAIRN_NODE_ID: "" } }).node_id, "node-1");
  });

  it("coerces environment strings to numbers, booleans and sizes", () => {
    const c = loadConfig({
      env: {
        CAIRN_CLUSTER_TOTAL_SHARDS: "128",
        CAIRN_TELEMETRY_PROMETHEUS_ENABLED: "false",
        CAIRN_STORAGE_MEMTABLE_BYTES: "8MiB",
        CAIRN_LOG_LEVEL: "debug",
        CAIRN_RAFT_QUIESCE: "false",
      },
    });
    assert.equal(c.cluster.total_shards, 128);
    assert.equal(c.telemetry.prometheus.enabled, false);
    assert.equal(c.raft.quiesce, false);
    assert.equal(c.storage.memtable_bytes, 8 * 1024 * 1024);
    assert.equal(c.log.level, "debug");
  });

  it("takes the snapshot rate as a size per second, from the environment too, at least 1MiB", () => {
    const c = loadConfig({ env: { CAIRN_RAFT_SNAPSHOT_RATE_BYTES_PER_SEC: "16MiB" } });
    assert.equal(c.raft.snapshot_rate_bytes_per_sec, 16 * 1024 * 1024);
    const slow = configError(() =>
      loadConfig({ configPath: yamlFile("raft:\n  snapshot_rate_bytes_per_sec: 512KiB\n") }),
    );
    assert.match(slow.message, /raft\.snapshot_rate_bytes_per_sec \(from .*\): .*, got "512KiB"/);
  });

  it("says what a size must be: its range, and how it is written when it does not parse", () => {
    const far = configError(() => loadConfig({ env: { CAIRN_LIMITS_MAX_VALUE_BYTES: "65MiB" } }));
    assert.match(
      far.message,
      /limits\.max_value_bytes .*: must be a size between 0 and 64MiB, got "65MiB"/,
    );
    const decimal = configError(() => loadConfig({ env: { CAIRN_LIMITS_MAX_VALUE_BYTES: "1MB" } }));
    assert.match(
      decimal.message,
      /must be a size between 0 and 64MiB, written as a whole number of bytes, or with B, KiB, MiB or GiB \(binary units: not MB or GB\), got "1MB"/,
    );
    assert.doesNotMatch(far.message + decimal.message, /Invalid input/);
  });

  it("names the key, the file and the bad value", () => {
    const path = yamlFile("cluster:\n  total_shards: abc\n");
    const err = configError(() => loadConfig({ configPath: path }));
    assert.equal(
      err.message,
      `config error: cluster.total_shards (from ${path}): must be an integer between 1 and 65536, got "abc"`,
    );
    assert.deepEqual(
      err.issues.map((i) => [i.key, i.source]),
      [["cluster.total_shards", path]],
    );
  });

  it("refuses a bad value that a later source overrides, naming both", () => {
    // design.md §2: bad values are rejected at start. A file's `total_shards: abc` was taken
    // without a word while CAIRN_CLUSTER_TOTAL_SHARDS hid it, and refused only on the start
    // without the variable; so was a bad variable that a flag hid.
    const path = yamlFile("cluster:\n  total_shards: abc\n");
    const err = configError(() =>
      loadConfig({
        configPath: path,
        env: { CAIRN_CLUSTER_TOTAL_SHARDS: "64", CAIRN_NODE_ID: "bad id!" },
        flags: { "node-id": "n1" },
      }),
    );
    assert.deepEqual(err.message.split("\n"), [
      `config error: cluster.total_shards (from ${path}, overridden by env CAIRN_CLUSTER_TOTAL_SHARDS): must be an integer between 1 and 65536, got "abc"`,
      `config error: node_id (from env CAIRN_NODE_ID, overridden by flag --node-id): must be 1 to 128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit, got "bad id!"`,
    ]);
    // Good values at every layer: the last wins, as before.
    const ok = loadConfig({
      configPath: yamlFile("cluster:\n  total_shards: 128\n"),
      env: { CAIRN_CLUSTER_TOTAL_SHARDS: "64" },
    });
    assert.equal(ok.cluster.total_shards, 64);
  });

  it("names the environment variable and the flag", () => {
    const env = configError(() => loadConfig({ env: { CAIRN_CLUSTER_TOTAL_SHARDS: "0" } }));
    assert.match(
      env.message,
      /^config error: cluster\.total_shards \(from env CAIRN_CLUSTER_TOTAL_SHARDS\): must be an integer between 1 and 65536, got 0$/,
    );
    const flag = configError(() => loadConfig({ flags: { "rpc-addr": "localhost" } }));
    assert.match(
      flag.message,
      /^config error: rpc_addr \(from flag --rpc-addr\): must be an address <host>:<port>; the port is missing, got "localhost"$/,
    );
    const level = configError(() => loadConfig({ env: { CAIRN_LOG_LEVEL: "loud" } }));
    assert.match(
      level.message,
      /log\.level \(from env CAIRN_LOG_LEVEL\): must be one of trace, debug, info, warn, error, got "loud"/,
    );
  });

  it("rejects unknown keys at any depth, listing what is accepted", () => {
    const path = yamlFile(
      "nodeid: x\ncluster:\n  total_shard: 5\ntelemetry:\n  prometheus:\n    enable: true\n",
    );
    const err = configError(() => loadConfig({ configPath: path }));
    assert.deepEqual(
      err.issues.map((i) => i.key),
      ["nodeid", "cluster.total_shard", "telemetry.prometheus.enable"],
    );
    assert.match(
      err.message,
      /cluster\.total_shard \(from .*\): unknown key; cluster accepts seed_nodes, total_shards, replication_factor, bootstrap_expect, dead_after_ms, disk_full_percent, max_joining, gossip_key_file, gossip_plaintext, rebalance/,
    );
  });

  it("rejects a section that is not a mapping and a value of the wrong type", () => {
    const path = yamlFile("cluster: 5\ntelemetry:\n  prometheus:\n    enabled: 'yes'\n");
    const err = configError(() => loadConfig({ configPath: path }));
    assert.match(err.message, /cluster \(from .*\): must be a mapping of keys, got 5/);
    assert.match(
      err.message,
      /telemetry\.prometheus\.enabled \(from .*\): must be true or false, got "yes"/,
    );
  });

  it("rejects unknown flags", () => {
    const err = configError(() => loadConfig({ flags: { "nod-id": "x" } }));
    assert.match(err.message, /unknown flag --nod-id/);
  });

  it("reports a missing file and invalid YAML with the path", () => {
    const missing = join(dir, "nope.yaml");
    assert.match(
      configError(() => loadConfig({ configPath: missing })).message,
      /cannot read the configuration file .*nope\.yaml: ENOENT/,
    );
    // Named through CAIRN_CONFIG: the message says so (a stale variable is easy to miss).
    assert.match(
      configError(() => loadConfig({ env: { CAIRN_CONFIG: missing } })).message,
      /cannot read the configuration file .*nope\.yaml \(from CAIRN_CONFIG\): ENOENT/,
    );
    // An empty --config names no file: said so, not as a file that cannot be read.
    assert.match(
      configError(() => loadConfig({ flags: { config: "" } })).message,
      /--config is empty: give the path of a configuration file/,
    );
    const bad = yamlFile("node_id: [unclosed\n");
    assert.match(
      configError(() => loadConfig({ configPath: bad })).message,
      /is not valid YAML at line/,
    );
    const dup = yamlFile("node_id: a\nnode_id: b\n");
    assert.match(configError(() => loadConfig({ configPath: dup })).message, /is not valid YAML/);
  });

  it("refuses a key the file sets twice, nested and as a dotted key", () => {
    // YAML's own duplicate check sees two different keys here (`cluster` and
    // `cluster.total_shards`): the last one written won, silently.
    const twice = yamlFile("cluster:\n  total_shards: 7\ncluster.total_shards: 5\n");
    const err = configError(() => loadConfig({ configPath: twice }));
    assert.deepEqual(
      err.issues.map((i) => i.key),
      ["cluster.total_shards"],
    );
    assert.match(err.message, /cluster\.total_shards \(from .*\): is set twice in the file/);
    const deeper = yamlFile("cluster:\n  rebalance.max_moves: 1\n  rebalance:\n    max_moves: 2\n");
    assert.match(
      configError(() => loadConfig({ configPath: deeper })).message,
      /cluster\.rebalance\.max_moves \(from .*\): is set twice in the file/,
    );
    // Once, either way, is a setting.
    assert.equal(
      loadConfig({ configPath: yamlFile("cluster.total_shards: 5\n") }).cluster.total_shards,
      5,
    );
  });

  it("reads a file named default as any other", () => {
    // Its path is its settings' source, and the defaults' source is "default": every key it
    // set was refused as set twice in the file, and its cluster.gossip_plaintext was taken for
    // the default and not checked (an audit, 2026-12-07).
    const named = mkdtempSync(join(dir, "named-"));
    const cwd = process.cwd();
    process.chdir(named);
    try {
      writeFileSync("default", "node_id: n7\ncluster:\n  total_shards: 8\n");
      const config = loadConfig({ configPath: "default" });
      assert.equal(config.node_id, "n7");
      assert.equal(config.cluster.total_shards, 8);
      writeFileSync("default", "cluster:\n  gossip_plaintext: accept\n");
      const err = configError(() => loadConfig({ configPath: "default" }));
      assert.deepEqual(
        err.issues.map((i) => i.key),
        ["cluster.gossip_plaintext"],
      );
      assert.match(err.message, /needs cluster\.gossip_key_file/);
    } finally {
      process.chdir(cwd);
    }
  });

  it("a file of many aliases (a YAML bomb) is a configuration error, not a crash; .inf shows as Infinity", () => {
    // yaml throws past its alias bound: serve died with a ReferenceError's stack, exit 1; and a
    // non-finite number was shown as null (an audit, 2026-12-05).
    const bomb = yamlFile(
      "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n" +
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
    );
    assert.match(
      configError(() => loadConfig({ configPath: bomb })).message,
      /cannot be read as a configuration: Excessive alias count/,
    );
    const inf = yamlFile("cluster:\n  total_shards: .inf\n");
    assert.match(
      configError(() => loadConfig({ configPath: inf })).message,
      /cluster\.total_shards .*got Infinity/,
    );
  });

  it("refuses a file that is not UTF-8 text, rather than reading its bytes as other characters", () => {
    // A Latin-1 file's `café` was read as `caf\uFFFD`: a data_dir the node then created, empty,
    // beside the one the operator meant.
    const p = join(dir, "latin1.yaml");
    writeFileSync(p, Buffer.concat([Buffer.from("data_dir: /srv/caf"), Buffer.from([0xe9, 0x0a])]));
    assert.match(
      configError(() => loadConfig({ configPath: p })).message,
      /latin1\.yaml is not UTF-8 text/,
    );
  });

  it("refuses a file larger than 1 MiB, and a device with no end, unread", () => {
    // Read whole, /dev/zero (a typo, a hostile mount) was read until the memory ran out.
    const MAX_CONFIG_FILE_BYTES = 1024 * 1024;
    assert.match(
      configError(() => loadConfig({ configPath: "/dev/zero" })).message,
      /^config error: the configuration file \/dev\/zero is larger than 1 MiB/,
    );
    const big = yamlFile(`node_id: n1\n${"#".repeat(MAX_CONFIG_FILE_BYTES)}\n`);
    assert.match(
      configError(() => loadConfig({ configPath: big })).message,
      /^config error: the configuration file .*\.yaml is larger than 1 MiB/,
    );
    const atBound = yamlFile(`node_id: n1\n#`.padEnd(MAX_CONFIG_FILE_BYTES - 1, "#") + "\n");
    assert.equal(loadConfig({ configPath: atBound }).node_id, "n1");
  });

  it("accepts an empty file", () => {
    assert.equal(loadConfig({ configPath: yamlFile("") }).node_id, "node-1");
  });

  it("refuses a wildcard bind address without an advertise address", () => {
    const err = configError(() => loadConfig({ env: { CAIRN_RPC_ADDR: "0.0.0.0:7447" } }));
    assert.match(
      err.message,
      /^config error: advertise_rpc_addr: must be set when rpc_addr \(from env CAIRN_RPC_ADDR\) binds the unspecified address 0\.0\.0\.0:7447/,
    );
    const ok = loadConfig({
      flags: { "http-addr": "[::]:8080", "advertise-http-addr": "node1.example:8080" },
    });
    assert.equal(ok.advertise_http_addr, "node1.example:8080");
    const wildcard = configError(() =>
      loadConfig({ flags: { "advertise-rpc-addr": "0.0.0.0:7447" } }),
    );
    assert.match(
      wildcard.message,
      /advertise_rpc_addr \(from flag --advertise-rpc-addr\): must be a reachable address, not the unspecified address 0\.0\.0\.0/,
    );
  });

  it("checks keys against each other", () => {
    const same = configError(() => loadConfig({ flags: { "http-addr": "127.0.0.1:7447" } }));
    assert.match(
      same.message,
      /http_addr \(from flag --http-addr\): must not use the same port as rpc_addr/,
    );
    // The same address written otherwise: it passed, and the start blamed another process for
    // the port (an audit, 2026-12-05). Two loopback addresses may share a port.
    for (const [rpc, http] of [
      ["127.0.0.1:7447", "localhost:7447"],
      ["LOCALHOST:7447", "[::1]:7447"],
      ["[::1]:7447", "[0:0:0:0:0:0:0:1]:7447"],
      ["[::1]:7447", "[::0.0.0.1]:7447"],
      ["[FE80::A]:7447", "[fe80:0:0:0:0:0:0:a]:7447"],
      // An IPv4-mapped IPv6 address is the IPv4 address: bound on a dual-stack socket it takes
      // the IPv4 address's port (EADDRINUSE), and the check let the pair pass.
      ["[::ffff:127.0.0.1]:7447", "127.0.0.1:7447"],
      ["127.0.0.1:7447", "[::FFFF:7F00:1]:7447"],
      ["[0:0:0:0:0:ffff:127.0.0.1]:7447", "localhost:7447"],
    ] as const) {
      assert.match(
        configError(() => loadConfig({ flags: { "rpc-addr": rpc, "http-addr": http } })).message,
        /http_addr .*must not use the same port as rpc_addr/,
        `${rpc} and ${http}`,
      );
    }
    for (const [rpc, http] of [
      ["127.0.0.2:7447", "127.0.0.1:7447"],
      ["[::ffff:127.0.0.2]:7447", "127.0.0.1:7447"],
      // An IPv4-compatible address (::127.0.0.1, deprecated) is an IPv6 address of its own.
      ["[::127.0.0.1]:7447", "127.0.0.1:7447"],
    ] as const) {
      assert.equal(
        loadConfig({ flags: { "rpc-addr": rpc, "http-addr": http } }).http_addr,
        http,
        `${rpc} and ${http}`,
      );
    }
    // An IPv6 address with a zone (link-local, `fe80::1%eth0`) is an address like another: the
    // comparison threw a TypeError (Invalid URL), and serve died with its stack, exit 1.
    assert.equal(
      loadConfig({ flags: { "rpc-addr": "[fe80::1%eth0]:7447", "http-addr": "127.0.0.1:7447" } })
        .rpc_addr,
      "[fe80::1%eth0]:7447",
    );
    assert.match(
      configError(() =>
        loadConfig({
          flags: { "rpc-addr": "[fe80::1%eth0]:7447", "http-addr": "[fe80:0::1%eth0]:7447" },
        }),
      ).message,
      /http_addr .*must not use the same port as rpc_addr/,
    );
    assert.equal(
      loadConfig({
        flags: { "rpc-addr": "[fe80::1%eth0]:7447", "http-addr": "[fe80::1%eth1]:7447" },
      }).http_addr,
      "[fe80::1%eth1]:7447",
    );
    const ticks = yamlFile("raft:\n  election_ticks: 3\n  heartbeat_ticks: 3\n");
    assert.match(
      configError(() => loadConfig({ configPath: ticks })).message,
      /raft\.heartbeat_ticks .*must be less than raft\.election_ticks \(3/,
    );
    assert.equal(
      loadConfig({
        env: { CAIRN_SEED_NODES: "127.0.0.1:7447" },
        flags: { "shard-workers": "2" },
      }).shard_workers,
      2,
      "shard workers run in a cluster too",
    );
    const workersWithIo = configError(() =>
      loadConfig({ env: { CAIRN_SHARD_WORKERS: "2", CAIRN_RPC_IO_THREADS: "1" } }),
    );
    assert.match(
      workersWithIo.message,
      /shard_workers \(from env CAIRN_SHARD_WORKERS\): must be 1 when rpc\.io_threads \(1, from env CAIRN_RPC_IO_THREADS\) is above 0/,
    );
    assert.equal(loadConfig({ env: { CAIRN_SHARD_WORKERS: "4" } }).shard_workers, 4);
    assert.match(
      configError(() =>
        loadConfig({ env: { CAIRN_SHARD_WORKERS: "4", CAIRN_CLUSTER_TOTAL_SHARDS: "2" } }),
      ).message,
      /shard_workers \(from env CAIRN_SHARD_WORKERS\): must be at most cluster\.total_shards \(2, from env CAIRN_CLUSTER_TOTAL_SHARDS\)/,
    );
    const msg = yamlFile("limits:\n  max_value_bytes: 4MiB\n");
    assert.match(
      configError(() => loadConfig({ configPath: msg })).message,
      /limits\.max_message_bytes \(from default\): must be at least/,
    );
    // A connection's output bound below the largest answer would end every connection that asks
    // for one.
    const output = yamlFile("limits:\n  max_message_bytes: 32MiB\n");
    assert.match(
      configError(() => loadConfig({ configPath: output })).message,
      /rpc\.max_connection_output_bytes \(from default\): must be at least limits\.max_message_bytes \+ 65536 \(33619968\) so the largest answer fits, got 16777216/,
    );
    assert.equal(
      loadConfig({
        configPath: output,
        env: { CAIRN_RPC_MAX_CONNECTION_OUTPUT_BYTES: "40MiB" },
      }).rpc.max_connection_output_bytes,
      40 * 1024 * 1024,
    );
  });

  it("lists every problem at once", () => {
    const err = configError(() =>
      loadConfig({ env: { CAIRN_NODE_ID: "bad id", CAIRN_HTTP_ADDR: "x:99999" } }),
    );
    assert.deepEqual(
      err.issues.map((i) => i.key),
      ["node_id", "http_addr"],
    );
    assert.equal(err.message.split("\n").length, 2);
  });

  it("accepts exactly the flags parseArgs is given", () => {
    const { values } = parseArgs({
      args: ["--node-id", "n7", "--http-addr", "127.0.0.1:0", "--log-level", "warn"],
      options: CONFIG_FLAG_OPTIONS,
      strict: true,
    });
    const c = loadConfig({ flags: values as Record<string, string> });
    assert.equal(c.node_id, "n7");
    assert.equal(c.http_addr, "127.0.0.1:0");
    assert.equal(c.log.level, "warn");
    assert.deepEqual(Object.keys(CONFIG_FLAG_OPTIONS).sort(), [
      "advertise-http-addr",
      "advertise-rpc-addr",
      "auth-tokens-file",
      "config",
      "data-dir",
      "gossip-key-file",
      "http-addr",
      "log-level",
      "node-id",
      "rpc-addr",
      "rpc-goaway-grace-ms",
      "rpc-handshake-timeout-ms",
      "rpc-idle-timeout-ms",
      "rpc-max-client-streams",
      "rpc-max-concurrent-streams",
      "rpc-max-connection-output-bytes",
      "rpc-max-connections",
      "rpc-max-connections-per-ip",
      "rpc-max-continuation-frames",
      "rpc-max-decompressions-per-connection",
      "rpc-max-incoming-request-bytes",
      "rpc-max-resets-per-second",
      "rpc-request-receive-timeout-ms",
      "rpc-write-stall-timeout-ms",
      "seed-nodes",
      "shard-workers",
      "tls-cert-file",
      "tls-client-ca-file",
      "tls-key-file",
      "tls-peer-ca-file",
      "unsafe-accept-lost-wal",
    ]);
  });

  it("refuses recovery.unsafe_accept_lost_wal in a cluster", () => {
    assert.equal(
      loadConfig({ flags: { "unsafe-accept-lost-wal": "true" } }).recovery.unsafe_accept_lost_wal,
      true,
    );
    assert.throws(
      () =>
        loadConfig({
          flags: { "unsafe-accept-lost-wal": "true", "seed-nodes": "127.0.0.1:7447" },
        }),
      /recovery\.unsafe_accept_lost_wal \(from flag --unsafe-accept-lost-wal\): applies to a single node only/,
    );
  });
});

describe("cairn.example.yaml", () => {
  const text = readFileSync(join(import.meta.dirname, "..", "..", "cairn.example.yaml"), "utf8");

  it("loads and equals the defaults", () => {
    const example = loadConfig({
      configPath: join(import.meta.dirname, "..", "..", "cairn.example.yaml"),
    });
    assert.deepEqual(example, loadConfig({}));
  });

  it("mentions every key (commented out or set)", () => {
    const uncommented = text.replace(/^(\s*)# ?([a-z_]+:)/gm, "$1$2");
    const doc = parseYaml(uncommented) as Record<string, unknown>;
    for (const spec of CONFIG_KEYS) {
      let node: unknown = doc;
      for (const part of spec.key.split("."))
        node = (node as Record<string, unknown> | undefined)?.[part];
      assert.notEqual(node, undefined, `${spec.key} is missing from cairn.example.yaml`);
    }
  });

  it("names each key's environment variable and, where it has one, its flag", () => {
    const lines = text.split("\n");
    for (const spec of CONFIG_KEYS) {
      const env = new RegExp(`\\b${spec.env}\\b`);
      const at = lines.findIndex((l) => /^\s*#/.test(l) && env.test(l));
      assert.ok(at >= 0, `cairn.example.yaml names ${spec.env} (${spec.key})`);
      // Its comment: the comment lines around it, up to a key's line (`# gossip_key_file: …`,
      // a key left commented out, ends the comment above it).
      const prose = (l: string | undefined): boolean =>
        l !== undefined && /^\s*#/.test(l) && !/^\s*# ?[a-z_]+: /.test(l);
      let first = at;
      while (prose(lines[first - 1])) first--;
      let last = at;
      while (prose(lines[last + 1])) last++;
      const block = lines.slice(first, last + 1).join("\n");
      if (spec.flag !== undefined)
        assert.match(block, new RegExp(`--${spec.flag}\\b`), `${spec.key}: flag --${spec.flag}`);
      else assert.doesNotMatch(block, /\bflag --/, `${spec.key} has no flag`);
      // A key with bounds gives them (`16..1000000`, `1MiB..1GiB`) as the schema has them.
      const bounds = /between (\S+) and (\S+?)(?: bytes| \(|$)/.exec(spec.expect);
      if (bounds !== null) {
        const given = [...block.matchAll(/(\d+(?:[KMG]iB)?)\.\.(\d+(?:[KMG]iB)?)/g)].map(
          (m) => `${parseBytes(m[1])}..${parseBytes(m[2])}`,
        );
        assert.ok(
          given.includes(`${parseBytes(bounds[1])}..${parseBytes(bounds[2])}`),
          `${spec.key}: ${given.join(", ") || "no bounds"} in cairn.example.yaml, ${spec.expect} in the schema`,
        );
      }
    }
  });
});

describe("addresses", () => {
  it("parses IPv4, bracketed IPv6 and host names", () => {
    assert.deepEqual(parseHostPort("127.0.0.1:7447"), {
      ok: true,
      value: { host: "127.0.0.1", port: 7447 },
    });
    assert.deepEqual(parseHostPort("[::1]:80"), { ok: true, value: { host: "::1", port: 80 } });
    assert.deepEqual(parseHostPort("db-1.example:1"), {
      ok: true,
      value: { host: "db-1.example", port: 1 },
    });
    assert.equal(formatHostPort({ host: "::1", port: 80 }), "[::1]:80");
    assert.equal(formatHostPort({ host: "10.0.0.1", port: 80 }), "10.0.0.1:80");
  });

  it("refuses malformed addresses with a reason", () => {
    for (const bad of [
      "::1:7447",
      ":7447",
      "host",
      "host:",
      "host:abc",
      "host:70000",
      "[::1]7447",
      "[nope]:1",
      "1.2.3:80",
      "a_b:1",
      "host:0",
    ]) {
      const r = parseHostPort(bad);
      assert.equal(r.ok, false, bad);
    }
    assert.equal(parseHostPort("host:0", { allowPortZero: true }).ok, true);
    assert.equal(parseHostPort("0.0.0.0:1", { allowUnspecified: false }).ok, false);
    assert.equal(parseHostPort("[::]:1", { allowUnspecified: false }).ok, false);
  });

  it("recognises the unspecified addresses", () => {
    // A v4-mapped 0.0.0.0 too: bound, it takes every IPv4 address, and advertised it reaches none.
    for (const h of ["0.0.0.0", "::", "0:0::0", "::ffff:0.0.0.0", "::FFFF:0:0"])
      assert.equal(isUnspecifiedHost(h), true, h);
    for (const h of ["127.0.0.1", "::1", "localhost", "::ffff:127.0.0.1", "::ffff:0:0:0"])
      assert.equal(isUnspecifiedHost(h), false, h);
  });

  it("takes an address for itself however it is written, and no other for it", () => {
    const same: [string, string][] = [
      ["127.0.0.1:7447", "[::ffff:127.0.0.1]:7447"],
      ["127.0.0.1:7447", "[::FFFF:7F00:1]:7447"],
      ["[::1]:7447", "[0:0:0:0:0:0:0:1]:7447"],
      ["[fe80::a]:7447", "[FE80:0::A]:7447"],
      ["localhost:7447", "127.0.0.1:7447"],
      ["localhost:7447", "[::1]:7447"],
      ["DB-1.example:7447", "db-1.example:7447"],
      [" 10.0.0.1:7447", "10.0.0.1:7447 "],
    ];
    for (const [a, b] of same) {
      assert.equal(sameAddress(a, b), true, `${a} ${b}`);
      assert.equal(sameAddress(b, a), true, `${b} ${a}`);
    }
    const other: [string, string][] = [
      ["127.0.0.1:7447", "127.0.0.1:7448"],
      ["127.0.0.1:7447", "127.0.0.2:7447"],
      ["localhost:7447", "127.0.0.2:7447"],
      ["[::1]:7447", "127.0.0.1:7447"],
      ["db-1.example:7447", "db-2.example:7447"],
      ["not an address", "not-an-address"],
    ];
    for (const [a, b] of other) assert.equal(sameAddress(a, b), false, `${a} ${b}`);
  });

  it("parses sizes", () => {
    assert.equal(parseBytes(12), 12);
    assert.equal(parseBytes("4MiB"), 4 * 1024 * 1024);
    assert.equal(parseBytes("512 KiB"), 512 * 1024);
    assert.equal(parseBytes("1.5MiB"), undefined);
    assert.equal(parseBytes("4MB"), undefined);
    assert.equal(parseBytes(1.5), undefined);
  });
});

describe("docs/operations.md", () => {
  const doc = readFileSync(join(import.meta.dirname, "..", "..", "docs", "operations.md"), "utf8");

  it("documents every key with its environment variable and flag", () => {
    for (const spec of CONFIG_KEYS) {
      const row = doc.split("\n").find((l) => l.startsWith(`| \`${spec.key}\` |`));
      assert.ok(row !== undefined, `${spec.key} has a row`);
      assert.ok(row.includes(spec.env), `${spec.key} row names ${spec.env}`);
      if (spec.flag !== undefined)
        assert.ok(row.includes(`--${spec.flag}`), `${spec.key} row names --${spec.flag}`);
    }
  });
});

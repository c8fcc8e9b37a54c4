/**
 * `bin/cairn` end to end against a real server process: every client command, text and JSON
 * output, exit codes and bad arguments.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { globals, UsageError } from "../../src/cli/common.ts";
import { run } from "../../src/cli/run.ts";
import { CairnClient } from "../../src/client/index.ts";
import { runInProcess } from "../support/cli-run.ts";
import { freePort } from "../support/ports.ts";
import {
  CAIRN,
  cleanEnv,
  ROOT,
  type ServerProcess,
  startServer,
} from "../support/server-process.ts";

interface Run {
  readonly code: number | null;
  readonly stdout: Buffer;
  readonly out: string;
  readonly err: string;
}

let dir: string;
let server: ServerProcess;
let deadPort = 0;

function cairn(
  args: readonly string[],
  opts: { stdin?: string | Buffer; env?: Record<string, string> } = {},
): Promise<Run> {
  const env = cleanEnv({
    CAIRN_ENDPOINTS: server.rpc,
    CAIRN_HTTP_ENDPOINT: server.http,
    ...opts.env,
  });
  const proc = spawn(CAIRN, [...args], { cwd: ROOT, env, stdio: ["pipe", "pipe", "pipe"] });
  const out: Buffer[] = [];
  let err = "";
  proc.stdout.on("data", (d: Buffer) => out.push(d));
  proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
  proc.stdin.end(opts.stdin ?? "");
  return new Promise((resolve) =>
    proc.once("close", (code) => {
      const stdout = Buffer.concat(out);
      resolve({ code, stdout, out: stdout.toString(), err });
    }),
  );
}

/**
 * A command run in this process on streams of its own (src/cli/run.ts, what `bin/cairn` runs
 * after the process's wiring): for the cases that reach no node, usage errors and help, which
 * would each cost a Node.js start. The commands read only their `Io`.
 */
function cairnInProcess(args: readonly string[]): Promise<Run> {
  const env = cleanEnv({ CAIRN_ENDPOINTS: server.rpc, CAIRN_HTTP_ENDPOINT: server.http });
  return runInProcess(run, args, { env });
}

const b64 = (s: string): string => Buffer.from(s).toString("base64");

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "cairn-cli-"));
  server = await startServer({ dataDir: join(dir, "data") });
  // A port nothing listens on: claimed, below the ephemeral range (freePort). One bound at port 0
  // and closed was ephemeral, for any other process to take meanwhile.
  deadPort = await freePort();
});

after(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("cairn put/get/delete", () => {
  it("puts from an argument and gets it back, text and JSON", async () => {
    const put = await cairn(["put", "greeting", "hello"]);
    assert.equal(put.code, 0, put.err);
    assert.match(put.out, /^OK \d+\/\d+\n$/);

    const get = await cairn(["get", "greeting"]);
    assert.equal(get.code, 0, get.err);
    assert.equal(get.out, "hello");

    const json = await cairn(["get", "greeting", "--output", "json"]);
    assert.equal(json.code, 0, json.err);
    const parsed = JSON.parse(json.out) as {
      key: string;
      value: string;
      found: boolean;
      version: { index: number };
    };
    assert.deepEqual(
      [parsed.key, parsed.value, parsed.found],
      [b64("greeting"), b64("hello"), true],
    );
    assert.equal(
      `OK ${parsed.version.index}/`,
      put.out.slice(0, `OK ${parsed.version.index}/`.length),
    );
    // Global options may also come before the command, as with etcdctl.
    const leading = await cairn(["--endpoints", server.rpc, "-w", "json", "get", "greeting"], {
      env: { CAIRN_ENDPOINTS: "127.0.0.1:1" },
    });
    assert.equal(leading.code, 0, leading.err);
    assert.equal((JSON.parse(leading.out) as { value: string }).value, b64("hello"));
  });

  it("reads the value from stdin and from --file, bytes intact", async () => {
    const bytes = Buffer.from([0, 1, 2, 255, 10, 13]);
    const put = await cairn(["put", "bin", "-"], { stdin: bytes });
    assert.equal(put.code, 0, put.err);
    const get = await cairn(["get", "bin"]);
    assert.deepEqual(get.stdout, bytes);

    const file = join(dir, "value.txt");
    writeFileSync(file, "from a file");
    const put2 = await cairn(["put", "filed", "--file", file, "--output", "json"]);
    assert.equal(put2.code, 0, put2.err);
    assert.equal((JSON.parse(put2.out) as { key: string }).key, b64("filed"));
    assert.equal((await cairn(["get", "filed"])).out, "from a file");
  });

  it("stops quietly when its reader closes the pipe early (cairn get | head -c 1)", async () => {
    const big = Buffer.alloc(900 * 1024, "x");
    const put = await cairn(["put", "big", "-"], { stdin: big });
    assert.equal(put.code, 0, put.err);
    const env = cleanEnv({ CAIRN_ENDPOINTS: server.rpc });
    const proc = spawn(CAIRN, ["get", "big"], {
      cwd: ROOT,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let err = "";
    let read = 0;
    proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
    // As `head` does: read the first bytes, then close the pipe while the value is being written.
    proc.stdout.once("data", (d: Buffer) => {
      read = d.length;
      proc.stdout.destroy();
    });
    const code = await new Promise((resolve) => proc.once("close", resolve));
    assert.ok(read > 0 && read < big.length, `read ${read} bytes before closing`);
    assert.equal(err, "", "no EPIPE error, no stack trace");
    assert.equal(code, 0);
  });

  it("exits 1 for a missing key, in text and JSON", async () => {
    const get = await cairn(["get", "nope"]);
    assert.equal(get.code, 1);
    assert.equal(get.out, "");
    assert.match(get.err, /not found/);
    const json = await cairn(["get", "nope", "-w", "json"]);
    assert.equal(json.code, 1);
    assert.deepEqual(JSON.parse(json.out), { key: b64("nope"), found: false });
    const del = await cairn(["delete", "nope"]);
    assert.equal(del.code, 1);
  });

  it("compare-and-set: exit 4 on a conflict, success on the right version", async () => {
    const put = await cairn(["put", "cas", "1", "--output", "json"]);
    const { version } = JSON.parse(put.out) as { version: { index: number; term: number } };
    const ok = await cairn([
      "put",
      "cas",
      "2",
      "--expected-version",
      `${version.index}/${version.term}`,
    ]);
    assert.equal(ok.code, 0, ok.err);
    const stale = await cairn([
      "put",
      "cas",
      "3",
      "--expected-version",
      `${version.index}/${version.term}`,
    ]);
    assert.equal(stale.code, 4);
    assert.match(stale.err, /conflict: current version \d+\/\d+/);
    const delStale = await cairn([
      "delete",
      "cas",
      "--expected-version",
      `${version.index}/${version.term}`,
    ]);
    assert.equal(delStale.code, 4);
    const del = await cairn(["delete", "cas", "--output", "json"]);
    assert.equal(del.code, 0, del.err);
    assert.equal((JSON.parse(del.out) as { deleted: boolean }).deleted, true);
    assert.equal((await cairn(["get", "cas"])).code, 1);
  });
});

describe("cairn scan", () => {
  it("lists by prefix and range with a limit, text and JSON", async () => {
    for (const k of ["s/a", "s/b", "s/c", "s/d", "t/a"]) {
      const r = await cairn(["put", k, `v-${k}`]);
      assert.equal(r.code, 0, r.err);
    }
    const text = await cairn(["scan", "--prefix", "s/"]);
    assert.equal(text.code, 0, text.err);
    assert.equal(text.out, "s/a\tv-s/a\ns/b\tv-s/b\ns/c\tv-s/c\ns/d\tv-s/d\n");

    const json = await cairn(["scan", "--from", "s/b", "--to", "t/a", "--output", "json"]);
    const parsed = JSON.parse(json.out) as {
      items: { key: string; value: string }[];
      more: boolean;
    };
    assert.deepEqual(
      parsed.items.map((i) => Buffer.from(i.key, "base64").toString()),
      ["s/b", "s/c", "s/d"],
    );
    assert.equal(parsed.more, false);

    const limited = await cairn(["scan", "--prefix", "s/", "--limit", "2", "--keys-only"]);
    assert.equal(limited.out, "s/a\ns/b\n");
    assert.match(limited.err, /more keys/);

    const empty = await cairn(["scan", "--prefix", "nothing/", "--output", "json"]);
    assert.deepEqual(JSON.parse(empty.out), { items: [], more: false });
    // A single node holds every shard: none is skipped, and the JSON says so.
    const skipping = ["scan", "--prefix", "s/", "--serializable", "--skip-unavailable"];
    const all = await cairn([...skipping, "--keys-only"]);
    assert.equal(all.out, "s/a\ns/b\ns/c\ns/d\n");
    assert.equal(all.err, "");
    const allJson = await cairn([...skipping, "--output", "json"]);
    assert.deepEqual((JSON.parse(allJson.out) as { skipped_shards: unknown }).skipped_shards, []);
  });

  it("--keys-only in JSON prints the keys and their versions, not the values", async () => {
    // Its help says "print only the keys": in JSON every value came too (base64, a scan of
    // large values printed them all).
    const put = await cairn(["put", "ko/a", "a value"]);
    assert.equal(put.code, 0, put.err);
    const json = await cairn(["scan", "--prefix", "ko/", "--keys-only", "--output", "json"]);
    assert.equal(json.code, 0, json.err);
    const parsed = JSON.parse(json.out) as { items: Record<string, unknown>[]; more: boolean };
    assert.equal(parsed.items.length, 1);
    assert.deepEqual(Object.keys(parsed.items[0] ?? {}), ["key", "version"]);
    assert.equal(Buffer.from(String(parsed.items[0]?.["key"]), "base64").toString(), "ko/a");
    assert.equal(parsed.more, false);
  });

  it("prints a key and value that begin with a byte order mark as they are, the mark kept", async () => {
    // U+FEFF first: TextDecoder drops it unless told not to, so scan printed "bom/k\tv", a key
    // and value other than the ones stored.
    const put = await cairn(["put", "\uFEFFbom/k", "\uFEFFv"]);
    assert.equal(put.code, 0, put.err);
    const text = await cairn(["scan", "--prefix", "\uFEFFbom/"]);
    assert.equal(text.code, 0, text.err);
    assert.equal(text.out, "\uFEFFbom/k\t\uFEFFv\n");
  });

  it("global options before the command go with a key after -- (a key that begins with -)", async () => {
    // Options before the command were moved to the end of the arguments: after "--", where
    // they are positionals ("unexpected argument \"--output\"", exit 2).
    const put = await cairn(["--timeout", "5000", "put", "--", "-dash", "v"]);
    assert.equal(put.code, 0, put.err);
    const get = await cairn(["--output", "json", "get", "--", "-dash"]);
    assert.equal(get.code, 0, get.err);
    assert.equal(
      Buffer.from((JSON.parse(get.out) as { value: string }).value, "base64").toString(),
      "v",
    );
  });

  it("prints a scan of several pages in full, text and JSON, and a limit past the first page", async () => {
    // 2,345 keys: three pages of the server's 1,000.
    const c = new CairnClient({ endpoints: [server.rpc] });
    const keys = Array.from({ length: 2345 }, (_, i) => `many/${String(i).padStart(5, "0")}`);
    try {
      let next = 0;
      await Promise.all(
        Array.from({ length: 32 }, async () => {
          for (let i = next++; i < keys.length; i = next++) await c.put(keys[i] as string, "v");
        }),
      );
    } finally {
      c.close();
    }
    const text = await cairn(["scan", "--prefix", "many/", "--keys-only"]);
    assert.equal(text.code, 0, text.err);
    assert.equal(text.out, keys.map((k) => `${k}\n`).join(""));
    const json = await cairn(["scan", "--prefix", "many/", "--output", "json"]);
    const parsed = JSON.parse(json.out) as { items: { key: string }[]; more: boolean };
    assert.deepEqual(
      parsed.items.map((i) => Buffer.from(i.key, "base64").toString()),
      keys,
    );
    assert.equal(parsed.more, false);
    const limited = await cairn(["scan", "--prefix", "many/", "--keys-only", "--limit", "1500"]);
    assert.equal(
      limited.out,
      keys
        .slice(0, 1500)
        .map((k) => `${k}\n`)
        .join(""),
    );
    assert.match(limited.err, /more keys beyond --limit 1500/);
  });
});

describe("cairn cluster, snapshot, health, metrics", () => {
  it("cluster prints members and shard leaders", async () => {
    const text = await cairn(["cluster"]);
    assert.equal(text.code, 0, text.err);
    assert.match(text.out, /MEMBER\tSTATE/);
    // The epoch is the answering node's view's (a single node: no other view to merge).
    assert.match(text.out, /^epoch \d+ \(n1's view\), \d+ shards/);
    // A single node has no member state (no cluster): "-".
    assert.match(text.out, new RegExp(`n1\\t-\\talive\\t-\\t\\d+\\t${server.rpc}`));
    const json = await cairn(["cluster", "--output", "json"]);
    const view = JSON.parse(json.out) as {
      node: string;
      merged_from: unknown[];
      nodes: { id: string }[];
      shards: { id: number; leader: string }[];
      total_shards: number;
    };
    assert.equal(view.node, "n1");
    assert.deepEqual(view.merged_from, []);
    assert.equal(view.nodes[0]?.id, "n1");
    assert.equal(view.shards.find((s) => s.id === 0)?.leader, "n1");
    assert.ok(view.total_shards > 0);
  });

  it("node decommission, recommission and status on a single node are refused, naming why", async () => {
    for (const action of ["decommission", "recommission", "status"]) {
      const run = await cairn(["node", action, "n1"]);
      // Refused as not allowed here, as an invalid request is (2): not a server fault (5).
      assert.equal(run.code, 2, `${action}: ${run.err}`);
      assert.match(run.err, /refused: a single node has no members to decommission, recommission/);
    }
    const usage = await cairn(["node", "evict", "n1"]);
    assert.equal(usage.code, 2);
    assert.match(usage.err, /ACTION must be decommission, recommission, remove, status/);
    const wait = await cairn(["node", "recommission", "n1", "--wait"]);
    assert.equal(wait.code, 2);
    assert.match(wait.err, /--wait goes with decommission/);
  });

  it("cluster --watch prints the first view and follows until interrupted", async () => {
    const env = cleanEnv({ CAIRN_ENDPOINTS: server.rpc });
    const proc = spawn(CAIRN, ["cluster", "--watch", "--output", "json"], { cwd: ROOT, env });
    let out = "";
    const firstLine = new Promise<void>((resolve) =>
      proc.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        if (out.includes("\n")) resolve();
      }),
    );
    const exited = new Promise<number | null>((r) => proc.once("exit", (c) => r(c)));
    await firstLine;
    assert.ok(proc.exitCode === null, "still following");
    proc.kill("SIGINT");
    assert.equal(await exited, 0);
    assert.equal(
      (JSON.parse(out.split("\n")[0] as string) as { nodes: unknown[] }).nodes.length,
      1,
    );
  });

  it("snapshot SHARD reports index and term; an inactive shard is exit 1", async () => {
    const json = await cairn(["snapshot", "0", "--output", "json"]);
    assert.equal(json.code, 0, json.err);
    const snap = JSON.parse(json.out) as { shard_id: number; index: number; term: number };
    assert.equal(snap.shard_id, 0);
    assert.ok(snap.term > 0);
    const text = await cairn(["snapshot", "0"]);
    assert.match(text.out, /^shard 0: snapshot at index \d+, term \d+, \d+ bytes\n$/);
  });

  it("transfer-leader moves nothing on one node, and names the replicas it could move to", async () => {
    const json = await cairn(["transfer-leader", "0", "n1", "--output", "json"]);
    assert.equal(json.code, 0, json.err);
    assert.deepEqual(JSON.parse(json.out), { shard_id: 0, leader: "n1" });
    const text = await cairn(["transfer-leader", "0", "n1"]);
    assert.equal(text.out, "shard 0: led by n1\n");
    const other = await cairn(["transfer-leader", "0", "n2"]);
    assert.notEqual(other.code, 0);
    assert.match(other.err, /no replica on node "n2"/);
    const usage = await cairn(["transfer-leader", "x", "n1"]);
    assert.equal(usage.code, 2);
  });

  it("health reports the node; --quick is the probe", async () => {
    const text = await cairn(["health"]);
    assert.equal(text.code, 0, text.err);
    assert.match(text.out, /^status: healthy\nnode: n1/);
    const json = await cairn(["health", "--output", "json"]);
    assert.equal((JSON.parse(json.out) as { status: string }).status, "healthy");
    const quick = await cairn(["health", "--quick"]);
    assert.equal(quick.code, 0, quick.err);
    assert.equal(quick.out, "OK\n");
  });

  it("metrics prints the Prometheus text, filtered or as JSON samples", async () => {
    const text = await cairn(["metrics"]);
    assert.equal(text.code, 0, text.err);
    assert.match(text.out, /# TYPE kv_requests_total counter/);
    const json = await cairn(["metrics", "--filter", "kv_requests_total", "--output", "json"]);
    const samples = JSON.parse(json.out) as {
      name: string;
      labels: Record<string, string>;
      value: number;
    }[];
    assert.ok(samples.length > 0);
    assert.ok(samples.every((s) => s.name.includes("kv_requests_total")));
    assert.ok(samples.some((s) => s.labels["operation"] === "put" && s.value > 0));
  });
});

describe("cairn errors and help", () => {
  it("--token without TLS goes to loopback endpoints only (usage error otherwise)", () => {
    const env = { CAIRN_TOKEN: "a-token-of-enough-length" };
    assert.throws(
      () => globals({ endpoints: "127.0.0.1:7447,10.1.2.3:7447" }, env),
      (e: unknown) => e instanceof UsageError && /in cleartext to 10\.1\.2\.3:7447/.test(e.message),
    );
    for (const endpoints of ["127.0.0.1:7447", "localhost:7447", "[::1]:7447"])
      assert.equal(globals({ endpoints }, env).token, env.CAIRN_TOKEN);
  });

  it("an empty CAIRN_* variable counts as unset, as the server's do", () => {
    const empty = { CAIRN_ENDPOINTS: "", CAIRN_OUTPUT: "", CAIRN_TOKEN: "", CAIRN_CACERT: "" };
    const g = globals({}, empty);
    assert.deepEqual(g.endpoints, ["127.0.0.1:7447"]);
    assert.equal(g.output, "text");
    assert.equal(g.token, undefined);
    assert.equal(g.tls, undefined);
  });

  it("a bad value from a CAIRN_* variable is named by the variable, not by a flag not given", async () => {
    const refused = (env: Record<string, string>, source: RegExp): void =>
      assert.throws(
        () => globals({}, env),
        (e: unknown) => e instanceof UsageError && source.test(e.message),
      );
    refused({ CAIRN_ENDPOINTS: "foo" }, /^CAIRN_ENDPOINTS: "foo" is not/);
    refused({ CAIRN_ENDPOINTS: "," }, /^CAIRN_ENDPOINTS is empty/);
    refused({ CAIRN_OUTPUT: "yaml" }, /^CAIRN_OUTPUT must be text or json/);
    refused({ CAIRN_CACERT: join(dir, "absent.pem") }, /^CAIRN_CACERT .* cannot be read/);
    // A flag given is still named as the flag.
    assert.throws(
      () => globals({ endpoints: "foo" }, { CAIRN_ENDPOINTS: "127.0.0.1:7447" }),
      (e: unknown) => e instanceof UsageError && /^--endpoints: "foo" is not/.test(e.message),
    );
    const health = await cairn(["health"], { env: { CAIRN_HTTP_ENDPOINT: "foo" } });
    assert.equal(health.code, 2);
    assert.match(health.err, /CAIRN_HTTP_ENDPOINT: "foo" is not/);
  });

  it("exit 3 when no node answers", async () => {
    const dead = `127.0.0.1:${deadPort}`;
    const get = await cairn(["get", "k", "--endpoints", dead, "--timeout", "300"]);
    assert.equal(get.code, 3);
    assert.match(get.err, /unavailable/);
    // Connection refused proves the write was not sent: unavailable, not indeterminate.
    const put = await cairn(["put", "k", "v", "--timeout", "300"], {
      env: { CAIRN_ENDPOINTS: dead },
    });
    assert.equal(put.code, 3);
    const health = await cairn(["health", "--http-endpoint", dead, "--timeout", "300"]);
    assert.equal(health.code, 3);
    const cluster = await cairn(["cluster", "--endpoints", dead, "--timeout", "300"]);
    assert.equal(cluster.code, 3);
  });

  it("health exits 3 when the node cannot report its health (HTTP 500)", async () => {
    // What a wedged node answers once its report misses the HTTP server's deadline.
    const wedged = createHttpServer((_req, res) => {
      res.writeHead(500, { "content-type": "application/json" });
      res.end('{"error":"Internal error: the health report took over 5000 ms"}');
    });
    await new Promise<void>((resolve) => wedged.listen(0, "127.0.0.1", resolve));
    try {
      const address = wedged.address() as AddressInfo;
      const health = await cairn(["health", "--http-endpoint", `127.0.0.1:${address.port}`]);
      assert.equal(health.code, 3, health.err);
      assert.match(health.err, /unhealthy: .* could not report its health \(HTTP 500: .*5000 ms/);
    } finally {
      wedged.close();
    }
  });

  it("a value larger than the server takes: refused before anything was written, exit 2", async () => {
    const big = Buffer.alloc(5 * 1024 * 1024, 0x61);
    const put = await cairn(["put", "too-big", "-"], { stdin: big });
    assert.equal(put.code, 2, put.err);
    // The node refuses it as invalid (nothing written), naming the limit it passed.
    assert.match(
      put.err,
      /invalid request: the request message is \d+ bytes; the limit is 4194304 bytes \(limits\.max_message_bytes\)/,
    );
    assert.doesNotMatch(put.err, /outcome unknown|may or may not/);
    assert.equal((await cairn(["get", "too-big"])).code, 1, "nothing was written");
  });

  it("exit 2 on bad arguments, naming the problem", async () => {
    const cases: [string[], RegExp][] = [
      [["put", "k"], /missing VALUE/],
      [["get"], /missing KEY/],
      [["get", "a", "b"], /unexpected argument "b"/],
      [["scan", "--prefix", "a", "--from", "b"], /cannot be combined/],
      [["scan", "--limit", "x"], /--limit/],
      [["scan", "--skip-unavailable"], /--skip-unavailable needs --serializable/],
      [["put", "k", "v", "--expected-version", "7"], /INDEX\/TERM/],
      [
        ["get", "k", "--endpoints", "nohostport"],
        /"nohostport" is not an address <host>:<port>; the port is missing/,
      ],
      // Port 0 reaches nothing (a connect to it fails: the client said "unavailable").
      [
        ["get", "k", "--endpoints", "127.0.0.1:7447,127.0.0.1:0"],
        /--endpoints: "127\.0\.0\.1:0" is not an address <host>:<port> with a port between 1 and 65535/,
      ],
      [["health", "--http-endpoint", "[::1]:00"], /with a port between 1 and 65535/],
      [["get", "k", "--endpoints", "::1:7447"], /write IPv6 hosts in brackets/],
      [["get", "k", "--output", "yaml"], /text or json/],
      [["get", "k", "--bogus"], /Unknown option '--bogus'/],
      [["snapshot", "x"], /shard number/],
      [["frobnicate"], /unknown command/],
      // Options and no command: missing, not unknown.
      [["--endpoints", "127.0.0.1:7447"], /no command after "--endpoints"/],
      [["--endpoints=127.0.0.1:7447"], /no command after "--endpoints=127\.0\.0\.1:7447"/],
      // Past what a timer can wait: health, metrics and cluster failed at once (exit 3), and
      // grpc-js threw out of get (an audit, 2026-12-05).
      [
        ["health", "--timeout", "3000000000"],
        /--timeout must be a whole number of milliseconds from 1 to 2147483647/,
      ],
      [["get", "k", "--timeout", "99999999999999999999"], /--timeout must be a whole number/],
      [["get", "k", "--timeout", "0"], /--timeout must be a whole number/],
      // Number() reads "" and " " as 0, and takes hex, exponents and spaces: `--limit ""` (a
      // script's unset variable) listed every key, as no limit, and `--timeout 0x3e8` passed.
      [["scan", "--limit", ""], /--limit must be an integer ≥ 0, not ""/],
      [["scan", "--limit", " "], /--limit must be an integer/],
      [["scan", "--limit", "1e3"], /--limit must be an integer/],
      [["scan", "--limit", "0x10"], /--limit must be an integer/],
      [["scan", "--limit", " 5"], /--limit must be an integer/],
      [["get", "k", "--timeout", "0x3e8"], /--timeout must be a whole number/],
      [["get", "k", "--timeout", "1e3"], /--timeout must be a whole number/],
      // An empty key (a script's unset variable) was sent: a node down made it "unavailable",
      // exit 3 (an audit, 2026-12-07). Nothing listens on deadPort: a request sent fails so.
      [["get", "", "--endpoints", `127.0.0.1:${deadPort}`], /KEY must not be empty/],
      [["put", "", "v", "--endpoints", `127.0.0.1:${deadPort}`], /KEY must not be empty/],
      [["delete", "", "--endpoints", `127.0.0.1:${deadPort}`], /KEY must not be empty/],
      // So was a NODE that is no node id (the configuration's node_id rules).
      [
        ["transfer-leader", "1", "", "--endpoints", `127.0.0.1:${deadPort}`],
        /NODE "" is not a node id: 1 to 128 letters, digits/,
      ],
      [
        ["node", "status", "n 1", "--endpoints", `127.0.0.1:${deadPort}`],
        /NODE "n 1" is not a node id/,
      ],
    ];
    const runs = await Promise.all(cases.map(([args]) => cairnInProcess(args)));
    runs.forEach((r, i) => {
      assert.equal(r.code, 2, `${cases[i]?.[0].join(" ")}: ${r.err}`);
      assert.match(r.err, cases[i]?.[1] as RegExp);
    });
  });

  it("--help on every command, with examples", async () => {
    const commands = [
      "put",
      "get",
      "delete",
      "scan",
      "backup",
      "restore",
      "cluster",
      "health",
      "metrics",
      "snapshot",
      "bench",
      "serve",
    ];
    // `serve` writes to the process's streams (it is the process): run as a process.
    const runs = await Promise.all(
      commands.map((c) => (c === "serve" ? cairn : cairnInProcess)([c, "--help"])),
    );
    runs.forEach((r, i) => {
      assert.equal(r.code, 0, `${commands[i]}: ${r.err}`);
      assert.match(r.out, new RegExp(`^Usage: cairn ${commands[i]}`));
      assert.match(r.out, /Examples:\n {2}cairn /);
    });
    const top = await cairnInProcess(["--help"]);
    assert.equal(top.code, 0);
    for (const c of commands) assert.match(top.out, new RegExp(`\\n  ${c}\\b`));
    // No command at all is a usage error: the help goes to standard error, none to standard
    // output; as the process `bin/cairn` starts, which says so by its exit code.
    const none = await cairn([]);
    assert.equal(none.code, 2);
    assert.equal(none.out, "");
    assert.equal(none.err, top.out);
  });
});

/**
 * The files a node reads again when they change (tls.*, auth.tokens_file,
 * cluster.gossip_key_file) given as a FIFO, against the real server process. At start each is
 * refused at once, naming its key and the file ("is not a regular file"): the start waited in
 * open(2) for a writer that never came. Replaced by a FIFO under a running node, each is refused
 * at the reload and logged, the files before kept, and the node serves on: the reload held the
 * thread's event loop (every call, every Raft round, /health) in that open. The configuration
 * file itself may still be a pipe, read once at start.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFileSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { CairnClient } from "../../src/client/index.ts";
import { eventually, freePort } from "../support/cluster-process.ts";
import { startExpectingExit } from "../support/failed-start.ts";
import { type ServerProcess, startServer } from "../support/server-process.ts";
import { type CertSet, makeCerts, read } from "../support/tls-certs.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-e2e-reloaded-files-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const ADMIN_TOKEN = "admin-token-0123456789abcdef";
const TOKENS = [
  "tokens:",
  "  - name: root",
  "    role: admin",
  `    token: ${ADMIN_TOKEN}`,
  "",
].join("\n");

/** A FIFO at `path` that nobody writes to. */
function fifo(path: string): string {
  execFileSync("mkfifo", [path]);
  return path;
}

/** A FIFO renamed over `file`, as a configuration manager replaces a file. */
function replaceByFifo(file: string): void {
  renameSync(fifo(`${file}.fifo`), file);
}

function escaped(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

describe("a reloaded file given as a FIFO, at start (real server process)", () => {
  it("is refused at once, each key, naming it and the file", async () => {
    const certs = makeCerts(join(dir, "start-certs"));
    const tls = { CAIRN_TLS_CERT_FILE: certs.nodeCert, CAIRN_TLS_KEY_FILE: certs.nodeKey };
    const at = (name: string): string => fifo(join(dir, name));
    // The TLS files are read in turn, the first unusable one refused: one start each.
    const cases: [Record<string, string>, string[]][] = [
      [
        {
          ...tls,
          CAIRN_TLS_CERT_FILE: at("cert.fifo"),
          CAIRN_AUTH_TOKENS_FILE: at("tokens.fifo"),
          CAIRN_CLUSTER_GOSSIP_KEY_FILE: at("gossip.fifo"),
        },
        ["CAIRN_TLS_CERT_FILE", "CAIRN_AUTH_TOKENS_FILE", "CAIRN_CLUSTER_GOSSIP_KEY_FILE"],
      ],
      [{ ...tls, CAIRN_TLS_KEY_FILE: at("key.fifo") }, ["CAIRN_TLS_KEY_FILE"]],
      [{ ...tls, CAIRN_TLS_CLIENT_CA_FILE: at("client-ca.fifo") }, ["CAIRN_TLS_CLIENT_CA_FILE"]],
      [{ ...tls, CAIRN_TLS_PEER_CA_FILE: at("peer-ca.fifo") }, ["CAIRN_TLS_PEER_CA_FILE"]],
    ];
    const keyOf = (env: string): string =>
      env
        .replace(/^CAIRN_/, "")
        .toLowerCase()
        .replace("_", ".");
    const runs = await Promise.all(
      cases.map(([env], i) =>
        startExpectingExit({ dataDir: join(dir, `start-${i}`), env, timeoutMs: 20_000 }),
      ),
    );
    for (const [i, run] of runs.entries()) {
      const [env, vars] = cases[i] as [Record<string, string>, string[]];
      assert.equal(run.code, 2, run.stderr);
      for (const name of vars) {
        const key = keyOf(name);
        assert.match(
          run.stderr,
          new RegExp(
            `${escaped(key)} \\(from env ${name}\\): ${escaped(env[name] ?? "")}: is not a regular file \\(a FIFO\\)`,
          ),
        );
      }
    }
  });

  it("takes the configuration file from a pipe, read once at start", async () => {
    // --config /dev/stdin or a shell's <(…): the file is a pipe its writer feeds.
    const config = fifo(join(dir, "config.fifo"));
    const fed = writeFile(config, "limits:\n  max_key_bytes: 1234\n");
    const server = await startServer({ dataDir: join(dir, "piped"), args: ["--config", config] });
    try {
      await fed;
      const c = new CairnClient({ endpoints: [server.rpc], timeoutMs: 3000, routing: false });
      try {
        await assert.rejects(c.put("k".repeat(1235), "v"), /1234/);
        await c.put("k".repeat(1234), "v");
      } finally {
        c.close();
      }
    } finally {
      await server.stop();
    }
  });
});

describe("a reloaded file replaced by a FIFO under a running node (real server process)", () => {
  it("is refused at the reload and logged, the files before kept, the node serving throughout", async () => {
    const certs: CertSet = makeCerts(join(dir, "reload-certs"));
    // The node's files, in a directory of their own.
    const live = join(dir, "live");
    mkdirSync(live);
    const cert = join(live, "node.crt");
    const key = join(live, "node.key");
    const tokens = join(live, "tokens.yaml");
    const gossip = join(live, "gossip.key");
    copyFileSync(certs.nodeCert, cert);
    copyFileSync(certs.nodeKey, key);
    writeFileSync(tokens, TOKENS);
    writeFileSync(gossip, `${randomBytes(32).toString("base64")}\n`);
    // A cluster of one, so that the gossip keys are in use (a single node ignores them); the
    // front end in the main thread, with Raft.
    const port = await freePort();
    const server: ServerProcess = await startServer({
      dataDir: join(dir, "reload"),
      args: ["--rpc-addr", `127.0.0.1:${port}`, "--seed-nodes", `127.0.0.1:${port}`],
      env: {
        CAIRN_CLUSTER_BOOTSTRAP_EXPECT: "1",
        CAIRN_RPC_IO_THREADS: "0",
        CAIRN_TLS_CERT_FILE: cert,
        CAIRN_TLS_KEY_FILE: key,
        CAIRN_TLS_PEER_CA_FILE: certs.ca,
        CAIRN_AUTH_TOKENS_FILE: tokens,
        CAIRN_CLUSTER_GOSSIP_KEY_FILE: gossip,
      },
    });
    // A client of its own each time: a new connection, a new handshake, the token checked.
    const serves = async (what: string): Promise<void> => {
      const c = new CairnClient({
        endpoints: [server.rpc],
        timeoutMs: 3000,
        routing: false,
        tls: { ca: read(certs.ca) },
        token: ADMIN_TOKEN,
        channelOptions: {
          "grpc.use_local_subchannel_pool": 1,
          "grpc.ssl_target_name_override": "localhost",
        },
      });
      try {
        await c.put(`reload/${what}`, what);
        assert.equal(await c.getString(`reload/${what}`), what);
      } finally {
        c.close();
      }
      const health = await fetch(`http://${server.http}/health/quick`, {
        signal: AbortSignal.timeout(5000),
      });
      assert.equal(health.status, 200, what);
    };
    /**
     * The log's line for `message` that names the FIFO's refusal, the node answering /health
     * meanwhile (its event loop was held in the reload's open(2)).
     */
    const refused = (message: string): Promise<void> =>
      eventually(
        `"${message}", not a regular file, the node answering meanwhile`,
        async () => {
          const health = await fetch(`http://${server.http}/health/quick`, {
            signal: AbortSignal.timeout(2000),
          });
          return (
            health.status === 200 &&
            server.lines.some(
              (l) => l.includes(message) && l.includes("is not a regular file (a FIFO)"),
            )
          );
        },
        15_000,
      );
    let unharmed = false;
    try {
      await eventually("the cluster serves", async () => {
        await serves("before");
        return true;
      });
      replaceByFifo(tokens);
      await refused("the tokens file changed but cannot be used");
      await serves("tokens");
      replaceByFifo(gossip);
      await refused("gossip keys not reloaded: the keys before are kept");
      await serves("gossip");
      replaceByFifo(cert);
      await refused("the TLS files changed but cannot be used");
      await refused("the TLS files changed but cannot be used to dial peers");
      await serves("cert");
      assert.equal(server.proc.exitCode, null, "the node runs on");
      unharmed = true;
    } finally {
      // A node held in open(2) hears no SIGTERM (its handler is JavaScript).
      await server.stop(unharmed ? "SIGTERM" : "SIGKILL");
    }
  });
});

/**
 * A chaos cluster: three (or five) real `cairn serve` processes on loopback, with every byte
 * between them through a FaultNet (net.ts), processes the harness can SIGKILL, SIGSTOP and
 * SIGCONT, and a watch on every exit so that a crash nobody asked for is reported.
 *
 * Node i binds 127.0.0.1:<real port> (gRPC and SWIM, which clients use directly), advertises its
 * relay address, and dials its peers through its own CONNECT proxy (net.ts explains why).
 *
 * Membership changes (faults.ts, membership.ts): `addNode()` gives the cluster one more node
 * slot (a new id, data directory and ports, on the FaultNet) for a node to join, `reuseNode()`
 * gives a retired node's slot a new life (an empty data directory under the removed member's
 * id); `retire()` stops a node for good (decommissioned, or killed to be removed). A retired node is no longer
 * one of the `members()`: no fault picks it, the heal does not restart it, the checks do not
 * expect it. Every change of a process's life (kill, restart, pause, retire) is made under
 * `exclusive()`, so that a fault's restart and a membership change never cross on one node.
 *
 * With `tls`, the nodes run as an operator runs a secured cluster (docs/operations.md,
 * "Security"): TLS between the peers (through the FaultNet's proxies: a CONNECT, then TLS end to
 * end), mutual TLS for the harness's clients (admin `alice`, for the membership changes' Admin
 * calls), and sealed gossip (through the UDP relays). Each node id gets its certificate and its
 * own copy of the gossip key file at its first start, so a node that joins later is admitted by
 * its own certificate, and a rotation (faults.ts, rotate-keys) rewrites the copies in turn.
 */
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, open, readdir, rm, statfs, unlink, writeFile } from "node:fs/promises";
import { connect as tlsConnect } from "node:tls";
import { promisify } from "node:util";
import { X509Certificate } from "node:crypto";
import { createSocket as createUdpSocket } from "node:dgram";
import { dirname, join } from "node:path";
import { type ChannelCredentials, credentials } from "@grpc/grpc-js";
import type { Rng } from "../../src/common/index.ts";
import { parseGossipKeys, readGossipKeyFile } from "../../src/common/gossip-keys.ts";
import { decodeMessage, encodeMessage, memberId } from "../../src/membership/core/index.ts";
import { GossipSeal } from "../../src/membership/index.ts";
import { writeFileDurably } from "../../src/storage/index.ts";
import { freePort } from "../support/cluster-process.ts";
import { connect, type Clients } from "../support/grpc-client.ts";
import { type Exit, type ServerProcess, startServer } from "../support/server-process.ts";
import { type ClusterCerts, clusterCerts, nodeCert } from "../support/tls-certs.ts";
import { FaultNet, type NetNode } from "./net.ts";

export type NodeState = "running" | "paused" | "down";

export interface ChaosNode {
  readonly id: string;
  readonly net: NetNode;
  /** The address clients use: the node's own port, never through the FaultNet. */
  rpc: string;
  readonly dataDir: string;
  server: ServerProcess | null;
  client: Clients | null;
  state: NodeState;
  /** Process starts so far (1 after the first start). */
  incarnation: number;
  /** Stopped for good (decommissioned, or killed to be removed): never restarted. */
  retired: boolean;
}

export interface Crash {
  readonly node: string;
  readonly incarnation: number;
  readonly exit: Exit;
  readonly at: number;
  readonly stderrTail: string;
  readonly logTail: readonly string[];
}

export interface ChaosClusterOptions {
  readonly dir: string;
  readonly size: number;
  readonly rng: Rng;
  /** CAIRN_* settings for every node. */
  readonly env: Readonly<Record<string, string>>;
  /** Milliseconds on the run's clock. */
  readonly now: () => number;
  /**
   * Put each node's data directory on a tmpfs of this many MiB (needs root), for the disk-full
   * fault; 0 (default): on the temporary directory's file system.
   */
  readonly tmpfsMiB?: number;
  /** TLS between the peers and for the clients, and sealed gossip (certificates in dir/certs). */
  readonly tls?: boolean;
}

/** A TLS cluster's certificates, and its clients' credentials (admin alice). */
interface ChaosTls {
  readonly certs: ClusterCerts;
  /** Each node id's certificate (the founders' at once, a later node's at its first start). */
  readonly nodes: Map<string, { readonly cert: string; readonly key: string }>;
  readonly credentials: ChannelCredentials;
  /**
   * The gossip keys a node's own key file gets at its first start (each node has its own copy,
   * as each machine has: a rotation rewrites them one at a time).
   */
  gossipKeys: readonly string[];
}

function chaosTls(dir: string, ids: readonly string[]): ChaosTls {
  const certs = clusterCerts(join(dir, "certs"), ids);
  return {
    certs,
    nodes: new Map(certs.nodes),
    credentials: credentials.createSsl(
      readFileSync(certs.peerCa),
      readFileSync(certs.alice.key),
      readFileSync(certs.alice.cert),
    ),
    gossipKeys: readGossipKeyFile(certs.gossipKey).map((k) => k.key.toString("base64")),
  };
}

/** A gossip key file listing `keys` (base64, the first seals), replaced whole. */
function writeKeyFile(path: string, keys: readonly string[]): Promise<void> {
  return writeFileDurably(path, keys.join("\n") + "\n");
}

const run = promisify(execFile);

/**
 * The harness's client of one node process (a new one each start): grpc-js channels with a
 * subchannel pool of their own and a reconnect backoff of at most a second.
 *
 * With grpc-js's default, the global subchannel pool, every channel to an address shares one
 * subchannel, and with it that subchannel's reconnect backoff (1 s growing ×1.6 to 120 s). A
 * channel closed in the same turn of the event loop as its first call (a kill queued behind the
 * start that made the client, while a poll already called through it) leaks its subchannel:
 * the name resolution's answer arrives after the close and makes one that nothing unrefs, which
 * then retries the address for good, its backoff growing while the node is down. The client of
 * the node's next start, on the same address, took that subchannel over in its backoff: every
 * call failed at once ("No connection established. Last error: null") until the backoff ended,
 * up to two minutes after the node was back (chaos seed 101: 2 keys "did not read back" through
 * a joined node that was serving all along). Each client here starts from its own pool.
 *
 * `tls`: the credentials of a TLS cluster's client; the nodes' certificates name `localhost`.
 */
export function nodeClient(address: string, tls?: ChannelCredentials): Clients {
  return connect(
    address,
    {
      "grpc.use_local_subchannel_pool": 1,
      "grpc.initial_reconnect_backoff_ms": 200,
      "grpc.max_reconnect_backoff_ms": 1_000,
      ...(tls === undefined ? {} : { "grpc.ssl_target_name_override": "localhost" }),
    },
    tls,
  );
}

export class ChaosCluster {
  readonly nodes: ChaosNode[];
  readonly net: FaultNet;
  readonly crashes: Crash[] = [];
  readonly #options: ChaosClusterOptions;
  readonly #tls: ChaosTls | null;
  /** Exits the harness caused (SIGKILL, SIGTERM at the end): not crashes. */
  readonly #expected = new Set<ServerProcess>();
  /** Every stdout line of every process so far, per node (for the report of a failed run). */
  readonly logs = new Map<string, string[]>();
  /** Nodes whose exit is a fail-stop the harness provoked (a full disk), not a crash. */
  readonly #mayExit = new Set<string>();
  readonly #mounted: string[] = [];
  /** The tail of the queue of exclusive() sections. */
  #lifecycle: Promise<unknown> = Promise.resolve();
  /** Set by shutdown(): no process starts any more (a change still under way fails). */
  #closed = false;

  private constructor(
    nodes: ChaosNode[],
    net: FaultNet,
    options: ChaosClusterOptions,
    tls: ChaosTls | null,
  ) {
    this.nodes = nodes;
    this.net = net;
    this.#options = options;
    this.#tls = tls;
  }

  static async create(options: ChaosClusterOptions): Promise<ChaosCluster> {
    let netNodes: NetNode[] = [];
    let net: FaultNet;
    const netRng = options.rng.fork();
    for (let attempt = 1; ; attempt++) {
      netNodes = [];
      for (let i = 1; i <= options.size; i++) {
        netNodes.push({
          id: `n${i}`,
          realPort: await freePort(),
          relayPort: await freePort(),
          proxyPort: await freePort(),
        });
      }
      try {
        net = await FaultNet.start(netNodes, netRng);
        break;
      } catch (err) {
        // Free when picked, taken since by a process running beside: other ports.
        if (attempt >= 3 || !String(err).includes("EADDRINUSE")) throw err;
      }
    }
    const mounted: string[] = [];
    if ((options.tmpfsMiB ?? 0) > 0) {
      for (const n of netNodes) {
        const dir = join(options.dir, n.id);
        await mkdir(dir, { recursive: true });
        await run("mount", ["-t", "tmpfs", "-o", `size=${options.tmpfsMiB}m`, "tmpfs", dir]);
        mounted.push(dir);
      }
    }
    const nodes = netNodes.map((n) => ({
      id: n.id,
      net: n,
      rpc: `127.0.0.1:${n.realPort}`,
      dataDir: join(options.dir, n.id),
      server: null,
      client: null,
      state: "down" as NodeState,
      incarnation: 0,
      retired: false,
    }));
    const tls =
      options.tls === true
        ? chaosTls(
            options.dir,
            netNodes.map((n) => n.id),
          )
        : null;
    const cluster = new ChaosCluster(nodes, net, options, tls);
    cluster.#mounted.push(...mounted);
    return cluster;
  }

  node(id: string): ChaosNode {
    const n = this.nodes.find((x) => x.id === id);
    if (n === undefined) throw new Error(`no node ${id}`);
    return n;
  }

  /** The nodes that are (or are to be) members: every node not retired. */
  members(): ChaosNode[] {
    return this.nodes.filter((n) => !n.retired);
  }

  /**
   * Every node's relay address, in the order the nodes were added: the founding nodes first (the
   * first seed founds the cluster, once), then the ones added later. A retired node's address
   * stays in the list (a seed that does not answer is skipped), so that the list only grows.
   */
  get seeds(): string {
    return this.nodes.map((n) => `127.0.0.1:${n.net.relayPort}`).join(",");
  }

  /**
   * Runs `fn` alone among the sections that change processes' lives: a fault (kill, restart,
   * pause) and a membership change (join, retire) never interleave.
   */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#lifecycle.then(fn);
    this.#lifecycle = run.catch(() => undefined);
    return run;
  }

  /**
   * A new node slot, `n<k>` for the next k: new ports on the FaultNet and a new data directory.
   * It is not started (start() it: with the cluster's seeds and an empty directory, it joins).
   */
  async addNode(): Promise<string> {
    if (this.#closed) throw new Error("the cluster is shut down");
    const id = `n${this.nodes.length + 1}`;
    for (let attempt = 1; ; attempt++) {
      const net: NetNode = {
        id,
        realPort: await freePort(),
        relayPort: await freePort(),
        proxyPort: await freePort(),
      };
      try {
        await this.net.add(net);
      } catch (err) {
        if (attempt >= 3 || !String(err).includes("EADDRINUSE")) throw err;
        continue;
      }
      const dataDir = join(this.#options.dir, id);
      if ((this.#options.tmpfsMiB ?? 0) > 0) {
        await mkdir(dataDir, { recursive: true });
        await run("mount", [
          "-t",
          "tmpfs",
          "-o",
          `size=${this.#options.tmpfsMiB}m`,
          "tmpfs",
          dataDir,
        ]);
        this.#mounted.push(dataDir);
      }
      this.nodes.push({
        id,
        net,
        rpc: `127.0.0.1:${net.realPort}`,
        dataDir,
        server: null,
        client: null,
        state: "down",
        incarnation: 0,
        retired: false,
      });
      return id;
    }
  }

  /**
   * Gives retired node `id` a new life: its data directory emptied (a new machine, or a
   * StatefulSet's pod scaled up again with a new volume, under a removed member's id) and its
   * slot a member again, at the same addresses. Not started (start() it: it joins as a new
   * member under the old id). The member it was must be removed first.
   */
  async reuseNode(id: string): Promise<void> {
    const n = this.node(id);
    if (!n.retired || n.state !== "down") throw new Error(`${id} is not retired and stopped`);
    // The directory may be a tmpfs mount point: its contents go, not the directory.
    for (const entry of await readdir(n.dataDir).catch(() => []))
      await rm(join(n.dataDir, entry), { recursive: true, force: true });
    n.retired = false;
  }

  /**
   * Stops node `id` for good: SIGTERM (a decommissioned node, stopped as an operator would) or
   * SIGKILL (a machine lost, to be removed). It is no longer a member of the run.
   */
  async retire(id: string, signal: "SIGTERM" | "SIGKILL"): Promise<void> {
    const n = this.node(id);
    n.retired = true;
    if (n.state === "paused") this.resume(id);
    const server = n.server;
    if (server === null) return;
    this.#expected.add(server);
    n.client?.close();
    n.client = null;
    n.server = null;
    n.state = "down";
    const timer = setTimeout(() => server.proc.kill("SIGKILL"), 15_000);
    await server.stop(signal);
    clearTimeout(timer);
  }

  async start(id: string, extraEnv: Readonly<Record<string, string>> = {}): Promise<void> {
    await this.#start(id, extraEnv, false);
  }

  /**
   * Starts node `id` as start() does, but a node that refuses to start (exits before it started)
   * is no crash: its error is returned (null once it started).
   */
  async startOrRefusal(id: string): Promise<string | null> {
    try {
      await this.#start(id, {}, true);
      return null;
    } catch (err) {
      return String(err);
    }
  }

  async #start(
    id: string,
    extraEnv: Readonly<Record<string, string>>,
    mayRefuse: boolean,
  ): Promise<void> {
    const n = this.node(id);
    if (n.state !== "down") throw new Error(`${id} is ${n.state}`);
    if (n.retired) throw new Error(`${id} is retired`);
    if (this.#closed) throw new Error("the cluster is shut down");
    let server: ServerProcess;
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          server = await this.#spawn(n, extraEnv);
          break;
        } catch (err) {
          // The port was free when picked, and another process (a test running beside) took
          // it since: a new one. Peers reach the node through its relay, which follows.
          if (attempt >= 3 || !String(err).includes("already in use")) throw err;
          n.net.realPort = await freePort();
          n.rpc = `127.0.0.1:${n.net.realPort}`;
        }
      }
    } catch (err) {
      if (mayRefuse) throw err;
      this.crashes.push({
        node: id,
        incarnation: n.incarnation + 1,
        exit: { code: null, signal: null },
        at: this.#options.now(),
        stderrTail: String(err).slice(-4000),
        logTail: [],
      });
      throw err;
    }
    n.incarnation++;
    const incarnation = n.incarnation;
    n.server = server;
    n.client = nodeClient(n.rpc, this.#tls?.credentials);
    n.state = "running";
    this.#watch(n, server, incarnation);
  }

  async #spawn(n: ChaosNode, extraEnv: Readonly<Record<string, string>>): Promise<ServerProcess> {
    const tlsEnv = await this.#tlsEnv(n.id);
    return startServer({
      dataDir: n.dataDir,
      args: [
        "--node-id",
        n.id,
        "--rpc-addr",
        n.rpc,
        "--advertise-rpc-addr",
        `127.0.0.1:${n.net.relayPort}`,
        "--seed-nodes",
        this.seeds,
      ],
      env: {
        ...this.#options.env,
        ...tlsEnv,
        ...extraEnv,
        grpc_proxy: `http://127.0.0.1:${n.net.proxyPort}`,
        no_grpc_proxy: "",
        no_proxy: "",
      },
      // A process's start (V8 compiling the server) took over 60 s on the shared 2-core machine
      // at a load average of 20–25, which failed runs before any fault.
      timeoutMs: 120_000,
    });
  }

  /** A TLS cluster's settings for node `id` (none in cleartext). */
  async #tlsEnv(id: string): Promise<Readonly<Record<string, string>>> {
    if (this.#tls === null) return {};
    const { certs, nodes } = this.#tls;
    let own = nodes.get(id);
    if (own === undefined) {
      own = nodeCert(dirname(certs.peerCa), id);
      nodes.set(id, own);
    }
    const gossipKeyFile = this.#gossipKeyFile(id);
    if (!existsSync(gossipKeyFile)) await writeKeyFile(gossipKeyFile, this.#tls.gossipKeys);
    return {
      CAIRN_TLS_CERT_FILE: own.cert,
      CAIRN_TLS_KEY_FILE: own.key,
      CAIRN_TLS_PEER_CA_FILE: certs.peerCa,
      CAIRN_TLS_CLIENT_CA_FILE: certs.clientCa,
      CAIRN_CLUSTER_GOSSIP_KEY_FILE: gossipKeyFile,
    };
  }

  /** Node `id`'s own copy of the gossip key file (cluster.gossip_key_file). */
  #gossipKeyFile(id: string): string {
    return join(dirname((this.#tls as ChaosTls).certs.peerCa), `gossip-${id}.key`);
  }

  /** The gossip keys in force: what a node's key file gets at its first start. */
  get gossipKeys(): readonly string[] {
    return this.#tls?.gossipKeys ?? [];
  }

  /**
   * Rewrites node `id`'s gossip key file to `keys` (the first seals), in one rename, as an
   * operator's configuration management does, and makes them what a node started later gets.
   * The node reads it within a second (src/common/gossip-keys.ts).
   */
  async setGossipKeys(id: string, keys: readonly string[]): Promise<void> {
    const tls = this.#tls;
    if (tls === null) throw new Error("the cluster runs without TLS: it has no gossip keys");
    tls.gossipKeys = [...keys];
    await writeKeyFile(this.#gossipKeyFile(id), keys);
  }

  /**
   * A new certificate and key for node `id` from the cluster's CA, replacing its files (the
   * certificate first, then the key: a reader between the two sees a pair that does not match,
   * which a reload must refuse and keep what it had). Returns the new certificate's SHA-256
   * fingerprint.
   */
  renewCertificate(id: string): string {
    const tls = this.#tls;
    if (tls === null) throw new Error("the cluster runs without TLS: it has no certificates");
    const files = nodeCert(dirname(tls.certs.peerCa), id);
    tls.nodes.set(id, files);
    return new X509Certificate(readFileSync(files.cert)).fingerprint256;
  }

  /**
   * Whether node `id` acks, within `waitMs`, a SWIM ping sealed under gossip key `key` (one line
   * of a key file), with an ack sealed under that key: it opens that key and seals with it. The
   * ping comes from an id no member has (the node asks it for a push-pull, which the harness
   * leaves unanswered: nothing joins), sent to its bound port, not through the FaultNet.
   */
  async acksGossipSealedWith(id: string, key: string, waitMs: number): Promise<boolean> {
    const seal = new GossipSeal(parseGossipKeys("chaos probe", key));
    const port = Number(this.node(id).rpc.split(":").pop());
    const seq = 1 + Math.floor(Math.random() * 0x7fff_fffe);
    const ping = encodeMessage({
      type: "ping",
      from: memberId("chaos-probe"),
      totalShards: Number(this.#options.env["CAIRN_CLUSTER_TOTAL_SHARDS"]),
      seq,
      target: memberId(id),
      gossip: [],
    });
    const socket = createUdpSocket("udp4");
    try {
      return await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), waitMs);
        socket.on("message", (msg: Buffer) => {
          const opened = seal.unwrap(msg);
          if (!opened.ok) return;
          const d = decodeMessage(opened.bytes);
          if (d.ok && d.message.type === "ack" && d.message.seq === seq) {
            clearTimeout(timer);
            resolve(true);
          }
        });
        socket.send(seal.wrap(ping), port, "127.0.0.1");
      });
    } finally {
      socket.close();
    }
  }

  /**
   * The SHA-256 fingerprint of the certificate node `id` serves on its rpc address now (a TLS
   * handshake as admin alice), or null when it does not answer within 2 s.
   */
  servedCertificate(id: string): Promise<string | null> {
    const tls = this.#tls;
    if (tls === null) throw new Error("the cluster runs without TLS: it serves no certificate");
    const [host, port] = this.node(id).rpc.split(":") as [string, string];
    return new Promise((resolve) => {
      const socket = tlsConnect({
        host,
        port: Number(port),
        servername: "localhost",
        ALPNProtocols: ["h2"],
        ca: readFileSync(tls.certs.peerCa),
        key: readFileSync(tls.certs.alice.key),
        cert: readFileSync(tls.certs.alice.cert),
      });
      const done = (fingerprint: string | null): void => {
        clearTimeout(timer);
        socket.destroy();
        resolve(fingerprint);
      };
      const timer = setTimeout(() => done(null), 2_000);
      socket.once("secureConnect", () => done(socket.getPeerCertificate().fingerprint256));
      socket.once("error", () => done(null));
    });
  }

  #watch(n: ChaosNode, server: ServerProcess, incarnation: number): void {
    const id = n.id;
    const log = this.logs.get(id) ?? [];
    this.logs.set(id, log);
    log.push(`--- ${id} start #${incarnation} at t=${Math.round(this.#options.now())} ms`);
    void server.exited.then((exit) => {
      log.push(...server.lines, `--- ${id} #${incarnation} exited ${JSON.stringify(exit)}`);
      if (this.#expected.has(server)) return;
      if (this.#mayExit.has(id) && exit.code === 1) {
        log.push(`--- ${id} #${incarnation} stopped on its storage (fail-stop, expected)`);
        if (n.server === server) {
          n.server = null;
          n.client?.close();
          n.client = null;
          n.state = "down";
        }
        return;
      }
      this.crashes.push({
        node: id,
        incarnation,
        exit,
        at: this.#options.now(),
        stderrTail: server.stderr().slice(-4000),
        logTail: server.lines.slice(-30),
      });
      if (n.server === server) {
        n.server = null;
        n.client?.close();
        n.client = null;
        n.state = "down";
      }
    });
  }

  /** Starts every node; when one fails, the others still finish starting (and are stopped). */
  async startAll(): Promise<void> {
    const results = await Promise.allSettled(this.nodes.map((n) => this.start(n.id)));
    const failed = results.find((r) => r.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  }

  /** SIGKILL (a paused process dies as well). */
  async kill(id: string): Promise<void> {
    const n = this.node(id);
    const server = n.server;
    if (server === null) return;
    this.#expected.add(server);
    n.client?.close();
    n.client = null;
    n.server = null;
    n.state = "down";
    await server.stop("SIGKILL");
  }

  pause(id: string): void {
    const n = this.node(id);
    if (n.server === null || n.state !== "running") return;
    n.server.proc.kill("SIGSTOP");
    n.state = "paused";
  }

  resume(id: string): void {
    const n = this.node(id);
    if (n.server === null || n.state !== "paused") return;
    n.server.proc.kill("SIGCONT");
    n.state = "running";
  }

  /**
   * Fills the node's data directory (a tmpfs) with a ballast file until the disk is full; the
   * node may stop on it (exit code 1: a fail-stop, not a crash) until freeDisk().
   */
  async fillDisk(id: string): Promise<number> {
    const n = this.node(id);
    this.#mayExit.add(id);
    const file = await open(join(n.dataDir, "ballast"), "w");
    const chunk = Buffer.alloc(1 << 20, 0x5a);
    let bytes = 0;
    try {
      for (;;) bytes += (await file.write(chunk)).bytesWritten;
    } catch (err) {
      if ((err as { code?: string }).code !== "ENOSPC") throw err;
      // The last partial chunk may have left room: fill it byte-wise, in 4 KiB steps.
      try {
        for (;;) bytes += (await file.write(chunk.subarray(0, 4096))).bytesWritten;
      } catch {
        // full
      }
    } finally {
      await file.close();
    }
    return bytes;
  }

  /**
   * Fills the node's data directory (a tmpfs) with a ballast file until its file system is
   * `percent` full as `df` counts it (used / (used + available), rounded up), short of ENOSPC;
   * returns the share reached. The node may still stop on a full disk (its own writes take the
   * rest) until freeDisk().
   */
  async fillDiskTo(id: string, percent: number): Promise<number> {
    const n = this.node(id);
    this.#mayExit.add(id);
    const usedShare = async (): Promise<{ used: number; room: number }> => {
      const st = await statfs(n.dataDir);
      const used = (st.blocks - st.bfree) * st.bsize;
      return { used, room: used + st.bavail * st.bsize };
    };
    const before = await usedShare();
    let left = Math.ceil((percent / 100) * before.room) - before.used;
    const file = await open(join(n.dataDir, "ballast"), "w");
    const chunk = Buffer.alloc(1 << 20, 0x5a);
    try {
      while (left > 0) {
        const { bytesWritten } = await file.write(chunk.subarray(0, Math.min(chunk.length, left)));
        left -= bytesWritten;
      }
    } catch (err) {
      if ((err as { code?: string }).code !== "ENOSPC") throw err;
    } finally {
      await file.close();
    }
    const after = await usedShare();
    return Math.ceil((100 * after.used) / after.room);
  }

  /** Whether node `id` may stop on its storage (exit code 1: a fail-stop, not a crash). */
  mayFailStop(id: string, allowed: boolean): void {
    if (allowed) this.#mayExit.add(id);
    else this.#mayExit.delete(id);
  }

  /**
   * Reads node `id`'s own copy of every key (serializable Scans through it, one after another)
   * until it exits, for at most `timeoutMs`: its log lines when it exited, else null.
   */
  async readUntilStopped(id: string, timeoutMs: number): Promise<string[] | null> {
    const n = this.node(id);
    const server = n.server;
    const client = n.client;
    if (server === null || client === null) return null;
    let exited = false;
    void server.exited.then(() => {
      exited = true;
    });
    const deadline = this.#options.now() + timeoutMs;
    while (!exited && this.#options.now() < deadline) {
      let token: Buffer = Buffer.alloc(0);
      try {
        do {
          const page = await client.call(client.kv, "Scan", {
            limit: 10_000,
            page_token: token,
            consistency: "SERIALIZABLE",
          });
          token = page["next_page_token"] as Buffer;
        } while (token.length > 0 && !exited);
      } catch {
        // Refused (the node stopping, or its copy not serving yet): again, until it exits.
      }
      await Promise.race([server.exited, new Promise((r) => setTimeout(r, 200))]);
    }
    return exited ? server.lines : null;
  }

  async freeDisk(id: string): Promise<void> {
    await unlink(join(this.node(id).dataDir, "ballast")).catch(() => undefined);
    this.#mayExit.delete(id);
  }

  /** Waits until the node answers GET `path` with `ok` (bounded). */
  async http(id: string, path: string): Promise<{ status: number; body: unknown } | null> {
    const n = this.node(id);
    if (n.server === null || n.state !== "running") return null;
    try {
      const res = await fetch(`http://${n.server.http}${path}`, {
        signal: AbortSignal.timeout(3_000),
      });
      const text = await res.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // not JSON
      }
      return { status: res.status, body };
    } catch {
      return null;
    }
  }

  /** Stops every process (SIGCONT first for paused ones), then the network. */
  async shutdown(): Promise<void> {
    this.#closed = true;
    // A section under way (a restart, a join's start) ends first, so that no process it
    // starts outlives the run; those queued after it start nothing.
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.#lifecycle, new Promise((r) => (timer = setTimeout(r, 75_000)))]);
    clearTimeout(timer);
    for (const n of this.nodes) if (n.state === "paused") this.resume(n.id);
    await Promise.all(
      this.nodes.map(async (n) => {
        const server = n.server;
        if (server === null) return;
        this.#expected.add(server);
        n.client?.close();
        n.client = null;
        n.server = null;
        n.state = "down";
        const timer = setTimeout(() => server.proc.kill("SIGKILL"), 15_000);
        await server.stop("SIGTERM");
        clearTimeout(timer);
      }),
    );
    await this.net.close();
    for (const dir of this.#mounted.splice(0)) {
      await run("umount", [dir]).catch(() => run("umount", ["-l", dir]));
    }
  }

  async writeLogs(dir: string): Promise<void> {
    for (const n of this.nodes) {
      const lines = [...(this.logs.get(n.id) ?? [])];
      if (n.server !== null) lines.push(...n.server.lines, "--- (still running)");
      await writeFile(join(dir, `${n.id}.log`), lines.join("\n") + "\n");
    }
  }
}

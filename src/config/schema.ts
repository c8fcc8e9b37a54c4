/**
 * Every configuration key: its zod schema, default, environment variable, flag and the sentence
 * an error message uses. This table is the single source of truth; docs/operations.md and
 * cairn.example.yaml mirror it (test/config checks that the example lists every key).
 */
import { z } from "zod";
import { parseHostPort } from "./address.ts";

export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error"] as const;
export type LogLevelName = (typeof LOG_LEVELS)[number];

/** How a string from the environment or a flag becomes a value before validation. */
export type ValueKind = "string" | "int" | "bool" | "list" | "bytes";

export interface KeySpec {
  /** Dotted YAML path, e.g. `cluster.total_shards`. */
  readonly key: string;
  readonly kind: ValueKind;
  readonly schema: z.ZodType;
  /** Default value; `undefined` for keys derived from others (the advertise addresses). */
  readonly default: unknown;
  readonly env: string;
  /** Long flag name without dashes (`node-id`), when `cairn serve` has one. */
  readonly flag?: string;
  /** "must be …": what the key accepts, used in error messages and docs. */
  readonly expect: string;
  readonly doc: string;
}

const KIB = 1024;
const MIB = 1024 * KIB;
const GIB = 1024 * MIB;

/** Sizes accept an integer number of bytes or a string such as `4MiB`, `512KiB`, `1GiB`. */
export function parseBytes(value: unknown): number | undefined {
  if (typeof value === "number") return Number.isSafeInteger(value) ? value : undefined;
  if (typeof value !== "string") return undefined;
  const m = /^\s*([0-9]+)\s*(B|KiB|MiB|GiB)?\s*$/.exec(value);
  if (m === null || m[1] === undefined) return undefined;
  const unit = m[2] === "GiB" ? GIB : m[2] === "MiB" ? MIB : m[2] === "KiB" ? KIB : 1;
  const n = Number(m[1]) * unit;
  return Number.isSafeInteger(n) ? n : undefined;
}

/** `bytes` as parseBytes reads it, in the largest binary unit that divides it: `256MiB`, `1000`. */
export function formatBytes(bytes: number): string {
  for (const [unit, size] of [
    ["GiB", GIB],
    ["MiB", MIB],
    ["KiB", KIB],
  ] as const) {
    if (bytes >= size && bytes % size === 0) return `${bytes / size}${unit}`;
  }
  return String(bytes);
}

function intBetween(min: number, max: number): z.ZodType<number> {
  return z.int().min(min).max(max);
}

function bytesBetween(min: number, max: number): z.ZodType<number> {
  return z.unknown().transform((v, ctx) => {
    const n = parseBytes(v);
    if (n === undefined || n < min || n > max) {
      // The key's own `expect` says what is wanted (load.ts): zod would say "Invalid input".
      ctx.addIssue({ code: "custom", params: { useExpect: true, unparsed: n === undefined } });
      return z.NEVER;
    }
    return n;
  });
}

/** A `host:port` string checked by parseHostPort; the issue message is the parser's reason. */
function address(rules: { allowPortZero: boolean; allowUnspecified: boolean }): z.ZodType<string> {
  return z.string().superRefine((s, ctx) => {
    const r = parseHostPort(s, rules);
    if (!r.ok) ctx.addIssue({ code: "custom", message: `must be ${r.reason}` });
  });
}

const BIND = { allowPortZero: true, allowUnspecified: true };
const ADVERTISE = { allowPortZero: false, allowUnspecified: false };

const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/** Whether `text` is a node id `node_id` accepts: what a command naming a node may send. */
export function isNodeId(text: string): boolean {
  return NODE_ID.test(text);
}

export const KEYS: readonly KeySpec[] = [
  {
    key: "node_id",
    kind: "string",
    schema: z.string().regex(NODE_ID),
    default: "node-1",
    env: "CAIRN_NODE_ID",
    flag: "node-id",
    expect:
      "must be 1 to 128 characters of letters, digits, '.', '_' or '-', starting with a letter or digit",
    doc: "Unique identifier of this node in the cluster (appears in logs and the raft_commit_index label).",
  },
  {
    key: "rpc_addr",
    kind: "string",
    schema: address(BIND),
    default: "127.0.0.1:7447",
    env: "CAIRN_RPC_ADDR",
    flag: "rpc-addr",
    expect: "must be an address <host>:<port>",
    doc: "Bind address of the gRPC server (clients and peers); SWIM uses UDP on the same port number.",
  },
  {
    key: "http_addr",
    kind: "string",
    schema: address(BIND),
    default: "127.0.0.1:8080",
    env: "CAIRN_HTTP_ADDR",
    flag: "http-addr",
    expect: "must be an address <host>:<port>",
    doc: "Bind address of the operators' HTTP server (/health/quick, /health, /metrics).",
  },
  {
    key: "advertise_rpc_addr",
    kind: "string",
    schema: address(ADVERTISE),
    default: undefined,
    env: "CAIRN_ADVERTISE_RPC_ADDR",
    flag: "advertise-rpc-addr",
    expect: "must be a reachable address <host>:<port>",
    doc: "RPC address other nodes and clients use to reach this node. Default: rpc_addr; required when rpc_addr binds 0.0.0.0 or [::].",
  },
  {
    key: "advertise_http_addr",
    kind: "string",
    schema: address(ADVERTISE),
    default: undefined,
    env: "CAIRN_ADVERTISE_HTTP_ADDR",
    flag: "advertise-http-addr",
    expect: "must be a reachable address <host>:<port>",
    doc: "HTTP address published to other nodes (health report `nodes`). Default: http_addr; required when http_addr binds 0.0.0.0 or [::].",
  },
  {
    key: "data_dir",
    kind: "string",
    schema: z.string().min(1),
    default: "./data",
    env: "CAIRN_DATA_DIR",
    flag: "data-dir",
    expect: "must be a non-empty path",
    doc: "Directory of the WAL and the shards' LSM files (relative paths are relative to the working directory).",
  },
  {
    key: "cluster.seed_nodes",
    kind: "list",
    schema: z.array(address(ADVERTISE)).max(64),
    default: [],
    env: "CAIRN_SEED_NODES",
    flag: "seed-nodes",
    expect: "must be a list of at most 64 addresses <host>:<port>",
    doc: "RPC addresses of nodes to join; empty means single-node mode. Env and flag: comma-separated.",
  },
  {
    key: "cluster.total_shards",
    kind: "int",
    schema: intBetween(1, 65536),
    default: 1024,
    env: "CAIRN_CLUSTER_TOTAL_SHARDS",
    expect: "must be an integer between 1 and 65536",
    doc: "Number of virtual shards; every node of a cluster must agree.",
  },
  {
    key: "cluster.replication_factor",
    kind: "int",
    schema: intBetween(1, 15),
    default: 3,
    env: "CAIRN_CLUSTER_REPLICATION_FACTOR",
    expect: "must be an integer between 1 and 15",
    doc: "Replicas of each shard (capped at the number of members; a single node keeps one).",
  },
  {
    key: "cluster.bootstrap_expect",
    kind: "int",
    schema: intBetween(1, 15),
    default: 3,
    env: "CAIRN_CLUSTER_BOOTSTRAP_EXPECT",
    expect: "must be an integer between 1 and 15",
    doc: "Members the first seed waits to see alive before it founds the cluster (with seeds only); they become the meta group's voters.",
  },
  {
    key: "cluster.dead_after_ms",
    kind: "int",
    schema: intBetween(1_000, 604_800_000),
    default: 300_000,
    env: "CAIRN_CLUSTER_DEAD_AFTER_MS",
    expect: "must be an integer between 1000 and 604800000 (7 days)",
    doc: "A member gossip has had unreachable this long is marked dead by the meta group's leader, and its replicas are re-created on the other active members (CockroachDB's server.time_until_store_dead). Read by the meta group's leader.",
  },
  {
    key: "cluster.disk_full_percent",
    kind: "int",
    schema: intBetween(50, 100),
    default: 95,
    env: "CAIRN_CLUSTER_DISK_FULL_PERCENT",
    expect: "must be an integer between 50 and 100",
    doc: "A member whose data directory's file system is this full (used share, as df's Use%) reports it to the meta group and takes no new replica (no new shard, repair or rebalancing move) until it is 5 points below; the replicas it holds stay. 100 turns the report off. Read by every member for itself.",
  },
  {
    key: "cluster.max_joining",
    kind: "int",
    schema: intBetween(1, 1024),
    default: 8,
    env: "CAIRN_CLUSTER_MAX_JOINING",
    expect: "must be an integer between 1 and 1024",
    doc: "Nodes that may be joining the cluster at once (each a learner of the meta group until it is active); a node asking to join past it is refused, CAIRN_ERR_MEMBER_LIMIT, and asks again every 2 s. A cluster records at most 1024 members, removed ones aside. Read by the meta group's leader.",
  },
  {
    key: "cluster.gossip_key_file",
    kind: "string",
    schema: z.string().min(1),
    default: undefined,
    env: "CAIRN_CLUSTER_GOSSIP_KEY_FILE",
    flag: "gossip-key-file",
    expect: "must be a non-empty path",
    doc: "Seals SWIM's UDP gossip (AES-256-GCM): a file of keys, one a line, each 32 bytes in base64 (cairn cert create-gossip-key); the first seals what this node sends, every one opens what it receives, so keys rotate by listing two. Every member needs a key of the others'. Unset, gossip is cleartext and anything a datagram says is believed. Ignored by a single node. A regular file of at most 64 KiB; reloaded when the file changes.",
  },
  {
    key: "cluster.gossip_plaintext",
    kind: "string",
    schema: z.enum(["refuse", "accept", "send"]),
    default: "refuse",
    env: "CAIRN_CLUSTER_GOSSIP_PLAINTEXT",
    expect: "must be one of refuse, accept, send",
    doc: "With cluster.gossip_key_file, what this node does with cleartext gossip: refuse (drops it: the default), accept (seals what it sends, takes cleartext too), send (sends cleartext, takes both). To turn keys on in a running cluster: send on every member, then accept, then refuse, a rolling restart a step; the reverse to turn them off.",
  },
  {
    key: "cluster.rebalance.max_moves",
    kind: "int",
    schema: intBetween(0, 256),
    default: 4,
    env: "CAIRN_CLUSTER_REBALANCE_MAX_MOVES",
    expect: "must be an integer between 0 and 256",
    doc: "Shards moving at once (a move sends a snapshot, at cluster.rebalance.rate_bytes_per_sec): repairs of dead or decommissioning members' replicas and rebalancing onto new members; 0 stops every move. Read by the meta group's leader.",
  },
  {
    key: "cluster.rebalance.moves_per_minute",
    kind: "int",
    schema: intBetween(0, 60_000),
    default: 120,
    env: "CAIRN_CLUSTER_REBALANCE_MOVES_PER_MINUTE",
    expect: "must be an integer between 0 and 60000",
    doc: "Balancing moves (replicas spread onto a new or less loaded member) the meta group's leader starts a minute, at most, within cluster.rebalance.max_moves; 0 starts none. Leaders are evened once the replicas are (with 0, on the placement as it is, as with max_moves 0). Repairs (a dead or decommissioning member's replicas) are not paced by it. Read by the meta group's leader.",
  },
  {
    key: "cluster.rebalance.tolerance",
    kind: "int",
    schema: intBetween(0, 65_536),
    default: 2,
    env: "CAIRN_CLUSTER_REBALANCE_TOLERANCE",
    expect: "must be an integer between 0 and 65536",
    doc: "Replicas the most loaded active member may hold above the least loaded before the meta group's leader moves one (0 acts as 1: one apart, a move would only swap them); once no replica moves, likewise the shards the alive active member that leads the most may lead above the one that leads the fewest before a leadership moves.",
  },
  {
    key: "cluster.rebalance.rate_bytes_per_sec",
    kind: "bytes",
    schema: bytesBetween(MIB, 64 * GIB),
    default: 4 * MIB,
    env: "CAIRN_CLUSTER_REBALANCE_RATE_BYTES_PER_SEC",
    expect: "must be a size between 1MiB and 64GiB (per second)",
    doc: "Snapshot data this node sends to learners (the new replicas of moves: rebalancing and repairs), to all of them together, in bytes per second; within raft.snapshot_rate_bytes_per_sec, which also paces them. Read by every node that leads a moving shard.",
  },
  {
    key: "telemetry.prometheus.enabled",
    kind: "bool",
    schema: z.boolean(),
    default: true,
    env: "CAIRN_TELEMETRY_PROMETHEUS_ENABLED",
    expect: "must be true or false",
    doc: "Serve GET /metrics; when false it answers 404 `metrics export disabled`.",
  },
  {
    key: "log.level",
    kind: "string",
    schema: z.enum(LOG_LEVELS),
    default: "info",
    env: "CAIRN_LOG_LEVEL",
    flag: "log-level",
    expect: `must be one of ${LOG_LEVELS.join(", ")}`,
    doc: "Lowest level written to the JSON log on stdout.",
  },
  {
    key: "limits.max_key_bytes",
    kind: "bytes",
    schema: bytesBetween(1, 65535),
    default: 4096,
    env: "CAIRN_LIMITS_MAX_KEY_BYTES",
    expect: "must be a size between 1 and 65535 bytes",
    doc: "Largest key accepted (keys are 1..max bytes); larger keys get INVALID_ARGUMENT.",
  },
  {
    key: "limits.max_value_bytes",
    kind: "bytes",
    schema: bytesBetween(0, 64 * MIB),
    default: MIB,
    env: "CAIRN_LIMITS_MAX_VALUE_BYTES",
    expect: "must be a size between 0 and 64MiB",
    doc: "Largest value accepted; larger values get INVALID_ARGUMENT.",
  },
  {
    key: "limits.max_message_bytes",
    kind: "bytes",
    schema: bytesBetween(64 * KIB, 256 * MIB),
    default: 4 * MIB,
    env: "CAIRN_LIMITS_MAX_MESSAGE_BYTES",
    expect: "must be a size between 64KiB and 256MiB",
    doc: "Largest gRPC message received or sent; must leave room for a largest key and value.",
  },
  {
    key: "limits.max_pending_bytes",
    kind: "bytes",
    schema: bytesBetween(MIB, 64 * 1024 * MIB),
    default: 128 * MIB,
    env: "CAIRN_LIMITS_MAX_PENDING_BYTES",
    expect: "must be a size between 1MiB and 64GiB",
    doc: "Bytes of requests waiting in the node (queued, proposed, or waiting for their apply or read index); past it requests get RESOURCE_EXHAUSTED (retryable).",
  },
  {
    key: "rpc.io_threads",
    kind: "int",
    schema: intBetween(0, 64),
    default: 0,
    env: "CAIRN_RPC_IO_THREADS",
    expect: "must be an integer between 0 and 64",
    doc: "Worker threads that serve rpc_addr (HTTP/2 and gRPC framing) and hand each call to the main thread, which runs Raft, the WAL and the LSM; 0 serves gRPC on the main thread itself (fastest on 2 cores; more threads help once the main thread is busy and cores are spare).",
  },
  {
    key: "rpc.max_connections",
    kind: "int",
    schema: intBetween(16, 1_000_000),
    default: 10_000,
    env: "CAIRN_RPC_MAX_CONNECTIONS",
    flag: "rpc-max-connections",
    expect: "must be an integer between 16 and 1000000",
    doc: "Connections rpc_addr may hold open at once, clients' and peers' together, across the node's threads; past it a new connection is closed as soon as it is accepted. In a cluster its last quarter (at most 256) is kept for connections from the members' addresses. Each holds a file descriptor, which the WAL and the tables need too: at start it is lowered, with a warning, to what the open-file limit leaves them.",
  },
  {
    key: "rpc.max_connections_per_ip",
    kind: "int",
    schema: intBetween(0, 1_000_000),
    default: 1000,
    env: "CAIRN_RPC_MAX_CONNECTIONS_PER_IP",
    flag: "rpc-max-connections-per-ip",
    expect: "must be an integer between 0 and 1000000",
    doc: "Connections one client address (an IPv6 address by its /64) may hold open on rpc_addr at once, so that one client cannot take all of rpc.max_connections; past it its new connections are closed as they are accepted. 0: no bound per address.",
  },
  {
    key: "rpc.max_client_streams",
    kind: "int",
    schema: intBetween(16, 1_000_000),
    default: 10_000,
    env: "CAIRN_RPC_MAX_CLIENT_STREAMS",
    flag: "rpc-max-client-streams",
    expect: "must be an integer between 16 and 1000000",
    doc: "Clients' streaming calls (Meta.WatchCluster, health Watch, reflection) open at once across the node, each ~22 KiB of memory; past it a new one is answered RESOURCE_EXHAUSTED (CAIRN_ERR_STREAMS_FULL). A peer's streaming call (Raft/Stream, Raft/InstallSnapshot) holds a slot only until its first message is whole, and none from a member's address.",
  },
  {
    key: "rpc.max_incoming_request_bytes",
    kind: "bytes",
    schema: bytesBetween(MIB, GIB),
    default: 256 * MIB,
    env: "CAIRN_RPC_MAX_INCOMING_REQUEST_BYTES",
    flag: "rpc-max-incoming-request-bytes",
    expect: "must be a size between 1MiB and 1GiB",
    doc: "Bytes of unary requests still arriving (header lists, and messages not yet whole or, compressed, not yet inflated) the node holds at once, across its threads; a request whose next bytes would pass it is answered RESOURCE_EXHAUSTED (CAIRN_ERR_BACKPRESSURE, retryable). At least limits.max_message_bytes + 64KiB, so the largest request fits. One client address holds at most a quarter of it (or one whole request, when more); in a cluster the last quarter is kept for the members' addresses. A quarter of it, apart, bounds the header blocks still arriving (a block waiting for its last CONTINUATION frame); a connection whose block would pass that is ended (GOAWAY ENHANCE_YOUR_CALM).",
  },
  {
    key: "rpc.max_concurrent_streams",
    kind: "int",
    schema: intBetween(1, 1_000_000),
    default: 1000,
    env: "CAIRN_RPC_MAX_CONCURRENT_STREAMS",
    flag: "rpc-max-concurrent-streams",
    expect: "must be an integer between 1 and 1000000",
    doc: "SETTINGS_MAX_CONCURRENT_STREAMS of every gRPC connection (clients' and peers'): calls open at once on one connection; a stream past it is refused (REFUSED_STREAM, which clients retry).",
  },
  {
    key: "rpc.max_continuation_frames",
    kind: "int",
    schema: intBetween(1, 1000),
    default: 16,
    env: "CAIRN_RPC_MAX_CONTINUATION_FRAMES",
    flag: "rpc-max-continuation-frames",
    expect: "must be an integer between 1 and 1000",
    doc: "CONTINUATION frames one header block may take; past it the connection ends (GOAWAY ENHANCE_YOUR_CALM).",
  },
  {
    key: "rpc.max_resets_per_second",
    kind: "int",
    schema: intBetween(0, 1_000_000),
    default: 1000,
    env: "CAIRN_RPC_MAX_RESETS_PER_SECOND",
    flag: "rpc-max-resets-per-second",
    expect: "must be an integer between 0 and 1000000",
    doc: "Streams one connection may reset a second, in bursts of as many (its own RST_STREAMs, and the resets it provokes: malformed requests, stream errors such as WINDOW_UPDATE 0 or DATA on a stream it ended, and streams opened past rpc.max_concurrent_streams); past it the connection ends (GOAWAY ENHANCE_YOUR_CALM: Rapid Reset, CVE-2023-44487). 0: no limit.",
  },
  {
    key: "rpc.max_connection_output_bytes",
    kind: "bytes",
    schema: bytesBetween(64 * KIB, GIB),
    default: 16 * MIB,
    env: "CAIRN_RPC_MAX_CONNECTION_OUTPUT_BYTES",
    flag: "rpc-max-connection-output-bytes",
    expect: "must be a size between 64KiB and 1GiB",
    doc: "Output one connection may hold unsent (its client does not read it, or grants it no flow-control window): past a quarter of it nothing more is read from the connection until it drains and its calls wait to run; an answer that would take it past the bound destroys the connection. At least limits.max_message_bytes + 64KiB, so the largest answer fits.",
  },
  {
    key: "rpc.write_stall_timeout_ms",
    kind: "int",
    schema: intBetween(100, 600_000),
    default: 10_000,
    env: "CAIRN_RPC_WRITE_STALL_TIMEOUT_MS",
    flag: "rpc-write-stall-timeout-ms",
    expect: "must be an integer between 100 and 600000",
    doc: "How long a connection whose reading stopped for its unsent output (rpc.max_connection_output_bytes) may wait for its client to read before it is destroyed.",
  },
  {
    key: "rpc.handshake_timeout_ms",
    kind: "int",
    schema: intBetween(100, 600_000),
    default: 10_000,
    env: "CAIRN_RPC_HANDSHAKE_TIMEOUT_MS",
    flag: "rpc-handshake-timeout-ms",
    expect: "must be an integer between 100 and 600000",
    doc: "A new connection must send its HTTP/2 preface and first SETTINGS (or a shard worker's CONNECT) within this long, or it is closed; with TLS, its TLS handshake must first finish within as long.",
  },
  {
    key: "rpc.idle_timeout_ms",
    kind: "int",
    schema: intBetween(0, 86_400_000),
    default: 300_000,
    env: "CAIRN_RPC_IDLE_TIMEOUT_MS",
    flag: "rpc-idle-timeout-ms",
    expect: "must be an integer between 0 and 86400000",
    doc: "A connection with no call open for this long gets GOAWAY (NO_ERROR) and is closed (clients reconnect on their next call); 0: never.",
  },
  {
    key: "rpc.request_receive_timeout_ms",
    kind: "int",
    schema: intBetween(0, 600_000),
    default: 60_000,
    env: "CAIRN_RPC_REQUEST_RECEIVE_TIMEOUT_MS",
    flag: "rpc-request-receive-timeout-ms",
    expect: "must be an integer between 0 and 600000",
    doc: "A unary call's request (its headers come first) must arrive whole within this long, or it is answered RESOURCE_EXHAUSTED (CAIRN_ERR_REQUEST_TOO_SLOW) without being run, and the bytes it held are given back; checked a quarter of it apart, so a request is cut between this and 1.5 times this. The default lets a 4 MiB request arrive at 70 KB/s; a request's bytes also wait for their turn on the connection, so a client that queues more on one connection than it can send in this time sees the last requests cut (retryable). A server-streaming call's one request (WatchCluster, health Watch) is timed too; client-streaming calls are not. 0: never.",
  },
  {
    key: "rpc.goaway_grace_ms",
    kind: "int",
    schema: intBetween(0, 600_000),
    default: 1000,
    env: "CAIRN_RPC_GOAWAY_GRACE_MS",
    flag: "rpc-goaway-grace-ms",
    expect: "must be an integer between 0 and 600000",
    doc: "Once the node has sent GOAWAY and ended its side of a connection, how long the client has to close it before it is destroyed.",
  },
  {
    key: "rpc.max_decompressions_per_connection",
    kind: "int",
    schema: intBetween(1, 64),
    default: 2,
    env: "CAIRN_RPC_MAX_DECOMPRESSIONS_PER_CONNECTION",
    flag: "rpc-max-decompressions-per-connection",
    expect: "must be an integer between 1 and 64",
    doc: "Compressed request messages (grpc-encoding gzip or deflate) one connection may have inflating at once, off the serving thread and bounded by the method's receive limit; the others wait.",
  },
  {
    key: "tls.cert_file",
    kind: "string",
    schema: z.string().min(1),
    default: undefined,
    env: "CAIRN_TLS_CERT_FILE",
    flag: "tls-cert-file",
    expect: "must be a non-empty path",
    doc: "The node's certificate (PEM, its chain may follow): with tls.key_file, rpc_addr serves TLS only (TLS 1.2 or later, ALPN h2), and in a cluster it is also the client certificate this node presents to its peers; both unset, it serves cleartext (the default). A regular file of at most 4 MiB, as each tls.* file; reloaded when the file changes.",
  },
  {
    key: "tls.key_file",
    kind: "string",
    schema: z.string().min(1),
    default: undefined,
    env: "CAIRN_TLS_KEY_FILE",
    flag: "tls-key-file",
    expect: "must be a non-empty path",
    doc: "The private key of tls.cert_file (PEM, unencrypted); set both or neither. Reloaded when the file changes.",
  },
  {
    key: "tls.client_ca_file",
    kind: "string",
    schema: z.string().min(1),
    default: undefined,
    env: "CAIRN_TLS_CLIENT_CA_FILE",
    flag: "tls-client-ca-file",
    expect: "must be a non-empty path",
    doc: "Mutual TLS: CA certificates (PEM); a client must present a certificate one of them signed (or, in a cluster, one tls.peer_ca_file signed: the peers are each other's clients), or its connection is refused. Needs tls.cert_file. Reloaded when the file changes.",
  },
  {
    key: "tls.peer_ca_file",
    kind: "string",
    schema: z.string().min(1),
    default: undefined,
    env: "CAIRN_TLS_PEER_CA_FILE",
    flag: "tls-peer-ca-file",
    expect: "must be a non-empty path",
    doc: "Peer TLS: CA certificates (PEM) of the cluster's node certificates; required in a cluster with TLS (cluster.seed_nodes set). A peer's calls are taken only over a connection whose certificate it signed and names the node id the call comes from; this node dials its peers over TLS, presenting tls.cert_file and checking that their certificate names the node id dialed. Needs tls.cert_file; ignored by a single node. Reloaded when the file changes.",
  },
  {
    key: "auth.tokens_file",
    kind: "string",
    schema: z.string().min(1),
    default: undefined,
    env: "CAIRN_AUTH_TOKENS_FILE",
    flag: "auth-tokens-file",
    expect: "must be a non-empty path",
    doc: "Static bearer tokens (YAML: tokens: [{name, role: read|readwrite|admin, sha256 or token}]): once set, every client call needs credentials (a token, or a client certificate with tls.client_ca_file) with the role its method needs. Without TLS only on a loopback rpc_addr. A regular file of at most 1 MiB; reloaded when the file changes.",
  },
  {
    key: "shard_workers",
    kind: "int",
    schema: intBetween(1, 64),
    default: 1,
    env: "CAIRN_SHARD_WORKERS",
    flag: "shard-workers",
    expect: "must be an integer between 1 and 64",
    doc: "Threads that each own the shards whose id mod shard_workers is theirs (their own WAL, Raft groups and LSM engines) and each serve rpc_addr, handing a call on another worker's shard to it; 1 runs every shard on the main thread. Above 1: with rpc.io_threads 0, fixed for the life of the data directory, and in a cluster the same on every member (worker i's groups talk to worker i of each peer, which needs the native addon).",
  },
  {
    key: "raft.tick_ms",
    kind: "int",
    schema: intBetween(1, 10_000),
    default: 100,
    env: "CAIRN_RAFT_TICK_MS",
    expect: "must be an integer between 1 and 10000",
    doc: "Length of one Raft tick in milliseconds.",
  },
  {
    key: "raft.election_ticks",
    kind: "int",
    schema: intBetween(2, 1000),
    default: 10,
    env: "CAIRN_RAFT_ELECTION_TICKS",
    expect: "must be an integer between 2 and 1000",
    doc: "Election timeout in ticks (randomised between this and twice this).",
  },
  {
    key: "raft.heartbeat_ticks",
    kind: "int",
    schema: intBetween(1, 1000),
    default: 2,
    env: "CAIRN_RAFT_HEARTBEAT_TICKS",
    expect: "must be an integer between 1 and 1000",
    doc: "Heartbeat interval in ticks; must be less than raft.election_ticks. Every awake group heartbeats its followers at this interval, so in cluster mode it sets much of the peers' traffic.",
  },
  {
    key: "raft.snapshot_rate_bytes_per_sec",
    kind: "bytes",
    schema: bytesBetween(MIB, 64 * GIB),
    default: 64 * MIB,
    env: "CAIRN_RAFT_SNAPSHOT_RATE_BYTES_PER_SEC",
    expect: "must be a size between 1MiB and 64GiB (per second)",
    doc: "Snapshot data this node sends to followers that fell behind, to all of them together, in bytes per second.",
  },
  {
    key: "raft.quiesce",
    kind: "bool",
    schema: z.boolean(),
    default: true,
    env: "CAIRN_RAFT_QUIESCE",
    expect: "must be true or false",
    doc: "Idle Raft groups sleep (no ticks, no heartbeats) 2 heartbeat intervals after their last activity.",
  },
  {
    key: "storage.memtable_bytes",
    kind: "bytes",
    schema: bytesBetween(64 * KIB, 1 * GIB),
    default: 4 * MIB,
    env: "CAIRN_STORAGE_MEMTABLE_BYTES",
    expect: "must be a size between 64KiB and 1GiB",
    doc: "Size of its entries (as an SSTable stores them) at which a shard's memtable is flushed; its memory, counted against storage.memtable_budget_bytes, is up to about twice that for small values.",
  },
  {
    key: "storage.block_cache_bytes",
    kind: "bytes",
    schema: bytesBetween(0, 64 * GIB),
    default: 256 * MIB,
    env: "CAIRN_STORAGE_BLOCK_CACHE_BYTES",
    expect: "must be a size between 0 and 64GiB",
    doc: "Node-wide SSTable block cache shared by all shards (0 disables it).",
  },
  {
    key: "storage.memtable_budget_bytes",
    kind: "bytes",
    schema: bytesBetween(MIB, 64 * GIB),
    default: 512 * MIB,
    env: "CAIRN_STORAGE_MEMTABLE_BUDGET_BYTES",
    expect: "must be a size between 1MiB and 64GiB",
    doc: "Node-wide memory for memtables (active and waiting for their flush) across every shard; past it the largest flush and writes wait for them.",
  },
  {
    key: "storage.wal_cache_bytes",
    kind: "bytes",
    schema: bytesBetween(MIB, 64 * GIB),
    default: 512 * MIB,
    env: "CAIRN_STORAGE_WAL_CACHE_BYTES",
    expect: "must be a size between 1MiB and 64GiB",
    doc: "Log entries the WAL keeps in memory until the shards' tables hold them; past it the shards with the most are flushed so their entries can be dropped.",
  },
  {
    key: "storage.min_free_bytes",
    kind: "bytes",
    schema: bytesBetween(0, 1024 * GIB),
    default: 512 * MIB,
    env: "CAIRN_STORAGE_MIN_FREE_BYTES",
    expect: "must be a size between 0 and 1024GiB",
    doc: "Disk space the node keeps available on its data directory's file system: under it, Puts are refused (RESOURCE_EXHAUSTED, CAIRN_ERR_DISK_FULL) while reads and Deletes are served (Deletes are refused too under a quarter of it), until it has an eighth more than this again; the node finishes what it accepted (its log, its followers' appends, flushes and compactions) in it instead of stopping on a full disk, and refuses a peer's snapshot whose file and the tables built from it would take it. 0 turns it off; over half the file system's size, it is logged at warn at start.",
  },
  {
    key: "shutdown.drain_timeout_ms",
    kind: "int",
    schema: intBetween(0, 600_000),
    default: 10_000,
    env: "CAIRN_SHUTDOWN_DRAIN_TIMEOUT_MS",
    expect: "must be an integer between 0 and 600000",
    doc: "On SIGTERM, SIGINT or SIGHUP, how long in-flight requests may finish before they are cut off.",
  },
  {
    key: "recovery.unsafe_accept_lost_wal",
    kind: "bool",
    schema: z.boolean(),
    default: false,
    env: "CAIRN_RECOVERY_UNSAFE_ACCEPT_LOST_WAL",
    flag: "unsafe-accept-lost-wal",
    expect: "must be true or false",
    doc: "Single node, for one start after a refusal: accept that the WAL is lost (missing, emptied, or ending before what the shards' tables hold) and start from what the tables hold; the writes only the WAL held are gone. Refused in a cluster (empty the data directory instead: the node rejoins and its peers refill it).",
  },
];

export const KEY_BY_NAME: ReadonlyMap<string, KeySpec> = new Map(KEYS.map((k) => [k.key, k]));

/** Options for node:util parseArgs, so `cairn serve` accepts exactly the configuration flags. */
export const CONFIG_FLAG_OPTIONS = {
  config: { type: "string" },
  ...Object.fromEntries(
    KEYS.filter((k) => k.flag !== undefined).map((k) => [k.flag, { type: "string" }]),
  ),
} as Readonly<Record<string, { readonly type: "string" }>>;

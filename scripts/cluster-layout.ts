/**
 * The settings of every node of a Cairn cluster, written once for every way this repository
 * runs one: `npm run cluster` (processes on loopback) and deploy/compose.yaml (containers).
 * test/deploy/cluster.test.ts checks that the compose file's `environment` of each node is
 * exactly `nodeEnvironment(COMPOSE, i, 3)`, and that the Kubernetes StatefulSet sets the same
 * variables, so the three cannot drift apart.
 *
 * What must stay true in every placement:
 * - every node gets the same `CAIRN_SEED_NODES`: the advertised RPC addresses of all nodes, in
 *   node order. The first seed is the node that bootstraps the cluster; a node that finds
 *   itself in the list skips it.
 * - advertise addresses are set explicitly: the containers bind 0.0.0.0, where the node
 *   refuses to start without them, and other members must reach the address it publishes.
 * - one data directory per node (the WAL and the shards' LSM files are never shared).
 *
 * Caveat: cluster-wide keys (`cluster.total_shards`, `cluster.replication_factor`, and
 * whatever cluster mode adds) are left at their defaults here, which every node shares.
 */

/** Where node `i` (1-based) of `n` listens, what it advertises, and where it keeps its data. */
export interface Placement {
  readonly nodeId: (i: number) => string;
  readonly rpcBind: (i: number) => string;
  readonly httpBind: (i: number) => string;
  readonly rpcAdvertise: (i: number) => string;
  readonly httpAdvertise: (i: number) => string;
  readonly dataDir: (i: number) => string;
}

export const RPC_PORT = 7447;
export const HTTP_PORT = 8080;

/** deploy/compose.yaml: service `cairn-<i>` is also its host name on the compose network. */
export const COMPOSE: Placement = {
  nodeId: (i) => `cairn-${i}`,
  rpcBind: () => `0.0.0.0:${RPC_PORT}`,
  httpBind: () => `0.0.0.0:${HTTP_PORT}`,
  rpcAdvertise: (i) => `cairn-${i}:${RPC_PORT}`,
  httpAdvertise: (i) => `cairn-${i}:${HTTP_PORT}`,
  dataDir: () => "/var/lib/cairn",
};

export type PortMode = "shared" | "distinct";

/**
 * `npm run cluster`: node i as `n<i>`. With `shared` ports every node has its own loopback
 * address 127.0.0.<i> and the same port numbers, as containers or hosts would; with `distinct`
 * (where only 127.0.0.1 can be bound, as on macOS) all use 127.0.0.1 and node i adds i-1 to
 * both base ports.
 */
export function loopback(opts: {
  readonly mode: PortMode;
  readonly rpcPort: number;
  readonly httpPort: number;
  readonly baseDir: string;
}): Placement {
  const host = (i: number): string => (opts.mode === "shared" ? `127.0.0.${i}` : "127.0.0.1");
  const offset = (i: number): number => (opts.mode === "shared" ? 0 : i - 1);
  const rpc = (i: number): string => `${host(i)}:${opts.rpcPort + offset(i)}`;
  const http = (i: number): string => `${host(i)}:${opts.httpPort + offset(i)}`;
  return {
    nodeId: (i) => `n${i}`,
    rpcBind: rpc,
    httpBind: http,
    rpcAdvertise: rpc,
    httpAdvertise: http,
    dataDir: (i) => `${opts.baseDir}/n${i}`,
  };
}

/** The `CAIRN_*` variables of node `i` (1-based) of an `n`-node cluster. */
export function nodeEnvironment(p: Placement, i: number, n: number): Record<string, string> {
  const seeds = Array.from({ length: n }, (_, k) => p.rpcAdvertise(k + 1));
  return {
    CAIRN_NODE_ID: p.nodeId(i),
    CAIRN_RPC_ADDR: p.rpcBind(i),
    CAIRN_HTTP_ADDR: p.httpBind(i),
    CAIRN_ADVERTISE_RPC_ADDR: p.rpcAdvertise(i),
    CAIRN_ADVERTISE_HTTP_ADDR: p.httpAdvertise(i),
    CAIRN_DATA_DIR: p.dataDir(i),
    CAIRN_SEED_NODES: seeds.join(","),
    // The first seed founds the cluster once it sees every node of the layout alive.
    CAIRN_CLUSTER_BOOTSTRAP_EXPECT: String(n),
  };
}

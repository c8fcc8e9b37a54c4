/**
 * The node's file descriptors against its open-file limit (docs/operations.md, "File
 * descriptors"). The storage needs a known number of them (the tables' cache, the WAL, the
 * manifests, the compactions); what is left goes to connections, whose number `rpc.max_connections`
 * bounds (src/api/connection-slots.ts). A node out of descriptors cannot open its next WAL
 * segment, and stops: so at start the bound is lowered, with a warning, to what the limit leaves.
 */
import { readFileSync } from "node:fs";
import { ConnectionSlots } from "../api/index.ts";
import type { CairnConfig } from "../config/index.ts";
import type { Logger } from "../ops/index.ts";

/**
 * Descriptors kept for everything but `rpc_addr`'s connections: 4096 for the tables' cache
 * (src/storage/lsm/caches.ts), and 512 for the WAL, the manifests being appended, the
 * compactions, the outgoing peer connections, the operators' HTTP connections
 * (OPS_HTTP_MAX_CONNECTIONS) and Node's own.
 */
export const RESERVED_DESCRIPTORS = 4096 + 512;

/**
 * This process's soft limit on open files (RLIMIT_NOFILE; Node raises it to the hard limit at
 * start), from /proc/self/limits; null where it cannot be read (not Linux) or is unlimited.
 */
export function openFileLimit(
  readLimits: () => string = () => readFileSync("/proc/self/limits", "utf8"),
): number | null {
  let text: string;
  try {
    text = readLimits();
  } catch {
    return null;
  }
  const soft = /^Max open files\s+(\S+)/m.exec(text)?.[1];
  if (soft === undefined || !/^\d+$/.test(soft)) return null;
  return Number(soft);
}

export interface ConnectionBound {
  /** The bound the node applies. */
  readonly limit: number;
  /** Whether it is below the configured one, for want of descriptors. */
  readonly lowered: boolean;
}

/**
 * `rpc.max_connections` as an open-file limit of `fileLimit` leaves room for it: `configured`,
 * or what is left after RESERVED_DESCRIPTORS (a quarter of the limit at least, below which the
 * storage is short anyway), never below 16.
 */
export function connectionBound(configured: number, fileLimit: number | null): ConnectionBound {
  if (fileLimit === null) return { limit: configured, lowered: false };
  const room = Math.max(fileLimit - RESERVED_DESCRIPTORS, Math.floor(fileLimit / 4), 16);
  return room < configured ? { limit: room, lowered: true } : { limit: configured, lowered: false };
}

/** The node's count of connections, its bound lowered (and a warning logged) as the limit asks. */
export function nodeConnectionSlots(
  config: CairnConfig,
  log: Logger,
  fileLimit: number | null = openFileLimit(),
): ConnectionSlots {
  const configured = config.rpc.max_connections;
  const bound = connectionBound(configured, fileLimit);
  if (bound.lowered) {
    log.warn(
      "the open-file limit is too low for rpc.max_connections; fewer connections are taken",
      {
        code: "CAIRN_ERR_OPEN_FILE_LIMIT",
        open_file_limit: fileLimit,
        rpc_max_connections: configured,
        connections_taken: bound.limit,
        hint: `raise the open-file limit (LimitNOFILE, ulimit -n) to at least ${configured + RESERVED_DESCRIPTORS}`,
      },
    );
  }
  return new ConnectionSlots(bound.limit, config.rpc.max_connections_per_ip);
}

/**
 * The node's file descriptors against its open-file limit (docs/operations.md, "File
 * descriptors"). A node out of descriptors cannot open its next WAL segment, flush a memtable or
 * read a table, and stops; so at start it splits what the limit allows between its two large
 * users, each bounded:
 *
 * - the tables' descriptors (the storage's cache of open table files, src/storage/lsm/caches.ts:
 *   TABLE_FILES, shared by the shard workers; a file it closed for want of room is opened, and
 *   mapped, again when a block the block cache does not hold is read from it);
 * - the connections `rpc_addr` holds (`rpc.max_connections`, src/api/connection-slots.ts);
 *
 * beside OTHER_DESCRIPTORS for everything else. When the limit leaves room for both in full
 * nothing changes; otherwise both are lowered, with a warning that names the limit to set.
 */
import { readFileSync } from "node:fs";
import { ConnectionSlots } from "../api/index.ts";
import type { CairnConfig } from "../config/index.ts";
import type { Logger } from "../ops/index.ts";

/** The tables' descriptors the storage keeps open when the limit allows (node-wide). */
export const TABLE_FILES = 4096;

/**
 * Descriptors kept for the rest: the WAL, the manifests being appended, the compactions, the
 * outgoing peer connections, the operators' HTTP connections (OPS_HTTP_MAX_CONNECTIONS), SWIM's
 * socket and Node's own.
 */
export const OTHER_DESCRIPTORS = 512;

/** The fewest tables' descriptors and connections a node is given, however low the limit. */
const MIN_TABLE_FILES = 64;
const MIN_CONNECTIONS = 16;

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

export interface DescriptorPlan {
  /** The storage's open tables, node-wide (the shard workers share them). */
  readonly tableFiles: number;
  /** `rpc.max_connections` as the node applies it. */
  readonly connections: number;
  /** Whether either is below what it would be with descriptors to spare. */
  readonly lowered: boolean;
}

/**
 * What an open-file limit of `fileLimit` leaves the tables and the connections: both in full
 * (TABLE_FILES and `configured`) when it allows, else connections at most half of what is left
 * beside OTHER_DESCRIPTORS and the tables the rest (never fewer than 64 tables, 16 connections).
 */
export function descriptorPlan(configured: number, fileLimit: number | null): DescriptorPlan {
  if (fileLimit === null || fileLimit - OTHER_DESCRIPTORS >= TABLE_FILES + configured) {
    return { tableFiles: TABLE_FILES, connections: configured, lowered: false };
  }
  const room = Math.max(0, fileLimit - OTHER_DESCRIPTORS);
  const connectionsWanted = Math.min(configured, Math.floor(room / 2));
  const tableFiles = Math.min(TABLE_FILES, Math.max(MIN_TABLE_FILES, room - connectionsWanted));
  const connections = Math.min(configured, Math.max(MIN_CONNECTIONS, room - tableFiles));
  return { tableFiles, connections, lowered: true };
}

/**
 * The node's plan (descriptorPlan) and its count of connections, with a warning logged when the
 * limit lowers them. Called once, by the thread that starts the node.
 */
export function planNodeDescriptors(
  config: CairnConfig,
  log: Logger,
  fileLimit: number | null = openFileLimit(),
): { readonly slots: ConnectionSlots; readonly plan: DescriptorPlan } {
  const configured = config.rpc.max_connections;
  const plan = descriptorPlan(configured, fileLimit);
  if (plan.lowered) {
    log.warn("the open-file limit is too low for this node; it keeps fewer files and connections", {
      code: "CAIRN_ERR_OPEN_FILE_LIMIT",
      open_file_limit: fileLimit,
      table_files: plan.tableFiles,
      table_files_wanted: TABLE_FILES,
      rpc_max_connections: configured,
      connections_taken: plan.connections,
      hint: `raise the open-file limit (LimitNOFILE, ulimit -n) to at least ${TABLE_FILES + OTHER_DESCRIPTORS + configured}`,
    });
  }
  return {
    slots: new ConnectionSlots(
      plan.connections,
      config.rpc.max_connections_per_ip,
      config.rpc.max_client_streams,
      config.rpc.max_incoming_request_bytes,
      incomingPerAddress(config),
    ),
    plan,
  };
}

/**
 * The bytes of requests still arriving one client address may hold: a quarter of
 * `rpc.max_incoming_request_bytes`, but at least one whole request of `limits.max_message_bytes`
 * with its headers (the configuration keeps the budget at least that).
 */
export function incomingPerAddress(config: CairnConfig): number {
  const budget = config.rpc.max_incoming_request_bytes;
  const oneRequest = config.limits.max_message_bytes + 64 * 1024;
  return Math.min(budget, Math.max(Math.floor(budget / 4), oneRequest));
}

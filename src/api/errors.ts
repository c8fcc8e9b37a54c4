/**
 * The one place where Cairn's errors become gRPC statuses (design.md §2). Retryable states
 * (no leader, shutting down, overload) are UNAVAILABLE or RESOURCE_EXHAUSTED so clients retry;
 * bad input is INVALID_ARGUMENT; a compare-and-set mismatch is FAILED_PRECONDITION with the
 * current version in trailing metadata; anything unexpected is INTERNAL. Never a silent success.
 */
import { Metadata, type ServiceError, status } from "@grpc/grpc-js";
import { CairnError, NotMemberError } from "../common/errors.ts";
import { type Logger, LogWindow } from "../ops/index.ts";
import { type NodeId, NotLeaderError } from "../raft/index.ts";
import type { Version } from "../replication/index.ts";

import { CURRENT_VERSION_KEY, ERROR_CODE_KEY, LEADER_HINT_KEY, LEFT_CLUSTER_KEY } from "./wire.ts";

export { CURRENT_VERSION_KEY, ERROR_CODE_KEY, LEADER_HINT_KEY };

export class InvalidArgumentError extends CairnError {
  constructor(message: string) {
    super("CAIRN_ERR_INVALID_ARGUMENT", message);
    this.name = "InvalidArgumentError";
  }
}

/** The write's expected version did not match; `current` is null when the key does not exist. */
export class VersionMismatchError extends CairnError {
  readonly current: Version | null;

  constructor(current: Version | null) {
    super(
      "CAIRN_ERR_VERSION_MISMATCH",
      current === null
        ? "compare-and-set failed: the key does not exist"
        : `compare-and-set failed: the key's current version is ${current.index}/${current.term}`,
    );
    this.name = "VersionMismatchError";
    this.current = current;
  }
}

/**
 * A call refused with NotLeaderError could not be forwarded: the leader's node did not accept a
 * connection, so the request was never sent (forward.ts). Still CAIRN_ERR_NOT_LEADER with the
 * leader hint: nothing was applied, and the client retries (a write too).
 */
export class LeaderUnreachableError extends NotLeaderError {
  constructor(leader: NodeId, address: string, cause: { details: string }) {
    super(leader);
    this.message = `${this.message}; forwarding to it at ${address} failed: ${cause.details}`;
    this.name = "LeaderUnreachableError";
  }
}

/**
 * A forwarded call was cut because this node learnt that another node now leads the shard: the
 * old leader (paused, cut off) may never answer. For a write the outcome is **unknown** (the old
 * leader may have replicated it before it lost its leadership); a read may be retried. The
 * trailer `cairn-leader` names the new leader.
 */
export class LeaderChangedError extends CairnError {
  readonly leader: string;

  constructor(previous: string, leader: string) {
    super(
      "CAIRN_ERR_LEADER_CHANGED",
      `the shard's leader changed from ${previous} to ${leader} while the call was forwarded to ${previous}; a write's outcome is unknown`,
      { retryable: true },
    );
    this.name = "LeaderChangedError";
    this.leader = leader;
  }
}

const STATUS_BY_CODE: Readonly<Record<string, status>> = {
  CAIRN_ERR_INVALID_ARGUMENT: status.INVALID_ARGUMENT,
  CAIRN_ERR_VERSION_MISMATCH: status.FAILED_PRECONDITION,
  CAIRN_ERR_SHARD_NOT_ACTIVE: status.FAILED_PRECONDITION,
  CAIRN_ERR_PRECONDITION: status.FAILED_PRECONDITION,
  CAIRN_ERR_INVALID_RAFT_REQUEST: status.FAILED_PRECONDITION,
  CAIRN_ERR_NOT_LEADER: status.UNAVAILABLE,
  CAIRN_ERR_LEADER_CHANGED: status.UNAVAILABLE,
  CAIRN_ERR_SHUTTING_DOWN: status.UNAVAILABLE,
  CAIRN_ERR_PROPOSAL_LOST: status.UNAVAILABLE,
  CAIRN_ERR_PROPOSAL_DROPPED: status.UNAVAILABLE,
  CAIRN_ERR_TIMEOUT: status.DEADLINE_EXCEEDED,
  CAIRN_ERR_NOT_READY: status.UNAVAILABLE,
  CAIRN_ERR_NOT_MEMBER: status.UNAVAILABLE,
  CAIRN_ERR_SHARD_CREATION: status.UNAVAILABLE,
  CAIRN_ERR_BACKPRESSURE: status.RESOURCE_EXHAUSTED,
  // The leader's disk is under storage.min_free_bytes: not retried (it lasts until an operator
  // or Deletes free space), and nothing was proposed.
  CAIRN_ERR_DISK_FULL: status.RESOURCE_EXHAUSTED,
};

/** The gRPC status for an error thrown while serving a call. */
export function toServiceError(err: unknown): Partial<ServiceError> {
  const metadata = new Metadata();
  if (err instanceof CairnError) {
    metadata.set(ERROR_CODE_KEY, err.code);
    if ((err instanceof NotLeaderError || err instanceof LeaderChangedError) && err.leader !== null)
      metadata.set(LEADER_HINT_KEY, err.leader);
    if (err instanceof VersionMismatchError && err.current !== null) {
      metadata.set(CURRENT_VERSION_KEY, `${err.current.index}/${err.current.term}`);
    }
    if (err instanceof NotMemberError && err.leftForGood) metadata.set(LEFT_CLUSTER_KEY, "true");
    const code = STATUS_BY_CODE[err.code] ?? status.INTERNAL;
    const details = code === status.INTERNAL ? `internal error: ${err.message}` : err.message;
    return { code, details, metadata };
  }
  const message = err instanceof Error ? err.message : String(err);
  metadata.set(ERROR_CODE_KEY, "CAIRN_ERR_INTERNAL");
  return { code: status.INTERNAL, details: `internal error: ${message}`, metadata };
}

/**
 * How the kv_requests_total `status` label sees an error: the client's own mistakes apart from
 * the server's faults, so an alert on `status="error"` pages for the server only. `invalid`: the
 * request was refused as malformed (INVALID_ARGUMENT); `conflict`: a compare-and-set found
 * another version (FAILED_PRECONDITION); `not_leader`: another node leads the shard; `error`:
 * anything else (INTERNAL, UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ...).
 */
export function metricStatusOf(err: unknown): "not_leader" | "invalid" | "conflict" | "error" {
  if (err instanceof NotLeaderError) return "not_leader";
  if (err instanceof CairnError) {
    if (err.code === "CAIRN_ERR_INVALID_ARGUMENT") return "invalid";
    if (err.code === "CAIRN_ERR_VERSION_MISMATCH") return "conflict";
  }
  return "error";
}

/**
 * Logs, at ERROR, each error a call is answered with as INTERNAL (a server fault the client can
 * do nothing about: the operator must see it), with its code. At most `perWindow` lines every
 * `windowMs`: a fault that fails every request must not flood the log; the first line after a
 * quiet window says how many were left out.
 */
export class InternalErrorLog {
  readonly #log: Logger;
  readonly #window: LogWindow;

  constructor(
    log: Logger,
    options: { perWindow?: number; windowMs?: number; now?: () => number } = {},
  ) {
    this.#log = log;
    this.#window = new LogWindow(options.perWindow, options.windowMs, options.now);
  }

  /** `answer` is what toServiceError made of `err`; logged only when it is INTERNAL. */
  maybeLog(method: string, err: unknown, answer: Partial<ServiceError>): void {
    if (answer.code !== status.INTERNAL) return;
    const skipped = this.#window.admit();
    if (skipped === null) return;
    const code = err instanceof CairnError ? err.code : "CAIRN_ERR_INTERNAL";
    const fields: Record<string, unknown> = { method, code, err };
    if (skipped > 0) fields["not_logged_before"] = skipped;
    this.#log.error("request failed with an internal error", fields);
  }
}

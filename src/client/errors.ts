/**
 * The client's error tree. gRPC statuses become these classes only here, at the user's edge; every
 * class carries a stable `code` (docs/client.md) and says whether retrying can succeed.
 */
import { type Metadata, status } from "@grpc/grpc-js";
import { CairnError } from "../common/errors.ts";
import type { Version } from "./types.ts";

/** No node could serve the call before its deadline (no quorum, no leader, nothing reachable). */
export class UnavailableError extends CairnError {
  readonly grpcCode: number;

  constructor(message: string, grpcCode: number = status.UNAVAILABLE, cause?: unknown) {
    super("CAIRN_ERR_UNAVAILABLE", message, { retryable: true, cause });
    this.name = "UnavailableError";
    this.grpcCode = grpcCode;
  }
}

/** A read (or a write known not to have applied) ran out of its deadline. */
export class DeadlineExceededError extends CairnError {
  constructor(message: string, cause?: unknown) {
    super("CAIRN_ERR_DEADLINE_EXCEEDED", message, { retryable: true, cause });
    this.name = "DeadlineExceededError";
  }
}

/**
 * A write whose outcome is unknown: it timed out or its connection broke after it was sent, so it
 * may or may not have been applied. The client never retries such a write on its own; read the key
 * (its version tells) or retry with `expectedVersion` to make the retry safe.
 */
export class IndeterminateWriteError extends CairnError {
  constructor(message: string, cause?: unknown) {
    super("CAIRN_ERR_INDETERMINATE", message, { retryable: false, cause });
    this.name = "IndeterminateWriteError";
  }
}

/** A compare-and-set write's `expectedVersion` did not match; `current` is null if the key is absent. */
export class VersionConflictError extends CairnError {
  readonly current: Version | null;

  constructor(message: string, current: Version | null) {
    super("CAIRN_ERR_VERSION_MISMATCH", message);
    this.name = "VersionConflictError";
    this.current = current;
  }
}

/** The server refused the request as malformed (key or value size, bad range, bad page token). */
export class InvalidRequestError extends CairnError {
  constructor(message: string) {
    super("CAIRN_ERR_INVALID_ARGUMENT", message);
    this.name = "InvalidRequestError";
  }
}

/** Any other failure reported by the server (INTERNAL, FAILED_PRECONDITION on admin calls, ...). */
export class ServerError extends CairnError {
  readonly grpcCode: number;

  constructor(code: string, message: string, grpcCode: number) {
    super(code, message);
    this.name = "ServerError";
    this.grpcCode = grpcCode;
  }
}

/** The client was closed. */
export class ClientClosedError extends CairnError {
  constructor() {
    super("CAIRN_ERR_CLIENT_CLOSED", "the client is closed");
    this.name = "ClientClosedError";
  }
}

/** The first value of a metadata key as a string, if any. */
export function metadataString(metadata: Metadata | undefined, key: string): string | undefined {
  const v = metadata?.get(key)[0];
  if (v === undefined) return undefined;
  return typeof v === "string" ? v : v.toString();
}

/**
 * "INDEX/TERM" as the server writes it into `cairn-current-version`, or null when the text is not
 * that: two decimal numbers that are safe integers (a version past 2^53 could not be given back
 * as an `expectedVersion`, which must be one, and past 2^64 is no uint64 at all).
 */
export function parseVersion(text: string): Version | null {
  const m = /^(\d+)\/(\d+)$/.exec(text.trim());
  if (m === null) return null;
  const index = Number(m[1]);
  const term = Number(m[2]);
  if (!Number.isSafeInteger(index) || !Number.isSafeInteger(term)) return null;
  return { index, term };
}

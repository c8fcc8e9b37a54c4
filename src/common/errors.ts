/**
 * The root of Cairn's error tree. Every error a caller may want to handle carries a stable `code`
 * (documented in docs/errors.md) and says whether retrying can succeed. Boundaries (gRPC, HTTP,
 * CLI) map codes to their own status in exactly one place each.
 */
export class CairnError extends Error {
  readonly code: string;
  readonly retryable: boolean;

  constructor(
    code: string,
    message: string,
    options: { retryable?: boolean; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "CairnError";
    this.code = code;
    this.retryable = options.retryable ?? false;
  }
}

/**
 * CAIRN_ERR_NOT_MEMBER: this node serves no client requests, as `message` says why (joining, not
 * admitted, decommissioned, removed). Nothing reached the store, so a client may retry on another
 * node. `leftForGood`: decommissioned or removed, this node will refuse every request from now
 * on; its answer says so (the trailer `cairn-left-cluster`), and a client stops asking it.
 */
export class NotMemberError extends CairnError {
  readonly leftForGood: boolean;

  constructor(message: string, leftForGood: boolean) {
    super("CAIRN_ERR_NOT_MEMBER", message, { retryable: true });
    this.name = "NotMemberError";
    this.leftForGood = leftForGood;
  }
}

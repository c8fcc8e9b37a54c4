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

import { CairnError } from "../../common/index.ts";

/**
 * Stored bytes fail their checksum or do not parse. Never retryable: the node must not serve data
 * from a damaged file. The message names the file and the byte offset.
 */
export class CorruptionError extends CairnError {
  readonly file: string;
  readonly offset: number;
  /** What is wrong, without the file and offset. */
  readonly what: string;

  constructor(file: string, offset: number, what: string, options: { cause?: unknown } = {}) {
    super("CAIRN_ERR_CORRUPTION", `corruption in ${file} at offset ${offset}: ${what}`, options);
    this.name = "CorruptionError";
    this.file = file;
    this.offset = offset;
    this.what = what;
  }
}

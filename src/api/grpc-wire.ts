/**
 * The gRPC protocol over HTTP/2 as the gRPC front end speaks it (front-end.ts), on its own HTTP/2
 * server (h2/) with no gRPC library in between: the request headers (deadline, metadata), the
 * length-prefixed message framing, and statuses as trailers. It follows the spec
 * (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md) and grpc-js's choices where
 * the spec leaves room (`grpc-message` is `encodeURI`d; binary metadata is base64; metadata it
 * does not allow is dropped; a malformed `grpc-timeout` is refused INTERNAL). Nothing here throws
 * but WireError on a request's bytes; a unary call's compressed message is inflated
 * asynchronously (inflateMessage), off the serving thread, its output bounded, and a stream read
 * here takes none (MessageReader).
 */
import { gunzip, gunzipSync, inflate, inflateSync } from "node:zlib";
import { status } from "@grpc/grpc-js";
import { deadlineClock } from "../common/index.ts";
import type { HeaderList } from "./h2/hpack.ts";
import { isProtocolHeader, type MetadataPairs } from "./handoff.ts";

/** Header fields as an encoder takes them, in order (a name may repeat). */
export type Fields = [string, string][];

/** The headers of every response that carries a message. */
export const RESPONSE_FIELDS: readonly (readonly [string, string])[] = Object.freeze([
  [":status", "200"],
  ["content-type", "application/grpc+proto"],
  ["grpc-accept-encoding", "identity,deflate,gzip"],
] as const);

/** Milliseconds per unit of a `grpc-timeout` value, by the unit's character code. */
function timeoutUnitMs(unit: number): number {
  switch (unit) {
    case 72 /* H */:
      return 3_600_000;
    case 77 /* M */:
      return 60_000;
    case 83 /* S */:
      return 1000;
    case 109 /* m */:
      return 1;
    case 117 /* u */:
      return 0.001;
    case 110 /* n */:
      return 0.000001;
    default:
      return NaN;
  }
}

/**
 * The call's deadline (on deadlineClock()) from a `grpc-timeout` value (1–8
 * digits and a unit), Infinity without one, NaN for a malformed one: the call is refused
 * (INTERNAL, as grpc-js does), not run without a deadline. Read character by character: a
 * regular expression's match was ~0.3 % of three nodes' main threads, read once per call.
 */
export function deadlineOf(timeout: string | undefined, now = deadlineClock()): number {
  if (timeout === undefined) return Infinity;
  const digits = timeout.length - 1;
  if (digits < 1 || digits > 8) return NaN;
  let amount = 0;
  for (let i = 0; i < digits; i++) {
    const d = timeout.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return NaN;
    amount = amount * 10 + d;
  }
  return now + amount * timeoutUnitMs(timeout.charCodeAt(digits));
}

/** The status details of a call refused for its malformed `grpc-timeout` (grpc-js's words). */
export function invalidTimeoutDetails(timeout: string | undefined): string {
  return `Invalid grpc-timeout value "${timeout ?? ""}"`;
}

/**
 * The application metadata of a request's header list (null when there is none, the common
 * case). A `-bin` value is base64, several values joined by commas. A pair gRPC does not allow
 * (isMetadataKey, isMetadataValue) is dropped, as grpc-js's server drops it: the call is served
 * without it (grpc-js's Metadata would throw on it).
 */
export function headerPairs(headers: HeaderList): MetadataPairs | null {
  let out: MetadataPairs | null = null;
  for (let i = 0; i < headers.length; i += 2) {
    const key = headers[i] as string;
    if (isProtocolHeader(key)) continue;
    const value = headers[i + 1] as string;
    const binary = key.endsWith("-bin");
    if (!isMetadataKey(key) || (!binary && !isMetadataValue(value))) continue;
    out ??= [];
    if (binary) {
      for (const part of value.split(",")) {
        out.push([key, new Uint8Array(Buffer.from(part, "base64"))]);
      }
    } else {
      out.push([key, value]);
    }
  }
  return out;
}

/** Whether `key` may be a gRPC metadata key: 1 or more of 0-9 a-z _ . - (grpc-js's rule). */
export function isMetadataKey(key: string): boolean {
  if (key.length === 0) return false;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    const ok =
      (c >= 0x61 && c <= 0x7a) ||
      (c >= 0x30 && c <= 0x39) ||
      c === 0x5f ||
      c === 0x2e ||
      c === 0x2d;
    if (!ok) return false;
  }
  return true;
}

/** Whether `value` may be a (non-binary) gRPC metadata value: printable ASCII, 0x20–0x7e. */
export function isMetadataValue(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

/** Metadata pairs as header fields (one field a value), added to `into`. */
export function addPairs(into: Fields, pairs: MetadataPairs | null): Fields {
  if (pairs === null) return into;
  for (const [key, v] of pairs) {
    into.push([key, typeof v === "string" ? v : Buffer.from(v).toString("base64")]);
  }
  return into;
}

/** The trailers of a status (for a trailers-only response, with RESPONSE_FIELDS first). */
export function statusFields(
  code: number,
  details: string,
  pairs: MetadataPairs | null,
  trailersOnly: boolean,
): Fields {
  const fields: Fields = trailersOnly ? RESPONSE_FIELDS.map(([k, v]) => [k, v]) : [];
  fields.push(["grpc-status", String(code)], ["grpc-message", encodeURI(details)]);
  return addPairs(fields, pairs);
}

/** A failure to read a request: the status the call ends with. */
export class WireError extends Error {
  readonly code: number;

  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

/**
 * A message past the receive limit, answered as grpc-js answers it (RESOURCE_EXHAUSTED
 * "Received message larger than max"); `size` is its length, null when only its inflating
 * passed the limit. The front end answers a client's own way (front-end.ts, refuseWire).
 */
export class MessageTooLargeError extends WireError {
  readonly size: number | null;
  readonly max: number;

  constructor(size: number | null, max: number) {
    super(
      status.RESOURCE_EXHAUSTED,
      size === null
        ? `Received message larger than max (decompressed, vs. ${max})`
        : `Received message larger than max (${size} vs. ${max})`,
    );
    this.size = size;
    this.max = max;
  }
}

/**
 * The one message of a unary request: `chunks` are the request's DATA, `encoding` its
 * `grpc-encoding`. Throws WireError for anything else than exactly one message within `max`.
 */
export function unaryMessage(
  chunks: readonly Buffer[],
  encoding: string | undefined,
  max: number,
): Buffer {
  const data = unaryFramed(chunks, max);
  return messageBody(data[0] as number, data.subarray(5), encoding, max);
}

/**
 * The one message of a unary request with its 5-byte prefix (byte 0: compressed or not), checked
 * as unaryMessage checks it but not decompressed (inflateMessage does that off this thread).
 */
export function unaryFramed(chunks: readonly Buffer[], max: number): Buffer {
  const data = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
  if (data.length < 5) {
    throw new WireError(status.INTERNAL, "the request has no complete message");
  }
  const length = data.readUInt32BE(1);
  if (length > max) throw new MessageTooLargeError(length, max);
  if (data.length !== 5 + length) {
    throw new WireError(status.INTERNAL, "a unary request must carry exactly one message");
  }
  return data;
}

/**
 * Decompresses a message on libuv's thread pool, not the calling thread, its output bounded by
 * `max` (a 4 KiB gzip may inflate to gigabytes): `done` hears the message or a WireError
 * (RESOURCE_EXHAUSTED past `max`, UNIMPLEMENTED for an unknown encoding, INTERNAL when it is
 * not valid).
 */
export function inflateMessage(
  body: Buffer,
  encoding: string | undefined,
  max: number,
  done: (err: WireError | null, message: Buffer | null) => void,
): void {
  const inflater = encoding === "gzip" ? gunzip : encoding === "deflate" ? inflate : null;
  if (inflater === null) {
    done(unsupportedEncoding(encoding), null);
    return;
  }
  inflater(body, { maxOutputLength: Math.max(1, max) }, (err, out) => {
    if (err === null) {
      done(null, out);
    } else if ((err as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE") {
      done(new MessageTooLargeError(null, max), null);
    } else {
      done(
        new WireError(status.INTERNAL, `could not decompress the message: ${err.message}`),
        null,
      );
    }
  });
}

function unsupportedEncoding(encoding: string | undefined): WireError {
  return new WireError(
    status.UNIMPLEMENTED,
    `a compressed message with grpc-encoding ${encoding ?? "(none)"} is not supported`,
  );
}

/** A message's bytes: `body` itself, or it decompressed when its flag byte says so. */
function messageBody(
  flag: number,
  body: Buffer,
  encoding: string | undefined,
  max: number,
): Buffer {
  if (flag === 0) return body;
  switch (encoding) {
    case "gzip":
      return gunzipSync(body, { maxOutputLength: Math.max(1, max) });
    case "deflate":
      return inflateSync(body, { maxOutputLength: Math.max(1, max) });
    default:
      throw unsupportedEncoding(encoding);
  }
}

/** A response message, length-prefixed (uncompressed). */
export function frame(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

/**
 * The refusal of a compressed message on a stream that takes none: the peers' streams
 * (MessageReader, and MessageSizeGuard as the front end sets it for them).
 */
function compressedRefused(): WireError {
  return new WireError(
    status.UNIMPLEMENTED,
    "a compressed message on this streaming call is not supported: send its messages uncompressed",
  );
}

/**
 * The messages of a streaming request as its DATA arrives, in any split: each whole message is
 * passed on as soon as its last byte is in (a view of the chunk when it lies within one). The
 * first may have a limit of its own, `first` (a peer's stream opens with its handshake:
 * front-end.ts). A compressed message is refused (UNIMPLEMENTED) at its prefix: it would be
 * inflated here, on the serving thread and synchronously (130 KB of gzip took ~120 ms to inflate
 * to 128 MiB), and the one stream read this way, the peers' Raft stream, never compresses.
 */
export class MessageReader {
  readonly #max: number;
  /** The limit of the next message: `first` until one has passed, then `#max`. */
  #limit: number;
  /** Bytes of an incomplete message (its prefix, perhaps only part of it). */
  #partial: Buffer[] = [];
  #partialBytes = 0;

  constructor(max: number, first = max) {
    this.#max = max;
    this.#limit = first;
  }

  /** Whether bytes of an incomplete message wait (at the end of the request: malformed). */
  get pending(): boolean {
    return this.#partialBytes > 0;
  }

  /**
   * Passes every message `chunk` completes to `each`; throws WireError on one over the limit or
   * compressed.
   */
  push(chunk: Buffer, each: (message: Buffer) => void): void {
    let data = chunk;
    if (this.#partialBytes > 0) {
      this.#partial.push(chunk);
      this.#partialBytes += chunk.length;
      if (this.#partialBytes < 5) return;
      const first = this.#partial[0] as Buffer;
      const prefix = first.length >= 5 ? first : Buffer.concat(this.#partial);
      // The message is concatenated once it is all in, never once per chunk.
      const need = 5 + this.#lengthOf(prefix);
      if (this.#partialBytes < need) return;
      data = Buffer.concat(this.#partial, this.#partialBytes);
      this.#partial = [];
      this.#partialBytes = 0;
    }
    let at = 0;
    while (data.length - at >= 5) {
      const length = this.#lengthOf(data.subarray(at));
      if (data.length - at < 5 + length) break;
      this.#limit = this.#max;
      each(data.subarray(at + 5, at + 5 + length));
      at += 5 + length;
    }
    if (at < data.length) {
      this.#partial = [data.subarray(at)];
      this.#partialBytes = data.length - at;
    }
  }

  /** The length a message prefix (5 bytes or more) announces, refused over the limit. */
  #lengthOf(prefix: Buffer): number {
    if (prefix[0] !== 0) throw compressedRefused();
    const length = prefix.readUInt32BE(1);
    if (length > this.#limit) throw new MessageTooLargeError(length, this.#limit);
    return length;
  }
}

/**
 * Checks the length prefixes of a request's messages as its DATA passes through (a proxied
 * streaming call), holding no message: only the up to five bytes of a prefix split across
 * chunks. What a message announces over its limit (`first` for the first message, else `max`)
 * is refused before its bytes are sent on, and so is a compressed message on a stream that takes
 * none (`compressed` false).
 */
export class MessageSizeGuard {
  readonly #max: number;
  /** The limit of the current (or next) message: `first` until one has passed, then `#max`. */
  #limit: number;
  readonly #compressed: boolean;
  /** Bytes of the current message's body still to pass; -1 while its prefix is read. */
  #bodyLeft = -1;
  readonly #prefix = Buffer.alloc(5);
  #prefixAt = 0;
  #firstPassed = false;

  constructor(
    max: number,
    {
      first = max,
      compressed = true,
    }: { readonly first?: number; readonly compressed?: boolean } = {},
  ) {
    this.#max = max;
    this.#limit = first;
    this.#compressed = compressed;
  }

  /** Whether the first message has passed whole. */
  get firstPassed(): boolean {
    return this.#firstPassed;
  }

  /**
   * Throws WireError when `chunk` starts a message larger than its limit (RESOURCE_EXHAUSTED),
   * or a compressed one where none is taken (UNIMPLEMENTED).
   */
  check(chunk: Buffer): void {
    let at = 0;
    while (at < chunk.length) {
      if (this.#bodyLeft > 0) {
        const n = Math.min(this.#bodyLeft, chunk.length - at);
        this.#bodyLeft -= n;
        at += n;
        if (this.#bodyLeft === 0) this.#passed();
        continue;
      }
      const n = Math.min(5 - this.#prefixAt, chunk.length - at);
      chunk.copy(this.#prefix, this.#prefixAt, at, at + n);
      this.#prefixAt += n;
      at += n;
      if (this.#prefixAt < 5) return;
      this.#prefixAt = 0;
      if (this.#prefix[0] !== 0 && !this.#compressed) throw compressedRefused();
      const length = this.#prefix.readUInt32BE(1);
      if (length > this.#limit) throw new MessageTooLargeError(length, this.#limit);
      this.#bodyLeft = length;
      if (length === 0) this.#passed();
    }
  }

  /** The current message has passed whole. */
  #passed(): void {
    this.#limit = this.#max;
    this.#firstPassed = true;
  }
}

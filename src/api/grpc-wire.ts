/**
 * The gRPC protocol over HTTP/2 as the I/O threads speak it (io-thread.ts), on node:http2 with no
 * gRPC library in between: the request headers (deadline, metadata), the length-prefixed message
 * framing, and statuses as trailers. It follows the spec
 * (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md) and grpc-js's choices where
 * the spec leaves room (`grpc-message` is `encodeURI`d; binary metadata is base64).
 */
import { gunzipSync, inflateSync } from "node:zlib";
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from "node:http2";
import { status } from "@grpc/grpc-js";
import { isProtocolHeader, type MetadataPairs } from "./handoff.ts";

export const RESPONSE_HEADERS: OutgoingHttpHeaders = Object.freeze({
  ":status": 200,
  "content-type": "application/grpc+proto",
  "grpc-accept-encoding": "identity,deflate,gzip",
});

const TIMEOUT_UNIT_MS: Readonly<Record<string, number>> = {
  H: 3_600_000,
  M: 60_000,
  S: 1000,
  m: 1,
  u: 0.001,
  n: 0.000001,
};

/** The call's deadline (ms since the epoch) from `grpc-timeout`, Infinity without one. */
export function deadlineOf(headers: IncomingHttpHeaders, now = Date.now()): number {
  const t = headers["grpc-timeout"];
  if (typeof t !== "string") return Infinity;
  const m = /^(\d{1,8})([HMSmun])$/.exec(t);
  if (m === null) return Infinity;
  return now + Number(m[1]) * (TIMEOUT_UNIT_MS[m[2] as string] as number);
}

/**
 * The application metadata of a request's headers (null when there is none, the common case).
 * A `-bin` header is base64, several values joined by commas.
 */
export function headerPairs(headers: IncomingHttpHeaders): MetadataPairs | null {
  let out: MetadataPairs | null = null;
  for (const key in headers) {
    if (isProtocolHeader(key)) continue;
    const value = headers[key];
    if (value === undefined) continue;
    out ??= [];
    for (const v of Array.isArray(value) ? value : [value]) {
      if (key.endsWith("-bin")) {
        for (const part of v.split(","))
          out.push([key, new Uint8Array(Buffer.from(part, "base64"))]);
      } else {
        out.push([key, v]);
      }
    }
  }
  return out;
}

/** Metadata pairs as HTTP/2 header fields (trailers), added to `into`. */
export function addPairs(
  into: OutgoingHttpHeaders,
  pairs: MetadataPairs | null,
): OutgoingHttpHeaders {
  if (pairs === null) return into;
  for (const [key, v] of pairs) {
    const value = typeof v === "string" ? v : Buffer.from(v).toString("base64");
    const prior = into[key];
    into[key] = prior === undefined ? value : `${String(prior)},${value}`;
  }
  return into;
}

/** The trailers of a status (for a trailers-only response, with RESPONSE_HEADERS first). */
export function statusHeaders(
  code: number,
  details: string,
  pairs: MetadataPairs | null,
  trailersOnly: boolean,
): OutgoingHttpHeaders {
  const h: OutgoingHttpHeaders = trailersOnly ? { ...RESPONSE_HEADERS } : {};
  h["grpc-status"] = String(code);
  h["grpc-message"] = encodeURI(details);
  return addPairs(h, pairs);
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
 * The one message of a unary request: `chunks` are the request's DATA, `encoding` its
 * `grpc-encoding`. Throws WireError for anything else than exactly one message within `max`.
 */
export function unaryMessage(
  chunks: readonly Buffer[],
  encoding: string | undefined,
  max: number,
): Buffer {
  const data = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
  if (data.length < 5) {
    throw new WireError(status.INTERNAL, "the request has no complete message");
  }
  const length = data.readUInt32BE(1);
  if (length > max) {
    throw new WireError(
      status.RESOURCE_EXHAUSTED,
      `Received message larger than max (${length} vs. ${max})`,
    );
  }
  if (data.length !== 5 + length) {
    throw new WireError(status.INTERNAL, "a unary request must carry exactly one message");
  }
  const body = data.subarray(5);
  if (data[0] === 0) return body;
  switch (encoding) {
    case "gzip":
      return gunzipSync(body, { maxOutputLength: Math.max(1, max) });
    case "deflate":
      return inflateSync(body, { maxOutputLength: Math.max(1, max) });
    default:
      throw new WireError(
        status.UNIMPLEMENTED,
        `a compressed message with grpc-encoding ${encoding ?? "(none)"} is not supported`,
      );
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

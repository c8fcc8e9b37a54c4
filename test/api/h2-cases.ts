/**
 * An h2spec-style catalogue of HTTP/2 cases (RFC 9113 §3–§8, RFC 7541 over the wire): each a
 * sequence of frames a client sends after its preface and SETTINGS, and the outcome the RFC asks
 * of a server. The conformance suite (h2-conformance.test.ts) runs them against Cairn's front
 * end; the differential suite (h2-differential.test.ts) runs them against node:http2 as well and
 * compares the outcome classes.
 *
 * Requests name Cairn's KV.Get (served by a real node), or Meta.WatchCluster for a stream the
 * server keeps open after the request has ended (half-closed (remote)).
 */
import assert from "node:assert/strict";
import {
  E,
  encodeBlock,
  F,
  type Field,
  frame,
  getRequest,
  grpcMessage,
  grpcRequest,
  grpcStatus,
  PREFACE,
  RawH2Client,
  S,
  settings,
  T,
  u32,
} from "../support/h2-raw.ts";

export const GET = "/cairn.v1.KV/Get";
export const WATCH = "/cairn.v1.Meta/WatchCluster";

/** What the RFC asks of the server. */
export type Expect =
  /** GOAWAY with one of `codes` (or, `closeOk`, a close without one), then the socket closed. */
  | { readonly kind: "connection"; readonly codes: readonly number[]; readonly closeOk?: boolean }
  /**
   * RST_STREAM on `id` with one of `codes`; the connection lives on. A server may treat a stream
   * error as a connection error (RFC 9113 §5.4.1): GOAWAY with one of the codes passes too.
   */
  | { readonly kind: "stream"; readonly id: number; readonly codes: readonly number[] }
  /** Nothing goes wrong: a PING is answered, no GOAWAY, no reset on `ids`. */
  | { readonly kind: "alive"; readonly ids?: readonly number[] }
  /** The call on `id` is answered (any grpc-status: the HTTP/2 layer served it). */
  | { readonly kind: "served"; readonly id: number }
  /** Any of several outcomes the RFC allows (MAY). */
  | { readonly kind: "either"; readonly options: readonly Expect[] };

export interface Case {
  /** RFC section, e.g. "6.5.3" or "7541/4.2". */
  readonly section: string;
  readonly what: string;
  /** The bytes sent after the preface and an empty SETTINGS (or instead of them: `raw`). */
  readonly send: readonly Buffer[];
  readonly expect: Expect;
  /** Sent as they are: no preface, no SETTINGS first. */
  readonly raw?: boolean;
  /** A frame of the server's to wait for before sending (e.g. the answer that closes a stream). */
  readonly after?: { readonly send: readonly Buffer[]; readonly untilServed: number };
}

// ── building blocks ────────────────────────────────────────────────────────────────────────

const k = Buffer.from("k");
export const GET_MESSAGE = grpcMessage(getRequest(k));

export function headers(
  id: number,
  fields: readonly Field[] = grpcRequest(GET),
  flags: number = F.END_HEADERS,
): Buffer {
  return frame(T.HEADERS, flags, id, encodeBlock(fields));
}

export function data(
  id: number,
  payload: Buffer = GET_MESSAGE,
  flags: number = F.END_STREAM,
): Buffer {
  return frame(T.DATA, flags, id, payload);
}

/** A whole Get call on stream `id`. */
export function call(id: number, fields: readonly Field[] = grpcRequest(GET)): Buffer[] {
  return [headers(id, fields), data(id)];
}

/** A request whose headers are `fields`, with a Get's message: malformed ones are reset. */
function malformed(section: string, what: string, fields: readonly Field[]): Case {
  return {
    section,
    what,
    send: call(1, fields),
    expect: { kind: "stream", id: 1, codes: [E.PROTOCOL_ERROR] },
  };
}

const replace = (name: string, value: string): Field[] =>
  grpcRequest(GET).map(([n, v]) => (n === name ? [name, value] : [n, v]) as Field);
const without = (name: string): Field[] => grpcRequest(GET).filter(([n]) => n !== name);
const conn = (...codes: number[]): Expect => ({ kind: "connection", codes });
const stream = (id: number, ...codes: number[]): Expect => ({ kind: "stream", id, codes });
const alive: Expect = { kind: "alive" };

/** An HPACK block: indexed :method POST, :scheme http, then `rest` octets, then the rest. */
function hpackCase(section: string, what: string, block: Buffer, expect: Expect): Case {
  return {
    section,
    what,
    send: [frame(T.HEADERS, F.END_HEADERS | F.END_STREAM, 1, block)],
    expect,
  };
}

// ── the catalogue ──────────────────────────────────────────────────────────────────────────

export const CASES: readonly Case[] = [
  // §3.4 The connection preface
  {
    section: "3.4",
    what: "an invalid connection preface",
    raw: true,
    send: [Buffer.from("PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"), frame(T.SETTINGS, 0, 0)],
    expect: { kind: "connection", codes: [E.PROTOCOL_ERROR], closeOk: true },
  },
  {
    section: "3.4",
    what: "a preface not followed by SETTINGS",
    raw: true,
    send: [PREFACE, frame(T.PING, 0, 0, Buffer.alloc(8))],
    expect: { kind: "connection", codes: [E.PROTOCOL_ERROR], closeOk: true },
  },
  // §4.1 Frame format
  {
    section: "4.1",
    what: "a frame of an unknown type",
    send: [frame(0xee, 0, 0, Buffer.alloc(8))],
    expect: alive,
  },
  {
    section: "4.1",
    what: "a PING with undefined flags",
    send: [frame(T.PING, 0xfe, 0, Buffer.alloc(8))],
    expect: alive,
  },
  {
    section: "4.1",
    what: "a PING whose stream id has the reserved bit set",
    send: [frame(T.PING, 0, 0x8000_0000, Buffer.alloc(8))],
    expect: alive,
  },
  // §4.2 Frame size
  {
    section: "4.2",
    what: "DATA larger than SETTINGS_MAX_FRAME_SIZE",
    send: [headers(1), data(1, Buffer.alloc(16_385))],
    expect: stream(1, E.FRAME_SIZE_ERROR),
  },
  {
    section: "4.2",
    what: "HEADERS larger than SETTINGS_MAX_FRAME_SIZE",
    send: [
      frame(
        T.HEADERS,
        F.END_HEADERS | F.END_STREAM,
        1,
        encodeBlock(grpcRequest(GET, [["x-pad", "p".repeat(16_400)]])),
      ),
    ],
    expect: conn(E.FRAME_SIZE_ERROR),
  },
  {
    section: "4.2",
    what: "a PING whose length field says 16 octets",
    send: [frame(T.PING, 0, 0, Buffer.alloc(8), 16), frame(T.PING, 0, 0, Buffer.alloc(8))],
    expect: conn(E.FRAME_SIZE_ERROR),
  },
  // §4.3 Header compression and decompression
  {
    section: "4.3",
    what: "an undecodable header block",
    send: [
      frame(
        T.HEADERS,
        F.END_HEADERS | F.END_STREAM,
        1,
        Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff]),
      ),
    ],
    expect: conn(E.COMPRESSION_ERROR),
  },
  {
    section: "4.3",
    what: "a PRIORITY frame inside a header block",
    send: [
      frame(T.HEADERS, F.END_STREAM, 1, encodeBlock(grpcRequest(GET))),
      frame(T.PRIORITY, 0, 1, Buffer.from([0, 0, 0, 0, 16])),
      frame(T.CONTINUATION, F.END_HEADERS, 1),
    ],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "4.3",
    what: "HEADERS of another stream inside a header block",
    send: [frame(T.HEADERS, F.END_STREAM, 1, encodeBlock(grpcRequest(GET))), ...call(3)],
    expect: conn(E.PROTOCOL_ERROR),
  },
  // §5.1 Stream states
  {
    section: "5.1",
    what: "DATA on an idle stream",
    send: [data(1)],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "5.1",
    what: "RST_STREAM on an idle stream",
    send: [frame(T.RST_STREAM, 0, 1, u32(E.CANCEL))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "5.1",
    what: "WINDOW_UPDATE on an idle stream",
    send: [frame(T.WINDOW_UPDATE, 0, 1, u32(100))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "5.1",
    what: "CONTINUATION on an idle stream",
    send: [frame(T.CONTINUATION, F.END_HEADERS, 1, encodeBlock(grpcRequest(GET)))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "5.1",
    what: "DATA on a half-closed (remote) stream",
    send: [...call(1, grpcRequest(WATCH)), data(1)],
    expect: stream(1, E.STREAM_CLOSED),
  },
  {
    section: "5.1",
    what: "HEADERS on a half-closed (remote) stream",
    send: [
      ...call(1, grpcRequest(WATCH)),
      headers(1, [["x-trailer", "1"]], F.END_HEADERS | F.END_STREAM),
    ],
    expect: stream(1, E.STREAM_CLOSED),
  },
  {
    section: "5.1",
    what: "DATA on a stream the client reset (ignored, or STREAM_CLOSED)",
    send: [headers(1), frame(T.RST_STREAM, 0, 1, u32(E.CANCEL)), data(1)],
    expect: { kind: "either", options: [alive, stream(1, E.STREAM_CLOSED)] },
  },
  {
    section: "5.1",
    what: "HEADERS reusing the id of a stream closed normally (MAY be a connection error)",
    send: [],
    after: { send: call(1), untilServed: 1 },
    expect: { kind: "either", options: [alive, conn(E.STREAM_CLOSED, E.PROTOCOL_ERROR)] },
  },
  // §5.1.1 Stream identifiers
  {
    section: "5.1.1",
    what: "a client stream with an even id",
    send: call(2),
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "5.1.1",
    what: "a new stream with an id below one already opened",
    send: [...call(5), ...call(3)],
    expect: conn(E.PROTOCOL_ERROR),
  },
  // §5.3 / §6.3 Priority
  {
    section: "5.3.1",
    what: "HEADERS whose priority depends on its own stream (RFC 7540's PROTOCOL_ERROR, or ignored)",
    send: [
      frame(
        T.HEADERS,
        F.END_HEADERS | F.PRIORITY,
        1,
        Buffer.concat([u32(1), Buffer.from([16]), encodeBlock(grpcRequest(GET))]),
      ),
      data(1),
    ],
    expect: { kind: "either", options: [{ kind: "served", id: 1 }, stream(1, E.PROTOCOL_ERROR)] },
  },
  {
    section: "6.3",
    what: "PRIORITY on stream 0",
    send: [frame(T.PRIORITY, 0, 0, Buffer.from([0, 0, 0, 1, 16]))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.3",
    what: "PRIORITY of 4 octets",
    send: [frame(T.PRIORITY, 0, 1, Buffer.from([0, 0, 0, 0]))],
    expect: stream(1, E.FRAME_SIZE_ERROR),
  },
  {
    section: "6.3",
    what: "PRIORITY on an idle stream",
    send: [frame(T.PRIORITY, 0, 9, Buffer.from([0, 0, 0, 0, 16]))],
    expect: alive,
  },
  // §5.5 Extending HTTP/2
  {
    section: "5.5",
    what: "an unknown frame inside a header block",
    send: [
      frame(T.HEADERS, F.END_STREAM, 1, encodeBlock(grpcRequest(GET))),
      frame(0xee, 0, 0, Buffer.alloc(4)),
      frame(T.CONTINUATION, F.END_HEADERS, 1),
    ],
    expect: conn(E.PROTOCOL_ERROR),
  },
  // §6.1 DATA
  {
    section: "6.1",
    what: "DATA on stream 0",
    send: [frame(T.DATA, 0, 0, Buffer.alloc(4))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.1",
    what: "DATA whose padding is as long as the frame",
    send: [headers(1), frame(T.DATA, F.PADDED | F.END_STREAM, 1, Buffer.from([5, 0, 0, 0, 0]))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.1",
    what: "padded DATA",
    send: [
      headers(1),
      frame(
        T.DATA,
        F.PADDED | F.END_STREAM,
        1,
        Buffer.concat([Buffer.from([7]), GET_MESSAGE, Buffer.alloc(7)]),
      ),
    ],
    expect: { kind: "served", id: 1 },
  },
  // §6.2 HEADERS
  {
    section: "6.2",
    what: "HEADERS on stream 0",
    send: [frame(T.HEADERS, F.END_HEADERS, 0, encodeBlock(grpcRequest(GET)))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.2",
    what: "HEADERS whose padding is longer than the frame",
    send: [
      frame(
        T.HEADERS,
        F.END_HEADERS | F.PADDED,
        1,
        Buffer.concat([Buffer.from([255]), encodeBlock(grpcRequest(GET))]),
      ),
    ],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.2",
    what: "padded HEADERS with a priority",
    send: [
      frame(
        T.HEADERS,
        F.END_HEADERS | F.PADDED | F.PRIORITY,
        1,
        Buffer.concat([
          Buffer.from([3]),
          u32(0),
          Buffer.from([16]),
          encodeBlock(grpcRequest(GET)),
          Buffer.alloc(3),
        ]),
      ),
      data(1),
    ],
    expect: { kind: "served", id: 1 },
  },
  // §6.4 RST_STREAM
  {
    section: "6.4",
    what: "RST_STREAM on stream 0",
    send: [frame(T.RST_STREAM, 0, 0, u32(E.CANCEL))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.4",
    what: "RST_STREAM of 3 octets",
    send: [headers(1), frame(T.RST_STREAM, 0, 1, Buffer.alloc(3))],
    expect: conn(E.FRAME_SIZE_ERROR),
  },
  // §6.5 SETTINGS
  {
    section: "6.5",
    what: "a SETTINGS ACK with a payload",
    send: [frame(T.SETTINGS, F.ACK, 0, settings([S.ENABLE_PUSH, 0]))],
    expect: conn(E.FRAME_SIZE_ERROR),
  },
  {
    section: "6.5",
    what: "SETTINGS on a stream",
    send: [frame(T.SETTINGS, 0, 1)],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.5",
    what: "SETTINGS of 3 octets",
    send: [frame(T.SETTINGS, 0, 0, Buffer.alloc(3))],
    expect: conn(E.FRAME_SIZE_ERROR),
  },
  {
    section: "6.5.2",
    what: "SETTINGS_ENABLE_PUSH of 2",
    send: [frame(T.SETTINGS, 0, 0, settings([S.ENABLE_PUSH, 2]))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.5.2",
    what: "SETTINGS_INITIAL_WINDOW_SIZE of 2^31",
    send: [frame(T.SETTINGS, 0, 0, settings([S.INITIAL_WINDOW_SIZE, 2 ** 31]))],
    expect: conn(E.FLOW_CONTROL_ERROR),
  },
  {
    section: "6.5.2",
    what: "SETTINGS_MAX_FRAME_SIZE below 16,384",
    send: [frame(T.SETTINGS, 0, 0, settings([S.MAX_FRAME_SIZE, 16_383]))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.5.2",
    what: "SETTINGS_MAX_FRAME_SIZE above 2^24-1",
    send: [frame(T.SETTINGS, 0, 0, settings([S.MAX_FRAME_SIZE, 2 ** 24]))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.5.2",
    what: "an unknown setting (ignored)",
    send: [frame(T.SETTINGS, 0, 0, settings([0xff, 1]))],
    expect: alive,
  },
  {
    section: "6.5.3",
    what: "SETTINGS with every known setting, then a call",
    send: [
      frame(
        T.SETTINGS,
        0,
        0,
        settings(
          [S.HEADER_TABLE_SIZE, 0],
          [S.ENABLE_PUSH, 0],
          [S.MAX_CONCURRENT_STREAMS, 10],
          [S.INITIAL_WINDOW_SIZE, 100],
          [S.MAX_FRAME_SIZE, 20_000],
          [S.MAX_HEADER_LIST_SIZE, 100_000],
        ),
      ),
      ...call(1),
    ],
    expect: { kind: "served", id: 1 },
  },
  // §6.7 PING
  {
    section: "6.7",
    what: "PING on a stream",
    send: [frame(T.PING, 0, 1, Buffer.alloc(8))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.7",
    what: "PING of 6 octets",
    send: [frame(T.PING, 0, 0, Buffer.alloc(6))],
    expect: conn(E.FRAME_SIZE_ERROR),
  },
  {
    section: "6.7",
    what: "an unsolicited PING ACK (ignored)",
    send: [frame(T.PING, F.ACK, 0, Buffer.alloc(8, 1))],
    expect: alive,
  },
  // §6.8 GOAWAY
  {
    section: "6.8",
    what: "GOAWAY on a stream",
    send: [frame(T.GOAWAY, 0, 1, Buffer.concat([u32(0), u32(0)]))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  // §6.9 WINDOW_UPDATE
  {
    section: "6.9",
    what: "a zero increment on the connection",
    send: [frame(T.WINDOW_UPDATE, 0, 0, u32(0))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.9",
    what: "a zero increment on an open stream",
    send: [headers(1), frame(T.WINDOW_UPDATE, 0, 1, u32(0))],
    expect: stream(1, E.PROTOCOL_ERROR),
  },
  {
    section: "6.9",
    what: "WINDOW_UPDATE of 3 octets",
    send: [frame(T.WINDOW_UPDATE, 0, 0, Buffer.alloc(3))],
    expect: conn(E.FRAME_SIZE_ERROR),
  },
  {
    section: "6.9.1",
    what: "the connection window raised past 2^31-1",
    send: [frame(T.WINDOW_UPDATE, 0, 0, u32(0x7fffffff))],
    expect: conn(E.FLOW_CONTROL_ERROR),
  },
  {
    section: "6.9.1",
    what: "a stream window raised past 2^31-1",
    send: [headers(1), frame(T.WINDOW_UPDATE, 0, 1, u32(0x7fffffff))],
    expect: stream(1, E.FLOW_CONTROL_ERROR),
  },
  {
    section: "6.9.2",
    what: "SETTINGS_INITIAL_WINDOW_SIZE pushing an open stream's window past 2^31-1",
    send: [
      headers(1),
      frame(T.WINDOW_UPDATE, 0, 1, u32(0x7fffffff - 65_535)),
      frame(T.SETTINGS, 0, 0, settings([S.INITIAL_WINDOW_SIZE, 65_536])),
    ],
    expect: conn(E.FLOW_CONTROL_ERROR),
  },
  // §6.10 CONTINUATION
  {
    section: "6.10",
    what: "a header block in HEADERS and two CONTINUATIONs",
    send: (() => {
      const block = encodeBlock(grpcRequest(GET));
      return [
        frame(T.HEADERS, 0, 1, block.subarray(0, 10)),
        frame(T.CONTINUATION, 0, 1, block.subarray(10, 20)),
        frame(T.CONTINUATION, F.END_HEADERS, 1, block.subarray(20)),
        data(1),
      ];
    })(),
    expect: { kind: "served", id: 1 },
  },
  {
    section: "6.10",
    what: "CONTINUATION after END_HEADERS",
    send: [headers(1), frame(T.CONTINUATION, F.END_HEADERS, 1, encodeBlock([["x-a", "b"]]))],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.10",
    what: "CONTINUATION on stream 0 inside a header block",
    send: [
      frame(T.HEADERS, 0, 1, encodeBlock(grpcRequest(GET))),
      frame(T.CONTINUATION, F.END_HEADERS, 0),
    ],
    expect: conn(E.PROTOCOL_ERROR),
  },
  {
    section: "6.10",
    what: "CONTINUATION on another stream inside a header block",
    send: [
      frame(T.HEADERS, 0, 1, encodeBlock(grpcRequest(GET))),
      frame(T.CONTINUATION, F.END_HEADERS, 3),
    ],
    expect: conn(E.PROTOCOL_ERROR),
  },
  // §8.1 HTTP message framing
  {
    section: "8.1",
    what: "a request with trailers",
    send: [
      headers(1),
      data(1, GET_MESSAGE, 0),
      headers(1, [["x-trailer", "t"]], F.END_HEADERS | F.END_STREAM),
    ],
    expect: { kind: "served", id: 1 },
  },
  {
    section: "8.1",
    what: "a second HEADERS without END_STREAM",
    send: [headers(1), headers(1, [["x-more", "m"]])],
    expect: stream(1, E.PROTOCOL_ERROR),
  },
  {
    section: "8.1",
    what: "pseudo-headers in trailers",
    send: [
      headers(1),
      data(1, GET_MESSAGE, 0),
      headers(1, [[":path", GET]], F.END_HEADERS | F.END_STREAM),
    ],
    expect: stream(1, E.PROTOCOL_ERROR),
  },
  {
    section: "8.1.1",
    what: "a content-length other than the DATA's length",
    send: call(1, grpcRequest(GET, [["content-length", "1000"]])),
    expect: stream(1, E.PROTOCOL_ERROR),
  },
  // §8.2 HTTP fields
  malformed("8.2", "an upper-case field name", grpcRequest(GET, [["X-Upper", "1"]])),
  malformed("8.2.1", "a field name with a space", grpcRequest(GET, [["x user", "1"]])),
  malformed("8.2.1", "an empty field name", grpcRequest(GET, [["", "1"]])),
  malformed("8.2.1", "a field name with a colon inside", grpcRequest(GET, [["x:y", "1"]])),
  malformed("8.2.1", "a field value with CR", grpcRequest(GET, [["x-a", "a\rb"]])),
  malformed("8.2.1", "a field value with LF", grpcRequest(GET, [["x-a", "a\nb"]])),
  malformed("8.2.1", "a field value with NUL", grpcRequest(GET, [["x-a", "a\0b"]])),
  malformed("8.2.1", "a field value with leading whitespace", grpcRequest(GET, [["x-a", " a"]])),
  malformed("8.2.1", "a field value with trailing whitespace", grpcRequest(GET, [["x-a", "a\t"]])),
  malformed("8.2.2", "a connection: header", grpcRequest(GET, [["connection", "close"]])),
  malformed("8.2.2", "a keep-alive: header", grpcRequest(GET, [["keep-alive", "1"]])),
  malformed("8.2.2", "a proxy-connection: header", grpcRequest(GET, [["proxy-connection", "1"]])),
  malformed(
    "8.2.2",
    "a transfer-encoding: header",
    grpcRequest(GET, [["transfer-encoding", "chunked"]]),
  ),
  malformed("8.2.2", "an upgrade: header", grpcRequest(GET, [["upgrade", "h2c"]])),
  malformed("8.2.2", "te: gzip", replace("te", "gzip")),
  // §8.3 HTTP control data
  malformed("8.3", "an unknown pseudo-header", grpcRequest(GET, [[":foo", "bar"]])),
  malformed("8.3", "a response pseudo-header in a request", grpcRequest(GET, [[":status", "200"]])),
  malformed("8.3", "a pseudo-header after a regular field", [
    ...without(":authority"),
    [":authority", "x"],
  ]),
  malformed("8.3.1", "a duplicate :method", grpcRequest(GET, [[":method", "POST"]])),
  malformed("8.3.1", "a duplicate :path", grpcRequest(GET, [[":path", GET]])),
  malformed("8.3.1", "a duplicate :scheme", grpcRequest(GET, [[":scheme", "http"]])),
  malformed("8.3.1", "no :method", without(":method")),
  malformed("8.3.1", "no :scheme", without(":scheme")),
  malformed("8.3.1", "no :path", without(":path")),
  malformed("8.3.1", "an empty :path", replace(":path", "")),
  // RFC 7541 over the wire: a decoding error is a connection error COMPRESSION_ERROR (RFC 9113 §4.3)
  hpackCase(
    "7541/2.3.3",
    "an index beyond both tables",
    Buffer.from([0x83, 0x86, 0xff, 0x10]),
    conn(E.COMPRESSION_ERROR),
  ),
  hpackCase("7541/2.3.3", "index 0", Buffer.from([0x80]), conn(E.COMPRESSION_ERROR)),
  hpackCase(
    "7541/4.2",
    "a table size update above SETTINGS_HEADER_TABLE_SIZE",
    Buffer.from([0x3f, 0xe2, 0x1f, 0x83]) /* 4,097 */,
    conn(E.COMPRESSION_ERROR),
  ),
  hpackCase(
    "7541/4.2",
    "a table size update after a field",
    Buffer.from([0x83, 0x20]),
    conn(E.COMPRESSION_ERROR),
  ),
  hpackCase(
    "7541/5.1",
    "an integer that overflows",
    Buffer.from([0x0f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]),
    conn(E.COMPRESSION_ERROR),
  ),
  hpackCase(
    "7541/5.2",
    "a Huffman string with EOS",
    Buffer.from([0x00, 0x84, 0xff, 0xff, 0xff, 0xff, 0x01, 0x61]),
    conn(E.COMPRESSION_ERROR),
  ),
  hpackCase(
    "7541/5.2",
    "Huffman padding longer than 7 bits",
    // "a" (00011) then 11 bits of ones.
    Buffer.from([0x00, 0x82, 0x1f, 0xff, 0x01, 0x61]),
    conn(E.COMPRESSION_ERROR),
  ),
  hpackCase(
    "7541/5.2",
    "Huffman padding that is not a prefix of EOS",
    // "a" (00011) then 000.
    Buffer.from([0x00, 0x81, 0x18, 0x01, 0x61]),
    conn(E.COMPRESSION_ERROR),
  ),
  hpackCase(
    "7541/5.2",
    "a string longer than the block",
    Buffer.from([0x00, 0x05, 0x61]),
    conn(E.COMPRESSION_ERROR),
  ),
  {
    section: "7541/2.3",
    what: "the dynamic table carried from one header block to the next",
    send: (() => {
      // Stream 1 indexes "x-tag: one" (incremental indexing); stream 3 names it by index 62.
      const first = Buffer.concat([
        encodeBlock(grpcRequest(GET)),
        Buffer.from([0x40, 5, ...Buffer.from("x-tag"), 3, ...Buffer.from("one")]),
      ]);
      const second = Buffer.concat([encodeBlock(grpcRequest(GET)), Buffer.from([0xbe])]);
      return [
        frame(T.HEADERS, F.END_HEADERS, 1, first),
        data(1),
        frame(T.HEADERS, F.END_HEADERS, 3, second),
        data(3),
      ];
    })(),
    expect: { kind: "either", options: [{ kind: "served", id: 3 }] },
  },
];

// ── running a case ─────────────────────────────────────────────────────────────────────────

/** The outcome class of a case: what the differential suite compares. */
export type OutcomeClass = "served" | "alive" | "stream-error" | "connection-error";

export interface Observed {
  readonly cls: OutcomeClass;
  /** The GOAWAY or RST_STREAM code, when there was one. */
  readonly code: number | null;
  readonly detail: string;
}

const WAIT_MS = 5000;
/**
 * How long after its GOAWAY a server may take to close: it must close at once (RFC 9113 §5.4.1),
 * flushing what it has queued; this is room for a loaded machine.
 */
const CLOSE_MS = 2000;

/**
 * Runs `c` against the server on `port` and observes what happened: a GOAWAY (or a close) is a
 * connection error; else a RST_STREAM on the case's stream a stream error; else a grpc answer
 * (or an HTTP/2 response with END_STREAM) "served"; else "alive" once a PING is answered.
 */
export async function observe(port: number, c: Case): Promise<Observed> {
  const client = c.raw === true ? new RawH2Client(port) : await RawH2Client.open(port);
  try {
    await client.connected();
    if (c.raw === true) client.send(...c.send);
    else {
      // The server's SETTINGS first: a case may depend on them having been seen.
      await client.waitFor(() => client.frames.some((f) => f.type === T.SETTINGS), WAIT_MS);
      if (c.after !== undefined) {
        client.send(...c.after.send);
        await client.streamDone(c.after.untilServed, WAIT_MS);
        client.send(...call(c.after.untilServed));
      } else {
        client.send(...c.send);
      }
    }
    // A PING after the case: its ACK proves the server has read all of it.
    const tag = Buffer.from("c0ffee00c0ffee00", "hex");
    client.send(frame(T.PING, 0, 0, tag));
    const acked = (): boolean =>
      client.frames.some(
        (f) => f.type === T.PING && (f.flags & F.ACK) !== 0 && f.payload.equals(tag),
      );
    const id = streamOf(c.expect);
    await client.waitFor(() => {
      if (client.goAway !== null || client.closed || client.remoteEnded) return true;
      if (id === null) return acked();
      const s = client.streams.get(id);
      return s !== undefined && (s.rst !== null || s.ended);
    }, WAIT_MS);
    const goAway = client.goAway;
    if (goAway !== null) {
      const closed = await client.waitClosed(CLOSE_MS);
      return {
        cls: "connection-error",
        code: goAway.code,
        detail: `GOAWAY ${goAway.code} (${goAway.debug})${closed ? "" : ", socket NOT closed"}`,
      };
    }
    if (client.closed || client.remoteEnded) {
      return { cls: "connection-error", code: null, detail: "closed without GOAWAY" };
    }
    const s = id === null ? undefined : client.streams.get(id);
    if (s !== undefined && s.rst !== null && !(s.ended && s.rst === E.NO_ERROR)) {
      return { cls: "stream-error", code: s.rst, detail: `RST_STREAM ${s.rst}` };
    }
    if (s?.ended === true) {
      return { cls: "served", code: null, detail: `served, grpc-status ${grpcStatus(s)}` };
    }
    return { cls: "alive", code: null, detail: "a PING answered, nothing else" };
  } finally {
    client.destroy();
  }
}

/** The stream whose fate an expectation is about. */
function streamOf(e: Expect): number | null {
  switch (e.kind) {
    case "stream":
    case "served":
      return e.id;
    case "either":
      for (const o of e.options) {
        const id = streamOf(o);
        if (id !== null) return id;
      }
      return null;
    case "alive":
    case "connection":
      return null;
  }
}

/** Whether `o` is what `e` asks (connection errors must also have closed the socket). */
export function meets(e: Expect, o: Observed): boolean {
  switch (e.kind) {
    case "connection":
      if (o.cls !== "connection-error") return false;
      if (o.detail.includes("NOT closed")) return false;
      return o.code === null ? e.closeOk === true : e.codes.includes(o.code);
    case "stream":
      if (o.cls === "stream-error") return o.code !== null && e.codes.includes(o.code);
      return meets({ kind: "connection", codes: e.codes }, o);
    case "alive":
      return o.cls === "alive";
    case "served":
      return o.cls === "served";
    case "either":
      return e.options.some((x) => meets(x, o));
  }
}

export function describeExpect(e: Expect): string {
  switch (e.kind) {
    case "connection":
      return `connection error ${e.codes.join("|")}${e.closeOk === true ? " or a close" : ""}`;
    case "stream":
      return `stream error ${e.codes.join("|")} on ${e.id}`;
    case "alive":
      return "ignored";
    case "served":
      return `served on ${e.id}`;
    case "either":
      return e.options.map(describeExpect).join(", or ");
  }
}

/** Asserts a case's outcome against the server on `port`. */
export async function assertCase(port: number, c: Case): Promise<void> {
  const o = await observe(port, c);
  assert.ok(meets(c.expect, o), `expected ${describeExpect(c.expect)}, got ${o.detail}`);
}

/**
 * What the HTTP/2 fuzzers share (test/api/h2-fuzz.test.ts within a fixed budget in `npm test`,
 * scripts/fuzz-h2.ts for longer runs): fast-check arbitraries for whole connections (sequences of
 * frames, valid ones and mutated ones) and for HPACK blocks, and one connection's run against a
 * server, classified.
 *
 * A run is seeded: fast-check's seed (printed) and its counterexample path replay it
 * (FUZZ_SEED, FUZZ_PATH).
 */
import fc from "fast-check";
import {
  E,
  encodeBlock,
  F,
  type Field,
  frame,
  getRequest,
  grpcMessage,
  grpcRequest,
  parseFrames,
  putRequest,
  RawH2Client,
  settings,
  T,
  u32,
} from "./h2-raw.ts";

const PATHS = [
  "/cairn.v1.KV/Get",
  "/cairn.v1.KV/Put",
  "/cairn.v1.KV/Scan",
  "/cairn.v1.Meta/WatchCluster",
  "/cairn.v1.Admin/SnapshotShard",
  "/cairn.v1.Raft/ReadIndex",
  "/no.Such/Method",
];

const streamId = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(1, 3, 5, 7, 9) },
  { weight: 1, arbitrary: fc.constantFrom(0, 2, 4) },
  { weight: 1, arbitrary: fc.integer({ min: 0, max: 0x7fffffff }) },
);

/** Header values that a fuzzer should try: ordinary, empty, odd bytes. */
const value = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.constantFrom("", " x", "x ", "a\tb", "a\rb", "a\nb", "a\0b", "café", "\u00ff"),
  fc.uint8Array({ maxLength: 12 }).map((a) => Buffer.from(a)),
);

const name = fc.oneof(
  fc.constantFrom(
    "x-a",
    "x-bin",
    "grpc-timeout",
    "grpc-encoding",
    "te",
    "connection",
    "content-length",
    ":path",
    ":method",
    ":status",
    ":foo",
    "X-Upper",
    "",
    "x y",
    "cairn-shard-worker",
  ),
  fc.string({ maxLength: 8 }),
);

const extraFields = fc.array(fc.tuple(name, value), { maxLength: 4 }) as fc.Arbitrary<Field[]>;

const message = fc.oneof(
  fc.constant(getRequest(Buffer.from("k"))),
  fc
    .tuple(fc.uint8Array({ maxLength: 16 }), fc.uint8Array({ maxLength: 64 }))
    .map(([k, v]) => putRequest(Buffer.from(k), Buffer.from(v))),
  fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)),
);

/** A request's header block: a gRPC call's fields, shuffled a little, extra fields added. */
const requestBlock = fc
  .tuple(fc.constantFrom(...PATHS), extraFields, fc.boolean())
  .map(([path, extra, drop]) => {
    const fields = grpcRequest(path, extra);
    return encodeBlock(drop ? fields.slice(1) : fields);
  });

/** A frame a client may well send. */
const validFrame: fc.Arbitrary<Buffer[]> = fc.oneof(
  fc
    .tuple(streamId, requestBlock, message, fc.boolean())
    .map(([id, block, msg, end]) => [
      frame(T.HEADERS, F.END_HEADERS, id, block),
      frame(T.DATA, end ? F.END_STREAM : 0, id, grpcMessage(msg)),
    ]),
  fc.tuple(streamId, requestBlock, fc.integer({ min: 1, max: 8 })).map(([id, block, cut]) => {
    // A header block split over HEADERS and CONTINUATION.
    const at = Math.min(block.length, cut);
    return [
      frame(T.HEADERS, 0, id, block.subarray(0, at)),
      frame(T.CONTINUATION, F.END_HEADERS, id, block.subarray(at)),
    ];
  }),
  fc
    .tuple(streamId, fc.uint8Array({ maxLength: 64 }), fc.boolean())
    .map(([id, d, end]) => [frame(T.DATA, end ? F.END_STREAM : 0, id, Buffer.from(d))]),
  fc.uint8Array({ minLength: 8, maxLength: 8 }).map((p) => [frame(T.PING, 0, 0, Buffer.from(p))]),
  fc
    .array(fc.tuple(fc.integer({ min: 0, max: 8 }), fc.nat()), { maxLength: 4 })
    .map((pairs) => [frame(T.SETTINGS, 0, 0, settings(...pairs))]),
  fc.constant<Buffer[]>([frame(T.SETTINGS, F.ACK, 0)]),
  fc
    .tuple(streamId, fc.integer({ min: 0, max: 0x7fffffff }))
    .map(([id, inc]) => [frame(T.WINDOW_UPDATE, 0, id, u32(inc))]),
  fc
    .tuple(streamId, fc.integer({ min: 0, max: 0xd }))
    .map(([id, code]) => [frame(T.RST_STREAM, 0, id, u32(code))]),
  fc
    .tuple(streamId, streamId)
    .map(([id, dep]) => [frame(T.PRIORITY, 0, id, Buffer.concat([u32(dep), Buffer.from([16])]))]),
  fc.constant<Buffer[]>([frame(T.GOAWAY, 0, 0, Buffer.concat([u32(0), u32(E.NO_ERROR)]))]),
  fc
    .tuple(fc.integer({ min: 10, max: 255 }), fc.uint8Array({ maxLength: 16 }))
    .map(([type, p]) => [frame(type, 0, 0, Buffer.from(p))]),
);

/** One mutation of a frame's bytes. */
function mutate(bytes: Buffer, kind: number, at: number, byte: number): Buffer {
  const out = Buffer.from(bytes);
  const i = out.length === 0 ? 0 : at % out.length;
  switch (kind) {
    case 0: // flip one bit
      if (out.length > 0) out[i] = (out[i] as number) ^ (1 << (byte % 8));
      return out;
    case 1: // set one byte
      if (out.length > 0) out[i] = byte;
      return out;
    case 2: // truncate
      return out.subarray(0, i);
    case 3: // a byte inserted
      return Buffer.concat([out.subarray(0, i), Buffer.from([byte]), out.subarray(i)]);
    case 4: // the type changed
      if (out.length > 3) out[3] = byte % 12;
      return out;
    case 5: // the flags changed
      if (out.length > 4) out[4] = byte;
      return out;
    default: // the length field changed
      if (out.length > 2) out[2] = byte;
      return out;
  }
}

const mutatedFrame: fc.Arbitrary<Buffer[]> = fc
  .tuple(validFrame, fc.integer({ min: 0, max: 6 }), fc.nat(), fc.integer({ min: 0, max: 255 }))
  .map(([frames, kind, at, byte]) => [mutate(Buffer.concat(frames), kind, at, byte)]);

/** A connection's frames after its preface and SETTINGS: mostly valid, some mutated. */
export const connectionArb: fc.Arbitrary<Buffer[]> = fc
  .array(fc.oneof({ weight: 4, arbitrary: validFrame }, { weight: 1, arbitrary: mutatedFrame }), {
    minLength: 1,
    maxLength: 10,
  })
  .map((groups) => groups.flat());

/** HPACK blocks: random octets, and valid blocks mutated. */
export const hpackBlockArb: fc.Arbitrary<Buffer> = fc.oneof(
  fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)),
  fc
    .tuple(requestBlock, fc.integer({ min: 0, max: 6 }), fc.nat(), fc.integer({ min: 0, max: 255 }))
    .map(([block, kind, at, byte]) => mutate(block, kind, at, byte)),
  fc
    .array(
      fc.oneof(
        fc.integer({ min: 0x80, max: 0xff }).map((b) => Buffer.from([b])), // indexed
        fc.constant(Buffer.from([0x3f, 0xe1, 0x1f])), // a table size update of 4,096
        fc.constant(Buffer.from([0x20])), // a table size update of 0
        fc
          .tuple(fc.string({ maxLength: 6 }), fc.string({ maxLength: 6 }))
          .map(([n, v]) => Buffer.concat([Buffer.from([0x40]), encodeBlock([[n, v]]).subarray(1)])), // a literal with incremental indexing
      ),
      { maxLength: 12 },
    )
    .map((parts) => Buffer.concat(parts)),
);

/**
 * Zero octets that complete a frame `bytes` leave cut short (a mutated length field): without
 * them the server would wait for the rest, and take the PING after it for that rest.
 */
function completion(bytes: Buffer): Buffer {
  let buf = bytes;
  for (let i = 0; i < 3; i++) {
    const { used } = parseFrames(buf);
    const rest = buf.length - used;
    if (rest === 0) break;
    const need = rest < 9 ? 9 - rest : 9 + buf.readUIntBE(used, 3) - rest;
    if (need > 16_384 + 9) break; // a frame too large: the server refuses it at once
    buf = Buffer.concat([buf, Buffer.alloc(need)]);
  }
  return buf.subarray(bytes.length);
}

/** What became of one fuzzed connection. */
export interface ConnectionRun {
  readonly goAwayCode: number | null;
  readonly closed: boolean;
  /** The server's header blocks failed to decode (its encoder is at fault). */
  readonly hpackError: unknown;
}

/** Sends `frames` on a new connection to `port`, then a PING; waits for its answer or a close. */
export async function runConnection(
  port: number,
  frames: readonly Buffer[],
): Promise<ConnectionRun> {
  const client = await RawH2Client.open(port);
  try {
    client.send(...frames, completion(Buffer.concat(frames)));
    // A PING's ACK proves the server read it all; a GOAWAY or a close ends the wait as well.
    const tag = Buffer.from("f022f022f022f022", "hex");
    client.send(frame(T.PING, 0, 0, tag));
    await client.waitFor(
      () =>
        client.goAway !== null ||
        client.frames.some(
          (f) => f.type === T.PING && (f.flags & F.ACK) !== 0 && f.payload.equals(tag),
        ),
      2000,
    );
    return {
      goAwayCode: client.goAway?.code ?? null,
      closed: client.closed || client.remoteEnded,
      hpackError: client.hpackError,
    };
  } finally {
    client.destroy();
  }
}

/** The seed and replay path of a run: FUZZ_SEED and FUZZ_PATH, else a fresh seed. */
export function fuzzParameters(): { seed: number; path?: string } {
  const seed = process.env["FUZZ_SEED"];
  const path = process.env["FUZZ_PATH"];
  return {
    seed: seed === undefined ? (Date.now() ^ (Math.random() * 0x7fffffff)) | 0 : Number(seed),
    ...(path === undefined ? {} : { path }),
  };
}

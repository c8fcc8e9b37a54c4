/**
 * The snapshot stream of an engine: a sequence of frames
 *     u32 bodyLength | u32 crc32c(body) | body
 * The first body is the header "CAIRNSNP" | u32 version | u64 seq; then bodies of entries
 * (varint keyLength | key | varint valueLength | value, ~1 MiB per frame); the last body is
 * "CAIRNEND" | u64 entryCount. A stream cut short or damaged is rejected, never half-imported.
 */
import { CairnError } from "../../common/index.ts";
import { crc32c } from "../common/index.ts";
import { BufferPool } from "./buffer-pool.ts";
import { ByteSink, readU64 } from "./format.ts";

const HEADER_MAGIC = Buffer.from("CAIRNSNP", "latin1");
const END_MAGIC = Buffer.from("CAIRNEND", "latin1");
const VERSION = 1;
const FRAME_TARGET = 1 << 20;
/** The header frame's body: magic, version, seq. */
const HEADER_BODY_BYTES = 20;
/**
 * The largest entry an engine holds, as the stream encodes it: every entry is written by the
 * apply of one log entry, so the largest is a Put of `limits.max_value_bytes` at its maximum
 * (64 MiB) behind its 16-byte version, under a key of `limits.max_key_bytes` at its maximum
 * (65,535) behind its 1-byte prefix (src/replication/commands.ts), with two varints of at most
 * 5 bytes. 65 MiB holds it, as it holds the WAL record that carried it (MAX_BODY_BYTES).
 */
const MAX_ENTRY_BYTES = 65 * 1024 * 1024;
/**
 * The largest body a frame of a valid image has: entries are added until the body reaches
 * FRAME_TARGET, so it is less than that plus one more entry. A frame declaring more is refused
 * as soon as its 8-byte header is read, before any of its body is buffered: a frame's length is
 * a u32, and one cut across chunks is copied into a buffer as it arrives, so a peer's stream
 * (a receive checks the image as it arrives, and a follower's install decodes it again) could
 * otherwise make the decoder hold up to 4 GiB for a single frame.
 */
export const MAX_FRAME_BODY_BYTES = FRAME_TARGET + MAX_ENTRY_BYTES;

/** A sink for one frame: its body is written after room left for the frame's header. */
function frameSink(bodyCapacity: number): ByteSink {
  const sink = new ByteSink(8 + bodyCapacity);
  sink.length = 8;
  return sink;
}

/** The frame `sink` holds (frameSink), its header written in place: no copy of the body. */
function frame(sink: ByteSink): Uint8Array {
  const out = sink.view();
  const body = out.subarray(8);
  out.writeUInt32LE(body.length, 0);
  out.writeUInt32LE(crc32c(body), 4);
  return out;
}

export function* encodeSnapshotFrames(
  seq: number,
  entries: Iterable<[Uint8Array, Uint8Array]>,
): Generator<Uint8Array> {
  const header = frameSink(HEADER_BODY_BYTES);
  header.bytes(HEADER_MAGIC);
  header.u32(VERSION);
  header.u64(seq);
  yield frame(header);
  let body = frameSink(FRAME_TARGET + 4096);
  let count = 0;
  for (const [key, value] of entries) {
    body.varint(key.length);
    body.bytes(key);
    body.varint(value.length);
    body.bytes(value);
    count++;
    if (body.length - 8 >= FRAME_TARGET) {
      yield frame(body);
      body = frameSink(FRAME_TARGET + 4096);
    }
  }
  if (body.length > 8) yield frame(body);
  const end = frameSink(16);
  end.bytes(END_MAGIC);
  end.u64(count);
  yield frame(end);
}

export type SnapshotItem =
  | { readonly kind: "header"; readonly seq: number }
  | { readonly kind: "entry"; readonly key: Uint8Array; readonly value: Uint8Array };

function bad(what: string): CairnError {
  return new CairnError("CAIRN_ERR_SNAPSHOT_INVALID", `snapshot stream: ${what}`);
}

function readVarint(buf: Buffer, at: number): [number, number] {
  let n = 0;
  let shift = 0;
  for (;;) {
    if (at >= buf.length || shift > 28) throw bad("entry truncated");
    const b = buf[at++] as number;
    n |= (b & 0x7f) << shift;
    if (b < 0x80) return [n >>> 0, at];
    shift += 7;
  }
}

/**
 * Free buffers the snapshots a node receives are read back (SnapshotFile) and decoded in (a
 * frame cut across two chunks): reused from one snapshot to the next rather than allocated for
 * each (buffer-pool.ts says why). At most this much is kept free.
 */
export const SNAPSHOT_BUFFERS = new BufferPool(16 << 20);

/** A frame cut across chunks gets room for all of it at once up to this length (FRAME_TARGET+). */
const CARRY_UPFRONT_BYTES = 4 << 20;

/**
 * The body length the frame header at `at` of `buf` declares, refused (CAIRN_ERR_SNAPSHOT_INVALID)
 * when no frame of a valid image is that long: the header frame's is known, any other's is at
 * most MAX_FRAME_BODY_BYTES.
 */
function declaredBodyLength(buf: Buffer, at: number, state: DecodeState): number {
  const len = buf.readUInt32LE(at);
  if (state.frames === 0 ? len !== HEADER_BODY_BYTES : len > MAX_FRAME_BODY_BYTES) {
    throw bad(
      `frame ${state.frames} declares a body of ${len} bytes, ` +
        (state.frames === 0
          ? `not the header's ${HEADER_BODY_BYTES}`
          : `over the ${MAX_FRAME_BODY_BYTES} a frame holds at most`),
    );
  }
  return len;
}

/** A frame cut across chunks: its bytes so far, kept until the rest arrives. */
class FrameCarry {
  /** The frame's bytes so far, in a buffer from SNAPSHOT_BUFFERS (null: none carried). */
  #buf: Buffer | null = null;
  length = 0;

  /**
   * Appends the bytes of `chunk` from `at` this frame still lacks: its header's, then its
   * body's; returns the position after them. Once its header is here, its declared length is
   * checked (declaredBodyLength) and room for the whole frame taken, unless it claims more
   * than CARRY_UPFRONT_BYTES: then the buffer grows as the bytes arrive, up to the frame's
   * length, so a damaged length costs no more memory than the bytes that came.
   */
  add(chunk: Buffer, at: number, state: DecodeState): number {
    at = this.#append(chunk, at, 8);
    if (this.length >= 8) {
      const frameLength = 8 + declaredBodyLength(this.#buf as Buffer, 0, state);
      at = this.#append(chunk, at, frameLength);
    }
    return at;
  }

  /** The whole frame once every byte has come (valid until the next add), else null. */
  frame(): Buffer | null {
    if (this.length < 8 || this.length < this.#frameLength()) return null;
    return (this.#buf as Buffer).subarray(0, this.length);
  }

  /** Forgets the frame (its buffer is kept for the next one). */
  reset(): void {
    this.length = 0;
  }

  release(): void {
    if (this.#buf !== null) SNAPSHOT_BUFFERS.give(this.#buf);
    this.#buf = null;
    this.length = 0;
  }

  #frameLength(): number {
    return 8 + (this.#buf as Buffer).readUInt32LE(0);
  }

  #append(chunk: Buffer, at: number, upTo: number): number {
    const n = Math.min(upTo - this.length, chunk.length - at);
    if (n <= 0) return at;
    let buf = this.#buf;
    if (buf === null || buf.length < this.length + n) {
      const room =
        upTo <= CARRY_UPFRONT_BYTES
          ? upTo
          : Math.min(upTo, Math.max(this.length + n, 2 * this.length));
      const grown = SNAPSHOT_BUFFERS.take(room);
      if (buf !== null) {
        buf.copy(grown, 0, 0, this.length);
        SNAPSHOT_BUFFERS.give(buf);
      }
      buf = this.#buf = grown;
    }
    chunk.copy(buf, this.length, at, at + n);
    this.length += n;
    return at + n;
  }
}

/** What decoding has seen so far, across frames. */
interface DecodeState {
  frames: number;
  count: number;
  ended: boolean;
  /** A copy of the last entry's key (the entries are views the caller may let go of). */
  lastKey: Buffer;
  lastKeyLength: number;
}

/** The items of one whole frame (header and checksum included); views of it. */
function* frameItems(frame: Buffer, state: DecodeState): Generator<SnapshotItem> {
  const len = frame.readUInt32LE(0);
  const body = frame.subarray(8, 8 + len);
  if (crc32c(body) !== frame.readUInt32LE(4)) throw bad(`frame ${state.frames} checksum mismatch`);
  if (state.ended) throw bad("data after the end frame");
  if (state.frames === 0) {
    if (len !== HEADER_BODY_BYTES || !body.subarray(0, 8).equals(HEADER_MAGIC)) {
      throw bad("bad header");
    }
    if (body.readUInt32LE(8) !== VERSION) throw bad("unsupported version");
    state.frames++;
    yield { kind: "header", seq: readU64(body, 12) };
    return;
  }
  state.frames++;
  if (len === 16 && body.subarray(0, 8).equals(END_MAGIC)) {
    if (readU64(body, 8) !== state.count) throw bad("entry count mismatch");
    state.ended = true;
    return;
  }
  let at = 0;
  while (at < body.length) {
    let keyLen: number;
    [keyLen, at] = readVarint(body, at);
    if (at + keyLen > body.length) throw bad("entry truncated");
    const key = body.subarray(at, at + keyLen);
    at += keyLen;
    let valueLen: number;
    [valueLen, at] = readVarint(body, at);
    if (at + valueLen > body.length) throw bad("entry truncated");
    const value = body.subarray(at, at + valueLen);
    at += valueLen;
    if (
      state.count > 0 &&
      Buffer.compare(key, state.lastKey.subarray(0, state.lastKeyLength)) <= 0
    ) {
      throw bad(`entry ${state.count}: key not above the one before (keys must ascend)`);
    }
    if (state.lastKey.length < keyLen) state.lastKey = Buffer.allocUnsafe(Math.max(64, 2 * keyLen));
    key.copy(state.lastKey);
    state.lastKeyLength = keyLen;
    state.count++;
    yield { kind: "entry", key, value };
  }
}

/**
 * The sequence of the image whose stream starts with `bytes` (its header frame whole, checksum
 * and all), or null when they do not start with a valid header frame.
 */
export function snapshotImageSeq(bytes: Uint8Array): number | null {
  if (bytes.length < 8 + HEADER_BODY_BYTES) return null;
  const buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
  if (buf.readUInt32LE(0) !== HEADER_BODY_BYTES) return null;
  const body = buf.subarray(8, 8 + HEADER_BODY_BYTES);
  if (crc32c(body) !== buf.readUInt32LE(4)) return null;
  if (!body.subarray(0, 8).equals(HEADER_MAGIC) || body.readUInt32LE(8) !== VERSION) return null;
  return readU64(body, 12);
}

/**
 * `chunks` passed on as they come, but refused (CAIRN_ERR_SNAPSHOT_INVALID) at the header frame,
 * before anything after it is passed on, when that header names another sequence than `seq`:
 * for an import that must install an image of `seq` exactly (a Raft snapshot at that index),
 * and would otherwise replace the engine's state with another index's. (A stream that does not
 * start with a valid header is passed on: the decoder refuses it.)
 */
export async function* expectImageSeq(
  chunks: AsyncIterable<Uint8Array>,
  seq: number,
): AsyncGenerator<Uint8Array> {
  const headerBytes = 8 + HEADER_BODY_BYTES;
  /** The stream's first bytes (copies) while its header frame is not whole; null once checked. */
  let head: Buffer | null = Buffer.alloc(0);
  for await (const chunk of chunks) {
    if (head === null) {
      yield chunk;
      continue;
    }
    // Copied when the header is cut: the source may reuse a chunk's memory for the next.
    const bytes: Uint8Array =
      head.length === 0 && chunk.length >= headerBytes ? chunk : Buffer.concat([head, chunk]);
    if (bytes.length < headerBytes) {
      head = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
      continue;
    }
    const found = snapshotImageSeq(bytes);
    if (found !== null && found !== seq) {
      throw bad(`the image is at sequence ${found}, not at ${seq} as its snapshot says`);
    }
    head = null;
    yield bytes;
  }
  if (head !== null && head.length > 0) yield head;
}

/**
 * Parses frames from chunks cut anywhere; throws CAIRN_ERR_SNAPSHOT_INVALID on any damage, and
 * on keys that are not strictly ascending (an exported image lists each live key once, in order:
 * tables built from anything else would answer reads wrong).
 *
 * Nothing is copied but what must outlive a chunk: an entry's key and value are views of the
 * chunk (or, for a frame cut across chunks, of a buffer reused for the next such frame), valid
 * until the caller asks for the next item; a caller that keeps them copies them. In turn the
 * source may reuse a chunk's memory once the next chunk is asked for (SnapshotFile reads each
 * into the same buffer): the bytes of a frame it cut are copied out before that.
 */
export async function* decodeSnapshotStream(
  chunks: AsyncIterable<Uint8Array>,
): AsyncGenerator<SnapshotItem> {
  const state: DecodeState = {
    frames: 0,
    count: 0,
    ended: false,
    lastKey: Buffer.allocUnsafe(64),
    lastKeyLength: 0,
  };
  const carry = new FrameCarry();
  try {
    for await (const c of chunks) {
      const chunk = Buffer.from(c.buffer, c.byteOffset, c.length);
      let at = 0;
      if (carry.length > 0) {
        at = carry.add(chunk, at, state);
        const frame = carry.frame();
        if (frame === null) continue;
        for (const item of frameItems(frame, state)) yield item;
        carry.reset();
      }
      while (chunk.length - at >= 8) {
        const end = at + 8 + declaredBodyLength(chunk, at, state);
        if (end > chunk.length) break;
        for (const item of frameItems(chunk.subarray(at, end), state)) yield item;
        at = end;
      }
      if (at < chunk.length) carry.add(chunk, at, state);
    }
    if (!state.ended || carry.length > 0) throw bad("stream ended before its end frame");
  } finally {
    carry.release();
  }
}

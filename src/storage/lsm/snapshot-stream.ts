/**
 * The snapshot stream of an engine: a sequence of frames
 *     u32 bodyLength | u32 crc32c(body) | body
 * The first body is the header "CAIRNSNP" | u32 version | u64 seq; then bodies of entries
 * (varint keyLength | key | varint valueLength | value, ~1 MiB per frame); the last body is
 * "CAIRNEND" | u64 entryCount. A stream cut short or damaged is rejected, never half-imported.
 */
import { CairnError } from "../../common/index.ts";
import { crc32c } from "../common/index.ts";
import { ByteSink, readU64 } from "./format.ts";

const HEADER_MAGIC = Buffer.from("CAIRNSNP", "latin1");
const END_MAGIC = Buffer.from("CAIRNEND", "latin1");
const VERSION = 1;
const FRAME_TARGET = 1 << 20;

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
  const header = frameSink(20);
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
 * Bytes received and not yet parsed, as the chunks they came in: a frame is copied out once,
 * when all of it has arrived. (Concatenating the pending bytes with each chunk copied a frame
 * once per chunk: 32 MiB in 4 KiB chunks took seconds, an unterminated frame minutes.)
 */
class PendingBytes {
  readonly #chunks: Buffer[] = [];
  /** Where the unread bytes of the first chunk start. */
  #head = 0;
  length = 0;

  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    this.#chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length));
    this.length += chunk.length;
  }

  /** The u32 at `at` bytes from the start (the caller checked that 4 bytes are there). */
  u32(at: number): number {
    let n = 0;
    for (let i = 3; i >= 0; i--) n = n * 256 + this.#byte(at + i);
    return n;
  }

  #byte(at: number): number {
    let p = this.#head + at;
    for (const c of this.#chunks) {
      if (p < c.length) return c[p] as number;
      p -= c.length;
    }
    throw new RangeError("PendingBytes: read past the end");
  }

  /** Removes the first `n` bytes (the caller checked that they are there), as a new buffer. */
  take(n: number): Buffer {
    const out = Buffer.allocUnsafe(n);
    let filled = 0;
    while (filled < n) {
      const c = this.#chunks[0] as Buffer;
      const m = Math.min(c.length - this.#head, n - filled);
      c.copy(out, filled, this.#head, this.#head + m);
      filled += m;
      this.#head += m;
      if (this.#head === c.length) {
        this.#chunks.shift();
        this.#head = 0;
      }
    }
    this.length -= n;
    return out;
  }
}

/**
 * Parses frames from chunks cut anywhere; throws CAIRN_ERR_SNAPSHOT_INVALID on any damage, and
 * on keys that are not strictly ascending (an exported image lists each live key once, in order:
 * tables built from anything else would answer reads wrong). Each frame is copied once (out of
 * the caller's chunks, which it may reuse), and entries are views of that copy.
 */
export async function* decodeSnapshotStream(
  chunks: AsyncIterable<Uint8Array>,
): AsyncGenerator<SnapshotItem> {
  const pending = new PendingBytes();
  let frames = 0;
  let count = 0;
  let ended = false;
  let lastKey: Buffer | undefined;
  for await (const chunk of chunks) {
    pending.push(chunk);
    for (;;) {
      if (pending.length < 8) break;
      const len = pending.u32(0);
      if (pending.length < 8 + len) break;
      const crc = pending.u32(4);
      const frame = pending.take(8 + len);
      const body = frame.subarray(8);
      if (crc32c(body) !== crc) throw bad(`frame ${frames} checksum mismatch`);
      if (ended) throw bad("data after the end frame");
      if (frames === 0) {
        if (len !== 20 || !body.subarray(0, 8).equals(HEADER_MAGIC)) throw bad("bad header");
        if (body.readUInt32LE(8) !== VERSION) throw bad("unsupported version");
        yield { kind: "header", seq: readU64(body, 12) };
      } else if (len === 16 && body.subarray(0, 8).equals(END_MAGIC)) {
        if (readU64(body, 8) !== count) throw bad("entry count mismatch");
        ended = true;
      } else {
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
          if (lastKey !== undefined && Buffer.compare(key, lastKey) <= 0) {
            throw bad(`entry ${count}: key not above the one before (keys must ascend)`);
          }
          lastKey = key;
          count++;
          yield { kind: "entry", key, value };
        }
      }
      frames++;
    }
  }
  if (!ended || pending.length > 0) throw bad("stream ended before its end frame");
}

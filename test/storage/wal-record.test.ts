/**
 * The WAL record scan that tells a torn tail from corruption: its verdicts, and a bound on its
 * work over a large garbage tail (counted, not timed).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MemoryFileSystem } from "../../src/storage/common/index.ts";
import {
  KIND_ENTRY,
  SCAN_WINDOW_BYTES,
  encodeRecord,
  encodedSize,
  hasValidRecordAfter,
  type ScanWork,
} from "../../src/storage/wal/record.ts";
import { Wal } from "../../src/storage/wal/index.ts";

const MiB = 1024 * 1024;

/** Deterministic pseudo-random bytes (xorshift32). */
function garbage(length: number, seed = 0x9e3779b9): Buffer {
  const out = Buffer.allocUnsafe(length);
  let x = seed >>> 0;
  for (let i = 0; i < length; i += 4) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out.writeUInt32LE(x, i);
  }
  return out;
}

/** Framed entry records with payloads of the given sizes, back to back. */
function records(...payloads: number[]): Buffer {
  const buf = Buffer.alloc(payloads.reduce((sum, n) => sum + encodedSize(n), 0));
  const view = new DataView(buf.buffer, buf.byteOffset, buf.length);
  let at = 0;
  payloads.forEach((n, i) => {
    const payload = new Uint8Array(n).fill(i + 1);
    at = encodeRecord(buf, view, at, KIND_ENTRY, 0, 0, 7, 1, i + 1, payload);
  });
  return buf;
}

function scan(buf: Buffer, from: number): { found: boolean; work: ScanWork } {
  const work: ScanWork = { offsets: 0, crcAttempts: 0, crcBytes: 0 };
  const view = new DataView(buf.buffer, buf.byteOffset, buf.length);
  return { found: hasValidRecordAfter(buf, view, from, work), work };
}

describe("WAL record scan after damage", () => {
  it("bounds its work over a 16 MiB garbage tail", () => {
    const buf = Buffer.concat([records(100, 200), garbage(16 * MiB)]);
    const { found, work } = scan(buf, encodedSize(100) + encodedSize(200));
    assert.equal(found, false);
    // Offsets are examined within the window only, and random bytes almost never pass the header
    // checks, so hardly any checksum is computed. Before the bound a checksum was computed
    // wherever a length and a kind looked plausible: 525 of them here, 3 GB of CRC.
    assert.ok(work.offsets <= SCAN_WINDOW_BYTES, `${work.offsets} offsets examined`);
    assert.ok(work.crcAttempts <= 4, `${work.crcAttempts} checksums computed`);
    assert.ok(work.crcBytes <= MiB, `${work.crcBytes} bytes checksummed`);
  });

  it("finds a valid record after a damaged payload, however large the damaged record", () => {
    const buf = records(10, 12 * MiB, 30);
    const second = encodedSize(10);
    const at = second + 8 + 24 + 5;
    buf.writeUInt8(buf.readUInt8(at) ^ 0xff, at);
    assert.equal(scan(buf, second).found, true);
  });

  it("finds a valid record after a damaged length field", () => {
    const buf = records(10, 300, 30);
    const second = encodedSize(10);
    buf.writeUInt32LE(0xdeadbeef, second);
    assert.equal(scan(buf, second).found, true);
  });

  it("finds nothing after a zero-filled tail", () => {
    const buf = Buffer.concat([records(10), Buffer.alloc(MiB)]);
    const { found, work } = scan(buf, encodedSize(10));
    assert.equal(found, false);
    assert.equal(work.crcAttempts, 0);
  });

  it("cuts a 16 MiB garbage tail off the last segment on open", async () => {
    const fs = new MemoryFileSystem();
    // Not preallocated: the garbage goes right after the last record.
    const wal = await Wal.open("/wal", { fs, preallocate: false });
    wal.append([
      {
        kind: "entries",
        shard: 1,
        entries: [{ index: 1, term: 1, type: 0, data: new Uint8Array(8) }],
      },
    ]);
    await wal.close();
    const path = "/wal/00000000000000000001.wal";
    const size = (await fs.readFile(path)).length;
    const file = await fs.open(path, {});
    const tail = garbage(16 * MiB, 12345);
    await file.write(tail, 0, tail.length, size);
    await file.close();
    const again = await Wal.open("/wal", { fs, preallocate: false });
    assert.deepEqual(again.tornTail, { file: path, offset: size, droppedBytes: 16 * MiB });
    assert.equal(again.lastIndex(1), 1);
    await again.close();
  });
});

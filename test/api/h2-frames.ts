/**
 * Raw HTTP/2 frames for the tests that speak to our HTTP/2 code below its API
 * (h2-connection.test.ts, h2-client.test.ts): building frames and parsing a peer's.
 */

export const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

export interface Frame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

export function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n, 0);
  return b;
}

export function setting(id: number, value: number): Buffer {
  const b = Buffer.alloc(6);
  b.writeUInt16BE(id, 0);
  b.writeUInt32BE(value, 2);
  return b;
}

export function rawFrame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(9);
  header.writeUIntBE(payload.length, 0, 3);
  header[3] = type;
  header[4] = flags;
  header.writeUInt32BE(streamId, 5);
  return Buffer.concat([header, payload]);
}

/** DATA bytes of stream `streamId` among `frames`. */
export function dataBytes(frames: readonly Frame[], streamId: number): number {
  let n = 0;
  for (const f of frames) if (f.type === 0x0 && f.streamId === streamId) n += f.payload.length;
  return n;
}

/** The whole frames at the start of `data`, and the bytes after them (a frame cut short). */
export function parseFrames(data: Buffer): { frames: Frame[]; rest: Buffer } {
  const frames: Frame[] = [];
  let at = 0;
  while (at + 9 <= data.length) {
    const length = data.readUIntBE(at, 3);
    if (at + 9 + length > data.length) break;
    frames.push({
      type: data[at + 3] as number,
      flags: data[at + 4] as number,
      streamId: data.readUInt32BE(at + 5) & 0x7fffffff,
      payload: data.subarray(at + 9, at + 9 + length),
    });
    at += 9 + length;
  }
  return { frames, rest: data.subarray(at) };
}

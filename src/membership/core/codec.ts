/**
 * The wire format of SWIM datagrams, version 1: compact binary, big-endian, bounded size.
 *
 *   datagram  = version:u8 type:u8 totalShards:u32 from:str8 body
 *   str8      = length:u8 utf8-bytes            (1..255 bytes; never empty)
 *   ping      = seq:u32 target:str8 gossip
 *   ping-req  = seq:u32 target:str8 targetAddr:str8 gossip
 *   ack       = seq:u32 gossip
 *   gossip    = count:u8 update*              (message type 6; also the tail of the three above)
 *   push-pull = flags:u8 (1 reply, 2 join, 4 first) count:u8 record*
 *   refuse    = reason:u8 (1 shard-count-mismatch)
 *   update    = kind:u8 (1 alive, 2 suspect, 3 dead, 4 left) id:str8 incarnation:u32 then
 *               alive: rpcAddr:str8 httpAddr:str8 totalShards:u32; suspect, dead: from:str8
 *   record    = state:u8 (1 alive, 2 suspect, 3 dead, 4 left) id:str8 incarnation:u32
 *               rpcAddr:str8 httpAddr:str8 totalShards:u32
 *
 * No message is encoded past MAX_MESSAGE_BYTES, and no datagram past MAX_DATAGRAM_BYTES is
 * decoded. decode() never throws: anything malformed (unknown
 * version, type or kind, truncated, trailing bytes, invalid UTF-8, oversized) is a DecodeFailure
 * the driver counts and drops. So is an address field (`rpcAddr`, `httpAddr`, `targetAddr`) that
 * is not `host:port` with an IP literal or a host name (address.ts, `bad-field`): no member
 * advertises one, and the driver hands these hosts to the resolver and the socket.
 */
import { isMemberAddress } from "./address.ts";
import type { Message, MemberRecord, Update } from "./messages.ts";
import type { MemberMeta, MemberState } from "./types.ts";
import { incarnation, memberId } from "./types.ts";

export const WIRE_VERSION = 1;
/**
 * The largest datagram taken, and sent, sealed or not: it fits one Ethernet frame with IP and
 * UDP headers, and an overlay network's smaller one (VXLAN's 1450): no fragmentation on common
 * paths.
 */
export const MAX_DATAGRAM_BYTES = 1400;
/**
 * Room every message leaves for a seal (src/membership/seal.ts: a 5-byte header, a 12-byte
 * nonce, a 16-byte tag), so that a sealed datagram fits MAX_DATAGRAM_BYTES too.
 */
export const SEAL_ROOM_BYTES = 33;
/**
 * The largest message encoded. Builds before sealed gossip encoded up to MAX_DATAGRAM_BYTES,
 * which the decoder still takes.
 */
export const MAX_MESSAGE_BYTES = MAX_DATAGRAM_BYTES - SEAL_ROOM_BYTES;
/** Longest string field (node id, address) in UTF-8 bytes. */
export const MAX_STRING_BYTES = 255;

const TYPE_CODES = {
  ping: 1,
  "ping-req": 2,
  ack: 3,
  "push-pull": 4,
  refuse: 5,
  gossip: 6,
} as const;
const UPDATE_CODES = { alive: 1, suspect: 2, dead: 3, left: 4 } as const;
const STATE_CODES: Record<MemberState, number> = { alive: 1, suspect: 2, dead: 3, left: 4 };
const STATES: readonly MemberState[] = ["alive", "suspect", "dead", "left"];

export type DecodeFailureReason =
  | "oversized"
  | "truncated"
  | "version"
  | "unknown-type"
  | "unknown-kind"
  | "bad-string"
  | "bad-field"
  | "trailing-bytes";

export interface DecodeFailure {
  readonly ok: false;
  readonly reason: DecodeFailureReason;
}

export type DecodeResult = { readonly ok: true; readonly message: Message } | DecodeFailure;

const encoder = new TextEncoder();
// ignoreBOM: a string field that starts with EF BB BF keeps its U+FEFF. Stripped, it decoded to
// a shorter string (a bare BOM to an empty one) that does not re-encode: a forged update naming
// such a member made every datagram carrying it fail to encode, probes of live members included.
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** UTF-8 length of `s` without encoding it (lone surrogates count as U+FFFD, 3 bytes). */
function utf8Length(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n += 4;
        i += 1;
      } else n += 3;
    } else n += 3;
  }
  return n;
}

/** Encoded size of a string field (length byte included); what the budgets below add up. */
export function stringBytes(s: string): number {
  return 1 + utf8Length(s);
}

/** True when `s` can be a string field: 1..MAX_STRING_BYTES bytes of UTF-8. */
export function isEncodableString(s: string): boolean {
  const n = utf8Length(s);
  return n >= 1 && n <= MAX_STRING_BYTES;
}

export function headerBytes(from: string): number {
  return 6 + stringBytes(from);
}

export function updateBytes(u: Update): number {
  switch (u.kind) {
    case "alive":
      return 5 + stringBytes(u.meta.id) + metaTailBytes(u.meta);
    case "suspect":
    case "dead":
      return 5 + stringBytes(u.id) + stringBytes(u.from);
    case "left":
      return 5 + stringBytes(u.id);
  }
}

export function recordBytes(r: MemberRecord): number {
  return 5 + stringBytes(r.meta.id) + metaTailBytes(r.meta);
}

function metaTailBytes(m: MemberMeta): number {
  return stringBytes(m.rpcAddr) + stringBytes(m.httpAddr) + 4;
}

class EncodeOverflow extends Error {}

/** Encoding is synchronous, so one scratch buffer serves every message. */
const scratch = new Uint8Array(MAX_MESSAGE_BYTES);
const scratchView = new DataView(scratch.buffer);

class Writer {
  readonly #buf = scratch;
  readonly #view = scratchView;
  #pos = 0;

  #room(n: number): void {
    if (this.#pos + n > MAX_MESSAGE_BYTES) throw new EncodeOverflow();
  }
  u8(v: number): void {
    this.#room(1);
    this.#view.setUint8(this.#pos, v);
    this.#pos += 1;
  }
  u32(v: number): void {
    this.#room(4);
    this.#view.setUint32(this.#pos, v);
    this.#pos += 4;
  }
  str(s: string): void {
    const n = utf8Length(s);
    if (n < 1 || n > MAX_STRING_BYTES) {
      throw new RangeError(`string field of ${n} bytes (1..${MAX_STRING_BYTES})`);
    }
    this.u8(n);
    this.#room(n);
    encoder.encodeInto(s, this.#buf.subarray(this.#pos, this.#pos + n));
    this.#pos += n;
  }
  finish(): Uint8Array {
    return this.#buf.slice(0, this.#pos);
  }
}

/**
 * Encodes a message. Throws RangeError when it does not fit MAX_MESSAGE_BYTES or a field is out
 * of range: the core sizes its messages so that never happens, and a throw means a bug.
 */
export function encodeMessage(m: Message): Uint8Array {
  const w = new Writer();
  try {
    w.u8(WIRE_VERSION);
    w.u8(TYPE_CODES[m.type]);
    w.u32(m.totalShards);
    w.str(m.from);
    switch (m.type) {
      case "ping":
        w.u32(m.seq);
        w.str(m.target);
        writeGossip(w, m.gossip);
        break;
      case "ping-req":
        w.u32(m.seq);
        w.str(m.target);
        w.str(m.targetAddr);
        writeGossip(w, m.gossip);
        break;
      case "ack":
        w.u32(m.seq);
        writeGossip(w, m.gossip);
        break;
      case "gossip":
        writeGossip(w, m.gossip);
        break;
      case "push-pull":
        w.u8((m.reply ? 1 : 0) | (m.join ? 2 : 0) | (m.first ? 4 : 0));
        writeCount(w, m.records.length);
        for (const r of m.records) {
          w.u8(STATE_CODES[r.state]);
          w.str(r.meta.id);
          w.u32(r.incarnation);
          writeMetaTail(w, r.meta);
        }
        break;
      case "refuse":
        w.u8(1);
        break;
    }
  } catch (e) {
    if (e instanceof EncodeOverflow) {
      throw new RangeError(`SWIM message exceeds ${MAX_MESSAGE_BYTES} bytes: ${m.type}`);
    }
    throw e;
  }
  return w.finish();
}

function writeCount(w: Writer, n: number): void {
  if (n > 255) throw new RangeError(`more than 255 items in one SWIM message (${n})`);
  w.u8(n);
}

function writeGossip(w: Writer, gossip: readonly Update[]): void {
  writeCount(w, gossip.length);
  for (const u of gossip) {
    w.u8(UPDATE_CODES[u.kind]);
    switch (u.kind) {
      case "alive":
        w.str(u.meta.id);
        w.u32(u.incarnation);
        writeMetaTail(w, u.meta);
        break;
      case "suspect":
      case "dead":
        w.str(u.id);
        w.u32(u.incarnation);
        w.str(u.from);
        break;
      case "left":
        w.str(u.id);
        w.u32(u.incarnation);
        break;
    }
  }
}

function writeMetaTail(w: Writer, m: MemberMeta): void {
  w.str(m.rpcAddr);
  w.str(m.httpAddr);
  w.u32(m.totalShards);
}

class DecodeError extends Error {
  readonly reason: DecodeFailureReason;
  constructor(reason: DecodeFailureReason) {
    super(reason);
    this.reason = reason;
  }
}

class Reader {
  readonly #buf: Uint8Array;
  readonly #view: DataView;
  #pos = 0;

  constructor(buf: Uint8Array) {
    this.#buf = buf;
    this.#view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  #need(n: number): void {
    if (this.#pos + n > this.#buf.length) throw new DecodeError("truncated");
  }
  u8(): number {
    this.#need(1);
    const v = this.#view.getUint8(this.#pos);
    this.#pos += 1;
    return v;
  }
  u32(): number {
    this.#need(4);
    const v = this.#view.getUint32(this.#pos);
    this.#pos += 4;
    return v;
  }
  str(): string {
    const n = this.u8();
    if (n === 0) throw new DecodeError("bad-string");
    this.#need(n);
    const bytes = this.#buf.subarray(this.#pos, this.#pos + n);
    this.#pos += n;
    try {
      return decoder.decode(bytes);
    } catch {
      throw new DecodeError("bad-string");
    }
  }
  end(): void {
    if (this.#pos !== this.#buf.length) throw new DecodeError("trailing-bytes");
  }
}

/** Decodes one datagram; never throws. */
export function decodeMessage(buf: Uint8Array): DecodeResult {
  if (buf.length > MAX_DATAGRAM_BYTES) return { ok: false, reason: "oversized" };
  try {
    const message = readMessage(new Reader(buf));
    return { ok: true, message };
  } catch (e) {
    if (e instanceof DecodeError) return { ok: false, reason: e.reason };
    throw e;
  }
}

function readMessage(r: Reader): Message {
  if (r.u8() !== WIRE_VERSION) throw new DecodeError("version");
  const type = r.u8();
  const totalShards = readTotalShards(r);
  const from = memberId(r.str());
  let m: Message;
  switch (type) {
    case TYPE_CODES.ping: {
      const seq = r.u32();
      const target = memberId(r.str());
      m = { type: "ping", from, totalShards, seq, target, gossip: readGossip(r) };
      break;
    }
    case TYPE_CODES["ping-req"]: {
      const seq = r.u32();
      const target = memberId(r.str());
      const targetAddr = readAddress(r);
      m = { type: "ping-req", from, totalShards, seq, target, targetAddr, gossip: readGossip(r) };
      break;
    }
    case TYPE_CODES.ack: {
      const seq = r.u32();
      m = { type: "ack", from, totalShards, seq, gossip: readGossip(r) };
      break;
    }
    case TYPE_CODES.gossip:
      m = { type: "gossip", from, totalShards, gossip: readGossip(r) };
      break;
    case TYPE_CODES["push-pull"]: {
      const flags = r.u8();
      if (flags > 7) throw new DecodeError("bad-field");
      const count = r.u8();
      const records: MemberRecord[] = [];
      for (let i = 0; i < count; i++) {
        const state = STATES[r.u8() - 1];
        if (state === undefined) throw new DecodeError("unknown-kind");
        const id = memberId(r.str());
        const inc = incarnation(r.u32());
        records.push({ state, incarnation: inc, meta: readMeta(r, id) });
      }
      const reply = (flags & 1) !== 0;
      const join = (flags & 2) !== 0;
      const first = (flags & 4) !== 0;
      m = { type: "push-pull", from, totalShards, reply, join, first, records };
      break;
    }
    case TYPE_CODES.refuse:
      if (r.u8() !== 1) throw new DecodeError("bad-field");
      m = { type: "refuse", from, totalShards, reason: "shard-count-mismatch" };
      break;
    default:
      throw new DecodeError("unknown-type");
  }
  r.end();
  return m;
}

function readTotalShards(r: Reader): number {
  const n = r.u32();
  if (n < 1) throw new DecodeError("bad-field");
  return n;
}

/** A string field that must be a member's address (address.ts). */
function readAddress(r: Reader): string {
  const addr = r.str();
  if (!isMemberAddress(addr)) throw new DecodeError("bad-field");
  return addr;
}

function readMeta(r: Reader, id: MemberMeta["id"]): MemberMeta {
  const rpcAddr = readAddress(r);
  const httpAddr = readAddress(r);
  const totalShards = readTotalShards(r);
  return { id, rpcAddr, httpAddr, totalShards };
}

function readGossip(r: Reader): Update[] {
  const count = r.u8();
  const out: Update[] = [];
  for (let i = 0; i < count; i++) {
    const kind = r.u8();
    const id = memberId(r.str());
    const inc = incarnation(r.u32());
    switch (kind) {
      case UPDATE_CODES.alive:
        out.push({ kind: "alive", incarnation: inc, meta: readMeta(r, id) });
        break;
      case UPDATE_CODES.suspect:
        out.push({ kind: "suspect", id, incarnation: inc, from: memberId(r.str()) });
        break;
      case UPDATE_CODES.dead:
        out.push({ kind: "dead", id, incarnation: inc, from: memberId(r.str()) });
        break;
      case UPDATE_CODES.left:
        out.push({ kind: "left", id, incarnation: inc });
        break;
      default:
        throw new DecodeError("unknown-kind");
    }
  }
  return out;
}

/**
 * HPACK (RFC 7541), the header compression of HTTP/2, as the I/O threads' HTTP/2 server needs it:
 * a full decoder (static and dynamic tables, Huffman-coded strings, table size updates) and an
 * encoder that never indexes (every field a literal "without indexing", strings raw), so the
 * peer's decoder table is never touched and the encoder keeps no state.
 *
 * Header names and values are handled as latin1 strings: HTTP/2 field values are octets, and
 * gRPC's are ASCII (binary metadata travels base64). The decoder flags a block holding a field
 * RFC 9113 §8.2.1 forbids (`malformed`), checking each literal once, when it is decoded (an
 * indexed field carries its entry's flag): the request is malformed, not the block.
 */

/** A header list as decoded, in order: name, value, name, value, … */
export type HeaderList = string[];

export class HpackError extends Error {}

/** RFC 7541 Appendix A. */
const STATIC_TABLE: readonly (readonly [string, string])[] = [
  [":authority", ""],
  [":method", "GET"],
  [":method", "POST"],
  [":path", "/"],
  [":path", "/index.html"],
  [":scheme", "http"],
  [":scheme", "https"],
  [":status", "200"],
  [":status", "204"],
  [":status", "206"],
  [":status", "304"],
  [":status", "400"],
  [":status", "404"],
  [":status", "500"],
  ["accept-charset", ""],
  ["accept-encoding", "gzip, deflate"],
  ["accept-language", ""],
  ["accept-ranges", ""],
  ["accept", ""],
  ["access-control-allow-origin", ""],
  ["age", ""],
  ["allow", ""],
  ["authorization", ""],
  ["cache-control", ""],
  ["content-disposition", ""],
  ["content-encoding", ""],
  ["content-language", ""],
  ["content-length", ""],
  ["content-location", ""],
  ["content-range", ""],
  ["content-type", ""],
  ["cookie", ""],
  ["date", ""],
  ["etag", ""],
  ["expect", ""],
  ["expires", ""],
  ["from", ""],
  ["host", ""],
  ["if-match", ""],
  ["if-modified-since", ""],
  ["if-none-match", ""],
  ["if-range", ""],
  ["if-unmodified-since", ""],
  ["last-modified", ""],
  ["link", ""],
  ["location", ""],
  ["max-forwards", ""],
  ["proxy-authenticate", ""],
  ["proxy-authorization", ""],
  ["range", ""],
  ["referer", ""],
  ["refresh", ""],
  ["retry-after", ""],
  ["server", ""],
  ["set-cookie", ""],
  ["strict-transport-security", ""],
  ["transfer-encoding", ""],
  ["user-agent", ""],
  ["vary", ""],
  ["via", ""],
  ["www-authenticate", ""],
];

/**
 * RFC 7541 Appendix B: the code length of each symbol (0–255, then EOS). The code is canonical
 * (codes assigned in order of length, then symbol), so the lengths define it.
 */
// prettier-ignore
const HUFFMAN_LENGTHS = [
  13,23,28,28,28,28,28,28,28,24,30,28,28,30,28,28,28,28,28,28,28,28,30,28,28,28,28,28,28,28,28,28,
  6,10,10,12,13,6,8,11,10,10,8,11,8,6,6,6,5,5,5,6,6,6,6,6,6,6,7,8,15,6,12,10,
  13,6,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,8,7,8,13,19,13,14,6,
  15,5,6,5,6,5,6,6,6,5,7,7,6,6,6,5,6,7,6,5,5,6,7,7,7,7,7,15,11,14,13,28,
  20,22,20,20,22,22,22,23,22,23,23,23,23,23,24,23,24,24,22,23,24,23,23,23,23,21,22,23,22,23,23,24,
  22,21,20,22,22,23,23,21,23,22,22,24,21,22,23,23,21,21,22,21,23,22,23,23,20,22,22,22,23,22,22,23,
  26,26,20,19,22,23,22,25,26,26,26,27,27,26,24,25,19,21,26,27,27,26,27,24,21,21,26,26,28,27,27,27,
  20,24,20,21,22,21,21,23,22,22,25,25,24,24,26,23,26,27,26,26,27,27,27,27,27,28,27,27,27,27,27,26,
  30,
];
const EOS = 256;
const MAX_CODE_LENGTH = 30;

/**
 * Canonical decoding tables: for each length, the first code of that length, how many codes have
 * it, and where its symbols start in SYMBOLS (the symbols sorted by length, then value).
 */
const FIRST_CODE = new Int32Array(MAX_CODE_LENGTH + 1);
const COUNT = new Int32Array(MAX_CODE_LENGTH + 1);
const OFFSET = new Int32Array(MAX_CODE_LENGTH + 1);
const SYMBOLS = new Uint16Array(HUFFMAN_LENGTHS.length);
{
  const order = HUFFMAN_LENGTHS.map((_, s) => s).sort(
    (a, b) => (HUFFMAN_LENGTHS[a] as number) - (HUFFMAN_LENGTHS[b] as number) || a - b,
  );
  order.forEach((s, i) => (SYMBOLS[i] = s));
  let code = 0;
  let prevLength = 0;
  for (let i = 0; i < order.length; i++) {
    const length = HUFFMAN_LENGTHS[order[i] as number] as number;
    if (i > 0) code = (code + 1) * 2 ** (length - prevLength);
    if (COUNT[length] === 0) {
      FIRST_CODE[length] = code;
      OFFSET[length] = i;
    }
    COUNT[length] = (COUNT[length] as number) + 1;
    prevLength = length;
  }
}

/** Decodes a Huffman-coded string (RFC 7541 §5.2), checking its padding. */
export function huffmanDecode(bytes: Uint8Array, start: number, end: number): string {
  let out = "";
  let code = 0;
  let length = 0;
  for (let i = start; i < end; i++) {
    const byte = bytes[i] as number;
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1);
      length++;
      const index = code - (FIRST_CODE[length] as number);
      if (index >= 0 && index < (COUNT[length] as number)) {
        const symbol = SYMBOLS[(OFFSET[length] as number) + index] as number;
        if (symbol === EOS) throw new HpackError("EOS in a Huffman-coded string");
        out += String.fromCharCode(symbol);
        code = 0;
        length = 0;
      } else if (length >= MAX_CODE_LENGTH) {
        throw new HpackError("an invalid Huffman code");
      }
    }
  }
  // Padding: fewer than 8 bits, all ones (a prefix of EOS).
  if (length > 7 || code !== 2 ** length - 1) throw new HpackError("invalid Huffman padding");
  return out;
}

const NO_BLOCK = new Uint8Array(0);
const MALFORMED_NAME = 1;
const MALFORMED_VALUE = 2;

/** Per RFC 7541 §4.1: a field's size in the dynamic table. */
const ENTRY_OVERHEAD = 32;

/**
 * A connection's HPACK decoder. Its table size is bounded by what this side advertised in
 * SETTINGS_HEADER_TABLE_SIZE (`maxTableSize`); `maxListSize` bounds a decoded header list
 * (names, values and 32 octets a field, as SETTINGS_MAX_HEADER_LIST_SIZE counts).
 */
export class HpackDecoder {
  /** Dynamic table, oldest first (index 62 is the newest: the last element). */
  readonly #names: string[] = [];
  readonly #values: string[] = [];
  /**
   * Per entry, checked once when it is added: MALFORMED_NAME and MALFORMED_VALUE bits (see
   * `malformed`).
   */
  readonly #malformed: number[] = [];
  /**
   * Whether the last block decoded holds a field HTTP/2 calls malformed (RFC 9113 §8.2.1): a
   * name with a character outside lower-case visible ASCII (or a colon past the first), or a
   * value with NUL, CR, LF or leading or trailing whitespace. It is still decoded whole (the
   * table must follow the peer's); the request is malformed, a stream error, not the block.
   */
  malformed = false;
  /**
   * Whether the last block's header list was larger than `maxListSize`. It was still decoded
   * whole, so the table follows the peer's, but the fields past the limit were dropped: the
   * request (or response) is refused, a stream error, not the connection's.
   */
  tooLarge = false;
  /** The size of the last block's header list, as SETTINGS_MAX_HEADER_LIST_SIZE counts it. */
  listSize = 0;
  #size = 0;
  #limit: number;
  readonly #maxTableSize: number;
  readonly #maxListSize: number;

  constructor(maxTableSize = 4096, maxListSize = 64 * 1024) {
    this.#limit = maxTableSize;
    this.#maxTableSize = maxTableSize;
    this.#maxListSize = maxListSize;
  }

  /**
   * Decodes one complete header block; throws HpackError (a connection error) when invalid. The
   * block's size is the caller's to bound (the core refuses one past twice the list limit): a
   * list past the limit is decoded to its end, its fields past the limit not kept (`tooLarge`).
   */
  decode(block: Uint8Array): HeaderList {
    const out: HeaderList = [];
    let listSize = 0;
    let fieldsSeen = false;
    let malformed = false;
    this.#block = block;
    this.#at = 0;
    while (this.#at < block.length) {
      const b = block[this.#at] as number;
      let name: string;
      let value: string;
      if (b & 0x80) {
        // Indexed field.
        const index = this.#int(7);
        name = this.#name(index);
        value = this.#value(index);
        if (index > STATIC_TABLE.length && this.#entryMalformed(index) !== 0) malformed = true;
      } else if ((b & 0xe0) === 0x20) {
        // Dynamic table size update: only before the first field.
        if (fieldsSeen) throw new HpackError("a table size update after a field");
        const size = this.#int(5);
        if (size > this.#maxTableSize) throw new HpackError("a table size above the setting");
        this.#limit = size;
        this.#evict(0);
        continue;
      } else {
        // Literal: with incremental indexing (01), without (0000) or never indexed (0001).
        const indexing = (b & 0xc0) === 0x40;
        const index = this.#int(indexing ? 6 : 4);
        let bad = 0;
        if (index === 0) {
          name = this.#string();
          if (!isFieldName(name)) bad = MALFORMED_NAME;
        } else {
          name = this.#name(index);
          if (index > STATIC_TABLE.length) bad = this.#entryMalformed(index) & MALFORMED_NAME;
        }
        value = this.#string();
        if (!isFieldValue(value)) bad |= MALFORMED_VALUE;
        if (bad !== 0) malformed = true;
        if (indexing) this.#insert(name, value, bad);
      }
      fieldsSeen = true;
      listSize += name.length + value.length + ENTRY_OVERHEAD;
      if (listSize <= this.#maxListSize) out.push(name, value);
    }
    this.#block = NO_BLOCK; // the caller's buffer is not held
    this.malformed = malformed;
    this.tooLarge = listSize > this.#maxListSize;
    this.listSize = listSize;
    return out;
  }

  /** The block being decoded and the position in it (state of decode, not kept between blocks). */
  #block: Uint8Array = NO_BLOCK;
  #at = 0;

  /** An integer with a `prefixBits`-bit prefix (RFC 7541 §5.1). */
  #int(prefixBits: number): number {
    const block = this.#block;
    const mask = (1 << prefixBits) - 1;
    let value = (block[this.#at++] as number) & mask;
    if (value < mask) return value;
    let shift = 0;
    for (;;) {
      if (this.#at >= block.length) throw new HpackError("a truncated integer");
      const b = block[this.#at++] as number;
      value += (b & 0x7f) * 2 ** shift;
      shift += 7;
      if ((b & 0x80) === 0) break;
      if (shift > 28) throw new HpackError("an integer too large");
    }
    return value;
  }

  /** A string literal, raw or Huffman-coded (RFC 7541 §5.2). */
  #string(): string {
    const block = this.#block;
    if (this.#at >= block.length) throw new HpackError("a truncated string");
    const huffman = ((block[this.#at] as number) & 0x80) !== 0;
    const length = this.#int(7);
    const at = this.#at;
    if (at + length > block.length) throw new HpackError("a truncated string");
    this.#at = at + length;
    return huffman ? huffmanDecode(block, at, at + length) : latin1(block, at, at + length);
  }

  #name(index: number): string {
    if (index === 0) throw new HpackError("index 0");
    if (index <= STATIC_TABLE.length) return (STATIC_TABLE[index - 1] as [string, string])[0];
    const i = this.#names.length - (index - STATIC_TABLE.length);
    if (i < 0) throw new HpackError(`index ${index} beyond the table`);
    return this.#names[i] as string;
  }

  #value(index: number): string {
    if (index <= STATIC_TABLE.length) return (STATIC_TABLE[index - 1] as [string, string])[1];
    return this.#values[this.#names.length - (index - STATIC_TABLE.length)] as string;
  }

  #entryMalformed(index: number): number {
    return this.#malformed[this.#names.length - (index - STATIC_TABLE.length)] ?? 0;
  }

  #insert(name: string, value: string, malformed: number): void {
    const size = name.length + value.length + ENTRY_OVERHEAD;
    this.#evict(size);
    // An entry larger than the table empties it and is not added (RFC 7541 §4.4).
    if (size > this.#limit) return;
    this.#names.push(name);
    this.#values.push(value);
    this.#malformed.push(malformed);
    this.#size += size;
  }

  /** Evicts the oldest entries until `incoming` more octets fit. */
  #evict(incoming: number): void {
    let drop = 0;
    while (this.#size + incoming > this.#limit && drop < this.#names.length) {
      this.#size -=
        (this.#names[drop] as string).length +
        (this.#values[drop] as string).length +
        ENTRY_OVERHEAD;
      drop++;
    }
    if (drop > 0) {
      this.#names.splice(0, drop);
      this.#values.splice(0, drop);
      this.#malformed.splice(0, drop);
    }
  }
}

/**
 * Whether `name` may be a field name (RFC 9113 §8.2.1): not empty, no character in 0x00–0x20,
 * 0x41–0x5a (upper case) or 0x7f–0xff, and no colon but a pseudo-header's first character.
 */
export function isFieldName(name: string): boolean {
  if (name.length === 0) return false;
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c <= 0x20 || (c >= 0x41 && c <= 0x5a) || c >= 0x7f || (c === 0x3a && i > 0)) return false;
  }
  return true;
}

/**
 * Whether `value` may be a field value (RFC 9113 §8.2.1): no NUL, CR or LF, and no whitespace
 * (SP, HTAB) at either end.
 */
export function isFieldValue(value: string): boolean {
  const n = value.length;
  if (n === 0) return true;
  const first = value.charCodeAt(0);
  const last = value.charCodeAt(n - 1);
  if (first === 0x20 || first === 0x09 || last === 0x20 || last === 0x09) return false;
  for (let i = 0; i < n; i++) {
    const c = value.charCodeAt(i);
    if (c === 0x00 || c === 0x0a || c === 0x0d) return false;
  }
  return true;
}

function latin1(bytes: Uint8Array, start: number, end: number): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset + start, end - start).toString("latin1");
}

const STATIC_NAME_INDEX = new Map<string, number>();
STATIC_TABLE.forEach(([name], i) => {
  if (!STATIC_NAME_INDEX.has(name)) STATIC_NAME_INDEX.set(name, i + 1);
});

/**
 * Encodes header fields as literals without indexing (RFC 7541 §6.2.2), names from the static
 * table where it has them, strings raw. `:status: 200` is the one indexed field.
 */
export function encodeHeaders(fields: readonly (readonly [string, string])[]): Buffer {
  const parts: number[] = [];
  for (const [name, value] of fields) {
    if (name === ":status" && value === "200") {
      parts.push(0x88);
      continue;
    }
    pushLiteral(parts, name, value, false);
  }
  return Buffer.from(parts);
}

/**
 * A literal field (RFC 7541 §6.2): with incremental indexing (§6.2.1) or without (§6.2.2), its
 * name from the static table where it has it.
 */
function pushLiteral(out: number[], name: string, value: string, indexed: boolean): void {
  const index = STATIC_NAME_INDEX.get(name);
  if (index === undefined) {
    out.push(indexed ? 0x40 : 0x00);
    pushString(out, name);
  } else if (indexed) {
    pushInt(out, 0x40, 6, index);
  } else {
    pushInt(out, 0x00, 4, index);
  }
  pushString(out, value);
}

function pushInt(out: number[], flags: number, prefixBits: number, value: number): void {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out.push(flags | value);
    return;
  }
  out.push(flags | max);
  let rest = value - max;
  while (rest >= 0x80) {
    out.push((rest % 0x80) | 0x80);
    rest = Math.floor(rest / 0x80);
  }
  out.push(rest);
}

function pushString(out: number[], s: string): void {
  pushInt(out, 0x00, 7, s.length);
  for (let i = 0; i < s.length; i++) out.push(s.charCodeAt(i) & 0xff);
}

/**
 * The fields a server's responses repeat, which HpackEncoder indexes: the headers of every
 * response with a message and the trailers of a plain OK (grpc-wire.ts RESPONSE_FIELDS,
 * statusFields), and the `cairn-served-by` trailer of a Put, Get or Delete answered OK, whatever
 * its value (a node id: a cluster has few; src/api/wire.ts). Every other field is sent as a
 * literal without indexing.
 */
const INDEXED_FIELDS: readonly (readonly [string, string])[] = [
  ["content-type", "application/grpc+proto"],
  ["grpc-accept-encoding", "identity,deflate,gzip"],
  ["grpc-status", "0"],
  ["grpc-message", "OK"],
];
const INDEXED_NAMES: ReadonlySet<string> = new Set(["cairn-served-by"]);

/** The table size this encoder uses at most (the protocol's default). */
const ENCODER_MAX_TABLE = 4096;

/**
 * A connection's HPACK encoder, as nghttp2's indexes: the first block that carries one of
 * INDEXED_FIELDS (or a field named in INDEXED_NAMES) inserts it into the peer's dynamic table (a literal with incremental indexing),
 * later ones reference it (one byte). It follows the peer's SETTINGS_HEADER_TABLE_SIZE
 * (`setPeerTableSize`): a lower size evicts entries here at once and is signalled at the start
 * of the next header block sent (`takeSizeUpdate`, which the connection prepends to whichever
 * block it frames next).
 *
 * Its blocks must reach the wire in the order they were encoded (a block that references an
 * entry after the block that inserted it): the caller encodes with it only a block it frames at
 * once; a block that may wait (trailers behind DATA that waits for window) uses encodeHeaders,
 * which never touches the dynamic table.
 */
export class HpackEncoder {
  /** The indexed fields in the peer's table, oldest first. */
  readonly #entries: (readonly [string, string])[] = [];
  #size = 0;
  #limit = ENCODER_MAX_TABLE;
  /** A size change not yet signalled: the smallest limit since the last signal, and the last. */
  #updateMin = -1;
  #updateFinal = -1;
  /** Bumped whenever the table changes: `cached` blocks of an older generation are stale. */
  #generation = 0;
  readonly #cache: { generation: number; block: Buffer }[] = [];

  /** The peer's SETTINGS_HEADER_TABLE_SIZE. */
  setPeerTableSize(size: number): void {
    const limit = Math.min(ENCODER_MAX_TABLE, size);
    if (limit === this.#limit) return;
    this.#updateMin = this.#updateMin < 0 ? limit : Math.min(this.#updateMin, limit);
    this.#updateFinal = limit;
    this.#limit = limit;
    this.#evict(0);
    this.#generation++;
  }

  /** The size update(s) the next header block must start with, or null (then taken). */
  takeSizeUpdate(): Buffer | null {
    if (this.#updateFinal < 0) return null;
    const out: number[] = [];
    pushInt(out, 0x20, 5, this.#updateMin);
    if (this.#updateFinal !== this.#updateMin) pushInt(out, 0x20, 5, this.#updateFinal);
    this.#updateMin = this.#updateFinal = -1;
    return Buffer.from(out);
  }

  /**
   * `fields` encoded, cached in `slot` (a small number the caller gives each constant list)
   * until the table changes: after a connection's first response its blocks cost nothing.
   */
  cached(slot: number, fields: readonly (readonly [string, string])[]): Buffer {
    const hit = this.#cache[slot];
    if (hit !== undefined && hit.generation === this.#generation) return hit.block;
    const generation = this.#generation;
    const block = this.encode(fields);
    // A block that inserted entries must not be sent twice: cached only when it changed nothing.
    if (generation === this.#generation) this.#cache[slot] = { generation, block };
    return block;
  }

  /** Encodes `fields`, indexing those of INDEXED_FIELDS and INDEXED_NAMES (see the class). */
  encode(fields: readonly (readonly [string, string])[]): Buffer {
    const parts: number[] = [];
    for (const [name, value] of fields) {
      if (name === ":status" && value === "200") {
        parts.push(0x88);
        continue;
      }
      if (isIndexed(name, value)) {
        const at = this.#lastIndexOf(name, value);
        if (at >= 0) {
          pushInt(parts, 0x80, 7, STATIC_TABLE.length + this.#entries.length - at);
          continue;
        }
        const size = name.length + value.length + ENTRY_OVERHEAD;
        if (size <= this.#limit) {
          pushLiteral(parts, name, value, true);
          this.#evict(size);
          this.#entries.push([name, value]);
          this.#size += size;
          this.#generation++;
          continue;
        }
      }
      pushLiteral(parts, name, value, false);
    }
    return Buffer.from(parts);
  }

  /** The position of (name, value) in #entries (the newest when twice), or -1. */
  #lastIndexOf(name: string, value: string): number {
    for (let i = this.#entries.length - 1; i >= 0; i--) {
      const e = this.#entries[i] as readonly [string, string];
      if (e[0] === name && e[1] === value) return i;
    }
    return -1;
  }

  /** Evicts the oldest entries until `incoming` more octets fit (as the peer's decoder does). */
  #evict(incoming: number): void {
    while (this.#entries.length > 0 && this.#size + incoming > this.#limit) {
      const [name, value] = this.#entries.shift() as readonly [string, string];
      this.#size -= name.length + value.length + ENTRY_OVERHEAD;
    }
  }
}

/** Whether HpackEncoder indexes (name, value): INDEXED_FIELDS, INDEXED_NAMES. */
function isIndexed(name: string, value: string): boolean {
  if (INDEXED_NAMES.has(name)) return true;
  for (const f of INDEXED_FIELDS) if (f[0] === name && f[1] === value) return true;
  return false;
}

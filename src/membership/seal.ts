/**
 * Sealed gossip (`cluster.gossip_key_file`): SWIM's datagrams encrypted and authenticated with a
 * key every member holds (AES-256-GCM), so that a host that can reach the UDP port can neither
 * read the gossip nor make it believe anything (a member dead, a made-up member alive). Without
 * it, anything a datagram says is believed (docs/membership.md, "Bounds", says what it can make a
 * node keep). The datagram codec (core/codec.ts) is unchanged: a sealed datagram wraps one of its
 * datagrams.
 *
 *   sealed = 0xC1 keyId:4 nonce:12 ciphertext tag:16       (the first five bytes authenticated too)
 *
 * keyId names the key that sealed it (the first 4 bytes of the key's SHA-256: common/gossip-keys.ts),
 * so a receiver tries one key, whatever the number it lists. The nonce starts at a random 96-bit
 * number in each process and counts up by one a datagram: two datagrams under one key share a
 * nonce only if two processes' ranges meet in 2^96, where a random nonce a datagram (memberlist's)
 * would repeat, by the birthday bound, after about 2^48 and is held to 2^32 a key by NIST.
 * The first byte is never a plain datagram's (its version, 1), so a node without a key counts a
 * sealed datagram as such (`no-key`) rather than as garbage.
 *
 * `cluster.gossip_plaintext` turns the keys on or off in a running cluster, one rolling restart a
 * step: `send` (sends plain datagrams, takes both), `accept` (seals, takes both), `refuse` (the
 * default: seals, drops plain ones). A replayed sealed datagram is taken again: SWIM's
 * incarnation numbers make old news stale, as in memberlist, and the core remembers the last
 * incarnation of members it forgot (core/swim.ts), so an old "alive" does not bring one back.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { GOSSIP_KEY_ID_BYTES, type GossipKey, type GossipKeys } from "../common/gossip-keys.ts";
import { MAX_DATAGRAM_BYTES, SEAL_ROOM_BYTES } from "./core/index.ts";

/** The first byte of a sealed datagram. */
export const SEALED_VERSION = 0xc1;
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const HEADER_BYTES = 1 + GOSSIP_KEY_ID_BYTES;
/** Bytes a seal adds to a datagram: the room every message leaves for it (core/codec.ts). */
export const SEAL_OVERHEAD = HEADER_BYTES + NONCE_BYTES + TAG_BYTES;
if (SEAL_OVERHEAD !== SEAL_ROOM_BYTES) throw new Error("a seal must fit SEAL_ROOM_BYTES");

/** `cluster.gossip_plaintext`: what a node with gossip keys does with plain datagrams. */
export type GossipPlaintext = "refuse" | "accept" | "send";

/**
 * Why a datagram was dropped before the codec saw it: `no-key` (sealed, and this node has no
 * key), `unknown-key` (sealed with a key this node does not list), `bad-seal` (does not open:
 * forged, altered or cut short), `unsealed` (plain, and this node refuses plain datagrams),
 * `oversized` (longer than any sealed datagram).
 */
export type SealFailureReason = "no-key" | "unknown-key" | "bad-seal" | "unsealed" | "oversized";

export type UnsealResult =
  | { readonly ok: true; readonly bytes: Uint8Array }
  | { readonly ok: false; readonly reason: SealFailureReason };

/** True when `datagram` is sealed (its first byte), whatever this node holds. */
export function isSealed(datagram: Uint8Array): boolean {
  return datagram[0] === SEALED_VERSION;
}

/** Seals with the first key and opens with any; the keys are replaced as the file changes. */
export class GossipSeal {
  readonly plaintext: GossipPlaintext;
  #keys: GossipKeys;
  /** The next nonce: a random start, counted up (nextNonce). */
  readonly #nonce = randomBytes(NONCE_BYTES);

  constructor(keys: GossipKeys, plaintext: GossipPlaintext = "refuse") {
    this.#keys = keys;
    this.plaintext = plaintext;
  }

  /** This datagram's nonce; the counter moves on by one (big-endian, wrapping at 2^96). */
  #nextNonce(): Buffer {
    const nonce = Buffer.from(this.#nonce);
    for (let i = NONCE_BYTES - 1; i >= 0; i--) {
      const b = ((this.#nonce[i] ?? 0) + 1) & 0xff;
      this.#nonce[i] = b;
      if (b !== 0) break;
    }
    return nonce;
  }

  /** The keys from now on (a reloaded file). */
  setKeys(keys: GossipKeys): void {
    this.#keys = keys;
  }

  /** How many keys this node opens with. */
  get keyCount(): number {
    return this.#keys.length;
  }

  /** What goes on the wire for a plain datagram: sealed, unless `plaintext` is `send`. */
  wrap(plain: Uint8Array): Uint8Array {
    return this.plaintext === "send" ? plain : seal(this.#keys[0], plain, this.#nextNonce());
  }

  /** The plain datagram a received one holds, or why it is dropped. */
  unwrap(datagram: Uint8Array): UnsealResult {
    if (!isSealed(datagram)) {
      return this.plaintext === "refuse"
        ? { ok: false, reason: "unsealed" }
        : { ok: true, bytes: datagram };
    }
    // A message of MAX_MESSAGE_BYTES sealed is the largest datagram taken.
    if (datagram.length > MAX_DATAGRAM_BYTES) return { ok: false, reason: "oversized" };
    if (datagram.length < SEAL_OVERHEAD) return { ok: false, reason: "bad-seal" };
    const id = datagram.subarray(1, HEADER_BYTES);
    const key = this.#keys.find((k) => k.id.equals(id));
    if (key === undefined) return { ok: false, reason: "unknown-key" };
    const bytes = open(key, datagram);
    return bytes === null ? { ok: false, reason: "bad-seal" } : { ok: true, bytes };
  }
}

/** `plain` sealed under `key` with `nonce` (12 bytes, never used before under this key). */
export function seal(key: GossipKey, plain: Uint8Array, nonce: Buffer): Uint8Array {
  const out = Buffer.allocUnsafe(SEAL_OVERHEAD + plain.length);
  out[0] = SEALED_VERSION;
  key.id.copy(out, 1);
  nonce.copy(out, HEADER_BYTES);
  const cipher = createCipheriv("aes-256-gcm", key.key, nonce);
  cipher.setAAD(out.subarray(0, HEADER_BYTES));
  let at = HEADER_BYTES + NONCE_BYTES;
  at += cipher.update(plain).copy(out, at);
  at += cipher.final().copy(out, at);
  cipher.getAuthTag().copy(out, at);
  return out;
}

/** The plain datagram `sealed` holds, or null when it does not open under `key`. */
function open(key: GossipKey, sealed: Uint8Array): Uint8Array | null {
  const nonce = sealed.subarray(HEADER_BYTES, HEADER_BYTES + NONCE_BYTES);
  const body = sealed.subarray(HEADER_BYTES + NONCE_BYTES, sealed.length - TAG_BYTES);
  const decipher = createDecipheriv("aes-256-gcm", key.key, nonce, { authTagLength: TAG_BYTES });
  decipher.setAAD(sealed.subarray(0, HEADER_BYTES));
  decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  try {
    const head = decipher.update(body);
    const tail = decipher.final();
    return tail.length === 0 ? head : Buffer.concat([head, tail]);
  } catch {
    return null;
  }
}

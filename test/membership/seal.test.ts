/**
 * Sealed gossip (src/membership/seal.ts) and its key file (src/common/gossip-keys.ts): what opens,
 * what is dropped and why, rotation by a second key, the three `cluster.gossip_plaintext` modes,
 * and the key file's refusals (which never quote a key).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import {
  GOSSIP_KEY_BYTES,
  GossipKeyFileError,
  GossipKeyFileWatch,
  type GossipKeys,
  MAX_GOSSIP_KEYS,
  parseGossipKeys,
  readGossipKeyFile,
  stampGossipKeyFile,
} from "../../src/common/gossip-keys.ts";
import {
  encodeMessage,
  MAX_DATAGRAM_BYTES,
  MAX_MESSAGE_BYTES,
  memberId,
} from "../../src/membership/core/index.ts";
import { GossipSeal, SEAL_OVERHEAD, seal, SEALED_VERSION } from "../../src/membership/seal.ts";

const newKey = (): string => randomBytes(GOSSIP_KEY_BYTES).toString("base64");
const keysOf = (...lines: string[]): GossipKeys => parseGossipKeys("test", lines.join("\n"));

const A = newKey();
const B = newKey();
const plain = encodeMessage({
  type: "gossip",
  from: memberId("sender-of-this-datagram"),
  totalShards: 16,
  gossip: [],
});

describe("the gossip key file", () => {
  it("lists keys in order, skipping blank lines and comments", () => {
    const keys = parseGossipKeys("f", `# a comment\n\n  ${A}  \r\n# another\n${B}\n`);
    assert.equal(keys.length, 2);
    assert.equal(keys[0].key.toString("base64"), A);
    assert.equal(keys[1]?.key.toString("base64"), B);
  });

  it("refuses what is not a list of keys, naming the line and never the key", () => {
    const short = randomBytes(16).toString("base64");
    const cases: [string, RegExp][] = [
      ["", /lists no key/],
      ["# only a comment\n\n", /lists no key/],
      [`${A}\nnot-a-key\n`, /line 2 is not a key: each key is 32 bytes in base64/],
      [short, /line 1 is not a key/],
      [`${A.slice(0, -1)}`, /line 1 is not a key/], // cut short: not canonical base64
      [`${A} ${B}`, /line 1 is not a key/],
      [`${A}\n${B}\n${A}`, /line 3 repeats a key listed before it/],
      [
        Array.from({ length: MAX_GOSSIP_KEYS + 1 }, newKey).join("\n"),
        new RegExp(`lists more than ${MAX_GOSSIP_KEYS} keys`),
      ],
    ];
    for (const [text, reason] of cases) {
      assert.throws(
        () => parseGossipKeys("/etc/cairn/gossip.key", text),
        (err: unknown) => {
          assert.ok(err instanceof GossipKeyFileError, String(err));
          assert.equal(err.code, "CAIRN_ERR_GOSSIP_KEY_FILE");
          assert.match(err.message, /^cluster\.gossip_key_file \(\/etc\/cairn\/gossip\.key\): /);
          assert.match(err.reason, reason);
          for (const k of [A, B, short]) assert.ok(!err.message.includes(k), "a key quoted");
          return true;
        },
        JSON.stringify(text),
      );
    }
  });

  it("a file that cannot be read, or is too large, is refused", () => {
    const dir = mkdtempSync(join(tmpdir(), "cairn-gossip-keys-"));
    after(() => rmSync(dir, { recursive: true, force: true }));
    assert.throws(() => readGossipKeyFile(join(dir, "missing")), /cannot be read: ENOENT/);
    const big = join(dir, "big");
    writeFileSync(big, `${"#".repeat(70_000)}\n${A}\n`);
    assert.throws(() => readGossipKeyFile(big), /big\): is larger than 64 KiB/);
    // Read whole, a device with no end was read until the memory ran out; it is no regular
    // file, which a file read again when it changes must be.
    assert.throws(
      () => readGossipKeyFile("/dev/zero"),
      (err: unknown) => {
        assert.ok(err instanceof GossipKeyFileError, String(err));
        assert.match(
          err.message,
          /^cluster\.gossip_key_file \(\/dev\/zero\): is not a regular file \(a character device\)/,
        );
        return true;
      },
    );
    const good = join(dir, "good");
    writeFileSync(good, `${A}\n`);
    assert.equal(readGossipKeyFile(good)[0].key.toString("base64"), A);
  });
});

describe("the gossip key file watch", () => {
  it("hands on a changed file that reads well, and reports one that does not", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cairn-gossip-watch-"));
    const file = join(dir, "gossip.key");
    writeFileSync(file, `${A}\n`);
    const events: string[] = [];
    let wake: () => void = () => {};
    const next = (): Promise<void> => new Promise((resolve) => (wake = resolve));
    const watch = new GossipKeyFileWatch(
      file,
      stampGossipKeyFile(file),
      (keys) => {
        events.push(`keys ${keys.map((k) => k.key.toString("base64")).join(",")}`);
        wake();
      },
      (err) => {
        events.push(`error ${err.reason}`);
        wake();
      },
      10,
    );
    // Replaced whole by a rename, so that no look finds it half written.
    const replace = (text: string): void => {
      writeFileSync(`${file}.new`, text);
      renameSync(`${file}.new`, file);
    };
    try {
      let seen = next();
      replace("not a key\n");
      await seen;
      seen = next();
      replace(`${A}\n${B}\n`);
      await seen;
      assert.equal(events.length, 2, events.join("; "));
      assert.match(events[0] ?? "", /^error line 1 is not a key/);
      assert.equal(events[1], `keys ${A},${B}`);
      // A path that becomes a device with no end, or a file too large, is refused as any bad
      // file is (the keys before kept), not read until the memory runs out; one that becomes a
      // FIFO, not opened (which waited for a writer, the thread held meanwhile).
      seen = next();
      symlinkSync("/dev/zero", `${file}.new`);
      renameSync(`${file}.new`, file);
      await seen;
      seen = next();
      execFileSync("mkfifo", [`${file}.new`]);
      renameSync(`${file}.new`, file);
      await seen;
      seen = next();
      replace(`${A}\n${"#".repeat(70_000)}\n`);
      await seen;
      seen = next();
      replace(`${B}\n`);
      await seen;
      assert.equal(events.length, 6, events.join("; "));
      assert.match(events[2] ?? "", /^error is not a regular file \(a character device\)/);
      assert.match(events[3] ?? "", /^error is not a regular file \(a FIFO\)/);
      assert.match(events[4] ?? "", /^error is larger than 64 KiB/);
      assert.equal(events[5], `keys ${B}`);
    } finally {
      watch.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("a sealed datagram", () => {
  it("opens under the key that sealed it, and hides what it carries", () => {
    const s = new GossipSeal(keysOf(A));
    const sealed = s.wrap(plain);
    assert.equal(sealed[0], SEALED_VERSION);
    assert.equal(sealed.length, plain.length + SEAL_OVERHEAD);
    assert.ok(
      !Buffer.from(sealed).includes(Buffer.from("sender-of-this")),
      "the sender's id in clear",
    );
    const opened = s.unwrap(sealed);
    assert.ok(opened.ok);
    assert.deepEqual(Buffer.from(opened.bytes), Buffer.from(plain));
    // A new nonce each time, counted up from a random start: the same datagram never seals to
    // the same bytes.
    const next = s.wrap(plain);
    assert.notDeepEqual(Buffer.from(next), Buffer.from(sealed));
    const nonceOf = (d: Uint8Array): bigint =>
      BigInt(`0x${Buffer.from(d.subarray(5, 17)).toString("hex")}`);
    assert.equal(nonceOf(next), (nonceOf(sealed) + 1n) % 2n ** 96n);
    assert.notEqual(nonceOf(new GossipSeal(keysOf(A)).wrap(plain)), nonceOf(next) + 1n);
  });

  it("does not open once any byte is altered, or cut short", () => {
    const s = new GossipSeal(keysOf(A));
    const sealed = s.wrap(plain);
    for (let i = 0; i < sealed.length; i++) {
      const bad = Uint8Array.from(sealed);
      bad[i] = (bad[i] ?? 0) ^ 0x01;
      const r = s.unwrap(bad);
      assert.equal(r.ok, false, `byte ${i} altered`);
      // The first byte marks a sealed datagram; the next four name the key.
      const want = i === 0 ? "unsealed" : i <= 4 ? "unknown-key" : "bad-seal";
      assert.equal(r.ok ? null : r.reason, want, `byte ${i} altered`);
    }
    for (const cut of [1, SEAL_OVERHEAD - 1, sealed.length - 1]) {
      const r = s.unwrap(sealed.subarray(0, cut));
      assert.equal(r.ok ? null : r.reason, "bad-seal", `cut at ${cut}`);
    }
  });

  it("another key does not open it; a second key listed does (rotation)", () => {
    const a = new GossipSeal(keysOf(A));
    const b = new GossipSeal(keysOf(B));
    const r = b.unwrap(a.wrap(plain));
    assert.equal(r.ok ? null : r.reason, "unknown-key");
    // A forgery naming A's id but sealed under another key.
    const forged = seal({ id: keysOf(A)[0].id, key: keysOf(B)[0].key }, plain, randomBytes(12));
    const f = a.unwrap(forged);
    assert.equal(f.ok ? null : f.reason, "bad-seal");

    // Rotation: B listed second opens B's; B moved first seals with B, A still opens.
    const both = new GossipSeal(keysOf(A, B));
    assert.ok(both.unwrap(b.wrap(plain)).ok);
    assert.ok(a.unwrap(both.wrap(plain)).ok, "A, listed first, seals");
    both.setKeys(keysOf(B, A));
    assert.ok(b.unwrap(both.wrap(plain)).ok, "B, now first, seals");
    assert.ok(both.unwrap(a.wrap(plain)).ok, "A still opens");
    both.setKeys(keysOf(B));
    const gone = both.unwrap(a.wrap(plain));
    assert.equal(gone.ok ? null : gone.reason, "unknown-key");
  });

  it("the largest message sealed is the largest datagram; anything longer is dropped", () => {
    const s = new GossipSeal(keysOf(A));
    const biggest = s.wrap(new Uint8Array(MAX_MESSAGE_BYTES));
    assert.equal(biggest.length, MAX_DATAGRAM_BYTES);
    assert.ok(s.unwrap(biggest).ok);
    const over = s.wrap(new Uint8Array(MAX_MESSAGE_BYTES + 1));
    const r = s.unwrap(over);
    assert.equal(r.ok ? null : r.reason, "oversized");
  });

  it("cluster.gossip_plaintext: refuse drops cleartext, accept takes it, send sends it", () => {
    const refuse = new GossipSeal(keysOf(A), "refuse");
    const accept = new GossipSeal(keysOf(A), "accept");
    const send = new GossipSeal(keysOf(A), "send");
    const r = refuse.unwrap(plain);
    assert.equal(r.ok ? null : r.reason, "unsealed");
    const taken = accept.unwrap(plain);
    assert.ok(taken.ok);
    assert.deepEqual(Buffer.from(taken.bytes), Buffer.from(plain));
    assert.deepEqual(Buffer.from(send.wrap(plain)), Buffer.from(plain), "send: cleartext out");
    assert.ok(send.unwrap(plain).ok);
    assert.ok(send.unwrap(accept.wrap(plain)).ok, "send opens sealed datagrams too");
    assert.equal(accept.wrap(plain)[0], SEALED_VERSION, "accept seals");
    assert.equal(refuse.wrap(plain)[0], SEALED_VERSION, "refuse seals");
  });
});

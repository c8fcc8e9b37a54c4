/**
 * Sealed gossip over real UDP on 127.0.0.1 (src/membership/seal.ts): a forged datagram that
 * declares a live member dead is believed in cleartext and dropped once the members hold gossip
 * keys; members on different keys do not form a cluster, and do once each lists the other's key
 * (a rotation); a dropped datagram is counted by reason and logged once per sender.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import dgram from "node:dgram";
import { describe, it } from "node:test";
import { type GossipKeys, parseGossipKeys } from "../../src/common/gossip-keys.ts";
import {
  decodeMessage,
  encodeMessage,
  memberId,
  type Message,
} from "../../src/membership/core/index.ts";
import {
  GossipSeal,
  Membership,
  type MembershipEvent,
  type MembershipLogger,
  type MembershipOptions,
} from "../../src/membership/index.ts";
import { withTimeout } from "../support/timeout.ts";

const keysOf = (...keys: Buffer[]): GossipKeys =>
  parseGossipKeys("test", keys.map((k) => k.toString("base64")).join("\n"));
const A = randomBytes(32);
const B = randomBytes(32);

function member(id: string, extra: Partial<MembershipOptions> = {}): Promise<Membership> {
  return Membership.start({
    nodeId: id,
    bindAddr: "127.0.0.1:0",
    advertiseHttpAddr: "127.0.0.1:8080",
    totalShards: 16,
    seeds: [],
    tickMs: 20,
    joinBackoffMs: { initial: 20, max: 100 },
    ...extra,
  });
}

/** Polls `check` every 20 ms until it holds, for at most `ms`. */
async function until(what: string, check: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A raw UDP socket that sends to `m` and collects what comes back. */
function rawSocket(m: Membership): {
  send: (bytes: Uint8Array) => Promise<void>;
  received: Buffer[];
  close: () => void;
} {
  const raw = dgram.createSocket("udp4");
  const received: Buffer[] = [];
  raw.on("message", (msg: Buffer) => received.push(msg));
  const port = Number(m.boundAddr.split(":")[1]);
  return {
    received,
    send: (bytes) =>
      new Promise((resolve, reject) =>
        raw.send(bytes, port, "127.0.0.1", (err) => (err ? reject(err) : resolve())),
      ),
    close: () => raw.close(),
  };
}

/** Gossip from a made-up sender that m2 is dead, at the incarnation m1 knows it by. */
function forgedDeath(m1: Membership): Message {
  const m2 = m1.members().find((m) => m.meta.id === "m2");
  assert.ok(m2 !== undefined, "m1 knows m2");
  return {
    type: "gossip",
    from: memberId("intruder"),
    totalShards: 16,
    gossip: [
      { kind: "dead", id: memberId("m2"), incarnation: m2.incarnation, from: memberId("intruder") },
    ],
  };
}

/** m1 and m2 (joined through m1), each with `seal` when given; events of m1 collected. */
async function pair(seal?: () => GossipSeal): Promise<{
  m1: Membership;
  m2: Membership;
  events: MembershipEvent[];
}> {
  const m1 = await member("m1", seal === undefined ? {} : { seal: seal() });
  const m2 = await member("m2", {
    seeds: [m1.boundAddr],
    ...(seal === undefined ? {} : { seal: seal() }),
  });
  await withTimeout(m2.join(), 10_000, "m2 joins m1");
  await until("m1 sees m2", () => m1.members().some((m) => m.meta.id === "m2"));
  const events: MembershipEvent[] = [];
  m1.onEvent((e) => events.push(e));
  return { m1, m2, events };
}

describe("sealed gossip over UDP", () => {
  it("in cleartext a forged datagram makes a member believe a live one dead", async () => {
    const { m1, m2, events } = await pair();
    const raw = rawSocket(m1);
    try {
      await raw.send(encodeMessage(forgedDeath(m1)));
      await until("m1 believes the forgery", () =>
        events.some((e) => e.kind === "dead" && e.member.meta.id === "m2"),
      );
    } finally {
      raw.close();
      await m2.close();
      await m1.close();
    }
  });

  it("with gossip keys the same forgery, and one sealed under another key, are dropped", async () => {
    const warnings: { message: string; fields: Record<string, unknown> | undefined }[] = [];
    const logger: MembershipLogger = {
      info: () => {},
      warn: (message, fields) => warnings.push({ message, fields }),
      error: () => {},
    };
    const keys = keysOf(A);
    const m1 = await member("m1", { seal: new GossipSeal(keys), logger });
    const m2 = await member("m2", { seeds: [m1.boundAddr], seal: new GossipSeal(keys) });
    const raw = rawSocket(m1);
    try {
      await withTimeout(m2.join(), 10_000, "m2 joins m1");
      await until("m1 sees m2", () => m1.members().some((m) => m.meta.id === "m2"));
      const events: MembershipEvent[] = [];
      m1.onEvent((e) => events.push(e));

      const forged = encodeMessage(forgedDeath(m1));
      await raw.send(forged);
      await raw.send(forged);
      await raw.send(new GossipSeal(keysOf(B)).wrap(forged));

      // A valid sealed probe from the same socket: its ack (sealed) proves the three went first.
      const ping: Message = {
        type: "ping",
        from: memberId("probe"),
        totalShards: 16,
        seq: 4242,
        target: memberId("m1"),
        gossip: [],
      };
      const mine = new GossipSeal(keys);
      await raw.send(mine.wrap(encodeMessage(ping)));
      await until("the ack of a sealed ping", () =>
        raw.received.some((msg) => {
          const opened = mine.unwrap(msg);
          if (!opened.ok) return false;
          const d = decodeMessage(opened.bytes);
          return d.ok && d.message.type === "ack" && d.message.seq === 4242;
        }),
      );
      assert.ok(
        raw.received.every((msg) => !decodeMessage(msg).ok),
        "m1 sent nothing in cleartext",
      );

      const dropped = m1.stats().dropped;
      assert.equal(dropped.unsealed, 2, JSON.stringify(dropped));
      assert.equal(dropped["unknown-key"], 1, JSON.stringify(dropped));
      assert.deepEqual(
        events.filter((e) => e.member.meta.id === "m2"),
        [],
        "no news of m2",
      );
      assert.equal(m1.members().find((m) => m.meta.id === "m2")?.state, "alive");
      // One line per reason and sender, however many datagrams.
      const lines = warnings.filter((w) => w.message.startsWith("gossip datagram dropped"));
      assert.deepEqual(
        lines.map((w) => w.fields?.["reason"]),
        ["unsealed", "unknown-key"],
        JSON.stringify(lines),
      );
    } finally {
      raw.close();
      await m2.close();
      await m1.close();
    }
  });

  it("the rollout's neighbouring steps form a cluster; a step skipped does not", async () => {
    const keys = keysOf(A);
    type Step = "none" | "send" | "accept" | "refuse";
    const sealOf = (step: Step): Partial<MembershipOptions> =>
      step === "none" ? {} : { seal: new GossipSeal(keys, step) };
    const forms = async (a: Step, b: Step): Promise<boolean> => {
      const m1 = await member("m1", sealOf(a));
      const m2 = await member("m2", { seeds: [m1.boundAddr], ...sealOf(b) });
      try {
        const joined = m2.join().then(() => true);
        const refused = until("m1 drops m2's datagrams", () =>
          Object.values(m1.stats().dropped).some((n) => (n ?? 0) >= 2),
        ).then(() => false);
        return await withTimeout(Promise.race([joined, refused]), 10_000, `${a} and ${b}`);
      } finally {
        await m2.close();
        await m1.close();
      }
    };
    // Turning keys on: no keys → send → accept → refuse, a rolling restart a step.
    assert.equal(await forms("none", "send"), true, "none and send");
    assert.equal(await forms("send", "accept"), true, "send and accept");
    assert.equal(await forms("accept", "refuse"), true, "accept and refuse");
    assert.equal(await forms("refuse", "refuse"), true, "refuse and refuse");
    // A step skipped: the keyless member cannot open what accept seals; refuse drops send's.
    assert.equal(await forms("none", "accept"), false, "none and accept");
    assert.equal(await forms("refuse", "send"), false, "refuse and send");
  });

  it("members on different keys do not form; listing each other's key second lets them", async () => {
    const s1 = new GossipSeal(keysOf(A));
    const s2 = new GossipSeal(keysOf(B));
    const m1 = await member("m1", { seal: s1 });
    const m2 = await member("m2", { seeds: [m1.boundAddr], seal: s2 });
    try {
      const joined = m2.join();
      await until("m1 drops m2's datagrams", () => (m1.stats().dropped["unknown-key"] ?? 0) >= 2);
      assert.deepEqual(
        m1.members().map((m) => m.meta.id),
        ["m1"],
      );
      // The rotation's first step on both: the other key listed second.
      s1.setKeys(keysOf(A, B));
      s2.setKeys(keysOf(B, A));
      await withTimeout(joined, 10_000, "m2 joins m1 once each opens the other's datagrams");
      await until("m1 sees m2 alive", () =>
        m1.members().some((m) => m.meta.id === "m2" && m.state === "alive"),
      );
    } finally {
      await m2.close();
      await m1.close();
    }
  });
});

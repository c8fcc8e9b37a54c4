/**
 * The membership driver against hostile datagrams on 127.0.0.1: nothing a datagram names may
 * throw out of the socket's handler, reach the socket as a host name, or end a join unless it is
 * a seed's refusal. Waits are event-driven and bounded (an ack proves the datagrams sent before
 * it from the same socket were handled: loopback keeps their order).
 */
import assert from "node:assert/strict";
import dgram from "node:dgram";
import { isIP } from "node:net";
import { describe, it } from "node:test";
import { incarnation, memberId } from "../../src/membership/core/index.ts";
import { Membership, type MembershipOptions } from "../../src/membership/index.ts";
import { MAX_REPORTED } from "../../src/membership/membership.ts";
import { withTimeout } from "../support/timeout.ts";
import { boundSocket, raw } from "./raw-udp.ts";

const base = {
  advertiseHttpAddr: "127.0.0.1:8080",
  totalShards: 16,
  seeds: [] as string[],
  tickMs: 20,
} satisfies Partial<MembershipOptions>;

describe("membership against hostile datagrams", () => {
  it("an address with a NUL byte (ping-req, alive, push-pull record) is dropped; the node lives on", async () => {
    const m = await Membership.start({ ...base, nodeId: "m1", bindAddr: "127.0.0.1:0" });
    const socket = await boundSocket();
    try {
      const port = Number(m.boundAddr.split(":")[1]);
      const r = raw(socket, port);
      const header = { from: memberId("evil"), totalShards: 16 };
      const nul = "\u0000:1";
      const meta = { id: memberId("x"), rpcAddr: nul, httpAddr: "127.0.0.1:1", totalShards: 16 };
      // Each made dns.lookup throw inside the socket's 'message' handler: the process exited.
      r.send({
        type: "ping-req",
        ...header,
        seq: 1,
        target: memberId("t"),
        targetAddr: nul,
        gossip: [],
      });
      r.send({
        type: "gossip",
        ...header,
        gossip: [{ kind: "alive", incarnation: incarnation(0), meta }],
      });
      r.send({
        type: "push-pull",
        ...header,
        reply: false,
        join: false,
        first: true,
        records: [{ meta, state: "alive", incarnation: incarnation(0) }],
      });
      await r.pingAcked("m1", "the ack of a ping after the three datagrams");
      assert.equal(m.stats().dropped["bad-field"], 3, JSON.stringify(m.stats()));
      assert.deepEqual(
        m.members().map((v) => v.meta.id),
        ["m1"],
      );
    } finally {
      socket.close();
      await m.close();
    }
  });

  it("a send that throws drops that datagram only", async () => {
    const seed = await boundSocket();
    const socket = dgram.createSocket("udp4");
    await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
    const seedPort = seed.address().port;
    const send = socket.send.bind(socket) as (...args: unknown[]) => void;
    // The socket throws for the seed's port (as dgram does for arguments it refuses).
    (socket as unknown as { send: (...args: unknown[]) => void }).send = (...args) => {
      if (args[1] === seedPort) throw new TypeError("refused by the socket");
      send(...args);
    };
    let dropped: () => void = () => {};
    const logged = new Promise<void>((resolve) => (dropped = resolve));
    const m = await Membership.start(
      {
        ...base,
        nodeId: "j",
        bindAddr: `127.0.0.1:${socket.address().port}`,
        seeds: [`127.0.0.1:${seedPort}`],
        joinBackoffMs: { initial: 60_000, max: 60_000 },
        logger: {
          info: () => {},
          error: () => {},
          warn: (msg) => {
            if (msg === "membership could not send a datagram; dropped") dropped();
          },
        },
      },
      socket,
    );
    try {
      const joining = m.join();
      let settled: unknown = "pending";
      joining.then(
        () => (settled = "joined"),
        (err: unknown) => (settled = err),
      );
      // The join's push-pull to the seed threw in the socket: counted, logged, the join waits
      // (the throw used to reject the join, or, from the 'message' handler, end the process).
      await withTimeout(logged, 10_000, "the dropped datagram logged");
      assert.equal(settled, "pending");
      assert.ok(m.stats().sendErrors >= 1, JSON.stringify(m.stats()));
      // Everything else still goes out: a ping from elsewhere is answered.
      const other = await boundSocket();
      try {
        await raw(other, socket.address().port).pingAcked("j", "the ack of a ping");
      } finally {
        other.close();
      }
    } finally {
      seed.close();
      await m.close();
    }
  });

  it("never hands a host name to the socket, and relays a ping-req to a name only as the target's address", async () => {
    const socket = dgram.createSocket("udp4");
    await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
    const sentTo: string[] = [];
    const send = socket.send.bind(socket) as (...args: unknown[]) => void;
    (socket as unknown as { send: (...args: unknown[]) => void }).send = (...args) => {
      sentTo.push(String(args[2]));
      send(...args);
    };
    let failed: () => void = () => {};
    const lookupFailed = new Promise<void>((resolve) => (failed = resolve));
    const m = await Membership.start(
      {
        ...base,
        nodeId: "m1",
        bindAddr: `127.0.0.1:${socket.address().port}`,
        logger: {
          info: () => {},
          error: () => {},
          warn: (msg, fields) => {
            if (msg === "cannot resolve a member address" && fields?.host === "h1.invalid")
              failed();
          },
        },
      },
      socket,
    );
    const attacker = await boundSocket();
    try {
      const r = raw(attacker, socket.address().port);
      const header = { from: memberId("evil"), totalShards: 16 };
      // A member named by a host name that does not resolve: probed, its datagrams dropped until
      // a lookup answers. dgram used to be handed the name and look it up again for each one.
      r.send({
        type: "gossip",
        ...header,
        gossip: [
          {
            kind: "alive",
            incarnation: incarnation(0),
            meta: {
              id: memberId("h1"),
              rpcAddr: "h1.invalid:7447",
              httpAddr: "h1.invalid:8080",
              totalShards: 16,
            },
          },
        ],
      });
      // Ping-reqs naming host names the table does not hold for their targets: not relayed.
      for (let i = 0; i < 5; i++) {
        r.send({
          type: "ping-req",
          ...header,
          seq: i,
          target: memberId(`t${i}`),
          targetAddr: `t${i}.invalid:7447`,
          gossip: [],
        });
      }
      await r.pingAcked("m1", "the ack of a ping after the ping-reqs");
      await withTimeout(lookupFailed, 30_000, "the probe of h1 and its failed lookup");
      const names = sentTo.filter((to) => isIP(to) === 0);
      assert.deepEqual(names, [], "host names handed to the socket");
      assert.ok(m.stats().sendErrors >= 1, "the probe of h1 was dropped");
    } finally {
      attacker.close();
      await m.close();
    }
  });

  it(`logs at most ${MAX_REPORTED} problems a minute however many senders forge them, and remembers no more`, async () => {
    // One datagram a problem (here another total_shards), from as many made-up senders as the
    // forger likes: each was one ERROR line, and one key remembered for a minute.
    const errors: string[] = [];
    const m = await Membership.start({
      ...base,
      nodeId: "m1",
      bindAddr: "127.0.0.1:0",
      logger: { info: () => {}, warn: () => {}, error: (msg) => errors.push(msg) },
    });
    const socket = await boundSocket();
    try {
      const r = raw(socket, Number(m.boundAddr.split(":")[1]));
      for (let i = 0; i < 4 * MAX_REPORTED; i++) {
        r.send({
          type: "gossip",
          from: memberId(`forged-${i}`),
          totalShards: 32,
          gossip: [],
        });
        if (i % 64 === 63) await r.pingAcked("m1", `the ack after ${i + 1} forged datagrams`);
      }
      await r.pingAcked("m1", "the ack after the forged datagrams");
      assert.equal(errors.length, MAX_REPORTED, errors.slice(0, 2).join("; "));
    } finally {
      socket.close();
      await m.close();
    }
  });

  it("only a seed's refusal naming another total_shards ends a join", async () => {
    const seed = await boundSocket();
    const seedPort = seed.address().port;
    const m = await Membership.start({
      ...base,
      nodeId: "j",
      bindAddr: "127.0.0.1:0",
      seeds: [`127.0.0.1:${seedPort}`],
      joinBackoffMs: { initial: 60_000, max: 60_000 },
    });
    const port = Number(m.boundAddr.split(":")[1]);
    try {
      const pushed = new Promise<void>((resolve) => seed.once("message", () => resolve()));
      const joining = m.join();
      let settled: unknown = "pending";
      joining.then(
        () => (settled = "joined"),
        (err: unknown) => (settled = err),
      );
      await withTimeout(pushed, 10_000, "the join's push-pull at the seed");
      const r = raw(seed, port);
      // A `refuse` naming the joiner's own total_shards (forged, from the seed's address): it
      // ended the join, and the node, with "this node has 16, whoever has 16".
      r.send({
        type: "refuse",
        from: memberId("whoever"),
        totalShards: 16,
        reason: "shard-count-mismatch",
      });
      // A ping with another total_shards from the seed's address is refused, not a refusal.
      r.send({
        type: "ping",
        from: memberId("s"),
        totalShards: 32,
        seq: 1,
        target: memberId("j"),
        gossip: [],
      });
      await r.pingAcked("j", "the ack of a ping after the two");
      assert.equal(settled, "pending", "the join ended");
      // The seed refuses for real: the join ends with the error naming both counts.
      r.send({
        type: "refuse",
        from: memberId("s"),
        totalShards: 32,
        reason: "shard-count-mismatch",
      });
      await assert.rejects(withTimeout(joining, 10_000, "the refused join"), {
        code: "CAIRN_ERR_SHARD_COUNT_MISMATCH",
        ours: 16,
        theirs: 32,
      });
    } finally {
      seed.close();
      await m.close();
    }
  });
});

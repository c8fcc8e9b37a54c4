/**
 * DownNodes: the nodes gossip declared down, against a forger on 127.0.0.1 announcing made-up
 * members and their deaths (gossip is unauthenticated UDP), and as the groups use it.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { incarnation, memberId } from "../../src/membership/core/index.ts";
import { Membership } from "../../src/membership/index.ts";
import { DownNodes } from "../../src/node/down-nodes.ts";
import { boundSocket, raw } from "../membership/raw-udp.ts";

describe("DownNodes", () => {
  it("keeps the ids gossip declared down, and, past its bound, only those gossip or the meta state still knows", async () => {
    // A forger's made-up members, each announced then declared dead: SWIM forgets each once its
    // tombstone expires (2 ticks here, 5 minutes by default), but the node's set of down nodes
    // kept every id for good (~600,000 a day at the defaults).
    const m = await Membership.start({
      nodeId: "m1",
      bindAddr: "127.0.0.1:0",
      advertiseHttpAddr: "127.0.0.1:8080",
      totalShards: 16,
      seeds: [],
      tickMs: 20,
      config: { tombstoneTicks: 2, maxMembers: 16 },
    });
    const meta = new Set(["real"]);
    const down = new DownNodes(() => [...m.members().map((v) => v.meta.id), ...meta], 64);
    m.onEvent((e) => down.note(e.member.meta.id, e.member.state));
    const socket = await boundSocket();
    const forger = raw(socket, Number(m.boundAddr.split(":")[1]));
    const from = memberId("forger");
    let declared = 0;
    try {
      // A member the meta state records, down: it stays down however many fakes follow.
      down.note("real", "dead");
      for (let round = 0; round < 40; round++) {
        for (let i = 0; i < 8; i++) {
          const id = memberId(`fake-${round}-${i}`);
          const at = incarnation(1);
          const rpcAddr = `127.0.0.2:${1000 + round * 8 + i}`;
          const alive = { id, rpcAddr, httpAddr: rpcAddr, totalShards: 16 };
          forger.send({
            type: "gossip",
            from,
            totalShards: 16,
            gossip: [
              { kind: "alive", incarnation: at, meta: alive },
              { kind: "dead", id, incarnation: at, from },
            ],
          });
          await forger.pingAcked("m1", `the gossip of ${id} handled`);
        }
        declared += 8;
        // Their tombstones expire (two ticks), and the table has room for the next.
        await new Promise((resolve) => setTimeout(resolve, 80));
      }
      assert.ok(m.members().length <= 16 + 1, "SWIM's table stays within maxMembers");
      assert.ok(down.size <= 64 + 1, `${down.size} ids kept of ${declared} declared down`);
      assert.equal(down.has("real"), true, "a meta member stays down");
      assert.equal(down.note("real", "alive"), true, "back: its groups wake");
      assert.equal(down.has("real"), false);
      assert.equal(down.note("real", "alive"), false, "already up");
    } finally {
      socket.close();
      await m.close();
    }
  });
});

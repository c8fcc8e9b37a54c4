/**
 * Joining and re-contacting through the members a node records (MembershipOptions.recorded),
 * real Membership instances on 127.0.0.1: a member that left gracefully is `left` in its peers'
 * views, which never probe it again; restarted with seeds that answer no more (the first seeds
 * decommissioned and removed since), it came back into gossip only through the members its meta
 * state records. Waits are bounded polls on the members' views, never sleeps.
 */
import assert from "node:assert/strict";
import dgram from "node:dgram";
import { describe, it } from "node:test";
import {
  Membership,
  type MembershipOptions,
  RECORDED_PER_ROUND,
  type RecordedMember,
} from "../../src/membership/index.ts";
import { withTimeout } from "../support/timeout.ts";

const base = { advertiseHttpAddr: "127.0.0.1:8080", totalShards: 16, tickMs: 20 };

/** Polls (bounded) until `check` holds. */
async function until(what: string, check: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!check()) {
    if (performance.now() > deadline) assert.fail(`not within ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function stateIn(m: Membership, id: string): string | undefined {
  return m.members().find((v) => v.meta.id === id)?.state;
}

async function boundSocket(): Promise<dgram.Socket> {
  const s = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => s.bind(0, "127.0.0.1", resolve));
  return s;
}

/**
 * m1, and m2 which joined through it and left gracefully (m1 holds it `left`); m2's port, free
 * again for its restart, and a socket that reads and never answers (a seed that is gone).
 */
async function leftMember(): Promise<{
  m1: Membership;
  port2: number;
  silent: dgram.Socket;
}> {
  const m1 = await Membership.start({ ...base, nodeId: "m1", bindAddr: "127.0.0.1:0", seeds: [] });
  const m2 = await Membership.start({
    ...base,
    nodeId: "m2",
    bindAddr: "127.0.0.1:0",
    seeds: [m1.boundAddr],
  });
  const port2 = Number(m2.boundAddr.split(":")[1]);
  await withTimeout(m2.join(), 10_000, "m2 joins through m1");
  await until("m1 has m2 alive", () => stateIn(m1, "m2") === "alive");
  await m2.leave();
  await until("m1 has m2 left", () => stateIn(m1, "m2") === "left");
  return { m1, port2, silent: await boundSocket() };
}

/** m2 again on `port2`, its seeds `seeds`, with `extra` options. */
function restart(
  port2: number,
  seeds: readonly string[],
  extra: Partial<MembershipOptions>,
): Promise<Membership> {
  return Membership.start({
    ...base,
    nodeId: "m2",
    bindAddr: `127.0.0.1:${port2}`,
    seeds,
    joinBackoffMs: { initial: 20, max: 80 },
    ...extra,
  });
}

describe("membership through the recorded members", () => {
  it("a member restarted after a graceful leave, whose seeds answer no more, rejoins through the members it records", async () => {
    const { m1, port2, silent } = await leftMember();
    const dead = `127.0.0.1:${silent.address().port}`;
    const recorded: RecordedMember[] = [{ id: "m1", rpcAddr: m1.boundAddr }];
    const m2 = await restart(port2, [dead], { recorded: () => recorded });
    const joining = m2.join();
    try {
      await withTimeout(joining, 10_000, "m2 rejoins through the member it records");
      await until("m1 has m2 alive again", () => stateIn(m1, "m2") === "alive");
      assert.equal(stateIn(m2, "m1"), "alive");
    } finally {
      await m2.close();
      await joining.catch(() => undefined);
      await m1.close();
      silent.close();
    }
  });

  it("reads the recorded members again each attempt: ones recorded after the join began are joined through", async () => {
    const { m1, port2, silent } = await leftMember();
    const dead = `127.0.0.1:${silent.address().port}`;
    // Empty at first: the meta state not loaded yet (shard 0 being refilled).
    const recorded: RecordedMember[] = [];
    let warned = 0;
    const m2 = await restart(port2, [dead], {
      recorded: () => recorded,
      logger: {
        info: () => {},
        error: () => {},
        warn: (message) => {
          if (message !== "no seed answered; retrying" || ++warned !== 1) return;
          recorded.push({ id: "m1", rpcAddr: m1.boundAddr });
        },
      },
    });
    const joining = m2.join();
    try {
      await withTimeout(joining, 10_000, "m2 joins once m1 is recorded");
      assert.ok(warned >= 1, "the first attempt, through the dead seed alone, went unanswered");
      await until("m1 has m2 alive again", () => stateIn(m1, "m2") === "alive");
    } finally {
      await m2.close();
      await joining.catch(() => undefined);
      await m1.close();
      silent.close();
    }
  });

  it("re-contacts a recorded member that is not live: a join done alone (its only seed itself) still reaches the cluster", async () => {
    const { m1, port2, silent } = await leftMember();
    const recorded: RecordedMember[] = [];
    const m2 = await restart(port2, [`127.0.0.1:${port2}`], {
      recorded: () => recorded,
      seedRecontactMs: 30,
    });
    try {
      // Its only seed is itself and it records no one yet: a cluster of one, at once.
      await withTimeout(m2.join(), 5_000, "m2's join alone");
      assert.equal(stateIn(m1, "m2"), "left");
      recorded.push({ id: "m1", rpcAddr: m1.boundAddr });
      await until("m1 has m2 alive again", () => stateIn(m1, "m2") === "alive");
      await until("m2 has m1 alive", () => stateIn(m2, "m1") === "alive");
    } finally {
      await m2.close();
      await m1.close();
      silent.close();
    }
  });

  it("host names that do not resolve do not starve one that does, however many, and each round is bounded", async () => {
    const { m1, port2, silent } = await leftMember();
    const dead = `127.0.0.1:${silent.address().port}`;
    const port1 = m1.boundAddr.split(":")[1];
    // A dead pod's name drops out of a headless service's DNS: listed first, it was looked up
    // again every round, and the cache's one lookup at a time left the others unresolved.
    const recorded: RecordedMember[] = [
      ...Array.from({ length: 12 }, (_, i) => ({
        id: `gone${i}`,
        rpcAddr: `gone-${i}.invalid:7447`,
      })),
      // Addresses that answer nothing: more than a round takes.
      ...Array.from({ length: 3 * RECORDED_PER_ROUND }, (_, i) => ({
        id: `silent${i}`,
        rpcAddr: `127.0.0.2:${10_000 + i}`,
      })),
      { id: "m1", rpcAddr: `localhost:${port1}` },
    ];
    const rounds: string[][] = [];
    const m2 = await restart(port2, [dead], {
      recorded: () => recorded,
      logger: {
        info: () => {},
        error: () => {},
        warn: (message, fields) => {
          if (message === "no seed answered; retrying")
            rounds.push((fields?.["recorded_members_asked"] as string[] | undefined) ?? []);
        },
      },
    });
    const joining = m2.join();
    try {
      await withTimeout(joining, 30_000, "m2 rejoins through m1, named by a host name");
      await until("m1 has m2 alive again", () => stateIn(m1, "m2") === "alive");
      // m1's name was looked up in its turn, after rounds that went unanswered; none of them
      // asked more than RECORDED_PER_ROUND members whose addresses are known, and one name.
      assert.ok(rounds.length >= 2, `${rounds.length} rounds`);
      for (const asked of rounds) {
        assert.ok(asked.length <= RECORDED_PER_ROUND + 1, asked.join(" "));
        assert.ok(asked.filter((a) => !/^127\./.test(a)).length <= 1, asked.join(" "));
      }
      // Every silent member was asked in turn (the list is longer than a round).
      const asked = new Set(rounds.flat());
      assert.ok(
        asked.has("127.0.0.2:10000") &&
          asked.has(`127.0.0.2:${10_000 + 3 * RECORDED_PER_ROUND - 1}`),
      );
    } finally {
      await m2.close();
      await joining.catch(() => undefined);
      await m1.close();
      silent.close();
    }
  });
});

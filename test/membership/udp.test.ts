/**
 * Membership over real UDP on 127.0.0.1: three member processes (scripts/swim-member.ts) form a
 * cluster from one seed; one is killed with SIGKILL and the others see it dead; it restarts on the
 * same port and is alive again. Plus: malformed datagrams are dropped without effect.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import dgram from "node:dgram";
import { once } from "node:events";
import { join } from "node:path";
import { createInterface } from "node:readline";
import dnsPromises from "node:dns/promises";
import { syncBuiltinESMExports } from "node:module";
import { after, describe, it } from "node:test";
import {
  decodeMessage,
  encodeMessage,
  incarnation,
  memberId,
  type Message,
} from "../../src/membership/core/index.ts";
import {
  bindGossipSocket,
  Membership,
  type MembershipEvent,
  type MembershipOptions,
  noopMembershipMetrics,
} from "../../src/membership/index.ts";
import { withTimeout } from "../support/timeout.ts";

const runner = join(import.meta.dirname, "..", "..", "scripts", "swim-member.ts");

interface Line {
  readonly event: string;
  readonly kind?: string;
  readonly addr?: string;
  readonly member?: { readonly id: string; readonly state: string; readonly incarnation: number };
  readonly code?: string;
}

/** One member process and the JSON lines it printed; waits are bounded and event-driven. */
class MemberProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly lines: Line[] = [];
  readonly #waiters = new Set<() => void>();
  #exited = false;

  constructor(name: string, args: string[]) {
    this.name = name;
    this.child = spawn(process.execPath, [runner, "--id", name, ...args], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const rl = createInterface({ input: this.child.stdout ?? assert.fail() });
    rl.on("line", (text) => {
      this.lines.push(JSON.parse(text) as Line);
      for (const w of this.#waiters) w();
    });
    this.child.on("exit", () => {
      this.#exited = true;
      for (const w of this.#waiters) w();
    });
  }

  waitFor(what: string, match: (l: Line) => boolean, timeoutMs: number): Promise<Line> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const found = this.lines.find(match);
        if (found !== undefined) {
          cleanup();
          resolve(found);
        } else if (this.#exited) {
          cleanup();
          reject(new Error(`${this.name} exited before: ${what}`));
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`${this.name}: timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const cleanup = (): void => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      this.#waiters.add(check);
      check();
    });
  }

  /** Waits for a `member` event of `kind` about `id` printed after line index `from`. */
  waitMember(kind: string, id: string, timeoutMs: number, from = 0): Promise<Line> {
    return this.waitFor(
      `${kind} ${id}`,
      (l) =>
        this.lines.indexOf(l) >= from &&
        l.event === "member" &&
        l.kind === kind &&
        l.member?.id === id,
      timeoutMs,
    );
  }

  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    if (this.#exited) return;
    const exited = once(this.child, "exit");
    this.child.kill(signal);
    await exited;
  }
}

describe("membership over real UDP", () => {
  const procs: MemberProcess[] = [];
  after(async () => {
    await Promise.all(procs.map((p) => p.stop("SIGKILL")));
  });

  it("three processes form a cluster; a SIGKILLed one is seen dead, then alive after restart", async () => {
    const a = new MemberProcess("a", ["--bind", "127.0.0.1:0"]);
    procs.push(a);
    const seed = (await a.waitFor("listening", (l) => l.event === "listening", 10_000)).addr;
    assert.ok(seed !== undefined);
    const b = new MemberProcess("b", ["--bind", "127.0.0.1:0", "--seeds", seed]);
    // Seeds may be host names.
    const seedByName = `localhost:${seed.slice(seed.lastIndexOf(":") + 1)}`;
    const c = new MemberProcess("c", ["--bind", "127.0.0.1:0", "--seeds", seedByName]);
    procs.push(b, c);
    const cAddr = (await c.waitFor("listening", (l) => l.event === "listening", 10_000)).addr;
    assert.ok(cAddr !== undefined);

    // Everyone learns of everyone, b and c only through the seed and gossip.
    await Promise.all([
      a.waitMember("joined", "b", 15_000),
      a.waitMember("joined", "c", 15_000),
      b.waitMember("joined", "c", 15_000),
      c.waitMember("joined", "b", 15_000),
      b.waitMember("joined", "a", 15_000),
    ]);

    const mark = { a: a.lines.length, b: b.lines.length };
    await c.stop("SIGKILL");
    await Promise.all([
      a.waitMember("dead", "c", 30_000, mark.a),
      b.waitMember("dead", "c", 30_000, mark.b),
    ]);

    const again = { a: a.lines.length, b: b.lines.length };
    const c2 = new MemberProcess("c", ["--bind", cAddr, "--seeds", seed]);
    procs.push(c2);
    const [aliveAtA, aliveAtB] = await Promise.all([
      a.waitMember("alive", "c", 20_000, again.a),
      b.waitMember("alive", "c", 20_000, again.b),
    ]);
    assert.ok((aliveAtA.member?.incarnation ?? 0) > 0, "the restarted member refuted its death");
    assert.equal(aliveAtB.member?.state, "alive");
    await c2.waitFor("joined-cluster", (l) => l.event === "joined-cluster", 10_000);

    // A graceful leave is seen as `left`, not as a failure.
    const beforeLeave = a.lines.length;
    await b.stop("SIGTERM");
    await a.waitMember("left", "b", 10_000, beforeLeave);
    assert.equal(b.child.exitCode, 0);
  });

  it("refuses a node whose total_shards differs, with an error on both sides", async () => {
    const a = new MemberProcess("ma", ["--bind", "127.0.0.1:0", "--total-shards", "1024"]);
    procs.push(a);
    const seed = (await a.waitFor("listening", (l) => l.event === "listening", 10_000)).addr;
    assert.ok(seed !== undefined);
    const d = new MemberProcess("md", [
      "--bind",
      "127.0.0.1:0",
      "--seeds",
      seed,
      "--total-shards",
      "128",
    ]);
    procs.push(d);
    const refused = await d.waitFor("refusal", (l) => l.event === "error", 10_000);
    assert.equal(refused.code, "CAIRN_ERR_SHARD_COUNT_MISMATCH");
    await once(d.child, "exit");
    assert.equal(d.child.exitCode, 3);
    await a.waitFor(
      "logged refusal",
      (l) => l.event === "log" && JSON.stringify(l).includes("CAIRN_ERR_SHARD_COUNT_MISMATCH"),
      5_000,
    );
    assert.ok(!a.lines.some((l) => l.event === "member" && l.member?.id === "md"));
  });
});

describe("membership drops malformed datagrams", () => {
  it("random bytes, truncated, wrong version and oversized datagrams change nothing", async () => {
    const fast = { tickMs: 20 };
    const m1 = await loneMember();
    const m2 = await Membership.start({
      nodeId: "m2",
      bindAddr: "127.0.0.1:0",
      advertiseHttpAddr: "127.0.0.1:8081",
      totalShards: 16,
      seeds: [m1.boundAddr],
      ...fast,
    });
    const raw = dgram.createSocket("udp4");
    try {
      await m2.join();
      const events: MembershipEvent[] = [];
      m1.onEvent((e) => events.push(e));
      m2.onEvent((e) => events.push(e));

      const { port } = new URL(`udp://${m1.boundAddr}`);
      const send = (bytes: Uint8Array): Promise<void> =>
        new Promise((resolve, reject) =>
          raw.send(bytes, Number(port), "127.0.0.1", (err) => (err ? reject(err) : resolve())),
        );
      const valid: Message = {
        type: "ping",
        from: memberId("probe"),
        totalShards: 16,
        seq: 4242,
        target: memberId("m1"),
        gossip: [],
      };
      const good = encodeMessage(valid);
      const wrongVersion = Uint8Array.from(good);
      wrongVersion[0] = 9;
      let state = 12345;
      const random = Uint8Array.from({ length: 200 }, () => {
        state = (state * 1103515245 + 12345) >>> 0;
        return state >>> 24;
      });
      random[0] = 1; // a plausible version byte, so the decoder has to work for its verdict
      await send(random);
      await send(good.subarray(0, good.length - 3));
      await send(wrongVersion);
      await send(new Uint8Array(1401));
      await send(new Uint8Array(0));

      // The member still answers a valid probe, and answering it proves the junk went first.
      // (An unknown sender also gets a push-pull introduction; only the ack matters here.)
      const acked = new Promise<void>((resolve) => {
        raw.on("message", (msg: Buffer) => {
          const d = decodeMessage(msg);
          if (d.ok && d.message.type === "ack" && d.message.seq === 4242) resolve();
        });
      });
      await send(good);
      await withTimeout(acked, 10_000, "the ack of a valid ping");

      const dropped = m1.stats().dropped;
      assert.equal(dropped.version, 1);
      assert.equal(dropped.oversized, 1);
      assert.ok((dropped.truncated ?? 0) >= 2, JSON.stringify(dropped));
      const total = Object.values(dropped).reduce((s, n) => s + (n ?? 0), 0);
      assert.equal(total, 5, JSON.stringify(dropped));
      assert.deepEqual(events, [], "no membership change");
      assert.deepEqual(
        m1.members().map((m) => [m.meta.id, m.state]),
        [
          ["m1", "alive"],
          ["m2", "alive"],
        ],
      );
    } finally {
      raw.close();
      await m2.close();
      await m1.close();
    }
  });

  it("refuses bad settings and releases the port", async () => {
    const port = await freeUdpPort();
    const options = {
      nodeId: "cfg",
      bindAddr: `127.0.0.1:${port}`,
      advertiseHttpAddr: "127.0.0.1:8080",
      totalShards: 16,
      seeds: [],
    };
    await assert.rejects(Membership.start({ ...options, config: { ackTimeoutTicks: 20 } }), {
      code: "CAIRN_ERR_MEMBERSHIP_CONFIG",
    });
    const m = await Membership.start(options);
    await m.close();
  });

  it("refuses a wildcard advertised address", async () => {
    await assert.rejects(
      Membership.start({
        nodeId: "w",
        bindAddr: "0.0.0.0:0",
        advertiseHttpAddr: "127.0.0.1:8080",
        totalShards: 16,
        seeds: [],
      }),
      /must be routable/,
    );
    await assert.rejects(
      Membership.start({
        nodeId: "w",
        bindAddr: "127.0.0.1:0",
        advertiseRpcAddr: "[::]:7447",
        advertiseHttpAddr: "127.0.0.1:8080",
        totalShards: 16,
        seeds: [],
      }),
      /must be routable/,
    );
  });
});

describe("membership join", () => {
  const base = { advertiseHttpAddr: "127.0.0.1:8080", totalShards: 16, tickMs: 20 };

  it("a flood of made-up members and of datagrams with another shard count: the table and the ERROR lines stay bounded", async () => {
    const lines: { level: string; message: string }[] = [];
    const logger = {
      info: () => {},
      warn: (message: string) => lines.push({ level: "warn", message }),
      error: (message: string) => lines.push({ level: "error", message }),
    };
    const m1 = await loneMember({ config: { maxMembers: 100 }, logger });
    const raw = dgram.createSocket("udp4");
    try {
      await m1.join();
      const { port } = new URL(`udp://${m1.boundAddr}`);
      const send = (m: Message): Promise<void> =>
        new Promise((resolve, reject) =>
          raw.send(encodeMessage(m), Number(port), "127.0.0.1", (err) =>
            err ? reject(err) : resolve(),
          ),
        );
      // A sync point: a valid probe, sent again until its ack comes, so that every datagram
      // sent before it was handled (batches stay far under the socket's receive buffer).
      let nextSeq = 10_000;
      const settle = async (): Promise<void> => {
        const seq = nextSeq++;
        const probe = (): Promise<void> =>
          send({
            type: "ping",
            from: memberId("probe"),
            totalShards: 16,
            seq,
            target: memberId("m1"),
            gossip: [],
          });
        const acked = new Promise<void>((resolve) => {
          const onMessage = (msg: Buffer): void => {
            const d = decodeMessage(msg);
            if (d.ok && d.message.type === "ack" && d.message.seq === seq) {
              raw.off("message", onMessage);
              resolve();
            }
          };
          raw.on("message", onMessage);
        });
        const again = setInterval(() => void probe(), 200);
        try {
          await probe();
          await withTimeout(acked, 10_000, `the ack of probe ${seq}`);
        } finally {
          clearInterval(again);
        }
      };
      // 300 datagrams with another shard count from one sender, then from 600 made-up ones.
      const mismatched = (from: string, seq: number): Message => ({
        type: "ping",
        from: memberId(from),
        totalShards: 32,
        seq,
        target: memberId("m1"),
        gossip: [],
      });
      for (let i = 0; i < 900; i++) {
        await send(mismatched(i < 300 ? "other-cluster" : `other-${i}`, i));
        if (i % 50 === 49) await settle();
      }
      // Then 2,000 made-up members in 100 gossip datagrams: warned of, although the problems
      // logged above fill what the node remembers of them.
      for (let d = 0; d < 100; d++) {
        await send({
          type: "gossip",
          from: memberId("flooder"),
          totalShards: 16,
          gossip: Array.from({ length: 20 }, (_, i) => ({
            kind: "alive" as const,
            incarnation: incarnation(0),
            meta: {
              id: memberId(`fake-${d * 20 + i}`),
              rpcAddr: "127.0.0.1:9",
              httpAddr: "127.0.0.1:9",
              totalShards: 16,
            },
          })),
        });
        if (d % 20 === 19) await settle();
      }

      assert.ok(m1.members().length <= 101, `${m1.members().length} members remembered`);
      const warned = lines.filter((l) => l.message.startsWith("gossip named more members"));
      assert.equal(warned.length, 1, JSON.stringify(warned));
      const errors = lines.filter((l) => l.level === "error");
      const fromOne = errors.filter((l) => l.message.includes("other-cluster at"));
      assert.equal(fromOne.length, 1, "one sender: one line a minute");
      assert.ok(errors.length <= 257, `${errors.length} ERROR lines for 900 datagrams`);

      // A real member joining now is kept out of the full table like the fakes, until m1's
      // meta state names it a member (reserve): then it takes a fake's place.
      const m2 = await Membership.start({
        ...base,
        nodeId: "m2",
        bindAddr: "127.0.0.1:0",
        seeds: [m1.boundAddr],
      });
      try {
        const joined = new Promise<void>((resolve) =>
          m1.onEvent((e) => {
            if (e.member.meta.id === "m2" && e.member.state === "alive") resolve();
          }),
        );
        await m2.join();
        await settle();
        assert.equal(
          m1.members().some((m) => m.meta.id === "m2"),
          false,
          "not a member yet: refused as the fakes are",
        );
        m1.reserve(new Set(["m1", "m2"]));
        await withTimeout(joined, 10_000, "m1 to take m2 in");
        assert.ok(m1.members().length <= 101, `${m1.members().length} members remembered`);
      } finally {
        await m2.close();
      }
    } finally {
      raw.close();
      await m1.close();
    }
  });

  it("resolves at once without seeds; refuses a port that is already bound", async () => {
    const alone = await Membership.start({
      ...base,
      nodeId: "s1",
      bindAddr: "127.0.0.1:0",
      seeds: [],
    });
    try {
      await alone.join();
      await assert.rejects(
        Membership.start({ ...base, nodeId: "s2", bindAddr: alone.boundAddr, seeds: [] }),
        { code: "EADDRINUSE" },
      );
    } finally {
      await alone.close();
    }
  });

  it("a node whose seed list names only itself starts a cluster of one", async () => {
    const port = await freeUdpPort();
    const m = await Membership.start({
      ...base,
      nodeId: "first",
      bindAddr: `127.0.0.1:${port}`,
      seeds: [`localhost:${port}`, `127.0.0.1:${port}`],
    });
    try {
      await m.join();
      assert.deepEqual(
        m.members().map((v) => v.meta.id),
        ["first"],
      );
    } finally {
      await m.close();
    }
  });

  it("a node whose seed list names only its advertised address (not one it binds) starts a cluster of one", async () => {
    // Behind NAT or a load balancer, the address a node advertises is not one of its sockets'.
    const socket = await bindGossipSocket("127.0.0.1:0");
    const port = socket.address().port;
    const warnings: string[] = [];
    const m = await Membership.start(
      {
        ...base,
        nodeId: "first",
        bindAddr: `127.0.0.1:${port}`,
        advertiseRpcAddr: `127.0.0.2:${port}`,
        seeds: [`127.0.0.2:${port}`],
        joinBackoffMs: { initial: 20, max: 40 },
        logger: { info: () => {}, error: () => {}, warn: (message) => warnings.push(message) },
      },
      socket,
    );
    const joining = m.join();
    try {
      await withTimeout(joining, 5_000, "the join of a node that is its only seed");
      assert.deepEqual(warnings, []);
    } finally {
      await m.close();
      await joining.catch(() => undefined);
    }
  });

  it("a node whose seed list names itself in another spelling of its address starts a cluster of one", async () => {
    // A seed that names this node as it is not written here (an IPv4-mapped address, another
    // spelling of an IPv6 one, upper-case hex, a name's case) was taken for another node: the
    // join sent push-pulls to itself (or to nowhere) and waited for an answer for ever.
    const cases: { bind: string; advertise?: string; seed: (port: number) => string }[] = [
      { bind: "127.0.0.1", seed: (port) => `[::ffff:127.0.0.1]:${port}` },
      { bind: "127.0.0.1", seed: (port) => `[::FFFF:7F00:1]:${port}` },
      { bind: "[::1]", seed: (port) => `[0:0:0:0:0:0:0:1]:${port}` },
      // `localhost` names the loopback address this node binds (which a lookup of it for the
      // socket's family may not return: many hosts files give it 127.0.0.1 only).
      { bind: "[::1]", seed: (port) => `localhost:${port}` },
      // Its advertised address, not one it binds (behind NAT), as it is not written here.
      {
        bind: "127.0.0.1",
        advertise: "Cairn-Self.invalid",
        seed: (port) => `cairn-self.invalid:${port}`,
      },
      { bind: "127.0.0.1", advertise: "127.0.0.2", seed: (port) => `[::ffff:127.0.0.2]:${port}` },
      // An address of this host, on a socket bound to every one.
      { bind: "0.0.0.0", advertise: "127.0.0.2", seed: (port) => `[::ffff:127.0.0.1]:${port}` },
    ];
    const failed: string[] = [];
    for (const { bind, advertise, seed } of cases) {
      const socket = await bindGossipSocket(`${bind}:0`);
      const port = socket.address().port;
      const warnings: string[] = [];
      const m = await Membership.start(
        {
          ...base,
          nodeId: "first",
          bindAddr: `${bind}:${port}`,
          ...(advertise === undefined ? {} : { advertiseRpcAddr: `${advertise}:${port}` }),
          seeds: [seed(port)],
          joinBackoffMs: { initial: 20, max: 40 },
          logger: { info: () => {}, error: () => {}, warn: (message) => warnings.push(message) },
        },
        socket,
      );
      const joining = m.join();
      try {
        await withTimeout(joining, 3_000, "the join");
        assert.deepEqual(warnings, []);
        assert.deepEqual(
          m.members().map((v) => v.meta.id),
          ["first"],
        );
        assert.equal(m.stats().datagramsSent, 0, "nothing sent to itself");
      } catch (err) {
        failed.push(`bound ${bind}, seed ${seed(port)}: ${String(err)}`);
      } finally {
        await m.close();
        await joining.catch(() => undefined);
      }
    }
    assert.deepEqual(failed, []);
  });

  it("keeps retrying a silent or unresolvable seed with backoff until closed", async () => {
    const warnings: string[] = [];
    let twoRetries: () => void = () => {};
    const retried = new Promise<void>((resolve) => (twoRetries = resolve));
    const m = await Membership.start({
      ...base,
      nodeId: "lonely",
      bindAddr: "127.0.0.1:0",
      seeds: ["127.0.0.1:9", "no-such-seed.invalid:7447"],
      joinBackoffMs: { initial: 20, max: 40 },
      logger: {
        info: () => {},
        error: () => {},
        warn: (message) => {
          warnings.push(message);
          if (warnings.filter((w) => w === "no seed answered; retrying").length >= 2) twoRetries();
        },
      },
    });
    const joining = m.join();
    await retried;
    await m.close();
    await assert.rejects(joining, { code: "CAIRN_ERR_MEMBERSHIP_CLOSED" });
    assert.ok(warnings.includes("cannot resolve a seed"));
  });

  it("a node whose seed list names itself and a seed that does not resolve yet keeps retrying: it is no cluster of one", async () => {
    // The first pod of a StatefulSet lists every pod, and the others' names are in no DNS until
    // they run: the join ended at once as a cluster of one, with nothing logged, and the node
    // reached the others only at its next re-contact (30 s) or when one reached it.
    const port = await freeUdpPort();
    const warnings: string[] = [];
    let twoRetries: () => void = () => {};
    const retried = new Promise<void>((resolve) => (twoRetries = resolve));
    const m = await Membership.start({
      ...base,
      nodeId: "first",
      bindAddr: `127.0.0.1:${port}`,
      seeds: [`127.0.0.1:${port}`, "no-such-seed.invalid:7447"],
      joinBackoffMs: { initial: 20, max: 40 },
      logger: {
        info: () => {},
        error: () => {},
        warn: (message) => {
          warnings.push(message);
          if (warnings.filter((w) => w === "no seed answered; retrying").length >= 2) twoRetries();
        },
      },
    });
    const joining = m.join();
    try {
      const first = await withTimeout(
        Promise.race([retried.then(() => "retried"), joining.then(() => "joined")]),
        10_000,
        "the join's retries",
      );
      assert.equal(first, "retried", "the join ended before the seed resolved");
      assert.ok(warnings.includes("cannot resolve a seed"));
    } finally {
      await m.close();
    }
    await assert.rejects(joining, { code: "CAIRN_ERR_MEMBERSHIP_CLOSED" });
  });

  it("a datagram with another shard count from a host that is not a seed does not abort the join", async () => {
    const bound = async (): Promise<dgram.Socket> => {
      const s = dgram.createSocket("udp4");
      await new Promise<void>((resolve) => s.bind(0, "127.0.0.1", resolve));
      return s;
    };
    const seed = await bound(); // answers when the test says so
    const stray = await bound(); // a node of another cluster that still pings this address
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
      const pushed = once(seed, "message");
      const joining = m.join();
      let settled: unknown = "pending";
      joining.then(
        () => (settled = "joined"),
        (err: unknown) => (settled = err),
      );
      await withTimeout(pushed, 10_000, "the join's push-pull at the seed");
      const answered = once(stray, "message");
      stray.send(
        encodeMessage({
          type: "ping",
          from: memberId("stray"),
          totalShards: 32,
          seq: 1,
          target: memberId("j"),
          gossip: [],
        }),
        port,
        "127.0.0.1",
      );
      const [reply] = (await withTimeout(answered, 10_000, "j's answer to the stray")) as [Buffer];
      const decoded = decodeMessage(reply);
      assert.ok(decoded.ok && decoded.message.type === "refuse", "j refused the stray ping");
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(settled, "pending", "the stray's shard count aborted the join");
      // The seed answers: the join completes.
      seed.send(
        encodeMessage({
          type: "push-pull",
          from: memberId("s"),
          totalShards: 16,
          reply: true,
          join: true,
          first: true,
          records: [
            {
              meta: {
                id: memberId("s"),
                rpcAddr: `127.0.0.1:${seedPort}`,
                httpAddr: "127.0.0.1:8080",
                totalShards: 16,
              },
              state: "alive",
              incarnation: incarnation(0),
            },
          ],
        }),
        port,
        "127.0.0.1",
      );
      await withTimeout(joining, 10_000, "the join");
    } finally {
      seed.close();
      stray.close();
      await m.close();
    }
  });

  it("a member bound on [::] reaches IPv4 seeds and members (dual-stack)", async () => {
    const m1 = await loneMember();
    const socket = await bindGossipSocket("[::]:0");
    const port = socket.address().port;
    let acked: () => void = () => {};
    const firstAck = new Promise<void>((resolve) => (acked = resolve));
    const m2 = await Membership.start(
      {
        ...base,
        nodeId: "v6",
        bindAddr: `[::]:${port}`,
        advertiseRpcAddr: `127.0.0.1:${port}`,
        seeds: [m1.boundAddr],
        joinBackoffMs: { initial: 50, max: 200 },
        // m2's only peer is m1 (127.0.0.1): a measured round trip is a probe of it acked.
        metrics: { ...noopMembershipMetrics, observeGossipLatencyMs: () => acked() },
      },
      socket,
    );
    try {
      await withTimeout(m2.join(), 10_000, "a join through an IPv4 seed");
      await withTimeout(firstAck, 10_000, "an ack of m2's probe of m1");
      assert.equal(m2.stats().sendErrors, 0);
      assert.deepEqual(
        m1.members().map((v) => [v.meta.id, v.state]),
        [
          ["m1", "alive"],
          ["v6", "alive"],
        ],
      );
    } finally {
      await m2.close();
      await m1.close();
    }
  });

  it("an IPv4 member reaches seeds and members written as IPv4-mapped addresses", async () => {
    // `[::ffff:127.0.0.1]:p` is 127.0.0.1:p (canonicalHost), but an IPv4 socket cannot send to
    // it as written (EINVAL): a join through such a seed never got an answer, and a member that
    // advertised such an address was never probed successfully (suspected, then dead).
    let acked: () => void = () => {};
    const firstAck = new Promise<void>((resolve) => (acked = resolve));
    const port1 = await freeUdpPort();
    const m1 = await Membership.start({
      ...base,
      nodeId: "mapped",
      bindAddr: `127.0.0.1:${port1}`,
      advertiseRpcAddr: `[::ffff:127.0.0.1]:${port1}`,
      seeds: [],
    });
    const m2 = await Membership.start({
      ...base,
      nodeId: "v4",
      bindAddr: "127.0.0.1:0",
      seeds: [`[::ffff:127.0.0.1]:${port1}`],
      joinBackoffMs: { initial: 50, max: 200 },
      // m2's only peer is m1, so a measured round trip is a ping to m1's advertised address.
      metrics: { ...noopMembershipMetrics, observeGossipLatencyMs: () => acked() },
    });
    try {
      await withTimeout(m2.join(), 5_000, "a join through an IPv4-mapped seed");
      await withTimeout(firstAck, 5_000, "an ack from m1 at its IPv4-mapped address");
      assert.equal(m2.stats().sendErrors, 0);
    } finally {
      await m2.close();
      await m1.close();
    }
  });

  it("members may advertise host names", async () => {
    let acked: () => void = () => {};
    const firstAck = new Promise<void>((resolve) => (acked = resolve));
    const m1 = await Membership.start({
      ...base,
      nodeId: "h1",
      bindAddr: "127.0.0.1:0",
      seeds: [],
      // m1's only peer is h2, so a measured round trip is a ping to "localhost:<port>" acked.
      metrics: { ...noopMembershipMetrics, observeGossipLatencyMs: () => acked() },
    });
    const port2 = await freeUdpPort();
    const m2 = await Membership.start({
      ...base,
      nodeId: "h2",
      bindAddr: `127.0.0.1:${port2}`,
      advertiseRpcAddr: `localhost:${port2}`,
      seeds: [`localhost:${m1.boundAddr.split(":")[1]}`],
    });
    try {
      await m2.join();
      await withTimeout(firstAck, 10_000, "an ack from h2 at its host name");
      assert.deepEqual(
        m1.members().map((v) => [v.meta.id, v.meta.rpcAddr, v.state]),
        [
          ["h1", m1.boundAddr, "alive"],
          ["h2", `localhost:${port2}`, "alive"],
        ],
      );
    } finally {
      await m2.close();
      await m1.close();
    }
  });
});

async function freeUdpPort(): Promise<number> {
  const probe = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => probe.bind(0, "127.0.0.1", resolve));
  const port = probe.address().port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

/** Member m1 on 127.0.0.1 (a free port), 16 shards, no seeds, a tick every 20 ms. */
function loneMember(extra: Partial<MembershipOptions> = {}): Promise<Membership> {
  return Membership.start({
    nodeId: "m1",
    bindAddr: "127.0.0.1:0",
    advertiseHttpAddr: "127.0.0.1:8080",
    totalShards: 16,
    seeds: [],
    tickMs: 20,
    ...extra,
  });
}

describe("membership re-contact of its seeds", () => {
  it("one round at a time: a seed lookup that hangs (a DNS server that does not answer) is not started again each round", async (t) => {
    // getaddrinfo behind a silent DNS server takes tens of seconds a name (its timeouts times
    // the search domains), and libuv runs two at once for the whole process: a round started
    // every 30 s beside the one still waiting added lookups faster than they ended, and every
    // other lookup of the node (members by name, gRPC peers) waited behind the pile.
    const hanging: (() => void)[] = [];
    const real = dnsPromises.lookup;
    t.mock.method(dnsPromises, "lookup", ((host: string, options?: unknown) => {
      if (host !== "silent-dns.example") return real(host, options as never);
      return new Promise((_, reject) =>
        hanging.push(() =>
          reject(Object.assign(new Error("queryA ETIMEOUT"), { code: "ETIMEOUT" })),
        ),
      );
    }) as typeof dnsPromises.lookup);
    syncBuiltinESMExports();
    t.mock.timers.enable({ apis: ["setInterval"] });
    let m: Membership | undefined;
    try {
      m = await Membership.start({
        advertiseHttpAddr: "127.0.0.1:8080",
        totalShards: 16,
        nodeId: "n1",
        bindAddr: "127.0.0.1:0",
        seeds: ["silent-dns.example:7447"],
        seedRecontactMs: 1_000,
      });
      for (let round = 0; round < 5; round++) t.mock.timers.tick(1_000);
      assert.equal(hanging.length, 1, "lookups of the seed in flight after five rounds");
      // Once it returns, the next round looks it up again.
      hanging.shift()?.();
      await new Promise((r) => setImmediate(r));
      t.mock.timers.tick(1_000);
      assert.equal(hanging.length, 1, "the next round's lookup");
    } finally {
      for (const fail of hanging.splice(0)) fail();
      t.mock.timers.reset();
      await m?.close();
      t.mock.restoreAll();
      syncBuiltinESMExports();
    }
  });
});

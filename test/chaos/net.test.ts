/**
 * The chaos harness's fault-injecting network on plain sockets: CONNECT tunnels and UDP relays
 * carry bytes between two fake nodes, and its rules stall, reset, delay and drop them.
 */
import assert from "node:assert/strict";
import { createSocket, type Socket as UdpSocket } from "node:dgram";
import { request } from "node:http";
import { createServer, type Server, Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { seededRng } from "../../src/common/index.ts";
import { freePort } from "../support/cluster-process.ts";
import { FaultNet, type NetNode } from "./net.ts";

/** A tunnel from `from`'s proxy to `to`'s advertised address, as grpc-js opens it. */
function tunnel(from: NetNode, to: NetNode): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: "127.0.0.1",
      port: from.proxyPort,
      method: "CONNECT",
      path: `127.0.0.1:${to.relayPort}`,
    });
    req.once("connect", (res, socket) => {
      if (res.statusCode === 200) resolve(socket);
      else reject(new Error(`CONNECT answered ${res.statusCode}`));
    });
    req.once("error", reject);
    req.end();
  });
}

function nextData(s: Socket | UdpSocket, ms = 1_000): Promise<string | null> {
  const event = s instanceof Socket ? "data" : "message";
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      s.removeListener(event, onData);
      resolve(null);
    }, ms);
    const onData = (d: Buffer): void => {
      clearTimeout(timer);
      s.removeListener(event, onData);
      resolve(d.toString());
    };
    s.on(event, onData);
  });
}

describe("FaultNet", () => {
  let net: FaultNet;
  let a: NetNode;
  let b: NetNode;
  const servers: Server[] = [];
  const udp: UdpSocket[] = [];
  /** What node b's TCP server received, by connection. */
  const accepted: Socket[] = [];

  before(async () => {
    a = {
      id: "a",
      realPort: await freePort(),
      relayPort: await freePort(),
      proxyPort: await freePort(),
    };
    b = {
      id: "b",
      realPort: await freePort(),
      relayPort: await freePort(),
      proxyPort: await freePort(),
    };
    for (const n of [a, b]) {
      const srv = createServer((s) => {
        accepted.push(s);
        s.on("data", (d) => s.write(`echo:${d.toString()}`));
      });
      await new Promise<void>((r) => srv.listen(n.realPort, "127.0.0.1", r));
      servers.push(srv);
      const u = createSocket("udp4");
      await new Promise<void>((r) => u.bind(n.realPort, "127.0.0.1", r));
      udp.push(u);
    }
    net = await FaultNet.start([a, b], seededRng(1));
  });

  after(async () => {
    await net.close();
    for (const s of accepted) s.destroy();
    for (const s of servers) await new Promise((r) => s.close(r));
    for (const u of udp) u.close();
  });

  it("relays TCP through the sender's proxy, and stalls one direction until the heal", async () => {
    const t = await tunnel(a, b);
    t.write("1");
    assert.equal(await nextData(t), "echo:1");
    net.set("a", "b", { block: "stall", delayMs: 0, udpLoss: 0 });
    t.write("2");
    assert.equal(await nextData(t, 300), null);
    net.heal();
    assert.equal(await nextData(t), "echo:2");
    t.destroy();
  });

  it("resets connections across a reset link and refuses new ones", async () => {
    const t = await tunnel(a, b);
    const closed = new Promise((r) => t.once("close", r));
    net.set("b", "a", { block: "reset", delayMs: 0, udpLoss: 0 });
    await closed;
    await assert.rejects(tunnel(a, b), /503/);
    net.heal();
    (await tunnel(a, b)).destroy();
  });

  it("delays TCP chunks", async () => {
    const t = await tunnel(a, b);
    net.set("a", "b", { block: "none", delayMs: 200, udpLoss: 0 });
    const t0 = performance.now();
    t.write("3");
    assert.equal(await nextData(t), "echo:3");
    assert.ok(performance.now() - t0 >= 190);
    net.heal();
    t.destroy();
  });

  it("relays datagrams both ways between the nodes' own sockets, and drops them on a rule", async () => {
    const [ua, ub] = udp as [UdpSocket, UdpSocket];
    // a sends to b's advertised (relay) address; b answers to the source it saw.
    const got = new Promise<[string, number]>((resolve) =>
      ub.once("message", (m, rinfo) => resolve([m.toString(), rinfo.port])),
    );
    ua.send("ping", b.relayPort, "127.0.0.1");
    const [msg, port] = await got;
    assert.equal(msg, "ping");
    const back = new Promise<[string, number]>((resolve) =>
      ua.once("message", (m, rinfo) => resolve([m.toString(), rinfo.port])),
    );
    ub.send("ack", port, "127.0.0.1");
    // a sees the answer come from b's advertised address.
    assert.deepEqual(await back, ["ack", b.relayPort]);

    net.set("a", "b", { block: "none", delayMs: 0, udpLoss: 1 });
    ua.send("lost", b.relayPort, "127.0.0.1");
    assert.equal(await nextData(ub, 300), null);
    net.heal();
    assert.ok(net.stats.datagramsDropped >= 1);
  });
});

describe("FaultNet.start when a port is taken", () => {
  it("rejects and leaves none of its own ports bound", async () => {
    // A CI run hung for 88 minutes: node 2's relay port was taken, start rejected, and node 1's
    // proxy and relay stayed open, so the test file's process never exited.
    const nodes: NetNode[] = [];
    for (const id of ["a", "b"]) {
      nodes.push({
        id,
        realPort: await freePort(),
        relayPort: await freePort(),
        proxyPort: await freePort(),
      });
    }
    const [a, b] = nodes as [NetNode, NetNode];
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(b.relayPort, "127.0.0.1", r));
    try {
      await assert.rejects(FaultNet.start(nodes, seededRng(1)), /EADDRINUSE/);
      for (const port of [a.proxyPort, a.relayPort, b.proxyPort]) {
        const probe = createServer();
        await new Promise<void>((resolve, reject) => {
          probe.once("error", reject);
          probe.listen(port, "127.0.0.1", resolve);
        });
        await new Promise((r) => probe.close(r));
      }
      const u = createSocket("udp4");
      await new Promise<void>((resolve, reject) => {
        u.once("error", reject);
        u.bind(a.relayPort, "127.0.0.1", resolve);
      });
      u.close();
    } finally {
      blocker.close();
    }
  });
});

describe("freePort", () => {
  it("never hands out the same port twice in one process", async () => {
    // Ports picked for one cluster are free when picked but bound only later, when its nodes
    // start: two picks of the same port would make one node's listen fail.
    const seen = new Set<number>();
    for (let i = 0; i < 500; i++) {
      const port = await freePort();
      assert.ok(!seen.has(port), `port ${port} handed out twice (pick ${i})`);
      seen.add(port);
    }
  });
});

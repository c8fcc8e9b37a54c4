/**
 * A fault-injecting network between the nodes of a chaos cluster, in the harness's process.
 *
 * Every byte between two nodes goes through here, and the harness knows, for each, which node
 * sent it and which one receives it:
 *
 * - **TCP (gRPC: Raft streams, read index, meta proposals, forwarded KV calls).** Each node runs
 *   with `grpc_proxy=http://127.0.0.1:<its own proxy port>`: grpc-js then opens every outgoing
 *   channel with an HTTP CONNECT through that proxy (@grpc/grpc-js http_proxy.ts), so the proxy
 *   knows the sender (whose proxy it is) and the receiver (the CONNECT target). Cairn sets no
 *   channel option that disables the proxy. The proxy opens the real connection and relays bytes.
 * - **UDP (SWIM).** Each node advertises a relay address (`advertise_rpc_addr`), not the address
 *   it binds, and the seeds are the relay addresses: peers send their datagrams there. A node's
 *   SWIM socket sends from its bound port, which identifies the sender. The relay for node j
 *   forwards a datagram from node i to j's real port from a side socket kept for i; what j sends
 *   back to that side socket (a reply to the source address it saw) goes to i from j's relay
 *   address, so i sees j at the address j advertises.
 * - The relay address also accepts plain TCP and relays it to the node without any fault: only a
 *   peer that bypassed its proxy would use it. Such connections are counted (`stats.unproxied`)
 *   and reported: they would escape the partitions.
 *
 * Faults are rules per direction (from → to):
 *
 * - `stall`: a blackhole as an IP partition makes it for TCP: bytes in that direction wait (TCP
 *   retransmits them) and flow again at the heal, in order; a new connection across it is not
 *   answered (its SYN is lost) until the heal; UDP datagrams are dropped.
 * - `reset`: the link refuses (an ICMP unreachable, a RST): connections across it are closed,
 *   new ones refused (the CONNECT answers 503), datagrams dropped.
 * - `delayMs`: latency added to every TCP chunk and datagram in that direction.
 * - `udpLoss`: the probability that a datagram is dropped (SWIM loss without a partition).
 *
 * A TCP connection carries both directions, so a rule on either direction affects opening it;
 * once open, each direction obeys its own rule (an asymmetric partition stalls one direction of
 * every connection between the two nodes, whichever opened it).
 */
import assert from "node:assert/strict";
import { createSocket, type RemoteInfo, type Socket as UdpSocket } from "node:dgram";
import { createServer as createHttpServer, type IncomingMessage, type Server } from "node:http";
import {
  createServer as createTcpServer,
  connect,
  type Server as TcpServer,
  type Socket,
} from "node:net";
import type { Rng } from "../../src/common/index.ts";

export interface LinkRule {
  readonly block: "none" | "stall" | "reset";
  readonly delayMs: number;
  readonly udpLoss: number;
}

export const OPEN: LinkRule = { block: "none", delayMs: 0, udpLoss: 0 };

export interface NetNode {
  readonly id: string;
  /**
   * The port the node binds (TCP gRPC and UDP SWIM), on 127.0.0.1. It may change between
   * starts (ChaosCluster.start: another process took it); the relays read it on every use.
   */
  realPort: number;
  /** The port of its relay (advertised; UDP and plain TCP), on 127.0.0.1. */
  readonly relayPort: number;
  /** The port of its outgoing CONNECT proxy, on 127.0.0.1. */
  readonly proxyPort: number;
}

export interface NetStats {
  connections: number;
  refused: number;
  resets: number;
  unproxied: number;
  datagrams: number;
  datagramsDropped: number;
}

interface Chunk {
  readonly data: Buffer;
  readonly at: number;
}

/** One direction of one relayed connection: chunks wait here for their time and their rule. */
class Pipe {
  readonly #queue: Chunk[] = [];
  #timer: NodeJS.Timeout | null = null;
  readonly #dest: Socket;
  readonly #rule: () => LinkRule;

  constructor(dest: Socket, rule: () => LinkRule) {
    this.#dest = dest;
    this.#rule = rule;
  }

  push(data: Buffer): void {
    this.#queue.push({ data, at: performance.now() + this.#rule().delayMs });
    this.pump();
  }

  pump(): void {
    if (this.#timer !== null) return;
    while (this.#queue.length > 0) {
      if (this.#rule().block !== "none" || this.#dest.destroyed) return;
      const head = this.#queue[0] as Chunk;
      const wait = head.at - performance.now();
      if (wait > 0) {
        this.#timer = setTimeout(() => {
          this.#timer = null;
          this.pump();
        }, wait);
        return;
      }
      this.#queue.shift();
      this.#dest.write(head.data);
    }
  }

  close(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    this.#queue.length = 0;
  }
}

interface Tunnel {
  readonly from: string;
  readonly to: string;
  readonly a: Socket;
  readonly b: Socket;
  readonly forward: Pipe;
  readonly backward: Pipe;
}

export class FaultNet {
  /** Every node the network has carried, in the order added (a node added later joins them). */
  readonly #nodes: NetNode[];
  readonly stats: NetStats = {
    connections: 0,
    refused: 0,
    resets: 0,
    unproxied: 0,
    datagrams: 0,
    datagramsDropped: 0,
  };
  readonly #rules = new Map<string, LinkRule>();
  readonly #rng: Rng;
  readonly #proxies = new Map<string, Server>();
  readonly #relays = new Map<string, TcpServer>();
  readonly #udp = new Map<string, UdpSocket>();
  /** Side sockets: `${from}>${to}` sends to `to`'s real port on behalf of `from`. */
  readonly #side = new Map<string, UdpSocket>();
  readonly #tunnels = new Set<Tunnel>();
  readonly #sockets = new Set<Socket>();
  /** CONNECTs held while their link stalls, answered at the heal. */
  readonly #held: (() => void)[] = [];
  #closed = false;

  private constructor(nodes: readonly NetNode[], rng: Rng) {
    this.#nodes = [...nodes];
    this.#rng = rng;
  }

  get nodes(): readonly NetNode[] {
    return this.#nodes;
  }

  static async start(nodes: readonly NetNode[], rng: Rng): Promise<FaultNet> {
    const net = new FaultNet(nodes, rng);
    try {
      for (const n of nodes) await net.#listen(n);
    } catch (err) {
      // What did bind must not outlive the failure: an open listener keeps the process alive.
      await net.close();
      throw err;
    }
    return net;
  }

  /**
   * Carries one more node (a node joining the cluster): its proxy, relay and datagrams from
   * now on. When a port is taken, nothing of the node stays bound and the error is thrown.
   */
  async add(n: NetNode): Promise<void> {
    if (this.#closed) throw new Error("the network is closed");
    if (this.#nodes.some((x) => x.id === n.id))
      throw new Error(`${n.id} is already on the network`);
    await this.#listen(n).catch(async (err: unknown) => {
      await this.#unlisten(n);
      throw err;
    });
    this.#nodes.push(n);
  }

  rule(from: string, to: string): LinkRule {
    return this.#rules.get(`${from}>${to}`) ?? OPEN;
  }

  /** Sets the rule of one direction; existing connections follow it at once. */
  set(from: string, to: string, rule: LinkRule): void {
    if (rule.block === "none" && rule.delayMs === 0 && rule.udpLoss === 0)
      this.#rules.delete(`${from}>${to}`);
    else this.#rules.set(`${from}>${to}`, rule);
    this.#apply();
  }

  /** Removes every rule: stalled bytes flow again, held connections are answered. */
  heal(): void {
    this.#rules.clear();
    this.#apply();
  }

  /** True when some rule is in force. */
  get faulty(): boolean {
    return this.#rules.size > 0;
  }

  #apply(): void {
    for (const t of [...this.#tunnels]) {
      if (this.rule(t.from, t.to).block === "reset" || this.rule(t.to, t.from).block === "reset") {
        this.stats.resets++;
        this.#closeTunnel(t);
        continue;
      }
      t.forward.pump();
      t.backward.pump();
    }
    const held = this.#held.splice(0);
    for (const retry of held) retry();
  }

  #closeTunnel(t: Tunnel): void {
    this.#tunnels.delete(t);
    t.forward.close();
    t.backward.close();
    t.a.destroy();
    t.b.destroy();
  }

  #byPort(port: number): NetNode | undefined {
    return this.#nodes.find((n) => n.relayPort === port || n.realPort === port);
  }

  #track(s: Socket): void {
    this.#sockets.add(s);
    s.once("close", () => this.#sockets.delete(s));
    s.on("error", () => s.destroy());
  }

  async #listen(n: NetNode): Promise<void> {
    // The node's outgoing CONNECT proxy.
    const proxy = createHttpServer((_req, res) => {
      res.writeHead(405).end();
    });
    proxy.on("connect", (req: IncomingMessage, socket: Socket, head: Buffer) =>
      this.#connect(n, req, socket, head),
    );
    this.#proxies.set(n.id, proxy);
    await new Promise<void>((resolve, reject) => {
      proxy.once("error", reject);
      proxy.listen(n.proxyPort, "127.0.0.1", () => resolve());
    });

    // Its relay address: plain TCP passes, unfaulted (counted), UDP goes through the rules.
    const relay = createTcpServer((socket) => {
      this.stats.unproxied++;
      this.#track(socket);
      const up = connect(n.realPort, "127.0.0.1");
      this.#track(up);
      socket.pipe(up).pipe(socket);
      socket.once("close", () => up.destroy());
      up.once("close", () => socket.destroy());
    });
    this.#relays.set(n.id, relay);
    await new Promise<void>((resolve, reject) => {
      relay.once("error", reject);
      relay.listen(n.relayPort, "127.0.0.1", () => resolve());
    });

    const udp = createSocket("udp4");
    this.#udp.set(n.id, udp);
    await new Promise<void>((resolve, reject) => {
      udp.once("error", reject);
      udp.bind(n.relayPort, "127.0.0.1", () => resolve());
    });
    udp.on("message", (msg, rinfo) => this.#datagramIn(n, msg, rinfo));
    udp.on("error", () => undefined);
  }

  /** Closes what #listen bound for `n` (after a failed listen). */
  async #unlisten(n: NetNode): Promise<void> {
    const servers = [this.#proxies.get(n.id), this.#relays.get(n.id)];
    this.#proxies.delete(n.id);
    this.#relays.delete(n.id);
    await Promise.all(
      servers.map(
        (srv) =>
          new Promise<void>((resolve) => {
            if (srv === undefined) resolve();
            else srv.close(() => resolve());
          }),
      ),
    );
    const udp = this.#udp.get(n.id);
    this.#udp.delete(n.id);
    try {
      udp?.close();
    } catch {
      // not bound
    }
  }

  #connect(from: NetNode, req: IncomingMessage, socket: Socket, head: Buffer): void {
    this.#track(socket);
    const target = req.url ?? "";
    const port = Number(target.slice(target.lastIndexOf(":") + 1));
    const to = this.#byPort(port);
    if (to === undefined) {
      // Not a node (or a node of another cluster): refuse rather than relay unfaulted.
      socket.end("HTTP/1.1 502 Bad Gateway\r\n\r\n");
      return;
    }
    const attempt = (): void => {
      if (this.#closed || socket.destroyed) return;
      const there = this.rule(from.id, to.id).block;
      const back = this.rule(to.id, from.id).block;
      if (there === "reset" || back === "reset") {
        this.stats.refused++;
        socket.end("HTTP/1.1 503 Service Unavailable\r\n\r\n");
        return;
      }
      if (there === "stall" || back === "stall") {
        // Unanswered until the heal, as a SYN into a blackhole; grpc-js times out meanwhile.
        this.#held.push(attempt);
        return;
      }
      const up = connect(to.realPort, "127.0.0.1");
      this.#track(up);
      up.once("connect", () => {
        this.stats.connections++;
        socket.write("HTTP/1.1 200 Connection Established\r\n\r\n");
        const t: Tunnel = {
          from: from.id,
          to: to.id,
          a: socket,
          b: up,
          forward: new Pipe(up, () => this.rule(from.id, to.id)),
          backward: new Pipe(socket, () => this.rule(to.id, from.id)),
        };
        this.#tunnels.add(t);
        if (head.length > 0) t.forward.push(head);
        socket.on("data", (d: Buffer) => t.forward.push(d));
        up.on("data", (d: Buffer) => t.backward.push(d));
        const end = (): void => {
          if (this.#tunnels.has(t)) this.#closeTunnel(t);
        };
        socket.once("close", end);
        up.once("close", end);
      });
      up.once("error", () => {
        if (!socket.destroyed) socket.end("HTTP/1.1 502 Bad Gateway\r\n\r\n");
      });
    };
    attempt();
  }

  /** A datagram for node `to`'s relay: from a node's SWIM socket (by its bound port). */
  #datagramIn(to: NetNode, msg: Buffer, rinfo: RemoteInfo): void {
    const from = this.#nodes.find((n) => n.realPort === rinfo.port);
    if (from === undefined) return;
    this.#relayDatagram(from, to, msg, this.#sideSocket(from, to), to.realPort);
  }

  /**
   * The side socket that carries `from`'s datagrams to `to`; what `to` sends back to it goes to
   * `from` from `to`'s relay address.
   */
  #sideSocket(from: NetNode, to: NetNode): UdpSocket {
    const key = `${from.id}>${to.id}`;
    let s = this.#side.get(key);
    if (s !== undefined) return s;
    const side = createSocket("udp4");
    side.bind(0, "127.0.0.1");
    side.on("error", () => undefined);
    side.on("message", (msg, rinfo) => {
      if (rinfo.port !== to.realPort) return;
      const relay = this.#udp.get(to.id);
      if (relay !== undefined) this.#relayDatagram(to, from, msg, relay, from.realPort);
    });
    this.#side.set(key, side);
    s = side;
    return s;
  }

  #relayDatagram(from: NetNode, to: NetNode, msg: Buffer, via: UdpSocket, port: number): void {
    this.stats.datagrams++;
    const rule = this.rule(from.id, to.id);
    if (rule.block !== "none" || (rule.udpLoss > 0 && this.#rng.float() < rule.udpLoss)) {
      this.stats.datagramsDropped++;
      return;
    }
    const send = (): void => {
      if (!this.#closed) via.send(msg, port, "127.0.0.1", () => undefined);
    };
    if (rule.delayMs > 0) setTimeout(send, rule.delayMs);
    else send();
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#rules.clear();
    this.#held.length = 0;
    for (const t of [...this.#tunnels]) this.#closeTunnel(t);
    for (const s of this.#sockets) s.destroy();
    await Promise.all(
      [...this.#proxies.values(), ...this.#relays.values()].map(
        (srv) => new Promise<void>((resolve) => srv.close(() => resolve())),
      ),
    );
    for (const s of [...this.#udp.values(), ...this.#side.values()]) {
      try {
        s.close();
      } catch {
        // already closed
      }
    }
    assert.ok(this.#tunnels.size === 0);
  }
}

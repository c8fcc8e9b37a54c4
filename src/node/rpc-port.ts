/**
 * `rpc_addr` before the node opens its storage, and on port 0.
 *
 * Checked first: a start that fails on `rpc_addr` (a port in use over TCP or UDP, a host that is
 * not this machine's or does not resolve) must fail before the storage opens. Opening it creates
 * the WALs (`wal`, `wal-worker-<i>`, their `.created` markers), which bind the data directory to
 * the shard_workers, node_id and mode of that start: a first start on a wrong port with a wrong
 * setting pinned the setting, and the next start, on the right port, was refused.
 * `claimRpcAddr` (a node in one thread) binds SWIM's socket there and keeps it for
 * `Membership.start`; gRPC's TCP port is only probed (bound and released): its listeners are
 * the front ends', bound with SO_REUSEPORT in their own threads, and a listener held from here
 * would accept connections (which then hang) while the storage recovers, where a node not yet
 * listening refuses them. `checkRpcAddr` (shard workers: worker 0's sockets, in its own thread)
 * probes both. Another process that takes the TCP port while the storage opens fails the start
 * after it (the front end checks again, io-threads.ts): on a new directory a window of
 * milliseconds.
 *
 * Port 0: a port free for gRPC (TCP) and for SWIM, whose UDP socket binds the same
 * number. The kernel picks a TCP port without looking at UDP (Linux even prefers odd ports for a
 * TCP bind and leaves even ones to outgoing connections), so binding gRPC first and then SWIM
 * on the number it got failed the start whenever that UDP port was taken. Here SWIM's socket is
 * bound first, on a port the kernel picks free for UDP, and kept; the same number is then tried
 * for TCP, and another one picked while it is taken.
 */
import type dgram from "node:dgram";
import { createServer } from "node:net";
import { formatHostPort, parseHostPort } from "../config/index.ts";
import { bindGossipSocket } from "../membership/index.ts";
import { AddressInUseError, BindError, bindErrorFor } from "../ops/index.ts";

/** Ports tried before the start fails: each one a random pick of the kernel's. */
export const RPC_PORT_ATTEMPTS = 32;

export interface ReservedRpcPort {
  /** rpc_addr with the port picked. */
  readonly address: string;
  /** SWIM's socket, bound on that port number: for `Membership.start`. */
  readonly socket: dgram.Socket;
}

/**
 * For `rpc_addr`'s host with port 0: SWIM's socket bound on a port whose TCP number was free a
 * moment ago (gRPC binds it next; another process taking it in between fails the start, as any
 * taken rpc_addr does). A bind error other than a taken TCP port is thrown as it is (a UDP one:
 * the socket's, `syscall` "bind").
 */
export async function reserveRpcPort(
  host: string,
  attempts: number = RPC_PORT_ATTEMPTS,
): Promise<ReservedRpcPort> {
  let last = "";
  for (let i = 0; i < attempts; i++) {
    const socket = await bindGossipSocket(formatHostPort({ host, port: 0 }));
    const { address: ip, port } = socket.address();
    try {
      if (await tcpFree(ip, port)) return { address: formatHostPort({ host, port }), socket };
    } catch (err) {
      socket.close();
      throw err;
    }
    last = formatHostPort({ host, port });
    socket.close();
  }
  throw new BindError(
    formatHostPort({ host, port: 0 }),
    "rpc_addr",
    `no port free for both TCP (gRPC) and UDP (SWIM) in ${attempts} tries (the last: ${last}); set rpc_addr to a free port`,
  );
}

/**
 * `rpcAddr` taken for a node that runs gRPC and SWIM in this thread: SWIM's socket bound on it
 * (port 0: on a port free for TCP too, `reserveRpcPort`) and kept, and its TCP port probed.
 * Rejects with AddressInUseError or BindError naming rpc_addr.
 */
export async function claimRpcAddr(rpcAddr: string): Promise<ReservedRpcPort> {
  const { host, port } = rpcHostPort(rpcAddr);
  if (port === 0) {
    return await reserveRpcPort(host).catch((err: unknown) => {
      throw bindFailure(err, rpcAddr);
    });
  }
  const socket = await bindGossipSocket(rpcAddr).catch((err: unknown) => {
    throw bindFailure(err, rpcAddr);
  });
  try {
    await probeTcp(host, port, rpcAddr);
  } catch (err) {
    socket.close();
    throw err;
  }
  return { address: rpcAddr, socket };
}

/**
 * Rejects with AddressInUseError or BindError naming rpc_addr unless `rpcAddr` can be bound now
 * over TCP and UDP (port 0: unless a port free for both can be found on its host): claimRpcAddr,
 * its socket released, since the shard workers bind both in their threads.
 */
export async function checkRpcAddr(rpcAddr: string): Promise<void> {
  const { socket } = await claimRpcAddr(rpcAddr);
  await new Promise<void>((resolve) => socket.close(() => resolve()));
}

function rpcHostPort(rpcAddr: string): { host: string; port: number } {
  const parsed = parseHostPort(rpcAddr, { allowPortZero: true, allowUnspecified: true });
  // The configuration checks rpc_addr with the same parser: this is a caller's mistake.
  if (!parsed.ok) throw bindErrorFor(new Error(parsed.reason), rpcAddr, "rpc_addr");
  return parsed.value;
}

/** A failure of SWIM's socket (its bind, or its host's lookup) names rpc_addr. */
function bindFailure(err: unknown, rpcAddr: string): unknown {
  const syscall = (err as NodeJS.ErrnoException).syscall;
  return syscall === "bind" || syscall === "getaddrinfo"
    ? bindErrorFor(err, rpcAddr, "rpc_addr")
    : err;
}

/** Binds host:port over TCP (without SO_REUSEPORT: a listener of anyone's refuses it) and lets go. */
async function probeTcp(host: string, port: number, rpcAddr: string): Promise<void> {
  let free: boolean;
  try {
    free = await tcpFree(host, port);
  } catch (err) {
    throw bindErrorFor(err, rpcAddr, "rpc_addr");
  }
  if (!free) throw new AddressInUseError(rpcAddr, "rpc_addr");
}

/** Whether a TCP listener can bind ip:port now (false: EADDRINUSE). */
function tcpFree(ip: string, port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", (err: NodeJS.ErrnoException) => {
      if (err.code === "EADDRINUSE") resolve(false);
      else reject(err);
    });
    probe.listen({ host: ip, port, exclusive: true }, () => probe.close(() => resolve(true)));
  });
}

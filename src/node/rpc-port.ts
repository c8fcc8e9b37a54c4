/**
 * `rpc_addr` on port 0: a port free for gRPC (TCP) and for SWIM, whose UDP socket binds the same
 * number. The kernel picks a TCP port without looking at UDP (Linux even prefers odd ports for a
 * TCP bind and leaves even ones to outgoing connections), so binding gRPC first and then SWIM
 * on the number it got failed the start whenever that UDP port was taken. Here SWIM's socket is
 * bound first, on a port the kernel picks free for UDP, and kept; the same number is then tried
 * for TCP, and another one picked while it is taken.
 */
import type dgram from "node:dgram";
import { createServer } from "node:net";
import { formatHostPort } from "../config/index.ts";
import { bindGossipSocket } from "../membership/index.ts";
import { BindError } from "../ops/index.ts";

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

/**
 * A raw UDP socket on 127.0.0.1 speaking SWIM's wire format to a membership driver under test:
 * it sends any message, and waits for the ack of a ping it sends after them, which proves the
 * datagrams sent before it from the same socket were handled (loopback keeps their order).
 */
import dgram from "node:dgram";
import {
  encodeMessage,
  decodeMessage,
  memberId,
  type Message,
} from "../../src/membership/core/index.ts";
import { withTimeout } from "../support/timeout.ts";

export async function boundSocket(): Promise<dgram.Socket> {
  const s = dgram.createSocket("udp4");
  await new Promise<void>((resolve) => s.bind(0, "127.0.0.1", resolve));
  return s;
}

/** A raw socket that sends messages to `port` and waits for the ack of a ping it sends. */
export function raw(socket: dgram.Socket, port: number) {
  let seq = 9000;
  return {
    send: (m: Message): void => {
      socket.send(encodeMessage(m), port, "127.0.0.1");
    },
    /** Pings `target` and waits for the ack: what was sent before it has been handled. */
    pingAcked: async (target: string, what: string): Promise<void> => {
      const mine = ++seq;
      const acked = new Promise<void>((resolve) => {
        const on = (msg: Buffer): void => {
          const d = decodeMessage(msg);
          if (d.ok && d.message.type === "ack" && d.message.seq === mine) {
            socket.off("message", on);
            resolve();
          }
        };
        socket.on("message", on);
      });
      socket.send(
        encodeMessage({
          type: "ping",
          from: memberId("prober"),
          totalShards: 16,
          seq: mine,
          target: memberId(target),
          gossip: [],
        }),
        port,
        "127.0.0.1",
      );
      await withTimeout(acked, 10_000, what);
    },
  };
}

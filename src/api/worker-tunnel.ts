/**
 * Connections aimed at one shard worker of a node (docs/architecture.md, "Using every core").
 * A node's shard workers all listen on `rpc_addr` (SO_REUSEPORT), so the kernel, not the caller,
 * picks the worker that accepts a connection. Clients do not care: a call whose shard another
 * worker owns is handed to it. A peer's Raft traffic does: worker i's groups talk to worker i of
 * every node, and a hop between threads for every frame would cost what the workers save.
 *
 * So a peer's connection opens with an HTTP/1.1 CONNECT whose authority names the worker,
 * `CONNECT cairn-shard-worker-<i>-of-<N>:0 HTTP/1.1` (N: the caller's own number of workers), its
 * HTTP/2 preface following at once (h2/core.ts reads the answer before the server's frames). The
 * worker that accepted the connection reads up to the end of that request, inside the read that
 * delivered it. If it is worker i it answers 200 and serves the connection. If not, it stops
 * reading there, duplicates the socket's descriptor (the native addon's dupFd), closes its own
 * socket and hands the copy, with the bytes it read past the request, to worker i, which answers
 * 200 and serves it; the rest of the client's bytes are still in the kernel's buffer for worker i
 * to read. The connection then carries HTTP/2 to worker i for its whole life, with no hop between
 * threads.
 *
 * With TLS on (`tls.*`, a cluster's peers), the CONNECT and its answer stay cleartext and TLS
 * starts after them, in the worker that serves the connection: a TLS session is state inside one
 * thread and cannot be handed over as a descriptor. The caller sends the CONNECT alone and starts
 * its TLS handshake once the 200 has arrived (h2/core.ts, CoreOptions.startTls); the worker that
 * accepted the connection hands it over as above, and worker i answers 200, then runs the
 * handshake (front-end.ts, `sniff`'s "tunnel" stage). The CONNECT carries no secret (a worker's
 * index); what follows is authenticated like any peer connection (src/common/peer-tls.ts). A
 * cleartext caller's preface after the CONNECT gets GOAWAY INADEQUATE_SECURITY.
 *
 * A connection whose first byte is not `C` is HTTP/2 (the preface starts `PRI`), served where it
 * landed. A CONNECT that is malformed (400), for another host (404), or from a caller that runs
 * another number of shard workers than this node (421, a configuration mistake the message
 * names) is answered and closed: the caller's connection fails before it is ready, and nothing
 * of a call was sent. A node whose workers serve a peer's Raft stream only on a tunnel to the
 * right worker refuses one that arrives on a plain connection (front-end.ts).
 */

/**
 * The authority that names shard worker `index` of `count` in a CONNECT request. The count lets
 * a node refuse a peer that slices its shards differently: worker i's groups are the shards
 * with id mod count = i on both ends only when both run as many workers.
 */
export function workerAuthority(index: number, count: number): string {
  return `cairn-shard-worker-${index}-of-${count}:0`;
}
/** A CONNECT request longer than this is refused: ours is ~80 bytes. */
export const MAX_TUNNEL_REQUEST_BYTES = 1024;
const C = 0x43;

/** What the first bytes of a connection ask for. */
export type TunnelRequest =
  /** Not a CONNECT: an HTTP/2 connection, to serve where it landed. */
  | { readonly kind: "http2" }
  /** Not enough bytes yet to tell. */
  | { readonly kind: "partial" }
  /**
   * A CONNECT for shard worker `index` of a node with `count` workers (the caller's own count);
   * the last `rest` bytes of the head came after it.
   */
  | {
      readonly kind: "worker";
      readonly index: number;
      readonly count: number;
      readonly rest: number;
    }
  /** A CONNECT this node cannot serve: answer with `answer` and close. */
  | { readonly kind: "refused"; readonly answer: string };

/** Reads the start of a connection (`head`: every byte received so far). */
export function readTunnelRequest(head: Buffer): TunnelRequest {
  if (head.length === 0) return { kind: "partial" };
  if (head[0] !== C) return { kind: "http2" };
  const end = head.indexOf("\r\n\r\n");
  if (end < 0) {
    return head.length > MAX_TUNNEL_REQUEST_BYTES
      ? { kind: "refused", answer: answer(400, "the CONNECT request is too long") }
      : { kind: "partial" };
  }
  const line = head.subarray(0, head.indexOf("\r\n")).toString("latin1");
  const match = /^CONNECT (\S+) HTTP\/1\.[01]$/.exec(line);
  if (match === null) return { kind: "refused", answer: answer(400, "not a CONNECT request") };
  const authority = match[1] as string;
  const worker = /^cairn-shard-worker-(\d{1,4})-of-(\d{1,4}):\d+$/.exec(authority);
  if (worker === null) {
    return {
      kind: "refused",
      answer: answer(404, `this node connects only to its shard workers, not ${authority}`),
    };
  }
  const index = Number(worker[1]);
  const count = Number(worker[2]);
  if (index >= count) {
    return {
      kind: "refused",
      answer: answer(400, `there is no shard worker ${index} of ${count}`),
    };
  }
  return { kind: "worker", index, count, rest: head.length - (end + 4) };
}

/**
 * An HTTP/1.1 answer to a CONNECT request, with the reason as its status line's text; any but a
 * 200 closes the connection.
 */
export function answer(code: number, reason: string): string {
  const close = code === 200 ? "" : "Connection: close\r\n";
  return `HTTP/1.1 ${code} ${reason.replace(/[\r\n]/g, " ")}\r\n${close}\r\n`;
}

/** The answer that opens a tunnel. */
export const TUNNEL_OPEN = answer(200, "Connection established");

/**
 * The leader's side of a KV call forwarded over the peer streams (forward.ts; RaftFrame.call in
 * proto/cairn/v1/raft.proto): the call runs through the same handler as a client's, marked
 * forwarded so that it is never forwarded again, and its answer — response or status with the
 * trailing metadata (CAIRN_ERR_* code, leader hint) — becomes the PeerReply sent back.
 *
 * Only the methods forward.ts forwards are served (Put, Get, Delete of cairn.v1.KV); any other
 * is answered UNIMPLEMENTED. The peer passed the stream's handshake (same cluster), and nothing
 * it sends here reaches anything a client could not reach.
 */
import { Metadata, type ServerErrorResponse, status } from "@grpc/grpc-js";
import { deadlineClock } from "../common/index.ts";
import type { PeerCall, PeerReply } from "../replication/index.ts";
import { metadataPairs } from "./handoff.ts";
import { HandedCall, type MethodTable } from "./io-threads.ts";
import { MALFORMED_REQUEST_CODE, malformedRequest } from "./strict-wire.ts";
import { ERROR_CODE_KEY, FORWARDED_KEY } from "./wire.ts";

/** The KV methods forward.ts sends to a leader. */
export const FORWARDED_PATHS: ReadonlySet<string> = new Set([
  "/cairn.v1.KV/Put",
  "/cairn.v1.KV/Get",
  "/cairn.v1.KV/Delete",
]);

const EMPTY = new Uint8Array(0);

/** Serves `call` from node `from` with `table`'s handler; `answer` hears exactly once. */
export function servePeerCall(
  table: MethodTable,
  from: string,
  call: PeerCall,
  answer: (reply: PeerReply) => void,
): void {
  const fail = (code: status, details: string, trailers: PeerReply["trailers"] = []): void =>
    answer({ id: call.id, code, details, response: EMPTY, trailers });
  const method = FORWARDED_PATHS.has(call.method) ? table.unaryByPath(call.method) : null;
  if (method === null) {
    fail(status.UNIMPLEMENTED, `${call.method} is not a method peers may forward`);
    return;
  }
  const { def, handler } = method;
  let request: unknown;
  try {
    request = def.requestDeserialize(
      Buffer.from(call.request.buffer, call.request.byteOffset, call.request.length),
    );
  } catch (err) {
    // The peer's bytes are no message of the method's type (a bug of its build, or another
    // build's): its mistake, answered as a client's unary call would be (io-threads.ts), not
    // INTERNAL, which would say a fault here and reach the forwarding node's client as one.
    fail(status.INVALID_ARGUMENT, malformedRequest(call.method, err), [
      [ERROR_CODE_KEY, MALFORMED_REQUEST_CODE],
    ]);
    return;
  }
  const metadata = new Metadata();
  metadata.set(FORWARDED_KEY, "1");
  const handed = new HandedCall(
    request,
    metadata,
    deadlineClock() + call.timeoutMs,
    `peer ${from}`,
    call.method,
  );
  let answered = false;
  const callback = (err: unknown, value?: unknown, trailer?: Metadata): void => {
    if (answered) return;
    answered = true;
    if (err !== null && err !== undefined) {
      const e = err as ServerErrorResponse;
      fail(
        typeof e.code === "number" ? e.code : status.UNKNOWN,
        e.details ?? e.message,
        trailerPairs(e.metadata),
      );
      return;
    }
    let response: Buffer;
    try {
      response = def.responseSerialize(value);
    } catch (serializeErr) {
      fail(status.INTERNAL, `error serializing response: ${String(serializeErr)}`);
      return;
    }
    answer({
      id: call.id,
      code: status.OK,
      details: "",
      response,
      trailers: trailerPairs(trailer),
    });
  };
  try {
    handler(handed, callback);
  } catch (err) {
    callback({ code: status.UNKNOWN, details: err instanceof Error ? err.message : String(err) });
  }
}

/** Metadata as PeerReply carries it: strings, a "-bin" value in base64 (metadataOf's input). */
function trailerPairs(md: Metadata | undefined | null): [string, string][] {
  if (md === undefined || md === null) return [];
  const pairs = metadataPairs(md);
  if (pairs === null) return [];
  return pairs.map(([k, v]) => [k, typeof v === "string" ? v : Buffer.from(v).toString("base64")]);
}

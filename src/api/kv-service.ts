/**
 * The KV service: validates each request, runs it through the multi-raft driver, records the
 * catalogue metrics, and answers with a value or a mapped gRPC status. With a Forwarder, a Put,
 * Delete or linearizable Get refused because another node leads the shard is forwarded there and
 * the leader's answer relayed (forward.ts); this node records it as `not_leader`.
 *
 * Every Put, Get and Delete answered OK names the node that served it in `cairn-served-by`
 * (SERVED_BY_KEY): this node when its store answered, the node a forward reached when it was
 * forwarded (its trailer relayed). A serializable Get's promises hold per serving node, not per
 * node called (docs/operations.md), so a client that checks them needs this. The trailer is one
 * Metadata made once and handed to every answer (grpc-js clones a status's metadata before it
 * sends it; the front end only reads it), so it costs no allocation per call here. Scan names
 * no node: a page may be read from replicas on several nodes (MultiRaft remoteScan).
 */
import {
  Metadata,
  type sendUnaryData,
  type ServerUnaryCall,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { callDeadline } from "../common/index.ts";
import { type CairnMetrics, type KvOperation, type KvResult, silentLogger } from "../ops/index.ts";
import type { Logger } from "../ops/index.ts";
import {
  InternalErrorLog,
  metricStatusOf,
  toServiceError,
  VersionMismatchError,
  InvalidArgumentError,
} from "./errors.ts";
import type { ForwardedMethod, Forwarder, ForwardReply } from "./forward.ts";
import { nodeId } from "../raft/index.ts";
import { ITEM_OVERHEAD_BYTES, type ScanPage } from "../replication/index.ts";
import type { DeleteRequest__Output } from "./generated/cairn/v1/DeleteRequest.ts";
import type { DeleteResponse } from "./generated/cairn/v1/DeleteResponse.ts";
import type { GetRequest__Output } from "./generated/cairn/v1/GetRequest.ts";
import type { GetResponse } from "./generated/cairn/v1/GetResponse.ts";
import type { PutRequest__Output } from "./generated/cairn/v1/PutRequest.ts";
import type { PutResponse } from "./generated/cairn/v1/PutResponse.ts";
import type { ScanRequest__Output } from "./generated/cairn/v1/ScanRequest.ts";
import type { ScanResponse } from "./generated/cairn/v1/ScanResponse.ts";
import type { KvStore } from "./store.ts";
import { SERVED_BY_KEY } from "./wire.ts";
import {
  checkEnum,
  checkExpected,
  checkKey,
  checkValue,
  CONSISTENCIES,
  type Limits,
} from "./validate.ts";

const DEFAULT_SCAN_LIMIT = 1000;
const MAX_SCAN_LIMIT = 10_000;
const PAGE_TOKEN_VERSION = 1;
/**
 * A scan page's items are cut to fit a message of this size at most (grpc-js's default receive
 * limit, which a client may keep), or of the node's limits.max_message_bytes when smaller.
 */
const SCAN_PAGE_MESSAGE_BYTES = 4 * 1024 * 1024;

/**
 * The bytes a scan page's items may take (scan-merge.ts counts them): the message, less the
 * page token (a key and a byte) and the response's own framing.
 */
export function scanPageBytes(maxMessageBytes: number, limits: Limits): number {
  return Math.min(maxMessageBytes, SCAN_PAGE_MESSAGE_BYTES) - limits.maxKeyBytes - 1024;
}

/**
 * The largest answer the KV service sends, past limits.max_message_bytes: the configuration
 * leaves room there for one largest key and value (a Put's), and a Scan page of that one item
 * names its key again in its page token (a key, a byte, and the field's framing). Without the
 * room that page was refused ("Sent message larger than max"), and no scan or backup could go
 * past such an item. A page of several items stays within scanPageBytes.
 */
export function maxAnswerBytes(maxMessageBytes: number, limits: Limits): number {
  return maxMessageBytes + limits.maxKeyBytes + 64;
}

export interface KvServiceOptions {
  /** Forwards refused calls to the shard's leader; absent (single node), NOT_LEADER is answered. */
  readonly forwarder?: Forwarder;
  /** Where a call answered INTERNAL is logged at ERROR (rate-limited, InternalErrorLog). */
  readonly log?: Logger;
  /** This node's id, named in `cairn-served-by` of what it serves; absent, no such trailer. */
  readonly nodeId?: string;
  /** The bytes of a scan page's items (scanPageBytes); default: for a 4 MiB message. */
  readonly scanPageBytes?: number;
}

/** The KV service's handlers over `store` (see the module comment). */
export function kvService(
  store: KvStore,
  metrics: CairnMetrics,
  limits: Limits,
  {
    forwarder,
    log = silentLogger,
    nodeId: self,
    scanPageBytes: pageBytes = scanPageBytes(SCAN_PAGE_MESSAGE_BYTES, limits),
  }: KvServiceOptions = {},
): UntypedServiceImplementation {
  const internalErrors = new InternalErrorLog(log);
  /** The trailer of every Put, Get and Delete served here (see the module comment). */
  let servedHere: Metadata | undefined;
  if (self !== undefined) {
    servedHere = new Metadata();
    servedHere.set(SERVED_BY_KEY, self);
  }

  /**
   * Runs a handler, answering the call and recording kv_requests_total / kv_request_duration_ms.
   * `forwardAs` names the method to forward the call as when another node leads its shard.
   */
  function serve<Req, Res>(
    op: KvOperation,
    call: ServerUnaryCall<Req, Res>,
    callback: sendUnaryData<Res>,
    handle: (req: Req, deadline: number) => Promise<{ response: Res; result?: KvResult }>,
    trailer: Metadata | undefined,
    forwardAs?: ForwardedMethod,
    leaderOf?: (req: Req) => string | null,
  ): void {
    const started = performance.now();
    const relay = (forwarded: Promise<ForwardReply<Res>>): void => {
      void forwarded.then((reply) => {
        // The leader records the real outcome; here the call counts as not_leader (design §2).
        metrics.recordKv(op, "not_leader", performance.now() - started);
        if (reply.ok) callback(null, reply.response, reply.trailer);
        else callback(reply.error, null);
      });
    };
    // A write this node would refuse naming the leader goes there at once, not through the
    // store's refusal (a throw and its way back through every await: ~0.15 ms on a lone Put).
    if (forwardAs !== undefined && forwarder !== undefined && leaderOf !== undefined) {
      const leader = leaderOf(call.request);
      const forwarded =
        leader === null ? null : forwarder.forwardTo(forwardAs, nodeId(leader), call);
      if (forwarded !== null) {
        relay(forwarded);
        return;
      }
    }
    // The store stops waiting on the call's behalf when its client does (KvStore).
    handle(call.request, callDeadline(call)).then(
      ({ response, result }) => {
        metrics.recordKv(op, "success", performance.now() - started, result);
        callback(null, response, trailer);
      },
      (err: unknown) => {
        const forwarded =
          forwardAs === undefined ? null : (forwarder?.maybeForward(forwardAs, err, call) ?? null);
        if (forwarded === null) {
          metrics.recordKv(op, metricStatusOf(err), performance.now() - started);
          const answer = toServiceError(err);
          internalErrors.maybeLog(op, err, answer);
          callback(answer, null);
          return;
        }
        relay(forwarded);
      },
    );
  }

  /**
   * The leader a valid write of `key` goes to (store.leaderElsewhere), or null: the request is
   * then served (or refused, or found invalid) by the handler as any other. Validated only when
   * it is to be forwarded: on the leader the handler validates, once.
   */
  function writeLeader(key: Uint8Array, validate: () => void): string | null {
    const leader = store.leaderElsewhere?.(key) ?? null;
    if (leader === null) return null;
    try {
      validate();
    } catch {
      return null; // answered by the handler, which validates the same way
    }
    return leader;
  }

  return {
    Put(
      call: ServerUnaryCall<PutRequest__Output, PutResponse>,
      callback: sendUnaryData<PutResponse>,
    ) {
      serve(
        "put",
        call,
        callback,
        async (req, deadline) => {
          const key = checkKey(req.key, limits);
          const value = checkValue(req.value, limits);
          const expected = checkExpected(req.expected_version);
          const outcome = await store.put(key, value, expected, deadline);
          if (outcome.type === "precondition-failed")
            throw new VersionMismatchError(outcome.current);
          if (outcome.type !== "written") throw new Error(`unexpected put outcome ${outcome.type}`);
          return { response: { version: outcome.version } };
        },
        servedHere,
        "Put",
        (req) =>
          writeLeader(req.key, () => {
            checkKey(req.key, limits);
            checkValue(req.value, limits);
            checkExpected(req.expected_version);
          }),
      );
    },

    Get(
      call: ServerUnaryCall<GetRequest__Output, GetResponse>,
      callback: sendUnaryData<GetResponse>,
    ) {
      serve(
        "get",
        call,
        callback,
        async (req, deadline) => {
          const key = checkKey(req.key, limits);
          const consistency = checkEnum(req.consistency, CONSISTENCIES, "consistency");
          // With its call: a read whose client cancels stops waiting then (KvStore).
          const item = await store.get(key, consistency !== "SERIALIZABLE", deadline, call);
          if (item === null) return { response: { found: false }, result: "not_found" };
          return {
            response: { found: true, value: item.value, version: item.version },
            result: "found",
          };
        },
        servedHere,
        // A serializable read is served from this node's replica; only a node that holds none
        // (five nodes, three replicas a shard) refuses it, and then it goes to the leader.
        "Get",
      );
    },

    Delete(
      call: ServerUnaryCall<DeleteRequest__Output, DeleteResponse>,
      callback: sendUnaryData<DeleteResponse>,
    ) {
      serve(
        "delete",
        call,
        callback,
        async (req, deadline) => {
          const key = checkKey(req.key, limits);
          const outcome = await store.delete(key, checkExpected(req.expected_version), deadline);
          switch (outcome.type) {
            case "deleted":
              return { response: { deleted: true, version: outcome.version } };
            case "not-found":
              return { response: { deleted: false } };
            case "precondition-failed":
              throw new VersionMismatchError(outcome.current);
            case "written":
              throw new Error("unexpected delete outcome");
          }
        },
        servedHere,
        "Delete",
        (req) =>
          writeLeader(req.key, () => {
            checkKey(req.key, limits);
            checkExpected(req.expected_version);
          }),
      );
    },

    // Not forwarded: a scan reads every shard this node holds, so no one leader can answer it
    // (on a node that does not hold every shard, a scan that reaches one it lacks fails).
    Scan(
      call: ServerUnaryCall<ScanRequest__Output, ScanResponse>,
      callback: sendUnaryData<ScanResponse>,
    ) {
      serve(
        "scan",
        call,
        callback,
        async (req, deadline) => {
          const { start, end } = scanRange(req, limits);
          const limit = req.limit === 0 ? DEFAULT_SCAN_LIMIT : req.limit;
          if (limit > MAX_SCAN_LIMIT) {
            throw new InvalidArgumentError(
              `limit is ${limit}; at most ${MAX_SCAN_LIMIT} items per page`,
            );
          }
          const consistency = checkEnum(req.consistency, CONSISTENCIES, "consistency");
          const skip = req.skip_unavailable_shards;
          if (skip && consistency !== "SERIALIZABLE") {
            throw new InvalidArgumentError(
              "skip_unavailable_shards needs consistency SERIALIZABLE: a linearizable scan reads every shard",
            );
          }
          const from = req.page_token.length > 0 ? afterToken(req.page_token, start, end) : start;
          const page = await store.scan(
            {
              start: from,
              end,
              limit,
              maxBytes: pageBytes,
              linearizable: consistency !== "SERIALIZABLE",
              ...(skip ? { skipUnavailable: true } : {}),
            },
            deadline,
            call,
          );
          const { items, more, skipped } = withRoomForSkipped(page, pageBytes);
          const last = items[items.length - 1];
          // A page cut before its first item (scan-merge.ts: a shard's page held none but
          // said more) has no key to go on from, and an empty token is the end of the range:
          // the scan fails rather than stop short without a word.
          if (more && last === undefined)
            throw new Error("a page of the scan held no item, yet more: it cannot go on");
          return {
            response: {
              items: items.map((i) => ({ key: i.key, value: i.value, version: i.version })),
              next_page_token:
                more && last !== undefined ? encodeToken(last.key) : new Uint8Array(0),
              skipped_shards: skipped === undefined ? [] : [...skipped],
            },
          };
        },
        undefined, // no serving node: see the module comment
      );
    },
  };
}

/**
 * The page with room in its message for the shards it left out: its items were cut to the
 * page's bytes with the list of those shards on top, and thousands of them (a cluster of 65,536
 * shards that lost most of its nodes: 3 bytes an id) took a full page past the node's send
 * limit ("Sent message larger than max", not retried by clients), so no skipping scan or backup
 * of large values could go on. Items are left off its end, for the next page (`more`), until
 * they and the list fit. One item is kept however large: a page of one item near the largest and
 * a list of thousands of shards may still pass the limit (maxAnswerBytes leaves room for a key).
 */
function withRoomForSkipped(page: ScanPage, pageBytes: number): ScanPage {
  const skipped = page.skipped;
  if (skipped === undefined || skipped.length === 0) return page;
  // The packed repeated field: its tag, its length and a varint an id.
  let listBytes = 0;
  for (const id of skipped) listBytes += varintBytes(id);
  listBytes += 1 + varintBytes(listBytes);
  let bytes = listBytes;
  for (const i of page.items) bytes += i.key.length + i.value.length + ITEM_OVERHEAD_BYTES;
  if (bytes <= pageBytes) return page;
  const items = [...page.items];
  while (items.length > 1 && bytes > pageBytes) {
    const i = items.pop() as (typeof items)[number];
    bytes -= i.key.length + i.value.length + ITEM_OVERHEAD_BYTES;
  }
  return { items, more: page.more || items.length < page.items.length, skipped };
}

/** The bytes of `n` as a protobuf varint. */
function varintBytes(n: number): number {
  let bytes = 1;
  for (let v = n; v >= 0x80; v = Math.floor(v / 128)) bytes++;
  return bytes;
}

function scanRange(
  req: ScanRequest__Output,
  limits: Limits,
): { start: Uint8Array; end: Uint8Array | null } {
  if (req.prefix.length > 0) {
    if (req.start.length > 0 || req.end.length > 0) {
      throw new InvalidArgumentError("give either prefix or start/end, not both");
    }
    checkKey(req.prefix, limits, "prefix");
    return { start: req.prefix, end: prefixEnd(req.prefix) };
  }
  if (req.start.length > limits.maxKeyBytes || req.end.length > limits.maxKeyBytes) {
    throw new InvalidArgumentError(
      `start and end are keys: at most ${limits.maxKeyBytes} bytes (limits.max_key_bytes)`,
    );
  }
  if (req.end.length > 0 && Buffer.compare(req.start, req.end) >= 0) {
    throw new InvalidArgumentError("start must sort before end");
  }
  return { start: req.start, end: req.end.length > 0 ? req.end : null };
}

/** The first key after every key with this prefix, or null if there is none. */
function prefixEnd(prefix: Uint8Array): Uint8Array | null {
  const end = Uint8Array.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if ((end[i] as number) < 0xff) {
      end[i] = (end[i] as number) + 1;
      return end.subarray(0, i + 1);
    }
  }
  return null;
}

function encodeToken(lastKey: Uint8Array): Uint8Array {
  const out = new Uint8Array(lastKey.length + 1);
  out[0] = PAGE_TOKEN_VERSION;
  out.set(lastKey, 1);
  return out;
}

/**
 * The longest key a page token names: limits.max_key_bytes at its largest. Not this node's own
 * limit, under which keys written when it was larger may be longer, and a page may end at one.
 */
const MAX_TOKEN_KEY_BYTES = 65_535;

/** The scan's next start: just after the last key of the previous page, inside [start, end). */
function afterToken(token: Uint8Array, start: Uint8Array, end: Uint8Array | null): Uint8Array {
  // A longer token is no key's: its start was copied and decoded once for every shard read (a
  // 4 MiB one held a node of 1,024 shards' main thread for 6.6 s, each call).
  if (token[0] !== PAGE_TOKEN_VERSION || token.length - 1 > MAX_TOKEN_KEY_BYTES)
    throw new InvalidArgumentError("page_token is not one this server issued");
  const last = token.subarray(1);
  if (Buffer.compare(last, start) < 0 || (end !== null && Buffer.compare(last, end) >= 0)) {
    throw new InvalidArgumentError("page_token does not belong to this scan's range");
  }
  const next = new Uint8Array(last.length + 1);
  next.set(last);
  return next;
}

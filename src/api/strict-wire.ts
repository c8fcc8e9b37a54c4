/**
 * Protobuf's wire rules, checked on a request's bytes before protobufjs decodes them.
 *
 * protobufjs decodes a field by the number its tag names and the type the schema gives that
 * number, whatever wire type the tag says: a PutRequest whose key (field 1) comes tagged as a
 * varint, or as wire type 6 (which does not exist), is read as a key all the same, and a tag
 * naming field 0 (which no message may have) is skipped. Protobuf's C++ and Go parsers refuse
 * the first two shapes or set the field aside as unknown, and refuse field 0. So a client's
 * malformed message could write a key nobody meant. A request is checked first, field by field
 * and into nested messages, and refused (INVALID_ARGUMENT: io-threads.ts answers the error
 * thrown here) when:
 *   - a tag is cut short, longer than 5 bytes, or names field 0 or one past 2^29 − 1;
 *   - its wire type is 6 or 7, or a group (3, 4: proto3 has none, and no cairn.v1 message uses
 *     one);
 *   - a field of the schema comes under another wire type than its type's (a repeated number
 *     may also come packed: length-delimited);
 *   - a varint runs past 10 bytes or past the message, a length or fixed-size field past it;
 *   - a `string` field is not UTF-8 (proto3 requires it; protobufjs would decode it lossily);
 *   - its repeated fields hold more than MAX_REPEATED_VALUES values in all.
 * Unknown field numbers are skipped by their wire type, as protobuf does: a newer client's new
 * fields reach an older server unread. Only the slow path pays: the hot Put and Get decoders
 * (kv-codec.ts) take the shapes they know themselves and hand the rest here.
 */
import { isUtf8 } from "node:buffer";
import {
  type MethodDefinition,
  Metadata,
  type ServerDuplexStream,
  type ServerWritableStream,
  type ServiceDefinition,
  status,
  type UntypedHandleCall,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import type { PackageDefinition } from "@grpc/proto-loader";
import { ERROR_CODE_KEY } from "./wire.ts";

/** What a protobuf field's schema says about its wire form. */
interface FieldRule {
  readonly name: string;
  /** The wire type of one value: 0 varint, 1 fixed 64, 2 length-delimited, 5 fixed 32. */
  readonly wire: 0 | 1 | 2 | 5;
  /** A repeated field: each of its values counts against MAX_REPEATED_VALUES. */
  readonly repeated: boolean;
  /** A repeated number, which may come packed (wire type 2) too. */
  readonly packable: boolean;
  /** A `string`: its bytes must be UTF-8. */
  readonly utf8: boolean;
  /** A message: its bytes are checked by these rules (resolved once every type is known). */
  readonly message: string | null;
}

/** Field number → rule, for one message type. */
type MessageRules = ReadonlyMap<number, FieldRule>;

/** The shape of proto-loader's descriptor objects this module reads. */
interface FieldDescriptor {
  readonly name: string;
  readonly number: number;
  readonly label: string;
  readonly type: string;
  readonly typeName: string;
}
interface MessageDescriptor {
  readonly name: string;
  readonly field: readonly FieldDescriptor[];
  readonly nestedType?: readonly MessageDescriptor[];
}

const WIRE_OF_TYPE: Readonly<Record<string, 0 | 1 | 2 | 5>> = {
  TYPE_DOUBLE: 1,
  TYPE_FIXED64: 1,
  TYPE_SFIXED64: 1,
  TYPE_FLOAT: 5,
  TYPE_FIXED32: 5,
  TYPE_SFIXED32: 5,
  TYPE_INT32: 0,
  TYPE_INT64: 0,
  TYPE_UINT32: 0,
  TYPE_UINT64: 0,
  TYPE_SINT32: 0,
  TYPE_SINT64: 0,
  TYPE_BOOL: 0,
  TYPE_ENUM: 0,
  TYPE_STRING: 2,
  TYPE_BYTES: 2,
  TYPE_MESSAGE: 2,
};

const WIRE_NAMES = ["varint", "64-bit", "length-delimited", "start group", "end group", "32-bit"];
const MAX_FIELD_NUMBER = 2 ** 29 - 1;
/** Messages nested deeper than this are refused (cairn.v1's are a few deep; no type recurses). */
const MAX_DEPTH = 32;
/**
 * The most values a request's repeated fields hold, at every depth together; more are refused
 * before protobufjs decodes them. protobufjs builds each value on the serving thread, for far
 * more than its bytes (a packed uint64 of one byte: ~86 bytes of heap; 8 MiB of them, +726 MiB
 * and 3 s), before any handler checks who called: the peers' unary calls take 128 MiB, from
 * anyone who reaches the port. The largest honest request is a peer's ConfirmTerms for every
 * shard of the largest cluster: three values a shard, 65,536 shards (196,608); no client
 * request has a repeated field.
 */
export const MAX_REPEATED_VALUES = 1 << 18;

/** A request that breaks the wire rules; its message says where. */
export class WireError extends Error {
  override readonly name = "WireError";
}

/**
 * What a request whose bytes are no message of its method's type (they break the rules above,
 * or protobufjs cannot decode them) is answered, however it came (a client's unary call, a KV
 * call a peer forwarded, a peer's snapshot chunk): INVALID_ARGUMENT with this code, the
 * caller's mistake. INTERNAL, which grpc-js answers for a decoder's throw, would say a fault of
 * the node's own (docs/errors.md).
 */
export const MALFORMED_REQUEST_CODE = "CAIRN_ERR_INVALID_ARGUMENT";

/** The details of that answer, naming the method and what was wrong. */
export function malformedRequest(path: string, err: unknown): string {
  return `the request is not a valid ${path} message: ${String(err)}`;
}

/**
 * A message of a client-streaming call that is no message of its type, handed to the call's
 * handler in its place (handMalformed), which refuses the call with it: grpc-js's server, which
 * decodes a streaming call's messages, answers a decoder's throw INTERNAL without a code.
 */
export class MalformedMessage {
  /** The answer's details (malformedRequest). */
  readonly details: string;

  constructor(path: string, err: unknown) {
    this.details = malformedRequest(path, err);
  }
}

/** Marks a method whose handler takes a MalformedMessage (handMalformed). */
const HANDS_MALFORMED = Symbol("handsMalformed");

/**
 * `def` with a message that does not decode handed to its handler as a MalformedMessage instead
 * of thrown; its rules' refusal too once WireRules.strict wraps it. For a client-streaming
 * method whose handler checks each message for one.
 */
export function handMalformed<
  M extends { readonly path: string; readonly requestDeserialize: (buf: Buffer) => unknown },
>(def: M): M {
  const decode = def.requestDeserialize;
  return {
    ...def,
    [HANDS_MALFORMED]: true,
    requestDeserialize: (buf: Buffer): unknown => {
      try {
        return decode(buf);
      } catch (err) {
        return new MalformedMessage(def.path, err);
      }
    },
  };
}

/**
 * `definition` and `implementation` with the request of each server-streaming and two-way
 * streaming method that is no message of its type refused as a client's unary call's is:
 * INVALID_ARGUMENT with MALFORMED_REQUEST_CODE, naming the method and what was wrong. grpc-js's
 * server decodes a streaming call's messages itself and answers a decoder's throw INTERNAL
 * ("Error deserializing request") without a code, which says a fault of the node's: a client's
 * garbled Meta.WatchCluster, health Watch or reflection request was answered so. The message is
 * handed on as a MalformedMessage (handMalformed) and refused before the handler sees it; a
 * two-way call ends after the answers to the requests before it. A client-streaming method
 * answers through its handler's callback, out of reach here: its handler must take the
 * MalformedMessage itself (InstallSnapshot), or read bytes (Raft.Stream), and is left as it is,
 * as is a method already given handMalformed.
 */
export function refusingMalformed(
  definition: ServiceDefinition,
  implementation: UntypedServiceImplementation,
): { definition: ServiceDefinition; implementation: UntypedServiceImplementation } {
  const methods: Record<string, MethodDefinition<unknown, unknown>> = {};
  const handlers: UntypedServiceImplementation = { ...implementation };
  for (const [name, def] of Object.entries(definition)) {
    const m = def as MethodDefinition<unknown, unknown>;
    methods[name] = m;
    // grpc-js finds a handler by the method's name, else by its name in the proto file.
    const key = name in implementation ? name : (m.originalName ?? name);
    const handler = implementation[key];
    if (!m.responseStream || HANDS_MALFORMED in m || handler === undefined) continue;
    methods[name] = handMalformed(m);
    handlers[key] = (m.requestStream ? refusingMalformedRequests : refusingMalformedRequest)(
      handler,
      implementation,
    );
  }
  return { definition: methods as ServiceDefinition, implementation: handlers };
}

/** The refusal of a MalformedMessage, as a stream's "error" event takes it (grpc-js). */
function malformedAnswer(message: MalformedMessage): {
  code: status;
  details: string;
  metadata: Metadata;
} {
  const metadata = new Metadata();
  metadata.set(ERROR_CODE_KEY, MALFORMED_REQUEST_CODE);
  return { code: status.INVALID_ARGUMENT, details: message.details, metadata };
}

/** A server-streaming handler that is not called for a request that did not decode. */
function refusingMalformedRequest(
  handler: UntypedHandleCall,
  self: UntypedServiceImplementation,
): UntypedHandleCall {
  const serve = handler as (call: ServerWritableStream<unknown, unknown>) => void;
  return ((call: ServerWritableStream<unknown, unknown>): void => {
    if (call.request instanceof MalformedMessage) {
      call.emit("error", malformedAnswer(call.request));
      return;
    }
    serve.call(self, call);
  }) as UntypedHandleCall;
}

/**
 * A two-way streaming handler whose call ends at a request that did not decode: the requests
 * before it are the handler's (answered, then the refusal), that one and any after it are not,
 * and the handler hears the requests' end.
 */
function refusingMalformedRequests(
  handler: UntypedHandleCall,
  self: UntypedServiceImplementation,
): UntypedHandleCall {
  const serve = handler as (call: ServerDuplexStream<unknown, unknown>) => void;
  return ((call: ServerDuplexStream<unknown, unknown>): void => {
    const push = call.push.bind(call);
    let refused = false;
    // grpc-js pushes each decoded request into the call (a Readable) for the handler to read.
    call.push = (chunk: unknown, encoding?: BufferEncoding): boolean => {
      if (refused) return false;
      if (!(chunk instanceof MalformedMessage)) return push(chunk, encoding);
      refused = true;
      // Refused once the handler has read the requests before it, which it may still answer
      // (ended at once, the call took none of the answers written after, and never sent its
      // status): the requests end here, and the refusal is the first to hear of it, before a
      // handler's own end of the call (reflection's), which then ends with the refusal's status.
      call.prependOnceListener("end", () => call.emit("error", malformedAnswer(chunk)));
      return push(null);
    };
    serve.call(self, call);
  }) as UntypedHandleCall;
}

/** The rules of every message type of some loaded proto files (proto-loader's definitions). */
export class WireRules {
  readonly #types = new Map<string, MessageRules>();
  /** Every type name the definitions hold, gathered before any rule is built. */
  readonly #names = new Set<string>();

  /** Every message type in `definitions`, by its full name (`cairn.v1.PutRequest`). */
  constructor(...definitions: readonly PackageDefinition[]) {
    const all: [string, MessageDescriptor][] = [];
    const gather = (fullName: string, type: MessageDescriptor): void => {
      all.push([fullName, type]);
      for (const nested of type.nestedType ?? []) gather(`${fullName}.${nested.name}`, nested);
    };
    for (const definition of definitions) {
      for (const [fullName, entry] of Object.entries(definition)) {
        const { format, type } = entry as { format?: string; type?: MessageDescriptor };
        // Messages only ("Protocol Buffer 3 DescriptorProto"; enums are EnumDescriptorProto).
        if (format?.endsWith(" DescriptorProto") === true && Array.isArray(type?.field)) {
          gather(fullName, type as MessageDescriptor);
        }
      }
    }
    for (const [name] of all) this.#names.add(name);
    for (const [name, type] of all) this.#add(name, type);
  }

  #add(fullName: string, type: MessageDescriptor): void {
    const scope = fullName.slice(0, fullName.lastIndexOf("."));
    const rules = new Map<number, FieldRule>();
    for (const f of type.field) {
      const wire = WIRE_OF_TYPE[f.type];
      // A group, or a type this module does not know: not checked (no cairn.v1 field is one).
      if (wire === undefined) continue;
      rules.set(f.number, {
        name: f.name,
        wire,
        repeated: f.label === "LABEL_REPEATED",
        packable: f.label === "LABEL_REPEATED" && wire !== 2,
        utf8: f.type === "TYPE_STRING",
        message: f.type === "TYPE_MESSAGE" ? this.#resolve(scope, fullName, f.typeName) : null,
      });
    }
    this.#types.set(fullName, rules);
  }

  /**
   * The full name a field's type name stands for: absolute (`.a.b.C`) as it is; relative, as
   * protobuf resolves it, from the innermost scope out (the message itself, then its package's
   * parents). The name is kept even when no type has it yet: `check` refuses nothing for it.
   */
  #resolve(scope: string, self: string, typeName: string): string {
    if (typeName.startsWith(".")) return typeName.slice(1);
    const parts = scope === "" ? [] : scope.split(".");
    const candidates = [`${self}.${typeName}`];
    for (let n = parts.length; n >= 0; n--) {
      candidates.push([...parts.slice(0, n), typeName].join("."));
    }
    return candidates.find((c) => this.#names.has(c)) ?? typeName;
  }

  /**
   * Checks `bytes` as a message of type `fullName`; throws a WireError naming the first rule
   * broken. A type with no rules (unknown here) is not checked.
   */
  check(fullName: string, bytes: Uint8Array): void {
    const rules = this.#types.get(fullName);
    if (rules !== undefined)
      this.#check(rules, bytes, 0, bytes.length, fullName, 0, { left: MAX_REPEATED_VALUES });
  }

  /** `values.left`: how many more values of repeated fields the request may hold. */
  #check(
    rules: MessageRules,
    buf: Uint8Array,
    start: number,
    end: number,
    where: string,
    depth: number,
    values: { left: number },
  ): void {
    if (depth > MAX_DEPTH) throw new WireError(`${where}: messages nested past ${MAX_DEPTH} deep`);
    const counted = (name: string): void => {
      if (--values.left < 0) {
        throw new WireError(
          `${name}: more than ${MAX_REPEATED_VALUES} values of repeated fields in one request`,
        );
      }
    };
    const at = { pos: start };
    while (at.pos < end) {
      const tagAt = at.pos;
      const tag = varint32(buf, at, end, where, "a tag");
      const field = Math.floor(tag / 8);
      const wire = tag % 8;
      if (field === 0) throw new WireError(`${where}: field number 0 at byte ${tagAt}`);
      if (field > MAX_FIELD_NUMBER) {
        throw new WireError(`${where}: field number ${field} past ${MAX_FIELD_NUMBER}`);
      }
      if (wire === 3 || wire === 4) {
        throw new WireError(`${where}: field ${field} is a group (wire type ${wire}): not used`);
      }
      if (wire === 6 || wire === 7) {
        throw new WireError(`${where}: field ${field} has wire type ${wire}, which does not exist`);
      }
      const rule = rules.get(field);
      if (rule !== undefined && wire !== rule.wire && !(rule.packable && wire === 2)) {
        throw new WireError(
          `${where}: field ${field} (${rule.name}) comes ${WIRE_NAMES[wire]}, its type is ${WIRE_NAMES[rule.wire]}`,
        );
      }
      const name = rule === undefined ? `${where} field ${field}` : `${where}.${rule.name}`;
      if (wire !== 2) {
        if (rule?.repeated === true) counted(name);
        at.pos = skipValue(buf, at.pos, end, wire, name);
        continue;
      }
      const length = varint32(buf, at, end, name, "a length");
      if (length > end - at.pos) {
        throw new WireError(`${name}: ${length} bytes announced, ${end - at.pos} left`);
      }
      const body = at.pos;
      at.pos += length;
      if (rule === undefined) continue;
      if (rule.packable) {
        // A packed run: values of the element's wire type, back to back, filling it whole.
        for (let p = body; p < at.pos;) {
          counted(name);
          p = skipValue(buf, p, at.pos, rule.wire, name);
        }
        continue;
      }
      if (rule.repeated) counted(name);
      if (rule.utf8) {
        if (!isUtf8(buf.subarray(body, at.pos))) throw new WireError(`${name}: not UTF-8`);
      } else if (rule.message !== null) {
        const nested = this.#types.get(rule.message);
        if (nested !== undefined) this.#check(nested, buf, body, at.pos, name, depth + 1, values);
      }
    }
  }

  /** `def` with its request checked by these rules before it is decoded. */
  strict<M extends MethodDefinition<unknown, unknown>>(def: M, requestType: string): M {
    const decode = def.requestDeserialize;
    const rules = this.#types.get(requestType);
    if (rules === undefined) return def;
    const handsMalformed = HANDS_MALFORMED in def;
    return {
      ...def,
      requestDeserialize: (buf: Buffer) => {
        try {
          this.#check(rules, buf, 0, buf.length, requestType, 0, { left: MAX_REPEATED_VALUES });
        } catch (err) {
          if (handsMalformed) return new MalformedMessage(def.path, err);
          throw err;
        }
        return decode(buf);
      },
    };
  }

  /**
   * `service` with every method's request checked by these rules first, but the methods whose
   * paths `except` lists (their own decoders read their bytes) and those whose request type these
   * rules do not hold.
   */
  strictService(service: ServiceDefinition, except: readonly string[] = []): ServiceDefinition {
    const out: Record<string, MethodDefinition<unknown, unknown>> = {};
    for (const [name, def] of Object.entries(service)) {
      const m = def as MethodDefinition<unknown, unknown>;
      const requestType = except.includes(m.path) ? null : requestTypeOf(m);
      out[name] = requestType === null ? m : this.strict(m, requestType);
    }
    return out as ServiceDefinition;
  }
}

/** `cairn.v1.PutRequest` for `/cairn.v1.KV/Put`, from the method's path and its request type. */
function requestTypeOf(def: MethodDefinition<unknown, unknown>): string | null {
  const type = (def as { requestType?: { type?: { name?: unknown } } }).requestType?.type?.name;
  if (typeof type !== "string") return null;
  const service = def.path.split("/")[1] ?? "";
  const pkg = service.slice(0, service.lastIndexOf("."));
  return pkg === "" ? type : `${pkg}.${type}`;
}

/**
 * A varint of at most 5 bytes (a tag or a length) at `at.pos`, which moves past it; `what` names
 * it in the error.
 */
function varint32(
  buf: Uint8Array,
  at: { pos: number },
  end: number,
  where: string,
  what: string,
): number {
  const start = at.pos;
  let value = 0;
  let scale = 1;
  for (let i = 0; i < 5; i++) {
    if (at.pos >= end) throw new WireError(`${where}: ${what} cut short at byte ${start}`);
    const b = buf[at.pos++] as number;
    value += (b & 0x7f) * scale;
    scale *= 128;
    if (b < 0x80) return value;
  }
  throw new WireError(`${where}: ${what} longer than 5 bytes at byte ${start}`);
}

/** Past one value of wire type `wire` (0, 1 or 5) at `pos`: where the next begins. */
function skipValue(buf: Uint8Array, pos: number, end: number, wire: number, name: string): number {
  if (wire === 0) return skipVarint(buf, pos, end, name);
  const size = wire === 1 ? 8 : 4;
  if (end - pos < size) throw new WireError(`${name}: a ${size}-byte value cut short`);
  return pos + size;
}

function skipVarint(buf: Uint8Array, pos: number, end: number, name: string): number {
  const at = pos;
  for (let i = 0; i < 10; i++) {
    if (pos >= end) throw new WireError(`${name}: a varint cut short at byte ${at}`);
    const b = buf[pos++] as number;
    if (b < 0x80) {
      if (i === 9 && b > 1) throw new WireError(`${name}: a varint past 64 bits at byte ${at}`);
      return pos;
    }
  }
  throw new WireError(`${name}: a varint longer than 10 bytes at byte ${at}`);
}

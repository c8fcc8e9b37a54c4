/**
 * The pure SWIM core: state machine, messages, wire format. No I/O, clock or global randomness;
 * see swim.ts for the protocol and its invariants, codec.ts for the wire format.
 */
export {
  type DecodeFailureReason,
  type DecodeResult,
  decodeMessage,
  encodeMessage,
  MAX_DATAGRAM_BYTES,
  MAX_MESSAGE_BYTES,
  SEAL_ROOM_BYTES,
  WIRE_VERSION,
} from "./codec.ts";
export {
  describeMessage,
  describeUpdate,
  type Message,
  type MemberRecord,
  type Update,
} from "./messages.ts";
export { isIpLiteral, isMemberAddress, isWildcardHost, parseHostPort } from "./address.ts";
export {
  MAX_RELAYS,
  type Outgoing,
  type Ready,
  Swim,
  type SwimOptions,
  validateMeta,
} from "./swim.ts";
export {
  DEFAULT_SWIM_CONFIG,
  DEFAULT_TICK_MS,
  type Incarnation,
  incarnation,
  type MemberEvent,
  type MemberEventKind,
  type MemberId,
  memberId,
  type MemberMeta,
  MembershipConfigError,
  type MemberState,
  type MemberView,
  DuplicateNodeIdError,
  ShardCountMismatchError,
  type SwimConfig,
  type Ticks,
  ticks,
} from "./types.ts";

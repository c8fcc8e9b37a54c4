/**
 * What the peer transport and the peers' service log through: the node's `Logger` (src/ops)
 * fits, and a silent one stands in when none is given. RefusalLog bounds the service's lines a
 * caller causes at will.
 */
import { LogWindow } from "../ops/log.ts";

export type LogFields = Readonly<Record<string, unknown>>;

/** What the transport logs through; the node's `Logger` (src/ops) fits. */
export interface PeerLogger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

export const silentLogger: PeerLogger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

/** How many lines of one kind a RefusalLog writes: at most `perWindow` every `windowMs`. */
export interface LogBound {
  /** Default 10. */
  readonly perWindow?: number;
  /** Default 10 s. */
  readonly windowMs?: number;
  /** Milliseconds, for the windows. Default performance.now (tests pass a virtual clock). */
  readonly now?: () => number;
}

/**
 * The peers' service's WARN lines that its callers cause at will, one a call: a stream, a unary
 * call or a snapshot refused (not a member, another cluster, no sender, a malformed frame or
 * chunk, too many snapshots at once). Anything that reaches the peer port can make such calls,
 * as fast as it likes, so at most `perWindow` lines of each message and status code are written
 * every `windowMs` (LogWindow, as the front end bounds its clients' events), the first after a
 * full window carrying `not_logged_before` (how many were left out). A flood of one kind leaves
 * room for the lines of the others. The counters (cairn_raft_peer_calls_refused_total, the
 * failed snapshot receives) count every refusal, logged or not.
 */
export class RefusalLog {
  readonly #log: PeerLogger;
  readonly #bound: LogBound;
  /** One window per message and code: a few dozen at most (the codes are gRPC's). */
  readonly #windows = new Map<string, LogWindow>();

  constructor(log: PeerLogger, bound: LogBound = {}) {
    this.#log = log;
    this.#bound = bound;
  }

  /** Logs `message` at WARN with `fields`, unless the window of its message and code is full. */
  warn(message: string, fields: LogFields & { readonly code: string }): void {
    const key = `${message}\u0000${fields.code}`;
    let window = this.#windows.get(key);
    if (window === undefined) {
      const { perWindow, windowMs, now } = this.#bound;
      window = new LogWindow(perWindow, windowMs, now);
      this.#windows.set(key, window);
    }
    const skipped = window.admit();
    if (skipped === null) return;
    this.#log.warn(message, skipped > 0 ? { ...fields, not_logged_before: skipped } : fields);
  }
}

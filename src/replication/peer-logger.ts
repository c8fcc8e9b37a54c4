/**
 * What the peer transport and the peers' service log through: the node's `Logger` (src/ops)
 * fits, and a silent one stands in when none is given.
 */

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

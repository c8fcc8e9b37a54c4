/**
 * Trailing metadata keys of the RPC contract (docs/errors.md). Shared by the server (errors.ts)
 * and the client library; this module imports nothing, so clients can use it without loading
 * the server.
 */
export const LEADER_HINT_KEY = "cairn-leader";
export const CURRENT_VERSION_KEY = "cairn-current-version";
export const ERROR_CODE_KEY = "cairn-error-code";

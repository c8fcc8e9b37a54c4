/**
 * Exit codes of the client commands (README "Command line"). A module of their own: main.ts
 * uses them before it loads any command, and common.ts loads the gRPC client.
 */
export const EXIT = {
  ok: 0,
  notFound: 1,
  usage: 2,
  unavailable: 3,
  conflict: 4,
  failed: 5,
  indeterminate: 6,
} as const;

/** The streams and environment a command runs with (the process's, or a test's). */
export interface Io {
  readonly stdout: NodeJS.WritableStream & { isTTY?: boolean };
  readonly stderr: NodeJS.WritableStream;
  readonly stdin: NodeJS.ReadableStream;
  readonly env: NodeJS.ProcessEnv;
}

export const PROCESS_IO: Io = {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  env: process.env,
};

/**
 * What the process's standard output carries, for main.ts when a write to it fails: a command's
 * report (the default: the command stops quietly on a closed pipe), or, for `cairn backup -`,
 * the backup itself, which a failed write leaves incomplete. Set by the command that writes it.
 */
export const PROCESS_STDOUT = { carriesBackup: false };

/**
 * A `cairn` command run in this process, on streams of its own (src/cli/io.ts's Io): for the
 * tests that need no process of their own (a usage error, help, a command against a server in the
 * test), each of which would otherwise cost a Node.js start. The commands read only their Io.
 */
import { PassThrough, Writable } from "node:stream";
import type { Io } from "../../src/cli/io.ts";

/** What a command run in this process wrote, and its exit code. */
export interface CliRun {
  readonly code: number;
  /** Its standard output, as written (a value `cairn get` prints may be any bytes). */
  readonly stdout: Buffer;
  /** Its standard output as UTF-8 text. */
  readonly out: string;
  /** Its standard error as UTF-8 text. */
  readonly err: string;
}

export interface CliRunOptions {
  /** The command's environment (none by default: the test's own CAIRN_* reach no command). */
  readonly env?: NodeJS.ProcessEnv;
  /**
   * Hears each write to standard error as it is made, before the write returns: a test acts at
   * a point of the command's run that the command announces (backup.test.ts swaps a file when
   * `cairn restore` warns about it).
   */
  readonly onStderr?: (text: string) => void;
}

/**
 * A stream that keeps what is written to it at once: its write finishes within the call, so what
 * a command wrote is all there when the command returns, synchronous or not.
 */
function collector(onWrite: (text: string) => void = () => undefined): {
  stream: Writable;
  bytes: () => Buffer;
} {
  const chunks: Buffer[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      chunks.push(chunk);
      try {
        onWrite(chunk.toString());
      } finally {
        // The write finishes, whatever the hook threw (to the command's write, as a failed
        // write would): the writes after it are kept too.
        done();
      }
    },
  });
  return { stream, bytes: () => Buffer.concat(chunks) };
}

/**
 * Runs `command` (`run` of src/cli/run.ts, or one command's function, or anything that takes an
 * Io) with `args`, on collecting streams and an empty standard input that never ends: the same
 * result, synchronously for a synchronous command (`cairn cert`), as a promise for another.
 */
export function runInProcess(
  command: (args: readonly string[], io: Io) => number,
  args: readonly string[],
  options?: CliRunOptions,
): CliRun;
export function runInProcess(
  command: (args: readonly string[], io: Io) => Promise<number>,
  args: readonly string[],
  options?: CliRunOptions,
): Promise<CliRun>;
export function runInProcess(
  command: (args: readonly string[], io: Io) => number | Promise<number>,
  args: readonly string[],
  options: CliRunOptions = {},
): CliRun | Promise<CliRun> {
  const stdout = collector();
  const stderr = collector(options.onStderr);
  const io: Io = {
    stdout: stdout.stream,
    stderr: stderr.stream,
    stdin: new PassThrough(),
    env: options.env ?? {},
  };
  const ran = (code: number): CliRun => {
    const bytes = stdout.bytes();
    return { code, stdout: bytes, out: bytes.toString(), err: stderr.bytes().toString() };
  };
  const code = command(args, io);
  return typeof code === "number" ? ran(code) : code.then(ran);
}

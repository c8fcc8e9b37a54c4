/**
 * The `cairn` command line. `bin/cairn` runs this file on the pinned Node.js; the commands are in
 * run.ts.
 */
import { EXIT } from "./exit-codes.ts";
import { PROCESS_IO, PROCESS_STDOUT } from "./io.ts";
import { hoistLeadingOptions, run } from "./run.ts";

/**
 * A reader that stops early (`cairn scan | head`) closes the pipe: a client command then stops
 * quietly, exit code 0, instead of dying on an unhandled EPIPE with its stack (Node.js ignores
 * SIGPIPE and reports the failed write as an error event). Not for `serve`, whose stdout is its
 * log; nor for `backup -`, whose stdout is the backup: cut short, it fails (exit 141, as a tool
 * killed by SIGPIPE, so `set -o pipefail` sees it), saying so. (It exited 0, silent, when the
 * program reading it died: a truncated backup reported as made.) A `backup FILE` writes only its
 * summary there, once FILE is whole: it is any other command (it said "the backup is
 * incomplete" of a backup that was made).
 */
function stopOnClosedStdout(command: string): void {
  process.stdout.on("error", (err: NodeJS.ErrnoException) => {
    const backup = PROCESS_STDOUT.carriesBackup;
    if (err.code !== "EPIPE") {
      // A write that failed otherwise (a full disk under `> FILE`): the command failed, said in
      // one line (it died with the error's stack, exit 1, which means "not found").
      const incomplete = backup ? ": the backup is incomplete" : "";
      process.stderr.write(
        `cairn ${command}: standard output failed (${err.code ?? err.message})${incomplete}\n`,
      );
      process.exit(EXIT.failed);
    }
    if (backup) {
      process.stderr.write(
        "cairn backup: the reader of standard output closed it before the backup was whole: the backup is incomplete\n",
      );
      process.exit(EXIT_STDOUT_CLOSED);
    }
    process.exit(0);
  });
}

/** A backup to standard output whose reader went away: as a process killed by SIGPIPE exits. */
const EXIT_STDOUT_CLOSED = 128 + 13;

const argv = process.argv.slice(2);
const command = hoistLeadingOptions(argv)[0];
if (command !== "serve") stopOnClosedStdout(command ?? "");

/**
 * Ends a client command with `code` once what it wrote has left the process. It does not wait
 * for the event loop to empty: grpc-js does not abort a TCP connect under way when its channel
 * closes (its connector drops only an established session), so a command that asked an address
 * whose SYNs go unanswered (a firewall that drops, a host gone) printed its error at its
 * `--timeout` and then stayed until the kernel gave the connect up, two minutes with Linux's
 * defaults. `serve` ends as before: its stop closes what it opened, and its log may still be
 * writing.
 */
function exitWhenWritten(code: number): void {
  process.exitCode = code;
  if (command === "serve") return;
  // A write's callback runs once the writes before it have been handed to the system. One that
  // failed is stopOnClosedStdout's to report: it ends the process with the failure's code.
  process.stdout.write("", (err) => {
    if (err === null || err === undefined) process.stderr.write("", () => process.exit(code));
  });
}

run(argv, PROCESS_IO).then(exitWhenWritten, (err: unknown) => {
  process.stderr.write(
    `cairn: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
  );
  exitWhenWritten(1);
});

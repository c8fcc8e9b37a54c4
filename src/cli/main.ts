/**
 * The `cairn` command line. `bin/cairn` runs this file on the pinned Node.js.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { serve } from "./serve.ts";

const HELP = `Usage: cairn <command> [options]

Cairn: a distributed, sharded, replicated key-value store.

Commands:
  serve        run a node (cairn serve --help)
  version      print the version

Options:
  -h, --help     show this help
  -v, --version  print the version

Exit codes: 0 ok, 1 failure, 2 usage or configuration error.
`;

function version(): string {
  const pkg = JSON.parse(
    readFileSync(join(import.meta.dirname, "..", "..", "package.json"), "utf8"),
  ) as {
    version: string;
  };
  return `cairn ${pkg.version} (node ${process.version})`;
}

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case undefined:
    case "-h":
    case "--help":
    case "help":
      process.stdout.write(HELP);
      return command === undefined ? 2 : 0;
    case "-v":
    case "--version":
    case "version":
      process.stdout.write(`${version()}\n`);
      return 0;
    case "serve":
      return serve(rest);
    default:
      process.stderr.write(`cairn: unknown command ${JSON.stringify(command)}\n\n${HELP}`);
      return 2;
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(
      `cairn: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exitCode = 1;
  },
);

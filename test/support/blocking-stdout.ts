/**
 * Preloaded by `npm test` (package.json, `test:unit`) into the test runner and each test file's
 * process. A test file's process sends its verdicts to the runner through its stdout, a pipe,
 * and on Linux a pipe's writes are asynchronous: the process.exit() of `--test-force-exit` then
 * dropped the last ones, and the run reported fewer tests than it ran, `fail 0`, exit 0
 * (nodejs/node#64833; test/test-runner.test.ts). Blocking writes leave nothing behind at exit.
 *
 * The preload also turns on Node.js's compile cache for the run and the processes it starts
 * (./compile-cache.ts).
 */
import "./compile-cache.ts";

const stdout = process.stdout as unknown as {
  _handle?: { setBlocking?: (blocking: boolean) => unknown };
};
stdout._handle?.setBlocking?.(true);

/**
 * `npm run fuzz:h2 -- [--seconds N] [--seed S] [--io-threads N]`: the HTTP/2 fuzzer of
 * test/api/h2-fuzz.test.ts for longer than `npm test` gives it (default 300 s). Whole
 * connections (valid and mutated frames) against a real `cairn serve` process, and HPACK blocks
 * against the decoder in this process.
 *
 * A failure (the node exits, a connection ends with GOAWAY INTERNAL_ERROR, the server's header
 * blocks do not decode, the decoder throws something else than HpackError) stops the run and
 * prints the seed, fast-check's replay path and the connection's frames in hex: make it a
 * regression test in test/api/h2-fuzz.test.ts.
 */
import assert from "node:assert/strict";
import { parseArgs } from "node:util";
import fc from "fast-check";
import { HpackDecoder, HpackError } from "../src/api/h2/hpack.ts";
import { connectionArb, hpackBlockArb, runConnection } from "../test/support/h2-fuzz.ts";
import { E } from "../test/support/h2-raw.ts";
import { isRunning, NodeUnderAttack } from "../test/support/node-under-attack.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "300" },
    seed: { type: "string" },
    path: { type: "string" },
    "io-threads": { type: "string", default: "0" },
  },
});
const seconds = Number(values.seconds);
const seed = values.seed === undefined ? Date.now() & 0x7fffffff : Number(values.seed);
const replay = values.path === undefined ? {} : { path: values.path };
console.log(`fuzz:h2 seed ${seed}, ${seconds} s, rpc.io_threads ${values["io-threads"]}`);

// HPACK first: a tenth of the budget.
const hpackMs = Math.max(1000, seconds * 100);
let blocks = 0;
fc.assert(
  fc.property(hpackBlockArb, (block) => {
    blocks++;
    try {
      new HpackDecoder().decode(block);
    } catch (err) {
      if (!(err instanceof HpackError)) throw err;
    }
  }),
  { seed, ...replay, numRuns: Number.MAX_SAFE_INTEGER, interruptAfterTimeLimit: hpackMs },
);
console.log(`HPACK: ${blocks} blocks, no failure`);

const node = new NodeUnderAttack({ CAIRN_RPC_IO_THREADS: String(values["io-threads"]) });
const server = await node.ensure();
let connections = 0;
const goAways = new Map<number, number>();
try {
  await fc.assert(
    fc.asyncProperty(connectionArb, async (frames) => {
      connections++;
      const run = await runConnection(node.port, frames);
      if (run.goAwayCode !== null)
        goAways.set(run.goAwayCode, (goAways.get(run.goAwayCode) ?? 0) + 1);
      const context = `frames: ${Buffer.concat(frames).toString("hex")}`;
      assert.ok(isRunning(server), `the node exited; ${context}\n${server.stderr().slice(-2000)}`);
      assert.notEqual(run.goAwayCode, E.INTERNAL_ERROR, `GOAWAY INTERNAL_ERROR; ${context}`);
      assert.equal(run.hpackError, null, `the server's header blocks do not decode; ${context}`);
    }),
    {
      seed,
      ...replay,
      numRuns: Number.MAX_SAFE_INTEGER,
      interruptAfterTimeLimit: seconds * 1000 - hpackMs,
      endOnFailure: true,
    },
  );
  await node.assertAlive();
  console.log(
    `connections: ${connections}, no failure; GOAWAY codes seen: ${JSON.stringify(Object.fromEntries(goAways))}`,
  );
} finally {
  await node.stop();
}

/**
 * Fuzzing Cairn's HTTP/2 front end within a fixed budget (scripts/fuzz-h2.ts runs longer):
 * whole connections (sequences of frames, valid and mutated, test/support/h2-fuzz.ts) against a
 * real node, and HPACK blocks against the decoder in this process.
 *
 * Asserted: the node never exits and still serves a normal call after; no connection ends with
 * GOAWAY INTERNAL_ERROR (what the front end sends when one of its handlers threw: a bug); the
 * server's own header blocks always decode; the decoder throws nothing but HpackError, and the
 * encoder's blocks decode back to what it was given.
 *
 * Each run prints its seed (a test diagnostic); FUZZ_SEED=<seed> (and FUZZ_PATH=<path>, from a
 * failure's report) replays it; FUZZ_MS sets the connection budget (default 4,000 ms). A crash
 * found becomes a regression test below.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import fc from "fast-check";
import { encodeHeaders, HpackDecoder, HpackError } from "../../src/api/h2/hpack.ts";
import { E } from "../support/h2-raw.ts";
import { connectionArb, fuzzParameters, hpackBlockArb, runConnection } from "../support/h2-fuzz.ts";
import { isRunning, NodeUnderAttack } from "../support/node-under-attack.ts";

const BUDGET_MS = Number(process.env["FUZZ_MS"] ?? 4000);

describe("HTTP/2 fuzzing (fixed budget)", { timeout: 120_000 }, () => {
  const node = new NodeUnderAttack({ CAIRN_RPC_IO_THREADS: "0" });
  before(() => node.ensure());
  after(() => node.stop());

  it("whole connections, valid and mutated frames: the node never fails", async (t) => {
    const server = await node.ensure();
    const params = fuzzParameters();
    t.diagnostic(`FUZZ_SEED=${params.seed}`);
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(connectionArb, async (frames) => {
        runs++;
        const run = await runConnection(node.port, frames);
        assert.ok(isRunning(server), "the node is running");
        assert.notEqual(
          run.goAwayCode,
          E.INTERNAL_ERROR,
          "no handler threw (GOAWAY INTERNAL_ERROR)",
        );
        assert.equal(run.hpackError, null, "the server's header blocks decode");
      }),
      {
        ...params,
        numRuns: 1_000_000,
        interruptAfterTimeLimit: BUDGET_MS,
        markInterruptAsFailure: false,
        endOnFailure: true,
      },
    );
    t.diagnostic(`${runs} connections`);
    assert.ok(runs >= 20, `at least 20 connections ran (${runs})`);
    await node.assertAlive();
  });

  it("HPACK blocks: the decoder throws only HpackError, one decoder across many blocks", (t) => {
    const params = fuzzParameters();
    t.diagnostic(`FUZZ_SEED=${params.seed}`);
    const shared = new HpackDecoder(4096, 64 * 1024);
    fc.assert(
      fc.property(hpackBlockArb, (block) => {
        for (const d of [new HpackDecoder(4096, 64 * 1024), shared]) {
          try {
            const list = d.decode(block);
            assert.equal(list.length % 2, 0);
            for (const s of list) assert.equal(typeof s, "string");
          } catch (err) {
            if (!(err instanceof HpackError)) throw err;
          }
        }
      }),
      { ...params, numRuns: 20_000, interruptAfterTimeLimit: 1500, markInterruptAsFailure: false },
    );
  });

  it("HPACK: what the encoder writes decodes back, block after block on one decoder", (t) => {
    const params = fuzzParameters();
    t.diagnostic(`FUZZ_SEED=${params.seed}`);
    const field = fc.tuple(fc.stringMatching(/^[a-z0-9-]{1,12}$/), fc.string({ maxLength: 20 }));
    const d = new HpackDecoder();
    fc.assert(
      fc.property(fc.array(field, { maxLength: 8 }), (fields) => {
        const list = d.decode(encodeHeaders(fields));
        const pairs: [string, string][] = [];
        for (let i = 0; i < list.length; i += 2)
          pairs.push([list[i] as string, list[i + 1] as string]);
        assert.deepEqual(pairs, fields);
      }),
      { ...params, numRuns: 2000 },
    );
  });
});

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { Counter, Histogram, Registry } from "prom-client";
import { KvRequestMetrics } from "../../src/ops/kv-metrics.ts";
import { KV_DURATION_BUCKETS_MS, KV_OPERATIONS, KV_STATUSES } from "../../src/ops/index.ts";

const COUNTER = ["kv_requests_total", "Total KV requests."] as const;
const HISTOGRAM = ["kv_request_duration_ms", "KV request latency in ms."] as const;

const combinations = KV_OPERATIONS.flatMap((operation) =>
  KV_STATUSES.map((status) => ({
    operation,
    status,
    results: operation === "get" && status === "success" ? ["found", "not_found"] : [""],
  })),
);
const series = combinations.flatMap(({ operation, status, results }) =>
  results.map((result) => ({ operation, status, result })),
);

/** The same two families as prom-client's own Counter and Histogram, every series at zero first. */
function reference(): { registry: Registry; record(i: number, ms: number): void } {
  const registry = new Registry();
  const counter = new Counter({
    name: COUNTER[0],
    help: COUNTER[1],
    labelNames: ["operation", "status"],
    registers: [registry],
  });
  const histogram = new Histogram({
    name: HISTOGRAM[0],
    help: HISTOGRAM[1],
    labelNames: ["operation", "status", "result"],
    buckets: [...KV_DURATION_BUCKETS_MS],
    registers: [registry],
  });
  for (const { operation, status, results } of combinations) {
    counter.inc({ operation, status }, 0);
    for (const result of results) histogram.zero({ operation, status, result });
  }
  return {
    registry,
    record(i, ms) {
      const s = series[i] as (typeof series)[number];
      counter.inc({ operation: s.operation, status: s.status });
      histogram.observe(s, ms);
    },
  };
}

function ours(): { registry: Registry; record(i: number, ms: number): void } {
  const registry = new Registry();
  const kv = new KvRequestMetrics(KV_DURATION_BUCKETS_MS, combinations);
  registry.registerMetric(kv.counter(...COUNTER));
  registry.registerMetric(kv.histogram(...HISTOGRAM));
  return {
    registry,
    record(i, ms) {
      const s = series[i] as (typeof series)[number];
      kv.record(s.operation, s.status, s.result, ms);
    },
  };
}

describe("KV request metrics kept off prom-client's request path", () => {
  it("expose exactly what prom-client's Counter and Histogram expose for the same requests", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({
            series: fc.nat(series.length - 1),
            // Bucket bounds themselves, values between them, zero and the slow tail.
            ms: fc.oneof(
              fc.constantFrom(0, ...KV_DURATION_BUCKETS_MS),
              fc.double({ min: 0, max: 2000, noNaN: true }),
            ),
          }),
          { maxLength: 60 },
        ),
        async (requests) => {
          const a = reference();
          const b = ours();
          for (const r of requests) {
            a.record(r.series, r.ms);
            b.record(r.series, r.ms);
          }
          assert.equal(await b.registry.metrics(), await a.registry.metrics());
          // The same samples as JSON too (prom-client adds exemplar fields, empty here).
          const samples = async (r: Registry): Promise<unknown> =>
            JSON.parse(
              JSON.stringify(await r.getMetricsAsJSON(), (k, v: unknown) =>
                k === "exemplar" ? undefined : v,
              ),
            );
          assert.deepEqual(await samples(b.registry), await samples(a.registry));
        },
      ),
      { numRuns: 300 },
    );
  });

  it("refuses a series that is not in the catalogue and a value that is not a number", () => {
    const kv = new KvRequestMetrics(KV_DURATION_BUCKETS_MS, combinations);
    assert.throws(() => kv.record("put", "success", "found", 1), TypeError);
    assert.throws(() => kv.record("watch", "success", "", 1), TypeError);
    assert.throws(() => kv.record("put", "success", "", Number.NaN), TypeError);
  });

  it("starts again from zero when the registry is reset", async () => {
    const a = reference();
    const b = ours();
    b.record(0, 3);
    b.registry.resetMetrics();
    a.registry.resetMetrics();
    // prom-client's reset drops its series; ours keep them at zero, as a fresh node has them.
    assert.match(
      await b.registry.metrics(),
      /kv_requests_total\{operation="put",status="success"\} 0/,
    );
  });
});

/**
 * kv_requests_total and kv_request_duration_ms, off the request path. Every KV request lands in
 * one of 29 series fixed in advance (operation × status, and found / not_found on successful
 * gets), so a request updates a few numbers in an array: no prom-client call, no label object,
 * no label hash string built per request (prom-client's labelled children build one on every
 * `inc` and `observe`). A scrape reads them through `counter()` and `histogram()`, two objects
 * registered in the node's prom-client Registry that return exactly what prom-client's Counter
 * and Histogram would for the same requests: the same samples, labels and order
 * (`test/ops/kv-metrics.test.ts` compares the two expositions).
 */
import type { Metric, MetricValueWithName } from "prom-client";

type Labels = Record<string, string | number>;

interface Series {
  readonly operation: string;
  readonly status: string;
  readonly result: string;
  count: number;
  sum: number;
  /** Observations per bucket (not cumulative): index i counts values in (bounds[i-1], bounds[i]]. */
  readonly buckets: number[];
}

export class KvRequestMetrics {
  readonly #bounds: readonly number[];
  /** Every series, in the order prom-client would list them (the order they were created in). */
  readonly #series: Series[] = [];
  /** Series by operation, then status, then result. */
  readonly #index = new Map<string, Map<string, Map<string, Series>>>();
  /** (operation, status) pairs of kv_requests_total, in order, with their series. */
  readonly #pairs: { labels: Labels; series: Series[] }[] = [];

  /**
   * `combinations` lists every (operation, status, results) in the order the series are to be
   * exported; `bounds` are the histogram's upper bounds (then +Inf).
   */
  constructor(
    bounds: readonly number[],
    combinations: readonly { operation: string; status: string; results: readonly string[] }[],
  ) {
    this.#bounds = bounds;
    for (const { operation, status, results } of combinations) {
      const pair: Series[] = [];
      for (const result of results) {
        const s: Series = {
          operation,
          status,
          result,
          count: 0,
          sum: 0,
          buckets: bounds.map(() => 0),
        };
        this.#series.push(s);
        pair.push(s);
        let byStatus = this.#index.get(operation);
        if (byStatus === undefined) this.#index.set(operation, (byStatus = new Map()));
        let byResult = byStatus.get(status);
        if (byResult === undefined) byStatus.set(status, (byResult = new Map()));
        byResult.set(result, s);
      }
      this.#pairs.push({ labels: { operation, status }, series: pair });
    }
  }

  /** One request of series (operation, status, result) that took `ms`; throws for an unknown one. */
  record(operation: string, status: string, result: string, ms: number): void {
    const s = this.#index.get(operation)?.get(status)?.get(result);
    if (s === undefined) {
      throw new TypeError(`no kv series operation=${operation} status=${status} result=${result}`);
    }
    if (!Number.isFinite(ms)) throw new TypeError(`Value is not a valid number: ${ms}`);
    s.count++;
    s.sum += ms;
    const bounds = this.#bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (ms <= (bounds[i] as number)) {
        (s.buckets[i] as number)++;
        break;
      }
    }
  }

  /** kv_requests_total for `registry.registerMetric`. */
  counter(name: string, help: string): Metric {
    return this.#metric(name, help, "counter", () =>
      this.#pairs.map(({ labels, series }) => ({
        value: series.reduce((n, s) => n + s.count, 0),
        labels: { ...labels },
      })),
    );
  }

  /** kv_request_duration_ms for `registry.registerMetric`. */
  histogram(name: string, help: string): Metric {
    const bucket = `${name}_bucket`;
    return this.#metric(name, help, "histogram", () => {
      const values: MetricValueWithName<string>[] = [];
      for (const s of this.#series) {
        const labels = { operation: s.operation, status: s.status, result: s.result };
        let cumulative = 0;
        this.#bounds.forEach((le, i) => {
          cumulative += s.buckets[i] as number;
          values.push({ value: cumulative, labels: { le, ...labels }, metricName: bucket });
        });
        values.push(
          { value: s.count, labels: { le: "+Inf", ...labels }, metricName: bucket },
          { value: s.sum, labels: { ...labels }, metricName: `${name}_sum` },
          { value: s.count, labels: { ...labels }, metricName: `${name}_count` },
        );
      }
      return values;
    });
  }

  #metric(
    name: string,
    help: string,
    type: "counter" | "histogram",
    values: () => MetricValueWithName<string>[],
  ): Metric {
    const metric = {
      name,
      help,
      type,
      aggregator: "sum",
      // What prom-client's Counter and Histogram `get()` return (MetricObjectWithValues).
      get: () => Promise.resolve({ name, help, type, aggregator: "sum", values: values() }),
      reset: (): void => {
        for (const s of this.#series) {
          s.count = 0;
          s.sum = 0;
          s.buckets.fill(0);
        }
      },
    };
    return metric as unknown as Metric;
  }
}

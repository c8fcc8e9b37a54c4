/**
 * Reading a /metrics export in tests. Families and types come from a real Prometheus text-format
 * parser (parse-prometheus-text-format, which also rejects malformed lines). That parser merges
 * the series of a labelled histogram into one, so the series themselves (`_bucket` with `le`,
 * `_sum`, `_count`, per label set) are checked from the sample lines with `samples()`.
 */
import assert from "node:assert/strict";
import parsePrometheusTextFormat from "parse-prometheus-text-format";

export const CATALOGUE: ReadonlyArray<readonly [string, string, readonly string[]]> = [
  ["kv_requests_total", "COUNTER", ["operation", "status"]],
  ["kv_request_duration_ms", "HISTOGRAM", ["operation", "status", "result"]],
  ["lsm_compaction_duration_ms", "HISTOGRAM", ["level", "result"]],
  ["lsm_memtable_size_bytes", "GAUGE", ["shard_id"]],
  ["lsm_sstable_count", "GAUGE", ["level", "shard_id"]],
  ["raft_leader_changes_total", "COUNTER", ["shard_id"]],
  ["raft_commit_index", "GAUGE", ["shard_id", "node_id"]],
  ["raft_term", "GAUGE", ["shard_id"]],
  ["swim_cluster_size", "GAUGE", []],
  ["swim_failed_members_total", "COUNTER", []],
  ["swim_gossip_latency_ms", "HISTOGRAM", []],
  ["process_cpu_seconds_total", "COUNTER", []],
  ["process_resident_memory_bytes", "GAUGE", []],
];

/** name → TYPE (upper case), from the real parser. */
export function familyTypes(text: string): Map<string, string> {
  return new Map(parsePrometheusTextFormat(text).map((f) => [f.name, f.type]));
}

export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/y;

export function samples(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = SAMPLE.exec(line);
    assert.ok(m !== null && m[1] !== undefined && m[3] !== undefined, `bad sample line: ${line}`);
    const labels: Record<string, string> = {};
    const body = m[2] ?? "";
    LABEL.lastIndex = 0;
    while (LABEL.lastIndex < body.length) {
      const l = LABEL.exec(body);
      assert.ok(l !== null && l[1] !== undefined && l[2] !== undefined, `bad labels: ${line}`);
      labels[l[1]] = l[2];
    }
    const value = m[3] === "+Inf" ? Infinity : Number(m[3]);
    assert.ok(!Number.isNaN(value), `bad value: ${line}`);
    out.push({ name: m[1], labels, value });
  }
  return out;
}

/** Checks every series of histogram `name`: ordered `le` bounds ending in +Inf, `_sum`, `_count`. */
export function checkHistogram(text: string, name: string, bounds: readonly number[]): number {
  const all = samples(text);
  const key = (labels: Readonly<Record<string, string>>): string =>
    JSON.stringify(
      Object.entries(labels)
        .filter(([k]) => k !== "le")
        .sort(),
    );
  const buckets = new Map<string, Sample[]>();
  for (const s of all.filter((s) => s.name === `${name}_bucket`)) {
    const k = key(s.labels);
    buckets.set(k, [...(buckets.get(k) ?? []), s]);
  }
  const expectedLe = [...bounds.map(String), "+Inf"];
  for (const [k, series] of buckets) {
    assert.deepEqual(
      series.map((s) => s.labels["le"]),
      expectedLe,
      `${name} buckets of ${k}`,
    );
    const counts = series.map((s) => s.value);
    for (let i = 1; i < counts.length; i++) {
      assert.ok((counts[i] ?? 0) >= (counts[i - 1] ?? 0), `${name} buckets are cumulative`);
    }
    const count = all.find((s) => s.name === `${name}_count` && key(s.labels) === k);
    const sum = all.find((s) => s.name === `${name}_sum` && key(s.labels) === k);
    assert.ok(count !== undefined && sum !== undefined, `${name} ${k} has _sum and _count`);
    assert.equal(count.value, counts[counts.length - 1], `${name} _count equals the +Inf bucket`);
  }
  return buckets.size;
}

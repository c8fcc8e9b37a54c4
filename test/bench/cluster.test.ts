/**
 * The parsing pieces of `npm run bench:cluster` (bench/cluster-lib.ts) on real outputs of the
 * two generators, of a node's /metrics and of a V8 CPU profile. No timing is asserted.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  areaOf,
  markdownTable,
  parseCairnBench,
  parseConcurrencies,
  parseGrpcLoad,
  parseList,
  parseMetrics,
  type Row,
  selfTimes,
  serverSide,
  sumMetric,
} from "../../bench/cluster-lib.ts";

// Captured from grpc-load (../shared/tools/grpc-load) against a Cairn node.
const GRPC_LOAD_GET =
  '{"test":"grpc-load","loadgen":"cpp","method":"/cairn.v1.KV/Get","mode":"load","endpoints":1,"channels":1,"concurrency":4,"threads":1,"keyspace":100,"key_size":16,"seconds":1.02,"ops":4091,"ops_per_s":3998,"errors":0,"errors_by_code":{},"first_error":null,"lat_ms":{"n":4091,"mean":0.841,"p50":0.312,"p90":0.653,"p99":14.777,"p999":36.592,"max":41.516},"loadgen_cpu_cores":0.12,"loadgen_cpu_us_per_op":30.4,"machine_busy_cores":2,"machine_steal_cores":0,"hit_ratio":0}';
const GRPC_LOAD_FILL =
  '{"test":"grpc-load","loadgen":"cpp","method":"/cairn.v1.KV/Put","mode":"fill","endpoints":3,"channels":3,"concurrency":256,"threads":1,"keyspace":20000,"key_size":16,"value_size":100,"seconds":20.61,"written":19890,"ops":19890,"ops_per_s":965,"errors":110,"errors_by_code":{"UNAVAILABLE":110},"first_error":"UNAVAILABLE: proposal dropped: leadership transfer to n3@33b4155c0c9140d0 in progress","lat_ms":{"n":19890,"mean":257.707,"p50":155.938,"p90":468.447,"p99":1712.427,"p999":2705.222,"max":3652.589},"loadgen_cpu_cores":0.07,"loadgen_cpu_us_per_op":70.7,"machine_busy_cores":1.97,"machine_steal_cores":0}';
// Every call failed: lat_ms has no percentiles.
const GRPC_LOAD_ALL_FAILED =
  '{"test":"grpc-load","loadgen":"cpp","method":"/cairn.v1.KV/Put","mode":"load","endpoints":3,"channels":3,"concurrency":8,"threads":1,"keyspace":10,"key_size":16,"value_size":100,"seconds":1.00,"ops":0,"ops_per_s":0,"errors":12,"errors_by_code":{"UNAVAILABLE":12},"first_error":"UNAVAILABLE: failed to connect to all addresses","lat_ms":{"n":0},"loadgen_cpu_cores":0.01,"machine_busy_cores":1.5,"machine_steal_cores":0}';

// Captured from `cairn bench put … --output json` (src/cli/bench.ts), pretty-printed as it is.
const CAIRN_BENCH_PUT = JSON.stringify(
  JSON.parse(
    '{"workload":"put","read_ratio":0,"distribution":"uniform","consistency":"linearizable","keyspace":50,"key_size":16,"value_size":100,"concurrency":4,"channels":4,"rate_limit":0,"duration_s":1,"ops":240,"ops_per_sec":240,"latency_ms":{"p50":6.019,"p90":28.895,"p99":293.375,"p999":297.164,"max":297.164,"mean":16.278},"errors":{"UNAVAILABLE":3},"error_count":3,"by_operation":{"put":{"ops":240,"ops_per_sec":240,"latency_ms":{"p50":6.019,"p90":28.895,"p99":293.375,"p999":297.164,"max":297.164,"mean":16.278}}},"client_cpu_percent":21.9,"warnings":[]}',
  ),
  null,
  2,
);

const METRICS = (
  cpu: number,
  success: number,
  notLeader: number,
  peerMessages = 0,
): string => `# HELP kv_requests_total KV requests by operation and status.
# TYPE kv_requests_total counter
kv_requests_total{operation="put",status="success"} ${success}
kv_requests_total{operation="put",status="not_leader"} ${notLeader}
kv_requests_total{operation="put",status="error"} 0
kv_requests_total{operation="get",status="success"} 10
kv_requests_total{operation="get",status="not_leader"} 0
kv_request_duration_ms_bucket{le="+Inf",operation="put",status="success",result=""} ${success}
raft_leader_changes_total{shard_id="0"} 1
raft_leader_changes_total{shard_id="887"} 1
process_cpu_seconds_total ${cpu}
cairn_raft_messages_sent_total{peer="n2"} ${peerMessages}
cairn_raft_messages_sent_total{peer="n3"} ${peerMessages / 2}
cairn_raft_heartbeats_sent_total{peer="n2"} ${peerMessages / 4}
`;

describe("bench:cluster parsing", () => {
  it("reads grpc-load's JSON line, also after other output", () => {
    const r = parseGrpcLoad(`some warning\n${GRPC_LOAD_GET}\n`, "get", 4);
    assert.equal(r.generator, "grpc-load");
    assert.equal(r.opsPerSec, 3998);
    assert.equal(r.ops, 4091);
    assert.equal(r.p50, 0.312);
    assert.equal(r.p99, 14.777);
    assert.equal(r.errors, 0);
    assert.equal(r.hitRatio, 0);
    assert.equal(r.clientCpuPercent, 12);
    assert.equal(r.firstError, null);

    const f = parseGrpcLoad(GRPC_LOAD_FILL, "put", 256);
    assert.deepEqual(f.errorsByCode, { UNAVAILABLE: 110 });
    assert.equal(f.hitRatio, null);
    assert.match(f.firstError ?? "", /leadership transfer/);

    const none = parseGrpcLoad(GRPC_LOAD_ALL_FAILED, "put", 8);
    assert.equal(none.opsPerSec, 0);
    assert.equal(none.p99, 0);
    assert.equal(none.errors, 12);
  });

  it("refuses output that is not grpc-load's, saying what it got", () => {
    assert.throws(() => parseGrpcLoad("", "put", 1), /no JSON line/);
    assert.throws(() => parseGrpcLoad('{"test":"other"}', "put", 1), /not "grpc-load"/);
    assert.throws(
      () => parseGrpcLoad('{"test":"grpc-load","ops":1,"lat_ms":{}}', "put", 1),
      /no number/,
    );
  });

  it("reads cairn bench's JSON object", () => {
    const r = parseCairnBench(CAIRN_BENCH_PUT, "put", 4);
    assert.equal(r.generator, "cairn-bench");
    assert.equal(r.opsPerSec, 240);
    assert.equal(r.p50, 6.019);
    assert.equal(r.p90, 28.895);
    assert.equal(r.p99, 293.375);
    assert.equal(r.errors, 3);
    assert.deepEqual(r.errorsByCode, { UNAVAILABLE: 3 });
    assert.equal(r.clientCpuPercent, 21.9);
    assert.throws(() => parseCairnBench("workload put …", "put", 4), /not one JSON object/);
  });

  it("reads /metrics counters and what the nodes did between two scrapes", () => {
    const m = parseMetrics(METRICS(1.5, 100, 20));
    assert.equal(m.get('kv_requests_total{operation="put",status="success"}'), 100);
    assert.equal(sumMetric(m, "kv_requests_total"), 130);
    assert.equal(sumMetric(m, "kv_requests_total", { status: "success" }), 110);
    assert.equal(sumMetric(m, "kv_requests_total", { operation: "put", status: "not_leader" }), 20);
    // A prefix of another metric's name does not match it.
    assert.equal(sumMetric(m, "kv_request_duration_ms"), 0);
    assert.equal(sumMetric(m, "raft_leader_changes_total"), 2);

    const before = [parseMetrics(METRICS(1, 100, 20, 40)), parseMetrics(METRICS(2, 0, 0))];
    const after = [parseMetrics(METRICS(3, 400, 120, 440)), parseMetrics(METRICS(3, 300, 0, 200))];
    const s = serverSide(before, after, 2);
    assert.deepEqual(s.cpuCoresByNode, [1, 0.5]);
    assert.equal(s.cpuCores, 1.5);
    assert.equal(s.forwarded, 100);
    assert.equal(s.answered, 600);
    assert.equal(s.leaderChanges, 0);
    // Both peers of each node: (440 + 220) - (40 + 20) on the first, 200 + 100 on the second.
    assert.equal(s.peerMessages, 900);
    assert.equal(s.heartbeats, 100 + 50);
  });

  it("sums a CPU profile's self time by function and by area, idle apart", () => {
    const frame = (functionName: string, url: string, lineNumber = 0) => ({
      functionName,
      url,
      lineNumber,
    });
    const profile = {
      nodes: [
        { id: 1, callFrame: frame("(root)", "") },
        { id: 2, callFrame: frame("(idle)", "") },
        { id: 3, callFrame: frame("append", "file:///work/x/src/storage/wal/wal.ts", 41) },
        {
          id: 4,
          callFrame: frame("sendMessage", "file:///w/node_modules/@grpc/grpc-js/build/src/x.js"),
        },
        { id: 5, callFrame: frame("(garbage collector)", "") },
      ],
      samples: [3, 3, 4, 2, 5, 3],
      timeDeltas: [0, 1000, 1000, 2000, 5000, 1000],
    };
    const f = selfTimes([profile]);
    // Sample i lasts until sample i+1; the last one gets the mean delta (2000 µs).
    assert.equal(f.idleMs, 5);
    assert.equal(f.busyMs, 1 + 1 + 2 + 1 + 2);
    assert.deepEqual(
      f.rows.map((r) => [r.name, r.ms]),
      [
        ["append src/storage/wal/wal.ts:42", 4],
        ["sendMessage @grpc/grpc-js/build/src/x.js:1", 2],
        ["(garbage collector)", 1],
      ],
    );
    const a = selfTimes([profile, profile], true);
    assert.deepEqual(
      a.rows.map((r) => [r.name, r.ms]),
      [
        ["src/storage", 8],
        ["@grpc/grpc-js", 4],
        ["(gc)", 2],
      ],
    );
    assert.equal(a.rows[1]?.share, 4 / 14);
    assert.equal(areaOf("x", "node:internal/streams/readable"), "node: (Node.js internals)");
    assert.equal(areaOf("main", "file:///r/src/index.ts"), "src/index.ts");
  });

  it("prints a Markdown row per case", () => {
    const row: Row = {
      ...parseGrpcLoad(GRPC_LOAD_GET, "get", 4),
      loadAvg: 3.21,
      server: {
        cpuCores: 1.2,
        cpuCoresByNode: [0.4, 0.4, 0.4],
        forwarded: 50,
        answered: 100,
        leaderChanges: 0,
        peerMessages: 1234,
        heartbeats: 205,
      },
    };
    const lines = markdownTable([row]).trim().split("\n");
    assert.equal(lines.length, 3);
    assert.equal(
      lines[2],
      "| grpc-load | get (linearizable) | 4 | 3,998 | 0.31 | 14.78 | 0 | 50% | 12.3 (2.1) | 1.20 | 300 | 12% | 3.2 |",
    );
  });

  it("parses the case lists", () => {
    assert.deepEqual(parseConcurrencies("1, 64,256"), [1, 64, 256]);
    assert.throws(() => parseConcurrencies("1,x"), /--concurrency/);
    assert.deepEqual(parseList("ops", "put,get", ["put", "get"]), ["put", "get"]);
    assert.throws(() => parseList("ops", "put,scan", ["put", "get"]), /"scan" is not one of/);
  });
});

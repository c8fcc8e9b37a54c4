/**
 * The five per-shard families of the catalogue — raft_term, raft_commit_index,
 * raft_leader_changes_total, lsm_memtable_size_bytes and lsm_sstable_count — with their text
 * exposition kept between scrapes. A node has up to 1,024 shards and so about 8,000 of these
 * series; rendering them through prom-client's labelled children (a label object, a hash string
 * and a formatted line per series at every scrape) took ~50 ms, the contract wants 1–5 ms (§4.3).
 *
 * Here each series keeps its sample line and the value the line was rendered from; a scrape
 * compares the current value (a field read) and renders only the lines whose value changed, then
 * concatenates the family. The text is what prom-client's Registry writes for the same series, in
 * the same order (`test/ops/shard-metrics.test.ts` compares the two byte for byte).
 *
 * Each family is also a prom-client `Metric` registered in the node's Registry, so
 * `getMetricsAsJSON()` (a shard worker's metrics, summed by the node) still sees it.
 *
 * Invariants: a series exists for every shard between `initShard` and `removeShard` (Raft
 * families); with a memtable source, for every shard the source ever named until removeShard;
 * with a table source, exactly for the shards the source names at the scrape.
 */
import type { Metric, MetricObjectWithValues, MetricValue } from "prom-client";

type Values = MetricValue<string>[];

/** prom-client's `getValueAsString`. */
function formatValue(value: number): string {
  if (Number.isNaN(value)) return "Nan";
  if (!Number.isFinite(value)) return value < 0 ? "-Inf" : "+Inf";
  return `${value}`;
}

/** prom-client's label value escaping. */
export function escapeLabelValue(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

/** One sample line, `\n` first (a family's lines follow its TYPE line), rendered only on change. */
class SampleLine {
  readonly #prefix: string;
  /** NaN never equals itself, so the first update always renders. */
  #value = NaN;
  text = "";

  constructor(name: string, labels: string) {
    this.#prefix = `\n${name}{${labels}} `;
  }

  /** True when the value changed (and the text was rendered anew). */
  update(value: number): boolean {
    if (value === this.#value) return false;
    this.#value = value;
    this.text = this.#prefix + formatValue(value);
    return true;
  }
}

/** Series per segment of a family's text. */
const SEGMENT = 64;

/**
 * A family's text, built at each scrape from its lines in order, in segments of SEGMENT lines
 * whose text is kept flat between scrapes: a segment whose lines are the same objects as last
 * time, none of them changed, is reused as it is. Joining a few thousand short strings into the
 * one flat string a socket write needs costs more than rendering them (~1.5 ms for 8,000 lines);
 * a scrape under load re-joins only the segments whose values moved.
 */
class FamilyText {
  readonly #header: string;
  readonly #segments: { readonly lines: SampleLine[]; text: string }[] = [];
  #segment = 0;
  #position = 0;
  #dirty = false;

  constructor(f: Family) {
    this.#header = `# HELP ${f.name} ${f.help}\n# TYPE ${f.name} ${f.type}`;
  }

  /** The next line of this scrape, at `value`. */
  add(line: SampleLine, value: number): void {
    if (line.update(value)) this.#dirty = true;
    let segment = this.#segments[this.#segment];
    if (segment === undefined) {
      segment = { lines: [], text: "" };
      this.#segments.push(segment);
    }
    if (segment.lines[this.#position] !== line) {
      segment.lines[this.#position] = line;
      this.#dirty = true;
    }
    if (++this.#position === SEGMENT) this.#close();
  }

  /**
   * After the last line: appends the family's text to `out`, as its header and one flat string
   * per segment (never one large string: see CairnMetrics.exposeBytes). The next add() starts
   * the next scrape.
   */
  finish(out: string[]): void {
    if (this.#position > 0) this.#close();
    this.#segments.length = this.#segment;
    out.push(this.#header);
    for (const segment of this.#segments) out.push(segment.text);
    this.#segment = 0;
  }

  #close(): void {
    const segment = this.#segments[this.#segment] as { lines: SampleLine[]; text: string };
    if (this.#dirty || segment.lines.length !== this.#position) {
      segment.lines.length = this.#position;
      // join, not +=: the text is then one flat string, not a rope of SEGMENT pieces.
      segment.text = segment.lines.map((l) => l.text).join("");
    }
    this.#segment++;
    this.#position = 0;
    this.#dirty = false;
  }
}

interface RaftShard {
  term: number;
  commit: number;
  nodeId: string;
  leaderChanges: number;
  readonly termLine: SampleLine;
  readonly leaderLine: SampleLine;
  commitLine: SampleLine;
  /** The node id commitLine was made for. */
  commitLineNode: string;
}

interface Family {
  readonly name: string;
  readonly help: string;
  readonly type: "gauge" | "counter";
}

const TERM: Family = { name: "raft_term", help: "Current Raft term.", type: "gauge" };
const COMMIT: Family = {
  name: "raft_commit_index",
  help: "Committed Raft log index.",
  type: "gauge",
};
const LEADER_CHANGES: Family = {
  name: "raft_leader_changes_total",
  help: "Leader changes (elections) seen by this node.",
  type: "counter",
};
const MEMTABLE: Family = {
  name: "lsm_memtable_size_bytes",
  help: "Current memtable size in bytes (active and immutable memtables).",
  type: "gauge",
};
const SSTABLES: Family = { name: "lsm_sstable_count", help: "SSTables per level.", type: "gauge" };

export type MemtableSource = () => Iterable<readonly [shard: number, bytes: number]>;
export type SstableSource = () => Iterable<readonly [shard: number, perLevel: readonly number[]]>;

export class ShardMetrics {
  readonly #defaultNodeId: string;
  readonly #raft = new Map<number, RaftShard>();
  readonly #memtables = new Map<number, { bytes: number; readonly line: SampleLine }>();
  /** Tables per shard and level pushed by the engines, in the order first pushed. */
  readonly #pushedTables = new Map<
    string,
    { readonly shard: number; readonly level: number; count: number; readonly line: SampleLine }
  >();
  /** Per shard, one line per level, for the tables read from the source. */
  #sourcedTables = new Map<number, SampleLine[]>();
  #memtableSource: MemtableSource | null = null;
  readonly #termText = new FamilyText(TERM);
  readonly #commitText = new FamilyText(COMMIT);
  readonly #leaderChangesText = new FamilyText(LEADER_CHANGES);
  readonly #memtableText = new FamilyText(MEMTABLE);
  readonly #sstableText = new FamilyText(SSTABLES);
  #sstableSource: SstableSource | null = null;

  constructor(defaultNodeId: string) {
    this.#defaultNodeId = defaultNodeId;
  }

  get hasMemtableSource(): boolean {
    return this.#memtableSource !== null;
  }

  get hasSstableSource(): boolean {
    return this.#sstableSource !== null;
  }

  setMemtableSource(source: MemtableSource): void {
    this.#memtableSource = source;
  }

  setSstableSource(source: SstableSource): void {
    this.#sstableSource = source;
  }

  initShard(shard: number): void {
    if (this.#memtableSource === null) this.setMemtable(shard, 0);
    this.#raft.set(shard, this.#newRaftShard(shard, 0, 0, this.#defaultNodeId, 0));
  }

  removeShard(shard: number): void {
    this.#raft.delete(shard);
    this.#memtables.delete(shard);
    for (const [key, entry] of this.#pushedTables) {
      if (entry.shard === shard) this.#pushedTables.delete(key);
    }
  }

  /** Every Raft round of every shard: field writes only. */
  setRaftState(shard: number, nodeId: string, term: number, commit: number): void {
    const state = this.#raft.get(shard);
    if (state === undefined) {
      this.#raft.set(shard, this.#newRaftShard(shard, term, commit, nodeId, 0));
    } else {
      state.term = term;
      state.commit = commit;
      state.nodeId = nodeId;
    }
  }

  incLeaderChanges(shard: number): void {
    const state = this.#raft.get(shard);
    if (state === undefined) {
      this.#raft.set(shard, this.#newRaftShard(shard, 0, 0, this.#defaultNodeId, 1));
    } else {
      state.leaderChanges++;
    }
  }

  /** An engine's own report (used only while the node gives no source). */
  setMemtable(shard: number, bytes: number): void {
    const entry = this.#memtables.get(shard);
    if (entry === undefined) {
      this.#memtables.set(shard, {
        bytes,
        line: new SampleLine(MEMTABLE.name, `shard_id="${shard}"`),
      });
    } else {
      entry.bytes = bytes;
    }
  }

  /** An engine's own report (used only while the node gives no source). */
  setSstableCount(shard: number, level: number, count: number): void {
    const key = `${shard}/${level}`;
    const entry = this.#pushedTables.get(key);
    if (entry === undefined) {
      const line = new SampleLine(SSTABLES.name, `level="L${level}",shard_id="${shard}"`);
      this.#pushedTables.set(key, { shard, level, count, line });
    } else {
      entry.count = count;
    }
  }

  #newRaftShard(
    shard: number,
    term: number,
    commit: number,
    nodeId: string,
    leaderChanges: number,
  ): RaftShard {
    const id = `shard_id="${shard}"`;
    return {
      term,
      commit,
      nodeId,
      leaderChanges,
      termLine: new SampleLine(TERM.name, id),
      leaderLine: new SampleLine(LEADER_CHANGES.name, id),
      commitLine: new SampleLine(COMMIT.name, `${id},node_id="${escapeLabelValue(nodeId)}"`),
      commitLineNode: nodeId,
    };
  }

  /** Reads the sources into the series (called once per scrape, before the families). */
  #pullMemtables(): void {
    const source = this.#memtableSource;
    if (source !== null) for (const [shard, bytes] of source()) this.setMemtable(shard, bytes);
  }

  // ── the text of each family (prom-client's layout: lines joined by "\n", no final newline) ──

  termText(out: string[]): void {
    const text = this.#termText;
    for (const s of this.#raft.values()) text.add(s.termLine, s.term);
    text.finish(out);
  }

  commitText(out: string[]): void {
    const text = this.#commitText;
    for (const [shard, s] of this.#raft) {
      if (s.commitLineNode !== s.nodeId) {
        s.commitLine = new SampleLine(
          COMMIT.name,
          `shard_id="${shard}",node_id="${escapeLabelValue(s.nodeId)}"`,
        );
        s.commitLineNode = s.nodeId;
      }
      text.add(s.commitLine, s.commit);
    }
    text.finish(out);
  }

  leaderChangesText(out: string[]): void {
    const text = this.#leaderChangesText;
    for (const s of this.#raft.values()) text.add(s.leaderLine, s.leaderChanges);
    text.finish(out);
  }

  memtableText(out: string[]): void {
    this.#pullMemtables();
    const text = this.#memtableText;
    for (const m of this.#memtables.values()) text.add(m.line, m.bytes);
    text.finish(out);
  }

  sstableText(out: string[]): void {
    const text = this.#sstableText;
    const source = this.#sstableSource;
    if (source === null) {
      for (const t of this.#pushedTables.values()) text.add(t.line, t.count);
      text.finish(out);
      return;
    }
    // The source names every open shard: a shard it no longer names loses its series.
    const previous = this.#sourcedTables;
    const next = new Map<number, SampleLine[]>();
    for (const [shard, perLevel] of source()) {
      const lines = previous.get(shard) ?? [];
      next.set(shard, lines);
      for (let level = 0; level < perLevel.length; level++) {
        const line = (lines[level] ??= new SampleLine(
          SSTABLES.name,
          `level="L${level}",shard_id="${shard}"`,
        ));
        text.add(line, perLevel[level] as number);
      }
    }
    this.#sourcedTables = next;
    text.finish(out);
  }

  // ── the same series as values, for getMetricsAsJSON (a shard worker's metrics) ──────────────

  #termValues(): Values {
    return [...this.#raft].map(([shard, s]) => ({
      value: s.term,
      labels: { shard_id: String(shard) },
    }));
  }

  #commitValues(): Values {
    return [...this.#raft].map(([shard, s]) => ({
      value: s.commit,
      labels: { shard_id: String(shard), node_id: s.nodeId },
    }));
  }

  #leaderChangesValues(): Values {
    return [...this.#raft].map(([shard, s]) => ({
      value: s.leaderChanges,
      labels: { shard_id: String(shard) },
    }));
  }

  #memtableValues(): Values {
    this.#pullMemtables();
    return [...this.#memtables].map(([shard, m]) => ({
      value: m.bytes,
      labels: { shard_id: String(shard) },
    }));
  }

  #sstableValues(): Values {
    const source = this.#sstableSource;
    if (source === null) {
      return [...this.#pushedTables.values()].map((t) => ({
        value: t.count,
        labels: { level: `L${t.level}`, shard_id: String(t.shard) },
      }));
    }
    const values: Values = [];
    for (const [shard, perLevel] of source()) {
      perLevel.forEach((count, level) =>
        values.push({ value: count, labels: { level: `L${level}`, shard_id: String(shard) } }),
      );
    }
    return values;
  }

  /**
   * The five families as prom-client Metrics, in the catalogue's order, each with the `text()`
   * CairnMetrics.expose() uses instead of prom-client's formatting.
   */
  families(): { readonly metric: Metric; readonly text: (out: string[]) => void }[] {
    const family = (
      f: Family,
      values: () => Values,
      text: (out: string[]) => void,
    ): { metric: Metric; text: (out: string[]) => void } => {
      const object = (): MetricObjectWithValues<MetricValue<string>> =>
        ({
          name: f.name,
          help: f.help,
          type: f.type,
          aggregator: "sum",
          values: values(),
        }) as unknown as MetricObjectWithValues<MetricValue<string>>;
      const metric = {
        name: f.name,
        help: f.help,
        type: f.type,
        aggregator: "sum",
        get: () => Promise.resolve(object()),
        reset: (): void => {},
      };
      return { metric: metric as unknown as Metric, text };
    };
    return [
      family(
        MEMTABLE,
        () => this.#memtableValues(),
        (out) => this.memtableText(out),
      ),
      family(
        SSTABLES,
        () => this.#sstableValues(),
        (out) => this.sstableText(out),
      ),
      family(
        LEADER_CHANGES,
        () => this.#leaderChangesValues(),
        (out) => this.leaderChangesText(out),
      ),
      family(
        COMMIT,
        () => this.#commitValues(),
        (out) => this.commitText(out),
      ),
      family(
        TERM,
        () => this.#termValues(),
        (out) => this.termText(out),
      ),
    ];
  }
}

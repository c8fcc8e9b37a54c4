/**
 * `npm run check:lsm-mutations [-- --only <id>]`
 *
 * Plants bugs in the LSM engine one at a time and shows that the storage tests fail for each
 * (issue 50). Each bug is a text patch applied to a copy of `src/` and `test/` in a temporary
 * directory (production code is never touched; a bug in the addon, `native/src`, is planted in
 * a copy of it built there); the listed test files run there, and a bug is caught when at least
 * one of them fails. Prints a Markdown table (the one in docs/storage.md) and exits 1 if a bug
 * went uncaught, 2 if a patch no longer applies (the code it targets changed: update the patch).
 */
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";

interface Mutation {
  readonly id: string;
  readonly what: string;
  readonly file: string;
  /** Replacements, each of a text found exactly once in `file`. */
  readonly patches: ReadonlyArray<readonly [string, string]>;
  readonly tests: readonly string[];
}

const MODEL = "test/storage/lsm-model.test.ts";
const REGRESSIONS = "test/storage/lsm-regressions.test.ts";

const MUTATIONS: readonly Mutation[] = [
  {
    id: "1",
    what: "seekInBlock's string search once a block's first and last keys are made",
    file: "src/storage/lsm/format.ts",
    patches: [
      [
        "if (block.keysMade === block.count) {",
        "if (block.keys !== undefined && block.keys[0] !== undefined && block.keys[block.count - 1] !== undefined) {",
      ],
    ],
    tests: ["test/storage/format.test.ts", REGRESSIONS, MODEL],
  },
  {
    id: "2",
    what: "a memtable iterator reads the value of the node it stands on (overwritten in place)",
    file: "src/storage/lsm/iterators.ts",
    patches: [
      [
        "  #node: MemNode | null = null;\n",
        "  #node: MemNode | null = null;\n  #newest = false;\n",
      ],
      [
        "        this.#node = node;\n",
        "        this.#node = node;\n        this.#newest = i === 0;\n",
      ],
      [
        "return this.valid ? this.#mem.value(this.#version) : EMPTY;",
        "return this.valid ? this.#mem.value(this.#newest ? (this.#node as MemNode) : this.#version) : EMPTY;",
      ],
    ],
    tests: [REGRESSIONS, MODEL],
  },
  {
    id: "3",
    what: "the addon's SIGBUS handler repairs no page of a mapping (every fault kills)",
    file: "native/src/cairn_native.c",
    patches: [["bool repaired = s != NULL", "bool repaired = false && s != NULL"]],
    tests: [REGRESSIONS, "test/storage/native.test.ts"],
  },
  {
    id: "4",
    what: "a failed import fails the engine unless the error is a CorruptionError",
    file: "src/storage/lsm/engine.ts",
    patches: [
      [
        "if (committing) this.#fail(err);",
        "if (!(err instanceof CorruptionError)) this.#fail(err);",
      ],
    ],
    tests: [REGRESSIONS],
  },
  {
    id: "5",
    what: "the snapshot decoder accepts keys out of order or repeated",
    file: "src/storage/lsm/snapshot-stream.ts",
    patches: [
      [
        "if (lastKey !== undefined && Buffer.compare(key, lastKey) <= 0) {",
        "if (lastKey === null) {",
      ],
    ],
    tests: [REGRESSIONS],
  },
  {
    id: "6",
    what: "the snapshot decoder concatenates the pending bytes with each chunk",
    file: "src/storage/lsm/snapshot-stream.ts",
    patches: [
      [
        "    this.#chunks.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length));\n",
        "    const rest = this.#chunks.map((c, i) => (i === 0 ? c.subarray(this.#head) : c));\n    const all = Buffer.concat([...rest, chunk]);\n    this.#chunks.length = 0;\n    this.#chunks.push(all);\n    this.#head = 0;\n",
      ],
    ],
    tests: [REGRESSIONS],
  },
  {
    id: "7",
    what: "one FIFO queue for flushes and compactions",
    file: "src/storage/lsm/worker-pool.ts",
    patches: [
      ['(job.type === "flush" ? this.#flushQueue : this.#queue).push({', "this.#queue.push({"],
    ],
    tests: ["test/storage/worker-pool.test.ts"],
  },
  {
    id: "a",
    what: "a flush ignores live snapshots (drops versions they read)",
    file: "src/storage/lsm/engine.ts",
    patches: [
      [
        "      arena: mem.arena(),\n      smallestSnapshot: this.#smallestSnapshot(),",
        "      arena: mem.arena(),\n      smallestSnapshot: this.#lastSeq,",
      ],
    ],
    tests: [MODEL],
  },
  {
    id: "b",
    what: "point reads probe L0 tables oldest first",
    file: "src/storage/lsm/engine.ts",
    patches: [
      [
        "    for (const t of this.#levels[0] as Table[]) {\n      v = t.get(k, seq, hash);",
        "    for (const t of [...(this.#levels[0] as Table[])].reverse()) {\n      v = t.get(k, seq, hash);",
      ],
    ],
    tests: [MODEL],
  },
  {
    id: "c",
    what: "no directory fsync before CURRENT names a new manifest, only when reopening",
    file: "src/storage/lsm/manifest.ts",
    patches: [
      [
        "    await fsyncDir(dir);\n    await writeFileDurably(",
        "    if (!dirDurable) await fsyncDir(dir);\n    await writeFileDurably(",
      ],
    ],
    tests: ["test/storage/lsm-reopen-crash.test.ts"],
  },
  {
    id: "d",
    what: "a point read returns a view of its block, which may be a mapping's",
    file: "src/storage/lsm/table.ts",
    patches: [
      ["return blockValueCopy(block, i);", "return blockValue(block, i);"],
      ["  blockValueCopy,\n", "  blockValue,\n"],
    ],
    tests: [REGRESSIONS],
  },
  {
    id: "e",
    what: "a scan yields views of its blocks, which may be a mapping's",
    file: "src/storage/lsm/engine.ts",
    patches: [["[keyToBytes(k), Buffer.from(it.value())]", "[keyToBytes(k), it.value()]"]],
    tests: [REGRESSIONS],
  },
  {
    id: "f",
    what: "reads do not notice the lost pages they met (the fault count is never read)",
    file: "src/storage/lsm/caches.ts",
    patches: [
      [
        "return mappedFaults === undefined ? 0 : Atomics.load(mappedFaults.counts, 0);",
        "return 0;",
      ],
    ],
    tests: [REGRESSIONS],
  },
];

const { values } = parseArgs({ options: { only: { type: "string" } } });
const root = join(import.meta.dirname, "..");

function plant(m: Mutation): string {
  const dir = mkdtempSync(join(tmpdir(), `cairn-mutation-${m.id}-`));
  for (const part of ["src", "test"])
    cpSync(join(root, part), join(dir, part), { recursive: true });
  for (const file of ["package.json", "tsconfig.json"]) cpSync(join(root, file), join(dir, file));
  // The packages, and the addon unless it is what is patched, shared: nothing there is patched.
  symlinkSync(join(root, "node_modules"), join(dir, "node_modules"));
  const native = m.file.startsWith("native/");
  if (native) {
    cpSync(join(root, "native", "src"), join(dir, "native", "src"), { recursive: true });
    cpSync(join(root, "scripts", "build-native.mjs"), join(dir, "scripts", "build-native.mjs"));
  } else {
    symlinkSync(join(root, "native"), join(dir, "native"));
  }
  const path = join(dir, m.file);
  let text = readFileSync(path, "utf8");
  for (const [from, to] of m.patches) {
    const count = text.split(from).length - 1;
    if (count !== 1) {
      rmSync(dir, { recursive: true, force: true });
      console.error(`mutation ${m.id}: a patch matches ${count} times in ${m.file}:\n${from}`);
      process.exit(2);
    }
    text = text.replace(from, () => to);
  }
  writeFileSync(path, text);
  if (native) {
    const build = spawnSync(process.execPath, [join(dir, "scripts", "build-native.mjs")], {
      stdio: ["ignore", "ignore", "inherit"],
      env: { ...process.env, CAIRN_REQUIRE_NATIVE: "1" },
    });
    if (build.status !== 0) {
      rmSync(dir, { recursive: true, force: true });
      console.error(`mutation ${m.id}: the patched addon does not build`);
      process.exit(2);
    }
  }
  return dir;
}

/** Runs one test file in `dir`; true when it fails (or dies, e.g. by SIGBUS). */
function fails(dir: string, test: string): boolean {
  const run = spawnSync(
    process.execPath,
    ["--import", "./test/support/blocking-stdout.ts", "--test", "--test-reporter=dot", test],
    {
      cwd: dir,
      stdio: ["ignore", "ignore", "ignore"],
      timeout: 900_000,
      // A failing model case is reported as found: shrinking scripts of hundreds of steps takes
      // minutes, and only whether the suite fails matters here.
      env: { ...process.env, LSM_MODEL_SHRINK: "0" },
    },
  );
  return run.status !== 0;
}

const rows: string[] = [];
let uncaught = 0;
for (const m of MUTATIONS) {
  if (values.only !== undefined && values.only !== m.id) continue;
  const dir = plant(m);
  const started = performance.now();
  const failed: string[] = [];
  const passed: string[] = [];
  try {
    for (const test of m.tests) {
      const name = test.replace("test/storage/", "");
      (fails(dir, test) ? failed : passed).push(name);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const caught = failed.length > 0;
  if (!caught) uncaught++;
  const seconds = ((performance.now() - started) / 1000).toFixed(0);
  rows.push(
    `| ${m.id} | ${m.what} | ${caught ? "**caught**" : "NOT caught"} | ${failed.join(", ") || "—"} | ${passed.join(", ") || "—"} | ${seconds} |`,
  );
  console.error(`mutation ${m.id}: ${caught ? "caught" : "NOT caught"} (${seconds} s)`);
}
console.log("| bug | planted | result | failing test files | passing test files | s |");
console.log("| --- | ------- | ------ | ----------------- | ------------------ | - |");
for (const row of rows) console.log(row);
process.exit(uncaught > 0 ? 1 : 0);

/**
 * A linearizability checker for histories of a versioned key-value register, shared by the
 * simulations and chaos harnesses. It follows Porcupine (Athalye): Wing & Gong's search as
 * improved by Lowe ("just-in-time linearization"), with memoisation of (set of linearized
 * operations, model state) so that no configuration is explored twice, and P-compositionality:
 * each key is an independent register, checked on its own.
 *
 * The register model. A key is absent or holds (value, version). A version is the (index, term)
 * of the log entry that wrote it; the checker trusts the version a successful write returns as
 * that write's identity, and requires versions to increase strictly along the linearization of
 * each key's writes. Operations (inputs → outputs), with the store's own outcome names
 * (src/replication/state-machine.ts, ApplyOutcome):
 *
 *   put(value)                 → written(version)
 *   put-if(expected, value)    → written(version) | precondition-failed(current)
 *   delete()                   → deleted(version) | not-found
 *   delete-if(expected)        → deleted(version) | not-found | precondition-failed(current)
 *   get()                      → found(value, version) | absent
 *
 * `expected` and `current` are a version or null for "absent" (the store's ABSENT, 0/0). A
 * delete-if whose precondition holds on an absent key (expected null) answers not-found.
 *
 * Indeterminate operations (output null: a timeout, a lost connection) are open-ended, as Jepsen
 * models them: they may take effect at any point after their invocation, or never; their return
 * time is ignored. A write whose effect is unobserved has an unknown version: the first later
 * observation of it (a read, a failed precondition) binds it. Indeterminate reads carry no
 * information and are dropped.
 *
 * Times are any numbers on one clock; an operation invoked at the very time another returns is
 * treated as concurrent with it (the lenient choice: it can never invent a violation).
 *
 * The search is bounded: beyond `budget` steps for one key the verdict is "unknown", never a hang.
 * A violation is reported with the smallest failing sub-history of its key: the key's history as
 * observed at the earliest time T at which it is already non-linearizable (operations invoked by
 * T; those still pending at T count as indeterminate). Since an operation can only take effect
 * between its invocation and its return, a history that is non-linearizable at T stays so at
 * every later time, so T is found by bisection.
 */

/** The (index, term) of the log entry that wrote a value; compared by index, then term. */
export interface Version {
  readonly index: number;
  readonly term: number;
}

export type RegisterInput =
  | { readonly type: "put"; readonly value: string }
  | { readonly type: "put-if"; readonly expected: Version | null; readonly value: string }
  | { readonly type: "delete" }
  | { readonly type: "delete-if"; readonly expected: Version | null }
  | { readonly type: "get" };

export type RegisterOutput =
  | { readonly type: "written"; readonly version: Version }
  | { readonly type: "deleted"; readonly version: Version }
  | { readonly type: "not-found" }
  | { readonly type: "precondition-failed"; readonly current: Version | null }
  | { readonly type: "found"; readonly value: string; readonly version: Version }
  | { readonly type: "absent" };

/** One client operation on one key. */
export interface RegisterOp {
  readonly client: string | number;
  readonly key: string;
  readonly invokeTime: number;
  /** When the response arrived; null (or ignored) when the outcome is unknown. */
  readonly returnTime: number | null;
  readonly input: RegisterInput;
  /** The response; null for an indeterminate operation. */
  readonly output: RegisterOutput | null;
}

export interface CheckOptions {
  /** Search steps allowed per key (and per bisection probe) before answering "unknown". */
  readonly budget?: number;
  /** Bisect a failing key down to its earliest failing time (default true). */
  readonly minimize?: boolean;
}

export type CheckResult =
  | {
      readonly status: "ok";
      readonly keys: number;
      readonly operations: number;
      readonly steps: number;
    }
  | {
      readonly status: "violation";
      readonly key: string;
      /**
       * The failing sub-history, in invocation order: the key's operations invoked by
       * `observedAt`, as they were (those pending at that time are treated as indeterminate).
       */
      readonly operations: readonly RegisterOp[];
      /** The earliest time at which the key's history is already non-linearizable. */
      readonly observedAt: number;
      readonly steps: number;
      /** Multi-line, human-readable: the key, the time and the operations. */
      readonly report: string;
    }
  | {
      readonly status: "unknown";
      readonly key: string;
      readonly steps: number;
      readonly report: string;
    };

export const DEFAULT_BUDGET = 1_000_000;

// ── the register model ──────────────────────────────────────────────────────────────────────────

/**
 * `value` null: absent. `version` null while present: written by an indeterminate operation,
 * not yet observed. `floor`: the highest write version known so far; the next write's version
 * must exceed it (an unknown version is only known to exceed the floor of its time).
 */
interface RegState {
  readonly value: string | null;
  readonly version: Version | null;
  readonly floor: Version | null;
}

const INITIAL: RegState = { value: null, version: null, floor: null };

export function compareVersions(a: Version, b: Version): number {
  return a.index !== b.index ? a.index - b.index : a.term - b.term;
}

function sameVersion(a: Version | null, b: Version | null): boolean {
  return a === null || b === null ? a === b : a.index === b.index && a.term === b.term;
}

function above(v: Version, floor: Version | null): boolean {
  return floor === null || compareVersions(v, floor) > 0;
}

function stateKey(s: RegState): string {
  const v = (x: Version | null): string => (x === null ? "-" : `${x.index}/${x.term}`);
  return `${s.value === null ? "∅" : JSON.stringify(s.value)}|${v(s.version)}|${v(s.floor)}`;
}

/**
 * The version the current value is observed to have: binds an unknown version (if it can be
 * that one) and returns the state with it bound, or null if the observation is impossible.
 */
function observe(s: RegState, current: Version | null): RegState | null {
  if (s.value === null) return current === null ? s : null;
  if (current === null) return null;
  if (s.version !== null) return sameVersion(s.version, current) ? s : null;
  return above(current, s.floor) ? { value: s.value, version: current, floor: current } : null;
}

/** A write that produced `version` (null: indeterminate, unknown) and left `value`. */
function write(s: RegState, value: string | null, version: Version | null): RegState | null {
  if (version === null) return { value, version: null, floor: s.floor };
  if (!above(version, s.floor)) return null;
  return { value, version: value === null ? null : version, floor: version };
}

function nonNull<T>(x: T | null): T[] {
  return x === null ? [] : [x];
}

/**
 * The states after `input` returned `output` in state `s` (none: impossible there). For an
 * indeterminate operation, the states in which it took effect; "never took effect" is the
 * search's business (it may leave an indeterminate operation out).
 */
function stepRegister(
  s: RegState,
  input: RegisterInput,
  output: RegisterOutput | null,
): RegState[] {
  switch (input.type) {
    case "get": {
      if (output === null) return [s];
      if (output.type === "absent") return s.value === null ? [s] : [];
      if (output.type !== "found" || s.value !== output.value) return [];
      return nonNull(observe(s, output.version));
    }
    case "put":
    case "delete": {
      const value = input.type === "put" ? input.value : null;
      if (output === null) {
        // A delete of an absent key changes nothing: the same as never taking effect.
        return input.type === "delete" && s.value === null ? [] : nonNull(write(s, value, null));
      }
      if (input.type === "delete" && output.type === "not-found")
        return s.value === null ? [s] : [];
      const expectType = input.type === "put" ? "written" : "deleted";
      if (output.type !== expectType) return [];
      // The register may hold an unobserved version; a write's own version says nothing of it.
      if (input.type === "delete" && s.value === null) return [];
      return nonNull(write(s, value, output.version));
    }
    case "put-if":
    case "delete-if": {
      const value = input.type === "put-if" ? input.value : null;
      if (output === null) {
        // Effective only if the precondition holds; a failed precondition changes nothing.
        const held = observe(s, input.expected);
        if (held === null) return [];
        if (value === null && held.value === null) return [];
        return nonNull(write(held, value, null));
      }
      if (output.type === "precondition-failed") {
        if (sameVersion(output.current, input.expected)) return [];
        return nonNull(observe(s, output.current));
      }
      const held = observe(s, input.expected);
      if (held === null) return [];
      if (input.type === "delete-if" && output.type === "not-found")
        return held.value === null ? [held] : [];
      const expectType = input.type === "put-if" ? "written" : "deleted";
      if (output.type !== expectType) return [];
      if (value === null && held.value === null) return [];
      return nonNull(write(held, value, output.version));
    }
  }
}

// ── the search (Lowe's just-in-time linearization with memoisation) ─────────────────────────────

interface SearchResult {
  readonly status: "ok" | "violation" | "unknown";
  readonly steps: number;
}

interface Frame {
  readonly op: number;
  readonly prev: RegState;
  readonly alts: readonly RegState[];
  readonly alt: number;
}

/**
 * Whether `ops` (one key's history) has a linearization. Entries are the invocations and returns
 * in time order, in a doubly-linked list from which linearized operations are lifted; the search
 * walks it, linearizing the first operation whose invocation comes before any pending return,
 * and backtracks when it meets the return of an operation it has not linearized.
 */
function search(ops: readonly RegisterOp[], budget: number): SearchResult {
  const n = ops.length;
  if (n === 0) return { status: "ok", steps: 0 };
  // Entry 2i is op i's invocation, 2i+1 its return; the head sentinel is 2n.
  const head = 2 * n;
  const time = (e: number): number => {
    const op = ops[e >> 1] as RegisterOp;
    if ((e & 1) === 0) return op.invokeTime;
    return op.output === null ? Infinity : (op.returnTime as number);
  };
  const order = Array.from({ length: 2 * n }, (_, i) => i).sort(
    // At equal times invocations come first: such operations are concurrent.
    (a, b) => time(a) - time(b) || (a & 1) - (b & 1) || a - b,
  );
  const next = new Int32Array(2 * n + 1).fill(-1);
  const prev = new Int32Array(2 * n + 1).fill(-1);
  let last = head;
  for (const e of order) {
    next[last] = e;
    prev[e] = last;
    last = e;
  }
  const unlink = (e: number): void => {
    const p = prev[e] as number;
    const x = next[e] as number;
    next[p] = x;
    if (x >= 0) prev[x] = p;
  };
  const relink = (e: number): void => {
    const p = prev[e] as number;
    const x = next[e] as number;
    next[p] = e;
    if (x >= 0) prev[x] = e;
  };
  const lift = (op: number): void => {
    unlink(2 * op);
    unlink(2 * op + 1);
  };
  const unlift = (op: number): void => {
    relink(2 * op + 1);
    relink(2 * op);
  };

  const words = new Uint32Array(Math.ceil(n / 32));
  // The memo key's form of the set: two UTF-16 units a word (exact, and a quarter of the memory
  // of decimal numbers: a search of millions of configurations keeps them all).
  const halves = new Uint16Array(words.buffer);
  const flip = (op: number): void => {
    words[op >> 5] = (words[op >> 5] as number) ^ (1 << (op & 31));
  };
  const cache = new Set<string>();
  const stack: Frame[] = [];
  let state = INITIAL;
  let steps = 0;

  /** Linearize `op` with the first alternative from `from` on not already explored. */
  const tryOp = (op: number, alts: readonly RegState[], from: number): boolean => {
    flip(op);
    const linearized = String.fromCharCode(...halves);
    for (let k = from; k < alts.length; k++) {
      const s = alts[k] as RegState;
      const key = `${linearized}#${stateKey(s)}`;
      if (cache.has(key)) continue;
      cache.add(key);
      stack.push({ op, prev: state, alts, alt: k });
      state = s;
      lift(op);
      return true;
    }
    flip(op);
    return false;
  };

  let e = next[head] as number;
  while (e >= 0) {
    if (++steps > budget) return { status: "unknown", steps };
    const op = e >> 1;
    const o = ops[op] as RegisterOp;
    if ((e & 1) === 0) {
      const alts = stepRegister(state, o.input, o.output);
      e = tryOp(op, alts, 0) ? (next[head] as number) : (next[e] as number);
      continue;
    }
    // The return of an operation not yet linearized. Indeterminate returns sort last, so
    // reaching one means every determinate operation is linearized; the rest never happened.
    if (o.output === null) return { status: "ok", steps };
    const f = stack.pop();
    if (f === undefined) return { status: "violation", steps };
    flip(f.op);
    state = f.prev;
    unlift(f.op);
    e = tryOp(f.op, f.alts, f.alt + 1) ? (next[head] as number) : (next[2 * f.op] as number);
  }
  return { status: "ok", steps };
}

// ── histories ───────────────────────────────────────────────────────────────────────────────────

function validate(op: RegisterOp): void {
  if (op.output !== null && op.returnTime === null) {
    throw new TypeError(`operation with a response but no return time: ${describeRegisterOp(op)}`);
  }
  if (op.output !== null && (op.returnTime as number) < op.invokeTime) {
    throw new TypeError(`operation returns before its invocation: ${describeRegisterOp(op)}`);
  }
}

/** The key's history as observed at time `t`: operations pending then are indeterminate. */
function observedAt(ops: readonly RegisterOp[], t: number): RegisterOp[] {
  const out: RegisterOp[] = [];
  for (const op of ops) {
    if (op.invokeTime > t) continue;
    if (op.output !== null && (op.returnTime as number) <= t) out.push(op);
    else out.push({ ...op, returnTime: null, output: null });
  }
  return out;
}

/** Indeterminate reads change nothing and promise nothing. */
function relevant(ops: readonly RegisterOp[]): RegisterOp[] {
  return ops.filter((op) => !(op.output === null && op.input.type === "get"));
}

function byInvocation(a: RegisterOp, b: RegisterOp): number {
  return a.invokeTime - b.invokeTime;
}

/** Checks a whole history, key by key. */
export function checkRegisterHistory(
  history: readonly RegisterOp[],
  options: CheckOptions = {},
): CheckResult {
  const budget = options.budget ?? DEFAULT_BUDGET;
  const byKey = new Map<string, RegisterOp[]>();
  for (const op of history) {
    validate(op);
    const list = byKey.get(op.key);
    if (list === undefined) byKey.set(op.key, [op]);
    else list.push(op);
  }
  let steps = 0;
  let unknown: CheckResult | null = null;
  for (const key of [...byKey.keys()].sort()) {
    const ops = (byKey.get(key) as RegisterOp[]).sort(byInvocation);
    const r = search(relevant(ops), budget);
    steps += r.steps;
    if (r.status === "violation") return minimize(key, ops, budget, options.minimize ?? true);
    if (r.status === "unknown" && unknown === null) {
      unknown = {
        status: "unknown",
        key,
        steps: r.steps,
        report: `key ${JSON.stringify(key)}: no verdict within ${budget} steps (${ops.length} operations)`,
      };
    }
  }
  return unknown ?? { status: "ok", keys: byKey.size, operations: history.length, steps };
}

function minimize(
  key: string,
  ops: readonly RegisterOp[],
  budget: number,
  enabled: boolean,
): CheckResult {
  const times = [
    ...new Set(ops.filter((o) => o.output !== null).map((o) => o.returnTime as number)),
  ].sort((a, b) => a - b);
  let steps = 0;
  // Invariant: the history observed at times[hi] fails; a failure at an earlier time is unknown
  // below lo. (An "unknown" probe counts as passing: the cut found is then merely later.)
  let lo = 0;
  let hi = times.length - 1;
  while (enabled && lo < hi) {
    const mid = (lo + hi) >> 1;
    const r = search(relevant(observedAt(ops, times[mid] as number)), budget);
    steps += r.steps;
    if (r.status === "violation") hi = mid;
    else lo = mid + 1;
  }
  const at = times[hi] as number;
  const sub = ops.filter((o) => o.invokeTime <= at);
  const lines = sub.map((o) => {
    const pending = o.output !== null && (o.returnTime as number) > at;
    return `  ${describeRegisterOp(o)}${pending ? `   (pending at t=${at}: indeterminate here)` : ""}`;
  });
  const report = [
    `key ${JSON.stringify(key)} is not linearizable: its ${sub.length} operations invoked by t=${at} (of ${ops.length}) admit no linearization as observed at t=${at}:`,
    ...lines,
  ].join("\n");
  return { status: "violation", key, operations: sub, observedAt: at, steps, report };
}

// ── describing ──────────────────────────────────────────────────────────────────────────────────

function describeVersion(v: Version | null): string {
  return v === null ? "absent" : `${v.index}/${v.term}`;
}

export function describeInput(input: RegisterInput): string {
  switch (input.type) {
    case "put":
      return `put(${JSON.stringify(input.value)})`;
    case "put-if":
      return `put-if(${describeVersion(input.expected)}, ${JSON.stringify(input.value)})`;
    case "delete":
      return "delete()";
    case "delete-if":
      return `delete-if(${describeVersion(input.expected)})`;
    case "get":
      return "get()";
  }
}

export function describeOutput(output: RegisterOutput | null): string {
  if (output === null) return "? (indeterminate)";
  switch (output.type) {
    case "written":
    case "deleted":
      return `${output.type} ${describeVersion(output.version)}`;
    case "precondition-failed":
      return `precondition-failed (current ${describeVersion(output.current)})`;
    case "found":
      return `found ${JSON.stringify(output.value)} ${describeVersion(output.version)}`;
    case "not-found":
    case "absent":
      return output.type;
  }
}

/** One line: `client [invoke, return] key input → output`. */
export function describeRegisterOp(op: RegisterOp): string {
  const ret = op.output === null ? "…" : String(op.returnTime);
  return `${String(op.client)} [${op.invokeTime}, ${ret}] ${op.key} ${describeInput(op.input)} → ${describeOutput(op.output)}`;
}

/**
 * The environment behind the Raft golden scripts (test/raft/testdata/*.txt): a group of Hosts
 * on a network the script controls. Commands:
 *
 *   cluster voters=1,2,3 [learners=4] [prevote=false] [checkquorum=false] [election=10]
 *           [heartbeat=1] [inflight=256] [maxmsg=N] [quiesce=N] [skip-heartbeats=true]
 *           [no-reply=true] [defer-commit=true] [uncommitted=N]
 *                              found a group (bootstrap applied silently); quiesce=N: leaders
 *                              quiesce after N idle ticks; skip-heartbeats: appends stand in for
 *                              heartbeats (RaftConfig.skipHeartbeatsAfterAppends); no-reply:
 *                              answers that tell nothing are not asked for
 *                              (RaftConfig.omitRedundantReplies); defer-commit: a new commit
 *                              index waits for the next append or heartbeat round
 *                              (RaftConfig.deferCommitBroadcast); uncommitted=N: a leader's
 *                              proposals refused past N bytes uncommitted
 *                              (RaftConfig.maxUncommittedBytes)
 *   report-leader-down 2       the failure detector of 2 suspects the node of 2's leader
 *   member-down 1 3 | member-up 1 3
 *                              the failure detector of 1 declares 3's node down (the leader
 *                              may sleep with 3 behind: RaftConfig.memberDown), or back
 *                              (RawNode.reportMemberUp)
 *   add-node 4                 a new, empty member (joins through conf changes)
 *   campaign 1 | tick 1 [n=5] | propose 1 data | conf-change 1 add-learner|add-voter|remove 4
 *   read-index 1 ctx | transfer-leader 1 2 | report-unreachable 1 2 | compact 1
 *   report-snapshot 1 3 ok|fail   the driver of 1 finished (or failed) sending 3 a snapshot
 *   send-commit 1 [2]          leader 1 sends its commit index to 2 (every follower) if not sent
 *   process-ready 1 [2 …] | deliver 2 | stabilize [1 2 …]
 *   partition 1 / 2 3 | isolate 1 | heal | crash 2 | restart 2
 *   status [1 …] | log 1 | progress 1 | sm 1
 */
import type { Command } from "../../support/datadriven.ts";
import { seededRng } from "../../../src/common/rng.ts";
import type { ConfChange, Message, NodeId } from "../../../src/raft/index.ts";
import {
  describeConf,
  describeData,
  describeEntries,
  describeHardState,
  describeMessage,
  describeSnapshot,
  logIndex,
  MemoryStorage,
  nodeId,
} from "../../../src/raft/index.ts";
import type { HostOptions } from "./host.ts";
import { Host } from "./host.ts";

const encoder = new TextEncoder();

export class GoldenEnv {
  readonly hosts = new Map<NodeId, Host>();
  readonly #queues = new Map<NodeId, Message[]>();
  readonly #down = new Set<NodeId>();
  #groups: NodeId[][] | null = null;
  #options: HostOptions = {};
  readonly #rng = seededRng(1);

  exec(cmd: Command): string {
    const out: string[] = [];
    const ids = (): NodeId[] =>
      cmd.args.length > 0 ? cmd.args.filter((a) => a !== "/").map(nodeId) : this.#ids();
    const one = (i = 0): NodeId => {
      const a = cmd.args[i];
      if (a === undefined) throw new Error(`${cmd.name}: missing node id`);
      return nodeId(a);
    };
    switch (cmd.name) {
      case "cluster":
        this.#cluster(cmd);
        break;
      case "add-node": {
        const id = one();
        this.hosts.set(id, new Host(id, new MemoryStorage(), this.#options, this.#rng.fork()));
        this.#queues.set(id, []);
        break;
      }
      case "campaign":
        this.#host(one()).raw.campaign();
        break;
      case "tick": {
        const n = Number(cmd.kv.get("n") ?? "1");
        for (const id of ids()) for (let i = 0; i < n; i++) this.#host(id).raw.tick();
        break;
      }
      case "propose":
        out.push(
          this.#try(one(), (h) => {
            const { index, term } = h.raw.propose(encoder.encode(cmd.args[1] ?? ""));
            return `proposed ${term}/${index}`;
          }),
        );
        break;
      case "conf-change": {
        const cc = { type: cmd.args[1], node: nodeId(cmd.args[2] ?? "") } as ConfChange;
        out.push(
          this.#try(one(), (h) => {
            const { index, term } = h.raw.proposeConfChange(cc);
            return `proposed ${term}/${index} conf ${cc.type} ${cc.node}`;
          }),
        );
        break;
      }
      case "read-index":
        out.push(
          this.#try(one(), (h) => {
            h.raw.readIndex(encoder.encode(cmd.args[1] ?? ""));
            return "read requested";
          }),
        );
        break;
      case "transfer-leader":
        out.push(
          this.#try(one(), (h) => {
            h.raw.transferLeader(one(1));
            return `transfer to ${one(1)} requested`;
          }),
        );
        break;
      case "report-unreachable":
        this.#host(one()).raw.reportUnreachable(one(1));
        break;
      case "report-leader-down":
        this.#host(one()).raw.reportLeaderDown();
        break;
      case "member-down":
        this.#host(one()).down.add(one(1));
        break;
      case "member-up": {
        const host = this.#host(one());
        host.down.delete(one(1));
        host.raw.reportMemberUp(one(1));
        break;
      }
      case "send-commit":
        this.#host(one()).raw.sendCommit(cmd.args[1] === undefined ? null : one(1));
        break;
      case "report-snapshot": {
        const outcome = cmd.args[2];
        if (outcome !== "ok" && outcome !== "fail")
          throw new Error("report-snapshot: expected ok or fail");
        this.#host(one()).raw.reportSnapshot(one(1), outcome === "ok");
        break;
      }
      case "compact": {
        const snap = this.#host(one()).compact();
        out.push(`${one()}: compacted to ${describeSnapshot(snap)}`);
        break;
      }
      case "process-ready":
        for (const id of ids()) this.#processReady(id, out);
        break;
      case "deliver":
        for (const id of ids()) this.#deliver(id);
        break;
      case "stabilize":
        this.#stabilize(ids(), out);
        break;
      case "partition":
        this.#groups = cmd.text
          .slice("partition".length)
          .split("/")
          .map((g) => g.trim().split(/\s+/).filter(Boolean).map(nodeId));
        break;
      case "isolate": {
        const id = one();
        this.#groups = [[id], this.#ids().filter((x) => x !== id)];
        break;
      }
      case "heal":
        this.#groups = null;
        break;
      case "crash":
        for (const id of ids()) {
          this.#down.add(id);
          this.#queues.set(id, []);
        }
        break;
      case "restart":
        for (const id of ids()) {
          this.#down.delete(id);
          this.#host(id).restart();
        }
        break;
      case "status":
        for (const id of ids()) out.push(this.#status(id));
        break;
      case "log": {
        const h = this.#host(one());
        const st = h.raw.status();
        const ents = h.raw.entries(st.firstIndex, logIndex(st.lastIndex + 1)) ?? [];
        out.push(`${h.id}: first=${st.firstIndex} last=${st.lastIndex} ${describeEntries(ents)}`);
        break;
      }
      case "progress": {
        const st = this.#host(one()).raw.status();
        if (st.progress.size === 0) out.push(`${st.id}: not leader`);
        for (const [id, p] of [...st.progress].sort()) out.push(`${id}: ${p}`);
        break;
      }
      case "sm": {
        const h = this.#host(one());
        out.push(
          `${h.id}: applied=${h.sm.appliedIndex} [${h.sm.entries.map((e) => `${e.term}/${e.index} ${describeData(e.data)}`).join(", ")}]`,
        );
        break;
      }
      default:
        throw new Error(`unknown command ${cmd.name}`);
    }
    return out.join("\n");
  }

  #cluster(cmd: Command): void {
    const list = (k: string): NodeId[] =>
      (cmd.kv.get(k) ?? "").split(",").filter(Boolean).map(nodeId);
    const voters = list("voters");
    const learners = list("learners");
    const num = (k: string): number | undefined =>
      cmd.kv.has(k) ? Number(cmd.kv.get(k)) : undefined;
    const opts: { -readonly [K in keyof HostOptions]: HostOptions[K] } = {};
    if (cmd.kv.has("prevote")) opts.preVote = cmd.kv.get("prevote") === "true";
    if (cmd.kv.has("checkquorum")) opts.checkQuorum = cmd.kv.get("checkquorum") === "true";
    const election = num("election");
    if (election !== undefined) opts.electionTick = election;
    const heartbeat = num("heartbeat");
    if (heartbeat !== undefined) opts.heartbeatTick = heartbeat;
    const inflight = num("inflight");
    if (inflight !== undefined) opts.maxInflightMsgs = inflight;
    const maxmsg = num("maxmsg");
    if (maxmsg !== undefined) opts.maxMsgBytes = maxmsg;
    const uncommitted = num("uncommitted");
    if (uncommitted !== undefined) opts.maxUncommittedBytes = uncommitted;
    const quiesce = num("quiesce");
    if (quiesce !== undefined) opts.quiesceTicks = quiesce;
    if (cmd.kv.has("skip-heartbeats"))
      opts.skipHeartbeatsAfterAppends = cmd.kv.get("skip-heartbeats") === "true";
    if (cmd.kv.has("no-reply")) opts.omitRedundantReplies = cmd.kv.get("no-reply") === "true";
    if (cmd.kv.has("defer-commit"))
      opts.deferCommitBroadcast = cmd.kv.get("defer-commit") === "true";
    this.#options = opts;
    for (const id of [...voters, ...learners]) {
      this.hosts.set(
        id,
        new Host(id, MemoryStorage.bootstrap(voters, learners), opts, this.#rng.fork()),
      );
      this.#queues.set(id, []);
    }
    // Apply the bootstrap configuration (no messages are produced yet).
    for (const id of this.#ids()) this.#host(id).handleReady(() => {});
  }

  #try(id: NodeId, f: (h: Host) => string): string {
    try {
      return `${id}: ${f(this.#host(id))}`;
    } catch (err) {
      const e = err as { code?: string; message: string };
      return `${id}: error ${e.code ?? "?"}: ${e.message}`;
    }
  }

  #processReady(id: NodeId, out: string[]): void {
    const h = this.#host(id);
    if (this.#down.has(id) || !h.raw.hasReady()) return;
    const sent: Message[] = [];
    const { ready: rd } = h.handleReady((m) => sent.push(m));
    if (rd.softState !== null)
      out.push(`${id}: became ${rd.softState.role} (lead=${rd.softState.lead ?? "-"})`);
    if (rd.hardState !== null) out.push(`${id}: hardstate ${describeHardState(rd.hardState)}`);
    if (rd.snapshot !== null) out.push(`${id}: persist ${describeSnapshot(rd.snapshot)}`);
    if (rd.entries.length > 0) out.push(`${id}: persist ${describeEntries(rd.entries)}`);
    if (rd.committedEntries.length > 0)
      out.push(`${id}: apply ${describeEntries(rd.committedEntries)}`);
    if (rd.snapshot !== null || rd.committedEntries.some((e) => e.type === "conf-change")) {
      out.push(`${id}: conf ${describeConf(h.raw.status().conf)}`);
    }
    for (const r of rd.readStates) out.push(`${id}: read ${describeData(r.context)} at ${r.index}`);
    for (const m of sent) {
      const cut = this.#down.has(m.to) || !this.#connected(m.from, m.to) || !this.hosts.has(m.to);
      out.push(`${describeMessage(m)}${cut ? " (dropped)" : ""}`);
      if (!cut) this.#queues.get(m.to)?.push(m);
    }
  }

  #deliver(id: NodeId): boolean {
    const q = this.#queues.get(id) ?? [];
    if (q.length === 0 || this.#down.has(id)) return false;
    this.#queues.set(id, []);
    const h = this.#host(id);
    for (const m of q) h.raw.step(m);
    return true;
  }

  #stabilize(ids: NodeId[], out: string[]): void {
    for (let round = 0; round < 10_000; round++) {
      let busy = false;
      for (const id of ids) {
        const h = this.#host(id);
        if (!this.#down.has(id) && h.raw.hasReady()) {
          this.#processReady(id, out);
          busy = true;
        }
      }
      for (const id of ids) busy = this.#deliver(id) || busy;
      if (!busy) return;
    }
    throw new Error("stabilize: no quiescence after 10000 rounds");
  }

  #connected(a: NodeId, b: NodeId): boolean {
    if (this.#groups === null) return true;
    const ga = this.#groups.findIndex((g) => g.includes(a));
    const gb = this.#groups.findIndex((g) => g.includes(b));
    return ga === gb && ga !== -1;
  }

  #status(id: NodeId): string {
    if (this.#down.has(id)) return `${id}: down`;
    const h = this.#host(id);
    const s = h.raw.status();
    return `${id}: ${s.role} term=${s.term} lead=${s.lead ?? "-"} vote=${s.vote ?? "-"} commit=${s.commit} applied=${s.applied} last=${s.lastIndex} ${describeConf(s.conf)}${s.quiesced ? " quiesced" : ""}`;
  }

  #ids(): NodeId[] {
    return [...this.hosts.keys()].sort();
  }

  #host(id: NodeId): Host {
    const h = this.hosts.get(id);
    if (h === undefined) throw new Error(`no node ${id}`);
    return h;
  }
}

/**
 * One stable, single-line description per entry, message and state. Golden test scripts compare
 * these strings, and logs print them; change them only together with `UPDATE_GOLDEN=1`.
 */
import type { Message } from "./message.ts";
import type { ConfState, Entry, HardState, Snapshot } from "./types.ts";
import { decodeConfChange } from "./types.ts";

const decoder = new TextDecoder("utf-8", { fatal: false });

/** Printable form of opaque bytes: the text if it is short printable ASCII, else its size. */
export function describeData(data: Uint8Array): string {
  if (data.length === 0) return "";
  if (data.length <= 32 && data.every((b) => b >= 0x20 && b < 0x7f)) {
    return JSON.stringify(decoder.decode(data));
  }
  return `<${data.length} bytes>`;
}

export function describeEntry(e: Entry): string {
  if (e.type === "conf-change") {
    const cc = decodeConfChange(e.data);
    return `${e.term}/${e.index} conf ${cc.type} ${cc.node}`;
  }
  return e.data.length === 0
    ? `${e.term}/${e.index} noop`
    : `${e.term}/${e.index} ${describeData(e.data)}`;
}

export function describeEntries(entries: readonly Entry[]): string {
  return `[${entries.map(describeEntry).join(", ")}]`;
}

export function describeConf(c: ConfState): string {
  const learners = c.learners.length > 0 ? ` learners=(${c.learners.join(" ")})` : "";
  return `voters=(${c.voters.join(" ")})${learners}`;
}

export function describeHardState(hs: HardState): string {
  return `term=${hs.term} vote=${hs.vote ?? "-"} commit=${hs.commit}`;
}

export function describeSnapshot(s: Snapshot): string {
  return `snapshot ${s.meta.term}/${s.meta.index} ${describeConf(s.meta.conf)}`;
}

export function describeMessage(m: Message): string {
  const head = `${m.from}->${m.to} ${m.type} term=${m.term}`;
  switch (m.type) {
    case "append":
      return `${head} prev=${m.prevTerm}/${m.prevIndex} commit=${m.commit} entries=${describeEntries(m.entries)}${m.noReply ? " no-reply" : ""}`;
    case "append-resp":
      return m.reject
        ? `${head} reject index=${m.index} hint=${m.hintTerm}/${m.hintIndex}${m.lost ? " lost" : ""}`
        : `${head} index=${m.index}`;
    case "vote":
    case "prevote":
      return `${head} last=${m.lastTerm}/${m.lastIndex} commit=${m.commitTerm}/${m.commit}${m.transfer ? " transfer" : ""}`;
    case "vote-resp":
    case "prevote-resp":
      if (!m.reject) return head;
      return m.commit > 0 ? `${head} reject commit=${m.commitTerm}/${m.commit}` : `${head} reject`;
    case "heartbeat":
      return `${head} commit=${m.commit}${m.readSeq > 0 ? ` read=${m.readSeq}` : ""}${m.quiesce ? " quiesce" : ""}${m.noReply ? " no-reply" : ""}`;
    case "heartbeat-resp":
      return `${head}${m.readSeq > 0 ? ` read=${m.readSeq}` : ""}`;
    case "snapshot":
      return `${head} ${describeSnapshot(m.snapshot)}`;
    case "timeout-now":
    case "wake":
      return head;
  }
}

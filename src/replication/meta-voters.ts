/**
 * The meta group's voters, recorded outside its directory (`<data_dir>/meta-voters`).
 *
 * A cluster member whose shard finds its tables corrupt as the node starts moves the shard's
 * directory aside and lets its peers refill it, when another replica holds what the group
 * committed (corrupt-shard.ts). For any other shard, the meta state says where its replicas
 * are. For the meta group's own shard (shard 0) that state is what is damaged, and its
 * configuration (the voters) was in the same tables. So the driver keeps a copy of the voters'
 * nodes in a small file of its own, written when the group's configuration changes here (a
 * conf change applied, a snapshot installed) and when the group opens: one durable write per
 * change, a few in a cluster's life. At start, the record says whether shard 0 has a voter on
 * another node: then its directory is moved aside and its peers refill it; else (the group's
 * only voter, or no record: a directory written before the record existed) the node refuses to
 * start, as before.
 *
 * The record may lag the group by the change a crash interrupted: it is rewritten as shard 0
 * opens at the next start. A stale record matters only when that change left this node the
 * group's only voter (a cluster shrunk to one member), and then the refill waits for peers that
 * are gone; the moved directory is kept in the quarantine for the operator.
 */
import { join } from "node:path";
import { nodeOfReplica } from "../cluster/index.ts";
import type { ConfState } from "../raft/index.ts";
import { crc32c, type FileSystem } from "../storage/index.ts";
import type { ReplicationObserver } from "./multi-raft-options.ts";

/** The record's file name, in the data directory. */
export const META_VOTERS_FILE = "meta-voters";

/** The record's last line: the checksum of the lines before it. */
const CHECKSUM = /^crc32c ([0-9a-f]{8})$/;

/** The voters' lines for `nodes`: one node id a line, sorted. */
function linesOf(nodes: readonly string[]): string {
  return [...new Set(nodes)]
    .sort()
    .map((n) => `${n}\n`)
    .join("");
}

function checksumOf(lines: string): string {
  return (crc32c(Buffer.from(lines)) >>> 0).toString(16).padStart(8, "0");
}

/**
 * The meta group's voters' nodes as `dataDir`'s record holds them, or null for none: no record
 * (a directory written before it existed, or by a single node), or one whose checksum does not
 * match (the file is rewritten in place, so a crash may leave it torn or empty).
 */
export async function readMetaVoters(fs: FileSystem, dataDir: string): Promise<string[] | null> {
  let text: string;
  try {
    text = (await fs.readFile(join(dataDir, META_VOTERS_FILE))).toString("utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw err;
  }
  // The voters' lines, then the checksum's; the text ends with a newline.
  const lines = text.split("\n");
  const check = CHECKSUM.exec(lines.at(-2) ?? "");
  const nodes = lines.slice(0, -2);
  const body = nodes.map((n) => `${n}\n`).join("");
  if (lines.at(-1) !== "" || check === null || check[1] !== checksumOf(body)) return null;
  return nodes;
}

/** What the driver's parts need of the record: to note a change. */
export type MetaVotersNote = Pick<MetaVotersRecord, "note">;

/** Who hears of a group's new configuration: the observer, and the meta group's voters' record. */
export interface ConfListeners {
  readonly observer: ReplicationObserver | undefined;
  readonly metaVoters: MetaVotersNote | null;
}

/** Shard `shard`'s group has configuration `conf` now (a conf change applied, a snapshot). */
export function confChanged(listeners: ConfListeners, shard: number, conf: ConfState): void {
  const voters = conf.voters.map(nodeOfReplica);
  listeners.observer?.confChanged?.(shard, voters);
  if (shard === 0) listeners.metaVoters?.note(voters);
}

/**
 * Keeps `<dataDir>/meta-voters` equal to the voters last noted: one write at a time, the newest
 * noted winning; a write that fails is handed to `fail` (as any storage write's failure).
 */
export class MetaVotersRecord {
  readonly #fs: FileSystem;
  readonly #dataDir: string;
  readonly #fail: (err: unknown) => void;
  /** The voters' lines the file holds (null: not read yet), and those last noted. */
  #written: string | null = null;
  #wanted: string | null = null;
  #writing: Promise<void> | null = null;

  constructor(fs: FileSystem, dataDir: string, fail: (err: unknown) => void) {
    this.#fs = fs;
    this.#dataDir = dataDir;
    this.#fail = fail;
  }

  /**
   * The meta group's voters are on `nodes` now. None is ignored: a replica that has not learnt
   * its configuration yet (a new one, or one refilling after its directory was lost) knows
   * nothing the record should lose.
   */
  note(nodes: readonly string[]): void {
    if (nodes.length === 0) return;
    const lines = linesOf(nodes);
    if (lines === this.#wanted) return;
    this.#wanted = lines;
    this.#writing ??= this.#drain();
  }

  /** Resolves once what was noted is written (or failed). */
  async settled(): Promise<void> {
    await this.#writing;
  }

  async #drain(): Promise<void> {
    try {
      if (this.#written === null) {
        // A restart finds the record as it left it: no write for an unchanged group.
        const recorded = await readMetaVoters(this.#fs, this.#dataDir);
        this.#written = recorded === null ? "" : linesOf(recorded);
      }
      while (this.#wanted !== null && this.#wanted !== this.#written) {
        const lines: string = this.#wanted;
        await this.#write(lines);
        this.#written = lines;
      }
    } catch (err) {
      this.#fail(err);
    } finally {
      this.#writing = null;
    }
  }

  /**
   * Rewrites the file in place, synced (the driver's FileSystem has no rename): a crash may
   * leave it torn, which its checksum tells, and a torn record is read as none.
   */
  async #write(lines: string): Promise<void> {
    const path = join(this.#dataDir, META_VOTERS_FILE);
    const bytes = Buffer.from(`${lines}crc32c ${checksumOf(lines)}\n`);
    const file = await this.#fs.open(path, { create: true, truncate: true });
    try {
      await file.write(bytes, 0, bytes.length, 0);
      await file.sync();
    } finally {
      await file.close();
    }
    await this.#fs.fsyncDir(this.#dataDir);
  }
}

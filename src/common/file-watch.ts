/**
 * Files a node reloads when they change (the TLS files: tls-files.ts; the tokens file:
 * auth-tokens.ts), watched by polling: every interval each file is stat-ed (a file replaced by
 * a rename is seen too), and once any stamp differs from the last one the files are read again.
 * A stamp is taken before the files are read, so a change in between is seen at the next look.
 */
import { type Stats, statSync } from "node:fs";
import { stat } from "node:fs/promises";

function stampOf(s: Stats): string {
  return `${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
}

function missing(err: unknown): string {
  return `missing:${(err as NodeJS.ErrnoException).code ?? ""}`;
}

/** The files' stamps now, synchronously: take it before reading them the first time. */
export function stampFiles(paths: readonly string[]): string {
  return paths
    .map((p) => {
      try {
        return stampOf(statSync(p));
      } catch (err) {
        return missing(err);
      }
    })
    .join("|");
}

async function stampFilesNow(paths: readonly string[]): Promise<string> {
  const stamps = await Promise.all(
    paths.map(async (p) => {
      try {
        return stampOf(await stat(p));
      } catch (err) {
        return missing(err);
      }
    }),
  );
  return stamps.join("|");
}

/**
 * Looks at `paths` every `intervalMs`; once they changed since `readAt` (stampFiles, taken before
 * what is in use was read), calls `reload`, which reads them again and hands on the result or
 * its refusal; when it answers true (a refusal that time alone may lift), it is called again at
 * the next look, changed or not. One look at a time; the timer does not hold the process open.
 */
export class FileWatch {
  readonly #timer: NodeJS.Timeout;
  #stamps: string;
  #busy = false;
  #again = false;

  constructor(paths: readonly string[], readAt: string, reload: () => boolean, intervalMs: number) {
    this.#stamps = readAt;
    const look = async (): Promise<void> => {
      const stamps = await stampFilesNow(paths);
      if (stamps === this.#stamps && !this.#again) return;
      this.#stamps = stamps;
      this.#again = reload() === true;
    };
    this.#timer = setInterval(() => {
      if (this.#busy) return;
      this.#busy = true;
      void look().finally(() => (this.#busy = false));
    }, intervalMs);
    this.#timer.unref();
  }

  close(): void {
    clearInterval(this.#timer);
  }
}

/**
 * A FileWatch that reads the files again with `read` once they changed: `onReload` hears what it
 * returned, `onError` a refusal `read` or `onReload` threw (`isRefusal`: the caller keeps what
 * it had; the watch tries again at the next change, or at every look while `passes` says time
 * alone may lift the refusal, such as a certificate not valid yet: reported once, not at each
 * look). Anything else thrown is a bug and is not caught.
 */
export class ReadingFileWatch<T, E extends Error> {
  readonly #watch: FileWatch;

  constructor(
    paths: readonly string[],
    /** stampFiles(paths), taken before what is in use was read. */
    readAt: string,
    read: () => T,
    isRefusal: (err: unknown) => err is E,
    onReload: (value: T) => void,
    onError: (err: E) => void,
    intervalMs: number,
    passes: (err: E) => boolean = () => false,
  ) {
    /** The refusal being tried again at each look (its message), reported already. */
    let retrying: string | null = null;
    const reload = (): boolean => {
      try {
        onReload(read());
        retrying = null;
        return false;
      } catch (err) {
        if (!isRefusal(err)) throw err;
        if (err.message !== retrying) onError(err);
        retrying = passes(err) ? err.message : null;
        return retrying !== null;
      }
    };
    this.#watch = new FileWatch(paths, readAt, reload, intervalMs);
  }

  close(): void {
    this.#watch.close();
  }
}

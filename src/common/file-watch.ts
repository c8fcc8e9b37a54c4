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
 * its refusal. One look at a time; the timer does not hold the process open.
 */
export class FileWatch {
  readonly #timer: NodeJS.Timeout;
  #stamps: string;
  #busy = false;

  constructor(paths: readonly string[], readAt: string, reload: () => void, intervalMs: number) {
    this.#stamps = readAt;
    const look = async (): Promise<void> => {
      const stamps = await stampFilesNow(paths);
      if (stamps === this.#stamps) return;
      this.#stamps = stamps;
      reload();
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
 * it had; the watch tries again at the next change). Anything else thrown is a bug and is not
 * caught.
 */
export class ReadingFileWatch<T, E> {
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
  ) {
    const reload = (): void => {
      try {
        onReload(read());
      } catch (err) {
        if (isRefusal(err)) onError(err);
        else throw err;
      }
    };
    this.#watch = new FileWatch(paths, readAt, reload, intervalMs);
  }

  close(): void {
    this.#watch.close();
  }
}

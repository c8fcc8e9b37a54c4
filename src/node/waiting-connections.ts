/**
 * The connections other shard workers accepted for this one (a descriptor each, and the bytes
 * read past its CONNECT: src/api/worker-tunnel.ts) while this worker's gRPC server does not
 * serve yet: the workers start serving one after another, and a peer's connection may name a
 * worker that has not. They wait here until it does (`serve`).
 */
export class WaitingConnections {
  #waiting: { readonly fd: number; readonly rest: Buffer | null }[] = [];
  #adopt: ((fd: number, rest: Buffer | null) => void) | null = null;

  /** The connections waiting. */
  get size(): number {
    return this.#waiting.length;
  }

  /** A connection handed over: served at once when the server serves, else kept to be. */
  add(fd: number, rest: Buffer | null): void {
    if (this.#adopt !== null) this.#adopt(fd, rest);
    else this.#waiting.push({ fd, rest });
  }

  /** The server serves: `adopt` takes the connections waiting, then each handed over. */
  serve(adopt: (fd: number, rest: Buffer | null) => void): void {
    this.#adopt = adopt;
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const { fd, rest } of waiting) adopt(fd, rest);
  }
}

/** A broken property found by the simulation: what, when (simulated time), and the evidence. */
export interface Violation {
  readonly kind: string;
  readonly at: number;
  readonly message: string;
}

export class ViolationError extends Error {
  readonly violation: Violation;

  constructor(v: Violation) {
    super(`${v.kind} at t=${v.at}: ${v.message}`);
    this.violation = v;
  }
}

/** Meta states for the node tests, built by applying commands as the meta group does. */
import assert from "node:assert/strict";
import { type MetaCommand, MetaState } from "../../src/cluster/index.ts";

/** The state `cmds` leave, applied in order to an empty one; each must be taken (not rejected). */
export function metaStateOf(...cmds: MetaCommand[]): MetaState {
  let s = MetaState.empty();
  for (const c of cmds) {
    const applied = s.apply(c);
    assert.notEqual(applied.outcome.kind, "rejected", JSON.stringify(applied.outcome));
    s = applied.state;
  }
  return s;
}

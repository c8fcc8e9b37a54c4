import assert from "node:assert/strict";
import { ConfigError, loadConfig } from "../../src/config/index.ts";

/** The message of the ConfigError loadConfig throws for `env` and `flags`; fails if it accepts them. */
export function configRefusal(
  env: Record<string, string>,
  flags: Record<string, string> = {},
): string {
  try {
    loadConfig({ env, flags });
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    assert.equal(err.code, "CAIRN_ERR_CONFIG");
    return err.message;
  }
  assert.fail("the configuration was accepted");
}

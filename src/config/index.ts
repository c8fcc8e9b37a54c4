/**
 * Configuration of a Cairn node: defaults < YAML file (`--config`) < `CAIRN_*` environment <
 * command-line flags, every value validated with a message naming the key and its source.
 * The keys, defaults, environment variables and flags are listed in docs/operations.md.
 */
export {
  type AddressParseResult,
  type AddressRules,
  canonicalHost,
  formatHostPort,
  type HostPort,
  isUnspecifiedHost,
  parseHostPort,
  sameAddress,
  sameHost,
} from "./address.ts";
export {
  type CairnConfig,
  ConfigError,
  type ConfigFlags,
  type ConfigIssue,
  loadConfig,
  type LoadConfigOptions,
} from "./load.ts";
export {
  CONFIG_FLAG_OPTIONS,
  KEYS as CONFIG_KEYS,
  type KeySpec as ConfigKeySpec,
  LOG_LEVELS,
  type LogLevelName,
  formatBytes,
  isNodeId,
  parseBytes,
} from "./schema.ts";

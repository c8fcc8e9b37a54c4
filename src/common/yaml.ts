/**
 * The `yaml` package, loaded the first time a YAML file is read: most processes read none (a
 * node started by flags and environment, every client command), and loading it costs ~20 ms of
 * CPU at each start.
 */
import { createRequire } from "node:module";
import type * as YamlModule from "yaml";

type Yaml = typeof YamlModule;

let yaml: Yaml | undefined;

export function loadYaml(): Yaml {
  yaml ??= createRequire(import.meta.url)("yaml") as Yaml;
  return yaml;
}

/**
 * README's API table held to the protocol: every service of proto/cairn/v1 has a row and every
 * method of it is named there, so that a call added to a .proto file cannot go unlisted (the
 * Admin row had kept the two calls of its first version while four member calls came).
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

const ROOT = join(import.meta.dirname, "..", "..");
const PROTO_DIR = join(ROOT, "proto", "cairn", "v1");

/** Service name → its methods, from every .proto file of the package. */
function protoServices(): Map<string, string[]> {
  const services = new Map<string, string[]>();
  for (const file of readdirSync(PROTO_DIR).filter((f) => f.endsWith(".proto"))) {
    const text = readFileSync(join(PROTO_DIR, file), "utf8");
    for (const m of text.matchAll(/^service (\w+) \{([\s\S]*?)^\}/gm)) {
      const [, name, body] = m;
      if (name === undefined || body === undefined) continue;
      services.set(
        name,
        [...body.matchAll(/^\s*rpc (\w+)\(/gm)].map((r) => r[1] ?? ""),
      );
    }
  }
  return services;
}

/** The rows of README's "## The API" table: the first cell without backticks → the row. */
function readmeRows(): Map<string, string> {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const section = readme.split("\n## The API\n")[1]?.split("\n## ")[0] ?? "";
  const rows = new Map<string, string>();
  for (const line of section.split("\n")) {
    const m = /^\| `([\w.]+)`/.exec(line);
    if (m?.[1] !== undefined) rows.set(m[1], line);
  }
  return rows;
}

describe("README's API table", () => {
  it("reads the protocol's services (the parser finds them)", () => {
    const services = protoServices();
    assert.deepEqual([...services.keys()].sort(), ["Admin", "KV", "Meta", "Raft"]);
    assert.ok(services.get("KV")?.includes("Put"));
  });

  it("has a row for every service, naming each of its methods", () => {
    const rows = readmeRows();
    for (const [service, methods] of protoServices()) {
      const row = rows.get(service);
      assert.ok(row !== undefined, `README's API table has no row for ${service}`);
      // The peers' service is described, not listed call by call.
      if (service === "Raft") continue;
      const missing = methods.filter((m) => !new RegExp(`\\b${m}\\b`).test(row));
      assert.deepEqual(missing, [], `README's ${service} row does not name ${missing.join(", ")}`);
    }
  });
});

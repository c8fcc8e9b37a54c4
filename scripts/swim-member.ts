/**
 * Runs one SWIM member over real UDP until SIGTERM/SIGINT (then leaves gracefully) and prints one
 * JSON object per line on stdout: `listening`, `joined-cluster`, `member` (with the member list)
 * and `error`. Used by the real-UDP test until the server (issue 4) hosts membership.
 *
 *   node scripts/swim-member.ts --id n1 --bind 127.0.0.1:7447 [--seeds h:p,h:p]
 *        [--total-shards 1024] [--advertise h:p] [--http h:p] [--tick-ms 100]
 *
 * Exit codes: 0 after a graceful leave, 2 on bad arguments, 3 when the cluster refused this node.
 */
import { parseArgs } from "node:util";
import { Membership, type MemberView } from "../src/membership/index.ts";

const print = (o: Record<string, unknown>): void => {
  process.stdout.write(`${JSON.stringify(o)}\n`);
};

const view = (m: MemberView) => ({
  id: m.meta.id,
  rpc_addr: m.meta.rpcAddr,
  http_addr: m.meta.httpAddr,
  state: m.state,
  incarnation: m.incarnation,
});

const { values } = parseArgs({
  options: {
    id: { type: "string" },
    bind: { type: "string", default: "127.0.0.1:0" },
    seeds: { type: "string", default: "" },
    "total-shards": { type: "string", default: "1024" },
    advertise: { type: "string" },
    http: { type: "string" },
    "tick-ms": { type: "string", default: "100" },
  },
});

if (values.id === undefined) {
  print({ event: "error", code: "usage", message: "--id is required" });
  process.exit(2);
}

const logger = {
  info: (message: string, fields?: Record<string, unknown>) =>
    print({ event: "log", level: "INFO", message, fields }),
  warn: (message: string, fields?: Record<string, unknown>) =>
    print({ event: "log", level: "WARN", message, fields }),
  error: (message: string, fields?: Record<string, unknown>) =>
    print({ event: "log", level: "ERROR", message, fields }),
};

let membership: Membership;
try {
  const bindHost = values.bind.slice(0, values.bind.lastIndexOf(":"));
  membership = await Membership.start({
    nodeId: values.id,
    bindAddr: values.bind,
    ...(values.advertise === undefined ? {} : { advertiseRpcAddr: values.advertise }),
    advertiseHttpAddr: values.http ?? `${bindHost === "0.0.0.0" ? "127.0.0.1" : bindHost}:8080`,
    totalShards: Number(values["total-shards"]),
    seeds: values.seeds.split(",").filter((s) => s !== ""),
    tickMs: Number(values["tick-ms"]),
    logger,
  });
} catch (e) {
  const err = e as { code?: string; message?: string };
  print({ event: "error", code: err.code ?? "start", message: err.message ?? String(e) });
  process.exit(2);
}

membership.onEvent((e) =>
  print({ event: "member", kind: e.kind, member: view(e.member), members: e.members.map(view) }),
);
print({ event: "listening", addr: membership.boundAddr, advertised: membership.self.rpcAddr });

const stop = (): void => {
  void membership.leave().then(() => {
    print({ event: "stopped", stats: membership.stats() });
    process.exit(0);
  });
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);

try {
  await membership.join();
  print({ event: "joined-cluster", members: membership.members().map(view) });
} catch (e) {
  const err = e as { code?: string; message?: string };
  print({ event: "error", code: err.code ?? "join", message: err.message ?? String(e) });
  await membership.close();
  process.exit(3);
}

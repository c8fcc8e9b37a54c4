/**
 * The cluster deployments of deploy/ against the code, with no external tool (docker compose
 * and kubectl kustomize run in `npm run check:deploy` where installed):
 *
 * - deploy/compose.yaml: each node's environment is exactly the table `npm run cluster` uses
 *   (scripts/cluster-layout.ts), loads with the real config loader, one volume per node, ports
 *   published for node 1 only, Prometheus scrapes exactly the compose nodes, Grafana gets the
 *   provisioning and the dashboard where the provisioning looks for it;
 * - deploy/k8s/: the StatefulSet sets the same variables (expanded as the kubelet would, they
 *   load with the real loader), readiness is /health/quick on the HTTP port of the code's
 *   defaults and liveness any answer of the HTTP server, the grace period outlasts preStop + the drain timeout, the PDB and Services
 *   select the pods, and the pods run as the image's non-root user;
 * - deploy/k8s-tls/: the certificates its header's `cairn cert` commands make (openssl, as the
 *   tool needs it) name every name a pod is dialed at, as a client's and a peer's check see it.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { once } from "node:events";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { createServer as createHttpServer } from "node:http";
import { type AddressInfo, createServer as createNetServer, type Server } from "node:net";
import { basename, join } from "node:path";
import { checkServerIdentity } from "node:tls";
import { describe, it } from "node:test";
import { parse as parseYaml, parseAllDocuments } from "yaml";
import { type CairnConfig, loadConfig, parseHostPort } from "../../src/config/index.ts";
import { COMPOSE, nodeEnvironment } from "../../scripts/cluster-layout.ts";
import { checkPeerName } from "../../src/common/peer-tls.ts";
import { ROOT } from "../support/server-process.ts";
import { certCommand } from "../support/tls-certs.ts";

const DEPLOY = join(ROOT, "deploy");
const read = (rel: string): string => readFileSync(join(DEPLOY, rel), "utf8");

/** The configuration a node gets from these variables alone (no file, no flags). */
function configFrom(env: Record<string, string>): CairnConfig {
  return loadConfig({ flags: {}, env });
}

function portOf(addr: string): number {
  const r = parseHostPort(addr, { allowPortZero: true, allowUnspecified: true });
  assert.ok(r.ok, addr);
  return r.value.port;
}

function hostOf(addr: string): string {
  const r = parseHostPort(addr, { allowPortZero: true, allowUnspecified: true });
  assert.ok(r.ok, addr);
  return r.value.host;
}

const DEFAULTS = configFrom({});
const DOCKER_USER = /^USER (\d+):(\d+)$/m.exec(read("Dockerfile"));

interface ComposeService {
  build?: { context: string; dockerfile: string };
  image?: string;
  hostname?: string;
  command?: string[];
  environment?: Record<string, string>;
  volumes?: string[];
  ports?: string[];
  depends_on?: unknown;
  stop_grace_period?: string;
}

describe("deploy/compose.yaml", () => {
  const compose = parseYaml(read("compose.yaml"), { merge: true }) as {
    services: Record<string, ComposeService>;
    volumes: Record<string, unknown>;
  };
  const nodes = Object.keys(compose.services).filter((s) => s.startsWith("cairn-"));

  it("runs 3 nodes whose environment is the launcher's table (scripts/cluster-layout.ts)", () => {
    assert.deepEqual(nodes, ["cairn-1", "cairn-2", "cairn-3"]);
    nodes.forEach((name, k) => {
      const svc = compose.services[name];
      assert.ok(svc);
      assert.deepEqual(svc.environment, nodeEnvironment(COMPOSE, k + 1, nodes.length), name);
      assert.equal(svc.hostname, name, "the host name other nodes resolve");
      assert.deepEqual(svc.build, { context: "..", dockerfile: "deploy/Dockerfile" });
      assert.ok(existsSync(join(DEPLOY, "..", svc.build.dockerfile)));
      // A healthy peer needs the others running: no node waits for another.
      assert.equal(svc.depends_on, undefined, `${name} must not depend on another node`);
    });
  });

  it("each node's environment loads with the real config loader: bound 0.0.0.0, advertised by service name", () => {
    for (const name of nodes) {
      const c = configFrom(compose.services[name]?.environment ?? {});
      assert.equal(c.node_id, name);
      assert.equal(c.advertise_rpc_addr, `${name}:${portOf(DEFAULTS.rpc_addr)}`);
      assert.equal(c.advertise_http_addr, `${name}:${portOf(DEFAULTS.http_addr)}`);
      assert.deepEqual(
        c.cluster.seed_nodes,
        nodes.map((n) => `${n}:${portOf(DEFAULTS.rpc_addr)}`),
      );
      assert.equal(c.data_dir, "/var/lib/cairn");
    }
  });

  it("gives every node its own named volume and publishes only node 1's ports, on loopback", () => {
    const mounts = nodes.map((n) => compose.services[n]?.volumes ?? []);
    for (const [k, m] of mounts.entries()) {
      assert.deepEqual(m, [`cairn-${k + 1}-data:/var/lib/cairn`]);
      assert.ok(`cairn-${k + 1}-data` in compose.volumes);
    }
    const rpc = portOf(DEFAULTS.rpc_addr);
    const http = portOf(DEFAULTS.http_addr);
    assert.deepEqual(compose.services["cairn-1"]?.ports, [
      `127.0.0.1:${rpc}:${rpc}/tcp`,
      `127.0.0.1:${rpc}:${rpc}/udp`,
      `127.0.0.1:${http}:${http}/tcp`,
    ]);
    assert.equal(compose.services["cairn-2"]?.ports, undefined);
    assert.equal(compose.services["cairn-3"]?.ports, undefined);
  });

  it("stops a node with a grace period beyond the drain timeout", () => {
    for (const name of nodes) {
      const m = /^(\d+)s$/.exec(compose.services[name]?.stop_grace_period ?? "");
      assert.ok(m?.[1] !== undefined, `${name}: stop_grace_period <n>s`);
      assert.ok(Number(m[1]) * 1000 >= DEFAULTS.shutdown.drain_timeout_ms + 10_000);
    }
  });

  it("Prometheus scrapes exactly the compose nodes' HTTP addresses with the mounted config", () => {
    const prom = compose.services["prometheus"];
    assert.ok(prom !== undefined);
    assert.ok(prom.command?.includes("--config.file=/etc/prometheus/prometheus.yaml"));
    assert.ok(prom.volumes?.includes("./prometheus:/etc/prometheus:ro"));
    const config = parseYaml(read("prometheus/prometheus.yaml")) as {
      scrape_configs: { job_name: string; static_configs: { targets: string[] }[] }[];
    };
    const targets = config.scrape_configs
      .find((j) => j.job_name === "cairn")
      ?.static_configs.flatMap((s) => s.targets);
    assert.deepEqual(
      targets,
      nodes.map((n) => compose.services[n]?.environment?.["CAIRN_ADVERTISE_HTTP_ADDR"]),
    );
  });

  it("Grafana gets the provisioning, the dashboard where the provider reads, and the Prometheus service", () => {
    const grafana = compose.services["grafana"];
    assert.ok(grafana?.volumes !== undefined);
    assert.ok(grafana.volumes.includes("./grafana/provisioning:/etc/grafana/provisioning:ro"));
    const provider = parseYaml(read("grafana/provisioning/dashboards/cairn.yaml")) as {
      providers: { options: { path: string } }[];
    };
    const dashboardsPath = provider.providers[0]?.options.path;
    assert.ok(grafana.volumes.includes(`./grafana/cairn.json:${dashboardsPath}/cairn.json:ro`));
    const ds = parseYaml(read("grafana/provisioning/datasources/prometheus.yaml")) as {
      datasources: { url: string }[];
    };
    const url = new URL(ds.datasources[0]?.url ?? "");
    assert.ok(url.hostname in compose.services, `data source host ${url.hostname} is a service`);
    assert.ok(
      compose.services["prometheus"]?.ports?.some((p) => p.endsWith(`:${url.port}/tcp`)),
      "Prometheus listens where the data source points",
    );
  });
});

describe("deploy/ names", () => {
  it("every test and script a deploy file names exists", () => {
    const files = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)],
      );
    for (const file of files(DEPLOY)) {
      const text = readFileSync(file, "utf8");
      for (const m of text.matchAll(/\b(?:test|scripts)\/[\w./-]+\.ts\b/g)) {
        assert.ok(existsSync(join(ROOT, m[0])), `${file} names ${m[0]}, which does not exist`);
      }
    }
  });
});

// ---------------------------------------------------------------------------------------------

interface Probe {
  httpGet?: { path: string; port: string | number };
  exec?: { command: string[] };
  periodSeconds: number;
  timeoutSeconds: number;
  failureThreshold: number;
}

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string> };
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- checked field by field below
  spec: any;
}

interface Container {
  name: string;
  ports: { name: string; containerPort: number; protocol: string }[];
  env: { name: string; value?: string; valueFrom?: { fieldRef: { fieldPath: string } } }[];
  startupProbe: Probe;
  readinessProbe: Probe;
  livenessProbe: Probe;
  lifecycle: { preStop: { exec: { command: string[] } } };
  resources: { requests: Record<string, string>; limits?: Record<string, string> };
  securityContext: Record<string, unknown> & { capabilities: { drop: string[] } };
  volumeMounts: { name: string; mountPath: string }[];
}

describe("deploy/k8s/", () => {
  const dir = join(DEPLOY, "k8s");
  const kustomization = parseYaml(read("k8s/kustomization.yaml")) as { resources: string[] };
  const objects: K8sObject[] = kustomization.resources.flatMap((f) =>
    parseAllDocuments(readFileSync(join(dir, f), "utf8")).map((d) => {
      assert.deepEqual(d.errors, [], f);
      return d.toJS() as K8sObject;
    }),
  );
  const find = (kind: string, pred: (o: K8sObject) => boolean = () => true): K8sObject => {
    const found = objects.filter((o) => o.kind === kind && pred(o));
    assert.equal(found.length, 1, `exactly one ${kind}`);
    return found[0] as K8sObject;
  };
  const sts = find("StatefulSet");
  const podLabels = sts.spec.template.metadata.labels as Record<string, string>;
  const container = (sts.spec.template.spec.containers as Container[])[0] as Container;
  const selects = (selector: Record<string, string>): boolean =>
    Object.entries(selector).every(([k, v]) => podLabels[k] === v);
  const headless = find("Service", (o) => o.metadata.name === sts.spec.serviceName);

  /** The container's CAIRN_* variables for pod `cairn-<ordinal>`, expanded as the kubelet does. */
  const podEnv = (ordinal: number, namespace: string): Record<string, string> => {
    const fields: Record<string, string> = {
      "metadata.name": `${sts.metadata.name}-${ordinal}`,
      "metadata.namespace": namespace,
    };
    const env: Record<string, string> = {};
    for (const e of container.env) {
      const raw = e.valueFrom !== undefined ? fields[e.valueFrom.fieldRef.fieldPath] : e.value;
      assert.ok(raw !== undefined, e.name);
      env[e.name] = raw.replace(/\$\((\w+)\)/g, (_, name: string) => {
        assert.ok(name in env, `${e.name} refers to $(${name}) defined before it`);
        return env[name] as string;
      });
    }
    return env;
  };

  it("lists every manifest of the folder in kustomization.yaml", () => {
    const files = readdirSync(dir).filter((f) => f.endsWith(".yaml") && f !== "kustomization.yaml");
    assert.deepEqual([...kustomization.resources].sort(), files.sort());
  });

  it("runs 3 replicas started in parallel, found through a headless Service that publishes unready pods", () => {
    assert.equal(sts.apiVersion, "apps/v1");
    assert.equal(sts.spec.replicas, 3);
    assert.equal(sts.spec.podManagementPolicy, "Parallel");
    assert.ok(selects(sts.spec.selector.matchLabels));
    assert.equal(headless.spec.clusterIP, "None");
    assert.equal(headless.spec.publishNotReadyAddresses, true);
    assert.ok(selects(headless.spec.selector));
    const client = find("Service", (o) => o.metadata.name !== sts.spec.serviceName);
    assert.ok(selects(client.spec.selector));
    assert.deepEqual(
      (client.spec.ports as { port: number }[]).map((p) => p.port),
      [portOf(DEFAULTS.rpc_addr)],
      "clients get the RPC port only",
    );
    const pdb = find("PodDisruptionBudget");
    assert.equal(pdb.apiVersion, "policy/v1");
    assert.equal(pdb.spec.maxUnavailable, 1);
    assert.ok(selects(pdb.spec.selector.matchLabels));
  });

  it("exposes the code's default ports: gRPC (TCP) and SWIM (UDP) on the RPC port, HTTP", () => {
    const byName = Object.fromEntries(container.ports.map((p) => [p.name, p]));
    assert.deepEqual(byName["rpc"], {
      name: "rpc",
      containerPort: portOf(DEFAULTS.rpc_addr),
      protocol: "TCP",
    });
    assert.deepEqual(byName["swim"], {
      name: "swim",
      containerPort: portOf(DEFAULTS.rpc_addr),
      protocol: "UDP",
    });
    assert.deepEqual(byName["http"], {
      name: "http",
      containerPort: portOf(DEFAULTS.http_addr),
      protocol: "TCP",
    });
  });

  it("sets the launcher's variables, from the pod name and the headless Service's DNS", () => {
    const names = container.env.map((e) => e.name).filter((n) => n.startsWith("CAIRN_"));
    assert.deepEqual(names.sort(), Object.keys(nodeEnvironment(COMPOSE, 1, 3)).sort());
    const replicas = sts.spec.replicas as number;
    for (let ordinal = 0; ordinal < replicas; ordinal++) {
      const env = podEnv(ordinal, "prod");
      const pod = `${sts.metadata.name}-${ordinal}`;
      const dns = (p: string): string => `${p}.${headless.metadata.name}.prod.svc`;
      const c = configFrom(env);
      assert.equal(c.node_id, pod);
      assert.equal(c.rpc_addr, `0.0.0.0:${portOf(DEFAULTS.rpc_addr)}`);
      assert.equal(c.advertise_rpc_addr, `${dns(pod)}:${portOf(DEFAULTS.rpc_addr)}`);
      assert.equal(c.advertise_http_addr, `${dns(pod)}:${portOf(DEFAULTS.http_addr)}`);
      // The same seeds on every pod, every replica once, the first (ordinal 0) first.
      assert.deepEqual(
        c.cluster.seed_nodes.map(hostOf),
        Array.from({ length: replicas }, (_, j) => dns(`${sts.metadata.name}-${j}`)),
      );
      const mount = container.volumeMounts.find((m) => m.mountPath === c.data_dir);
      assert.ok(mount, "the data directory is the mounted volume");
      const claims = sts.spec.volumeClaimTemplates as { metadata: { name: string } }[];
      assert.ok(claims.some((t) => t.metadata.name === mount.name));
    }
  });

  it("probes readiness with /health/quick, startup and liveness with one check: a long startup, generous liveness", () => {
    assert.deepEqual(container.readinessProbe.httpGet, { path: "/health/quick", port: "http" });
    assert.deepEqual(container.startupProbe.exec, container.livenessProbe.exec);
    const window = (p: Probe): number => p.periodSeconds * p.failureThreshold;
    assert.ok(window(container.startupProbe) >= 300, "5 minutes or more to replay the WAL");
    assert.ok(window(container.livenessProbe) >= 60, "liveness tolerates a stuck minute");
    assert.ok(window(container.readinessProbe) < window(container.livenessProbe));
  });

  it("restarts a pod only when its HTTP server does not answer: a 503 (decommissioned, no quorum) is alive", async () => {
    // Seen failing: liveness was GET /health/quick, 503 by design for a decommissioned member
    // (and one whose shard 0 lost its quorum): Kubernetes restarted such a pod every 2 minutes.
    const command = container.livenessProbe.exec?.command;
    assert.ok(command !== undefined, "an exec probe");
    assert.equal(command[0], "node", "the image's node");
    const limitMs = container.livenessProbe.timeoutSeconds * 1000;
    // The command reads the port of the pod's CAIRN_HTTP_ADDR, the container's http port.
    const httpPort = container.ports.find((p) => p.name === "http")?.containerPort;
    assert.equal(portOf(podEnv(0, "default")["CAIRN_HTTP_ADDR"] ?? ""), httpPort);
    const probe = async (port: number): Promise<{ code: number | null; ms: number }> => {
      const started = performance.now();
      const proc = spawn(process.execPath, command.slice(1), {
        env: { ...process.env, CAIRN_HTTP_ADDR: `0.0.0.0:${port}` },
        stdio: "ignore",
      });
      const [code] = (await once(proc, "exit")) as [number | null];
      return { code, ms: performance.now() - started };
    };
    const listen = async (server: Server): Promise<number> => {
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
      return (server.address() as AddressInfo).port;
    };
    const answering = (status: number): Server =>
      createHttpServer((_req, res) => {
        res.writeHead(status, { "content-type": "text/plain; charset=utf-8" });
        res.end(status === 200 ? "OK" : "UNAVAILABLE");
      });
    const ok = answering(200);
    const unavailable = answering(503);
    // A main thread that no longer runs: the kernel accepts the connection, nothing answers.
    const stuck = createNetServer(() => {});
    const gone = createNetServer();
    try {
      assert.equal((await probe(await listen(ok))).code, 0, "200: alive");
      assert.equal((await probe(await listen(unavailable))).code, 0, "503: alive");
      const hung = await probe(await listen(stuck));
      assert.notEqual(hung.code, 0, "no answer: not alive");
      assert.ok(hung.ms < limitMs, `it ends by itself within timeoutSeconds (${hung.ms} ms)`);
      const port = await listen(gone);
      await new Promise<void>((resolve) => gone.close(() => resolve()));
      assert.notEqual((await probe(port)).code, 0, "nothing listening: not alive");
    } finally {
      ok.close();
      unavailable.close();
      stuck.close();
    }
  });

  it("gives the pod longer than preStop + the drain timeout to stop", () => {
    const cmd = container.lifecycle.preStop.exec.command;
    assert.equal(cmd[0], "sleep");
    const preStopMs = Number(cmd[1]) * 1000;
    const drainMs = configFrom(podEnv(0, "default")).shutdown.drain_timeout_ms;
    const graceMs = (sts.spec.template.spec.terminationGracePeriodSeconds as number) * 1000;
    assert.ok(graceMs >= preStopMs + drainMs + 10_000, `grace ${graceMs} ms`);
  });

  it("runs as the image's non-root user with requests, no privileges and a read-only root", () => {
    assert.ok(DOCKER_USER?.[1] !== undefined && DOCKER_USER[2] !== undefined);
    const pod = sts.spec.template.spec.securityContext;
    assert.equal(pod.runAsNonRoot, true);
    assert.equal(pod.runAsUser, Number(DOCKER_USER[1]));
    assert.equal(pod.fsGroup, Number(DOCKER_USER[2]));
    assert.equal(container.securityContext["allowPrivilegeEscalation"], false);
    assert.equal(container.securityContext["readOnlyRootFilesystem"], true);
    assert.deepEqual(container.securityContext.capabilities.drop, ["ALL"]);
    assert.ok(container.resources.requests["cpu"] && container.resources.requests["memory"]);
  });

  it("gives the read-only root a writable /tmp, where `cairn restore -` in the pod keeps the backup it reads from standard input", () => {
    const mount = (container.volumeMounts as { name: string; mountPath: string }[]).find(
      (m) => m.mountPath === "/tmp",
    );
    assert.ok(mount !== undefined, "a volume mounted at /tmp");
    const volumes = (sts.spec.template.spec.volumes ?? []) as {
      name: string;
      emptyDir?: object;
    }[];
    assert.ok(
      volumes.some((v) => v.name === mount.name && v.emptyDir !== undefined),
      "an emptyDir",
    );
  });

  describe("deploy/k8s-tls/", () => {
    const overlay = read("k8s-tls/kustomization.yaml");
    const patch = parseYaml(read("k8s-tls/tls-patch.yaml")) as K8sObject;
    const patchEnv = (patch.spec.template.spec.containers as Container[])[0]?.env ?? [];
    const client = find("Service", (o) => o.metadata.name !== sts.spec.serviceName);
    /** The shell lines of the header's instructions, continuation lines joined. */
    const script = overlay
      .split("\n")
      .filter((l) => l.startsWith("#   "))
      .map((l) => l.slice(4).trim())
      .join("\n")
      .replaceAll("\\\n", " ")
      .split("\n");

    it("makes each pod a certificate every name it is dialed at verifies against", () => {
      const loop = script.map((l) => /^for i in ([\d ]+); do$/.exec(l)).find((m) => m !== null);
      const create = script.find((l) => l.startsWith("cairn cert create-node "));
      const rename = script.find((l) => l.startsWith("mv certs/node.crt "));
      assert.ok(loop?.[1] !== undefined && create !== undefined && rename !== undefined);
      const ordinals = loop[1].trim().split(/ +/).map(Number);
      const replicas = sts.spec.replicas as number;
      assert.deepEqual(
        ordinals,
        Array.from({ length: replicas }, (_, i) => i),
        "every pod",
      );
      const certFile = patchEnv.find((e) => e.name === "CAIRN_TLS_CERT_FILE")?.value;
      assert.ok(certFile !== undefined);
      const dir = mkdtempSync(join(tmpdir(), "cairn-k8s-tls-"));
      try {
        assert.equal(certCommand(["create-ca", "--certs-dir", dir]).code, 0);
        const namespace = "prod";
        for (const i of ordinals) {
          const pod = `${sts.metadata.name}-${i}`;
          const args = create
            .split(/ +/)
            .slice(2)
            .map((a) => a.replaceAll("$i", String(i)).replace(/\bNS\b/g, namespace))
            .map((a) => (a === "certs" ? dir : a));
          const made = certCommand(args);
          assert.equal(made.code, 0, made.err);
          // The file the pod reads is the one made for it.
          const movedTo: string | undefined = rename.split(/ +/)[2]?.replaceAll("$i", String(i));
          assert.equal(basename(certFile.replace("$(POD_NAME)", pod)), basename(movedTo ?? ""));
          const cert = new X509Certificate(readFileSync(join(dir, "node.crt"))).toLegacyObject();
          // Its peers dial it at its advertised address and check it names its node id.
          assert.equal(checkPeerName(pod)(pod, cert), undefined, pod);
          // Clients: the advertised address (routing follows it) and the client Service, as a
          // client in the cluster may write them (cluster.local: the default cluster domain).
          const advertised = hostOf(configFrom(podEnv(i, namespace)).advertise_rpc_addr);
          const service = client.metadata.name;
          const names = [
            pod,
            advertised,
            `${advertised}.cluster.local`,
            service,
            `${service}.${namespace}`,
            `${service}.${namespace}.svc`,
            `${service}.${namespace}.svc.cluster.local`,
          ];
          const refused = names
            .map((name) => checkServerIdentity(name, cert)?.message)
            .filter((m) => m !== undefined);
          assert.deepEqual(refused, [], `${pod}: names its clients dial`);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
});

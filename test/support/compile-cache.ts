/**
 * Node.js's on-disk compile cache for every process a test run starts: the runner, each test
 * file's process, and every child they spawn (`cairn serve`, crash children, the CLI), which
 * inherit `NODE_COMPILE_CACHE` from this process's environment.
 *
 * Much of a child's start is Node.js compiling Cairn's modules and its dependencies (type
 * stripping, then V8 parsing): four `cairn serve` starts to "node started" took 8.0–8.7 s of CPU
 * without the cache, 5.6–6.1 s with it (the measuring process included; a 2-core machine); the
 * default suite starts hundreds of processes. With the cache a start reuses the code the first
 * one compiled; each entry is checked against its source's hash, so an edited file is
 * simply compiled again. What a process does once it runs is unchanged.
 *
 * `NODE_COMPILE_CACHE` from the caller's shell wins; `NODE_DISABLE_COMPILE_CACHE=1` turns it off.
 */
import { enableCompileCache } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dir = process.env["NODE_COMPILE_CACHE"] ?? join(tmpdir(), "cairn-test-compile-cache");
process.env["NODE_COMPILE_CACHE"] = dir;
enableCompileCache(dir);

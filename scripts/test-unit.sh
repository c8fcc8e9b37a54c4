#!/usr/bin/env bash
# `npm run test:unit`: every test file under test/. The in-memory ones run one after another in
# one process (`test:shared`, as mocha runs a suite: a process a file cost ~0.4 s of CPU each
# before its first test); the rest, the files that start processes or threads or change what a
# process shares, each in a process of its own, two at a time (`test:isolated`).
# scripts/test-files.ts says which is which. The shared run's output is kept and printed after
# the other's. Exit status: the isolated run's, or the shared run's when the other passed.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp "${TMPDIR:-/tmp}/cairn-shared.XXXXXX")
trap 'rm -f "$log"' EXIT
mapfile -t shared < <(node scripts/test-files.ts shared)
mapfile -t isolated < <(node scripts/test-files.ts isolated)
if [ "${#shared[@]}" -eq 0 ] || [ "${#isolated[@]}" -eq 0 ]; then
  echo "scripts/test-files.ts listed no test file" >&2
  exit 1
fi
npm run --silent test:shared -- "${shared[@]}" >"$log" 2>&1 &
pid=$!
npm run --silent test:isolated -- "${isolated[@]}"
own=$?
wait "$pid"
together=$?
echo
echo "── the files run in one process (${#shared[@]}): $([ "$together" -eq 0 ] && echo passed || echo "FAILED (exit $together)") ──"
cat "$log"
if [ "$own" -ne 0 ]; then exit "$own"; fi
exit "$together"

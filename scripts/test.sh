#!/usr/bin/env bash
# `npm test`: the static checks (`npm run check`) and every test file under test/, side by side;
# `npm run test:unit` (this with --no-check): the tests alone.
#
# The in-memory test files run one after another in one process (`test:shared`, as mocha runs a
# suite: a process a file cost each ~0.4 s of CPU before its first test); the rest, the files
# that start processes or threads or change what a process shares, each in a process of its
# own, two at a time, longest first (`test:isolated`, scripts/run-isolated.ts: `node --test` would
# run them in name order); scripts/test-files.ts says which is which. Three test
# processes at once: with two, the tests kept two cores only about 80 % busy (end-to-end tests
# wait on their nodes' timers); the checks, a minute of single-threaded work, fill part of the
# rest instead of running first.
#
# The isolated files' first runner writes to this script's own stdout (a file under CI: the
# runner's last lines, its summary, are not put through a pipe); the output of the shared run,
# the checks and the third lane (below) is kept and printed after it. Exit status: the first
# that failed of the isolated run, the shared run, the checks and the third lane.
set -uo pipefail
cd "$(dirname "$0")/.."
checks=1
if [ "${1:-}" = "--no-check" ]; then checks=0; fi
kept=$(mktemp -d "${TMPDIR:-/tmp}/cairn-test.XXXXXX")
trap 'rm -rf "$kept"' EXIT
mapfile -t shared < <(node scripts/test-files.ts shared)
mapfile -t isolated < <(node scripts/test-files.ts isolated)
if [ "${#shared[@]}" -eq 0 ] || [ "${#isolated[@]}" -eq 0 ]; then
  echo "scripts/test-files.ts listed no test file" >&2
  exit 1
fi

# The isolated files: most in a runner two at a time from the start, whose output is this
# script's own; two in five after the first twelve (the longest: scripts/test-files.ts lists them
# longest first) in a third lane, one at a time, started once the shared run and the checks have
# ended (with one in three, the third lane ended ~150 s before the others). Two lanes alone left
# the cores ~35 % idle after that, the end-to-end files waiting on their nodes' timers; a third
# from the start (five processes with the shared run and the checks) gained nothing
# (docs/development.md).
lead=()
late=()
for i in "${!isolated[@]}"; do
  if [ "$i" -ge 12 ] && [ $(((i - 12) % 5 % 2)) -eq 1 ]; then
    late+=("${isolated[$i]}")
  else
    lead+=("${isolated[$i]}")
  fi
done

# Runs a command in the background, its output kept under a title.
names=()
pids=()
background() {
  local title=$1
  shift
  "$@" >"$kept/${#names[@]}.log" 2>&1 &
  names+=("$title")
  pids+=($!)
}

background "the files run in one process (${#shared[@]})" npm run --silent test:shared -- "${shared[@]}"
if [ "$checks" -eq 1 ]; then background "npm run check" npm run --silent check; fi
npm run --silent test:isolated -- "${lead[@]}" &
leader=$!
codes=()
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  codes+=($?)
done
if [ "${#late[@]}" -gt 0 ]; then
  background "the third lane's files (${#late[@]}), each in a process of its own" \
    npm run --silent test:isolated -- --concurrency=1 "${late[@]}"
fi
wait "$leader"
status=$?
for i in "${!names[@]}"; do
  if [ "$i" -ge "${#codes[@]}" ]; then
    wait "${pids[$i]}"
    codes+=($?)
  fi
  code=${codes[$i]}
  echo
  echo "── ${names[$i]}: $([ "$code" -eq 0 ] && echo passed || echo "FAILED (exit $code)") ──"
  cat "$kept/$i.log"
  if [ "$status" -eq 0 ]; then status=$code; fi
done
exit "$status"

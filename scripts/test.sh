#!/usr/bin/env bash
# `npm test`: the static checks (`npm run check`) and every test (`npm run test:unit`), side by
# side. Three test processes run at once (scripts/test-unit.sh: the in-memory files together in
# one, the others two at a time): with two, the tests kept two cores only about 80 % busy
# (end-to-end tests wait on their nodes' timers); the checks, a minute of single-threaded work,
# fill part of the rest instead of running first.
# The tests write to this script's own stdout (a file under CI: the runner's last lines, its
# summary, are not put through a pipe); the checks' output is kept and printed after them. Exit
# status: the tests', or the checks' when the tests passed.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp "${TMPDIR:-/tmp}/cairn-check.XXXXXX")
trap 'rm -f "$log"' EXIT
npm run --silent check >"$log" 2>&1 &
check=$!
npm run --silent test:unit
unit=$?
wait "$check"
checked=$?
echo
echo "── npm run check: $([ "$checked" -eq 0 ] && echo passed || echo "FAILED (exit $checked)") ──"
cat "$log"
if [ "$unit" -ne 0 ]; then exit "$unit"; fi
exit "$checked"

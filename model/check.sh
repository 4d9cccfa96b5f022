#!/usr/bin/env bash
# Checks model/exactly-once.pml with spin (Debian package `spin`): safety and liveness of the model, and that each
# mutant (a known way to get exactly-once wrong) is caught. Prints the figures; exits non-zero on any surprise.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

run() { # name, claim, expect (0: no errors, 1: errors), extra cpp flags
  local name=$1 claim=$2 expect=$3 flags=${4:-}
  spin -a $flags "$here/exactly-once.pml" >/dev/null
  gcc -O2 -w -DNOREDUCE -o pan pan.c
  local out errors states transitions
  out="$(./pan -a -m100000 -N "$claim" 2>&1)"
  errors=$(sed -nE 's/.*errors: ([0-9]+).*/\1/p' <<<"$out" | head -1)
  states=$(sed -nE 's/^ *([0-9]+) states, stored.*/\1/p' <<<"$out" | head -1)
  transitions=$(sed -nE 's/^ *([0-9]+) transitions.*/\1/p' <<<"$out" | head -1)
  echo "$name: claim $claim, states $states, transitions $transitions, errors $errors"
  if { [ "$expect" -eq 0 ] && [ "$errors" != "0" ]; } || { [ "$expect" -eq 1 ] && [ "$errors" = "0" ]; }; then
    echo "unexpected result for $name:" >&2
    echo "$out" >&2
    return 1
  fi
}

run model safety 0
run model liveness 0
run mutant-reexecute safety 1 -DMUTANT_REEXECUTE
run mutant-handover-first safety 1 -DMUTANT_HANDOVER_FIRST
run mutant-no-retry liveness 1 -DMUTANT_NO_RETRY

#!/usr/bin/env bash
# Checks the Promela models with spin (Debian package `spin`): model/exactly-once.pml (the client protocol) and
# model/domain.pml (the service-domain protocol). For each, its claims hold on the model, and each mutant (a known way
# to get the protocol wrong) is caught by the claim named. Prints the figures; exits non-zero on any surprise.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

run() { # model file, name, claim, expect (0: no errors, 1: errors), extra cpp flags
  local model=$1 name=$2 claim=$3 expect=$4 flags=${5:-}
  spin -a $flags "$here/$model" >/dev/null
  gcc -O2 -w -DNOREDUCE -o pan pan.c
  local out errors states transitions
  out="$(./pan -a -m100000 -N "$claim" 2>&1)"
  errors=$(sed -nE 's/.*errors: ([0-9]+).*/\1/p' <<<"$out" | head -1)
  states=$(sed -nE 's/^ *([0-9]+) states, stored.*/\1/p' <<<"$out" | head -1)
  transitions=$(sed -nE 's/^ *([0-9]+) transitions.*/\1/p' <<<"$out" | head -1)
  echo "$name: claim $claim, states $states, transitions $transitions, errors $errors"
  if [ -z "$errors" ] || { [ "$expect" -eq 0 ] && [ "$errors" != "0" ]; } || { [ "$expect" -eq 1 ] && [ "$errors" = "0" ]; }; then
    echo "unexpected result for $name:" >&2
    echo "$out" >&2
    return 1
  fi
}

run exactly-once.pml model safety 0
run exactly-once.pml model liveness 0
run exactly-once.pml mutant-reexecute safety 1 -DMUTANT_REEXECUTE
run exactly-once.pml mutant-handover-first safety 1 -DMUTANT_HANDOVER_FIRST
run exactly-once.pml mutant-no-retry liveness 1 -DMUTANT_NO_RETRY

# The service domain (model/README.md, "The service-domain model"); the mutants are the four defects of issue 49.
run domain.pml domain safety 0
run domain.pml domain liveness 0
run domain.pml domain converges 0
run domain.pml domain-mutant-lost-epoch-reply safety 1 -DMUTANT_LOST_EPOCH_REPLY
run domain.pml domain-mutant-refusal-as-outcome safety 1 -DMUTANT_REFUSAL_AS_OUTCOME
run domain.pml domain-mutant-caller-keeps-numbering safety 1 -DMUTANT_CALLER_KEEPS_NUMBERING
run domain.pml domain-mutant-no-var-rollback liveness 0 -DMUTANT_NO_VAR_ROLLBACK
run domain.pml domain-mutant-no-var-rollback converges 1 -DMUTANT_NO_VAR_ROLLBACK
run domain.pml domain-mutant-uncapped liveness 1 "-DMUTANT_NO_VAR_ROLLBACK -DMUTANT_UNCAPPED"
run domain.pml domain-mutant-no-flush safety 1 -DMUTANT_NO_FLUSH
run domain.pml domain-mutant-reset-dv-reply safety 1 -DMUTANT_RESET_DV_REPLY
# The code as it is, where it differs from the model (docs/domains.md, "The model"): not mutants, their results recorded.
run domain.pml domain-code-withown safety 0 -DCODE_WITHOWN
run domain.pml domain-code-withown converges 0 -DCODE_WITHOWN
run domain.pml domain-code-no-hold safety 0 -DCODE_NO_HOLD
run domain.pml domain-code-no-hold liveness 0 -DCODE_NO_HOLD
run domain.pml domain-code-no-hold converges 1 -DCODE_NO_HOLD

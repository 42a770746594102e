#!/usr/bin/env bash
# Simulator parity snapshot: every registered policy on two benchmark scenarios, one output
# directory each (summary JSON, per-job and timeline CSVs) under OUT_DIR. Run it before and after
# a refactor that must not change behaviour, then `diff -r -I '"wall_s"' BEFORE AFTER`: the
# reports' wall-clock fields are their only lines that differ between identical runs, so any
# other difference is a change in behaviour.
# Usage: bash benchmarks/sim_parity.sh OUT_DIR [MAX_JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: sim_parity.sh OUT_DIR [MAX_JOBS]}
max_jobs=${2:-120}
mkdir -p "$out"
py=.venv/bin/python
policies=$($py -c "from scheduling.core.registry import policy_names; print(' '.join(policy_names()))")
for policy in $policies; do
  case $policy in
    powerflow|budget_greedy) budget=(--match-baseline fifo) ;;
    greenflow) budget=(--match-baseline fifo --budget-kind carbon --carbon-zone ES) ;;
    *) budget=() ;;
  esac
  $py -m scheduling.simulator --trace data/trace/pollux_workload-1.csv --cluster data/clusters/n16g4_t4.json \
    --policy "$policy" "${budget[@]}" --knowledge both --max-jobs "$max_jobs" --no-progress \
    --out "$out/pollux1-$policy" >/dev/null
  $py -m scheduling.simulator --trace data/trace/elasticflow_philly_876.csv --cluster data/clusters/n16g8_a100.json \
    --policy "$policy" "${budget[@]}" --knowledge oracle --max-jobs "$max_jobs" --no-progress \
    --out "$out/philly876-$policy" >/dev/null
  echo "$policy done"
done

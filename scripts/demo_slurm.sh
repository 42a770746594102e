#!/usr/bin/env bash
# The demo on a local Slurm (`WATTFLOW_DEMO_SLURM=1 make run`, issue 14).
#
#   scripts/demo_slurm.sh up     start a private Slurm whose nodes are the demo's node-01..04
#                                (scripts/slurm.sh, state in $WATTFLOW_VAR_DIR/slurm-demo) and
#                                write $WATTFLOW_VAR_DIR/slurm-demo.env for the demo's processes
#   scripts/demo_slurm.sh run    up, then the Procfile's processes with that environment, then
#                                down when they stop (Ctrl-C)
#   scripts/demo_slurm.sh down   stop that Slurm
#
# In that environment the service runs jobs with the Slurm executor, the simulated agents run
# in monitor mode on the Prolog's handoff directory (scripts/sim_agent.sh), and replayed jobs
# run scripts/demo_slurm_job.py as their Slurm job (they have no training code of their own).
# Needs root, like scripts/slurm.sh; its ports are WATTFLOW_SLURM_PORT_BASE (16900) and up.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
VAR="${WATTFLOW_VAR_DIR:-var}"
mkdir -p "$VAR"
VAR="$(cd "$VAR" && pwd)"
STATE="$VAR/slurm-demo"
ENV_FILE="$VAR/slurm-demo.env"
export WATTFLOW_SLURM_NODES="node-01 node-02 node-03 node-04"  # seed_demo's nodes

up() {
    local out
    out="$(bash scripts/slurm.sh up "$STATE")"
    {
        echo "# written by scripts/demo_slurm.sh up: the demo's processes on the local Slurm"
        echo "WATTFLOW_EXECUTOR=slurm"
        echo "$out"
        echo "WATTFLOW_REPLAY_COMMAND='exec $ROOT/.venv/bin/python $ROOT/scripts/demo_slurm_job.py'"
    } >"$ENV_FILE"
    echo "demo_slurm.sh: Slurm up for node-01..node-04; environment in $ENV_FILE" >&2
}

case "${1:-}" in
up) up ;;
down)
    bash scripts/slurm.sh down "$STATE"
    rm -f "$ENV_FILE"
    ;;
run)
    up
    set -a
    # shellcheck disable=SC1090
    . "$ENV_FILE"
    set +a
    # Ctrl-C reaches honcho too (same process group): it stops the demo, then Slurm goes down.
    trap 'true' INT TERM
    rc=0
    .venv/bin/honcho -f Procfile.dev start || rc=$?
    bash scripts/slurm.sh down "$STATE" || true
    rm -f "$ENV_FILE"
    exit "$rc"
    ;;
*)
    echo "usage: scripts/demo_slurm.sh up|run|down" >&2
    exit 1
    ;;
esac

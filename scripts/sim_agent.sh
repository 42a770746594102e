#!/usr/bin/env bash
# `make run`'s simulated node agent for one seeded node: waits for the web server, reads the
# node's token from var/agent_tokens.json (written by seed_demo), and runs the agent with
# 8 simulated A100s. Usage: scripts/sim_agent.sh node-01
# With WATTFLOW_HANDOFF_DIR set (the demo on Slurm, scripts/demo_slurm.sh) the agent runs in
# monitor mode: Slurm runs the jobs, the agent reads the Prolog's handoffs there.
set -euo pipefail
cd "$(dirname "$0")/.."
NODE="$1"
HOST="${WATTFLOW_WEB_HOST:-127.0.0.1}"
PORT="${WATTFLOW_WEB_PORT:-8000}"
VAR="${WATTFLOW_VAR_DIR:-var}"
PY=.venv/bin/python
# The agent exits if it cannot register, and honcho then stops everything: wait for daphne.
for _ in $(seq 1 120); do
    $PY scripts/service_addresses.py --probe "$HOST" "$PORT" && break
    sleep 1
done
WATTFLOW_AGENT_TOKEN="$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$VAR/agent_tokens.json" "$NODE")"
export WATTFLOW_AGENT_TOKEN
mode=()
if [[ -n ${WATTFLOW_HANDOFF_DIR:-} ]]; then
    mode=(--runner none --handoff-dir "$WATTFLOW_HANDOFF_DIR")
fi
exec $PY -m telemetry.agent --server "http://$HOST:$PORT" --name "$NODE" --simulate \
    --gpus 8 --gpu-model A100 --work-dir "$VAR/agent/$NODE" "${mode[@]}"

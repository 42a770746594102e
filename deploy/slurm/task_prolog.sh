#!/bin/sh
# Wattflow's Slurm Task Prolog: tell a Wattflow job where to write its progress
# (slurm.conf: TaskProlog=...).
#
# slurmstepd runs it as the job's user before each task; a line "export NAME=value" on its
# output sets NAME in the task's environment. If the Prolog (prolog.sh) made a progress file
# for this job on this node, the job gets WATTFLOW_PROGRESS_FILE pointing at it, as the agent
# gives it to the jobs it runs itself (telemetry/agent/jobs.py). Other jobs get nothing.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

handoff_dir=${WATTFLOW_HANDOFF_DIR:-/var/lib/wattflow/handoff}
job_id=${SLURM_JOB_ID:-}
node=${SLURMD_NODENAME:-}
case $job_id in '' | *[!0-9]*) exit 0 ;; esac
case $node in '' | .* | */*) exit 0 ;; esac
progress=$handoff_dir/$node/$job_id.progress
if [ -f "$progress" ] && [ -w "$progress" ]; then
    echo "export WATTFLOW_PROGRESS_FILE=$progress"
fi
exit 0

#!/bin/sh
# Wattflow's Slurm Prolog: hand a starting Wattflow job to the node agent.
#
# slurmd runs it as root on each node of a job (slurm.conf: Prolog=/path/to/prolog.sh, with
# PrologFlags=Alloc so it runs on every node when the job is allocated). For a job whose
# SLURM_JOB_COMMENT starts with "wattflow" it writes
#     $WATTFLOW_HANDOFF_DIR/$SLURMD_NODENAME/$SLURM_JOB_ID.json
# ({"slurm_job_id", "slurm_job_gpus", "comment"}: telemetry/agent/slurm_handoff.py), through a
# temporary file and a rename so that the agent never reads half of it, and creates the job's
# progress file $SLURM_JOB_ID.progress beside it, owned by the job's user. The agent applies
# the comment's power limit or SM clock to the GPUs in SLURM_JOB_GPUS.
#
# It never fails a job: every path exits 0 (a non-zero Prolog would drain the node and requeue
# the job). Without a running agent the file just waits; the Epilog removes it.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
umask 022

handoff_dir=${WATTFLOW_HANDOFF_DIR:-/var/lib/wattflow/handoff}
comment=${SLURM_JOB_COMMENT:-}

case $comment in
    wattflow | "wattflow "*) ;;
    *) exit 0 ;;  # not Wattflow's job: nothing to do
esac

say() {
    echo "wattflow prolog: $*" >&2
    exit 0
}

job_id=${SLURM_JOB_ID:-}
case $job_id in
    '' | *[!0-9]*) say "SLURM_JOB_ID '$job_id' is not a job id; no handoff written" ;;
esac
node=${SLURMD_NODENAME:-$(hostname -s)}
case $node in
    '' | .* | */*) say "node name '$node' cannot name a directory; no handoff written" ;;
esac
gpus=${SLURM_JOB_GPUS:-}
case $gpus in
    *[!0-9,]*) say "SLURM_JOB_GPUS '$gpus' is not a list of GPU indices; no handoff written" ;;
esac

dir=$handoff_dir/$node
mkdir -p "$dir" 2>/dev/null || say "cannot create $dir; no handoff written"

# The job writes its iterations here (WATTFLOW_PROGRESS_FILE, set by task_prolog.sh). Emptied
# on each start: a count left by an earlier run counts at that run's batch.
progress=$dir/$job_id.progress
if : >"$progress" 2>/dev/null; then
    chmod 0644 "$progress"
    if [ -n "${SLURM_JOB_UID:-}" ]; then
        chown "$SLURM_JOB_UID" "$progress" 2>/dev/null ||
            echo "wattflow prolog: cannot give $progress to uid $SLURM_JOB_UID" >&2
    fi
else
    echo "wattflow prolog: cannot create $progress; the job's progress is not reported" >&2
fi

# JSON string: control characters dropped, backslash and double quote escaped.
json_comment=$(printf '%s' "$comment" | tr -d '\000-\037' | sed 's/\\/\\\\/g; s/"/\\"/g')
tmp=$dir/.$job_id.json.$$
if printf '{"slurm_job_id": "%s", "slurm_job_gpus": "%s", "comment": "%s"}\n' \
    "$job_id" "$gpus" "$json_comment" >"$tmp" 2>/dev/null &&
    mv -f "$tmp" "$dir/$job_id.json" 2>/dev/null; then
    exit 0
fi
rm -f "$tmp"
say "cannot write $dir/$job_id.json; the agent will not tune this job's GPUs"

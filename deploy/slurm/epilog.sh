#!/bin/sh
# Wattflow's Slurm Epilog: tell the node agent a job has ended (slurm.conf: Epilog=...).
#
# slurmd runs it as root on each node of a job when the job ends. It removes the files the
# Prolog (prolog.sh) wrote for this job, the handoff first: the agent sees the handoff go and
# puts the job's GPUs back to their default clocks and power limit. A job the Prolog wrote
# nothing for (not Wattflow's) has nothing to remove; the comment is not consulted, so a job
# whose comment was changed while it ran is still cleaned up.
#
# It never fails a job or drains a node: every path exits 0, with or without an agent.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH

handoff_dir=${WATTFLOW_HANDOFF_DIR:-/var/lib/wattflow/handoff}
job_id=${SLURM_JOB_ID:-}
case $job_id in
    '' | *[!0-9]*) exit 0 ;;
esac
node=${SLURMD_NODENAME:-$(hostname -s)}
case $node in
    '' | .* | */*) exit 0 ;;
esac
dir=$handoff_dir/$node
rm -f "$dir/$job_id.json" "$dir/.$job_id.json".* 2>/dev/null
rm -f "$dir/$job_id.progress" 2>/dev/null
exit 0

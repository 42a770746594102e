#!/usr/bin/env bash
# A private single-host Slurm for tests, benchmarks and the demo (issue 14).
#
#   scripts/slurm.sh up   [STATE_DIR]   install packages if missing, start everything (idempotent)
#   scripts/slurm.sh down [STATE_DIR]   stop everything this script started under STATE_DIR
#   scripts/slurm.sh env  [STATE_DIR]   print the environment the CLI and Wattflow need
#
# What runs, all state under STATE_DIR (default: var/slurm), all ports private (base port
# WATTFLOW_SLURM_PORT_BASE, default 16900): munged (reused if one already answers on the
# default socket), a private MariaDB (base+5), slurmdbd (base+1), slurmctld (base), one slurmd
# per node with 8 placeholder GPUs each, slurmrestd with JWT (base+4). The nodes are n1 and n2
# (base+2, base+3) unless WATTFLOW_SLURM_NODES names others ("node-01 node-02 node-03 node-04"
# for the demo: the 1st and 2nd on base+2 and base+3, the later ones on base+6, base+7, ...).
# Wattflow's Prolog, Epilog and TaskProlog (deploy/slurm/) are configured with the handoff
# directory STATE_DIR/handoff, which node agents in monitor mode read (--handoff-dir).
# No systemd unit is started or left enabled. Must run as root (it installs packages,
# makes device nodes and runs the daemons as root).
set -euo pipefail

cmd="${1:-}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="${2:-${WATTFLOW_SLURM_DIR:-$ROOT/var/slurm}}"
mkdir -p "$STATE"
STATE="$(cd "$STATE" && pwd)"
BASE="${WATTFLOW_SLURM_PORT_BASE:-16900}"
CTLD_PORT=$BASE DBD_PORT=$((BASE + 1)) REST_PORT=$((BASE + 4)) DB_PORT=$((BASE + 5))
read -r -a NODES <<<"$(echo "${WATTFLOW_SLURM_NODES:-n1 n2}" | tr ',' ' ')"
((${#NODES[@]} > 0)) || { echo "slurm.sh: WATTFLOW_SLURM_NODES names no node" >&2; exit 1; }
node_port() {  # node_port INDEX: n1/n2's ports stay base+2/base+3, later nodes skip base+4/5
    local k=$1
    if ((k < 2)); then echo $((BASE + 2 + k)); else echo $((BASE + 4 + k)); fi
}
NODE_LIST=$(IFS=,; echo "${NODES[*]}")
HANDOFF="$STATE/handoff"
# Unix sockets: slurmstepd listens in slurmd's spool on <spool>/<node>_<job id>.<step id> (a
# batch step id has 10 digits; allow 10 for the job id too), MariaDB on <run>/mysql.sock, and
# a socket path holds at most 107 bytes. Under a long state directory (a test's tmp_path) both
# move to a short directory of their own in /tmp, named after the state directory, which
# $STATE/spool and $STATE/sockets link to.
SOCKETS="$STATE"
longest_node=0
for n in "${NODES[@]}"; do ((${#n} > longest_node)) && longest_node=${#n}; done
if ((${#STATE} + 7 + longest_node + 1 + longest_node + 1 + 10 + 1 + 10 > 107 || ${#STATE} + 15 > 107)); then
    SOCKETS="/tmp/wattflow-slurm-$(printf '%s' "$STATE" | sha1sum | cut -c1-12)"
fi
SPOOL="$SOCKETS/spool"
MYSQL_SOCKET="$SOCKETS/run/mysql.sock"
HOST="$(hostname -s)"
GPUS_PER_NODE=8
PACKAGES=(slurmctld slurmd slurm-client slurmdbd slurmrestd slurm-wlm-jwt-plugin munge mariadb-server)
UNITS=(slurmctld slurmd slurmdbd slurmrestd munge mariadb)
export SLURM_CONF="$STATE/etc/slurm.conf"

say() { echo "slurm.sh: $*" >&2; }
die() { say "$*"; exit 1; }

pid_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

check_ports() {
    # A port answering while our daemon for it is not running belongs to someone else (another
    # checkout's Slurm on the same ports): talking to it would run and cancel their jobs.
    local pair
    local pairs=("slurmctld:$CTLD_PORT" "slurmdbd:$DBD_PORT" "slurmrestd:$REST_PORT" \
        "mariadb:$DB_PORT") k
    for k in "${!NODES[@]}"; do pairs+=("slurmd-${NODES[k]}:$(node_port "$k")"); done
    for pair in "${pairs[@]}"; do
        local name=${pair%%:*} port=${pair##*:}
        if ! pid_alive "$STATE/run/$name.pid" && port_taken "$port"; then
            die "port $port ($name) is taken by another process; set WATTFLOW_SLURM_PORT_BASE"
        fi
    done
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2; shift 2
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "$what did not come up in ${limit}s (logs: $STATE/log)"
        sleep 0.1
    done
}

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    # Exit status 3 means "cannot install": the test fixture skips (loudly) on it only.
    [[ $(id -u) -eq 0 ]] || { say "packages missing (${missing[*]}) and not root: cannot install"; exit 3; }
    say "installing ${missing[*]}"
    # Keep the packages' maintainer scripts from starting their services.
    local policy=/usr/sbin/policy-rc.d created=0
    if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created=1; fi
    local rc=0
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${missing[@]}"; } >"$STATE/apt.log" 2>&1 || rc=$?
    ((created)) && rm -f "$policy"
    ((rc == 0)) || { say "apt-get failed (rc $rc), see $STATE/apt.log"; exit 3; }
    disable_units
}

disable_units() {
    # The packages enable their units; nothing here should start at boot.
    for u in "${UNITS[@]}"; do
        rm -f "/etc/systemd/system/multi-user.target.wants/$u.service"
    done
    command -v systemctl >/dev/null && systemctl disable --quiet "${UNITS[@]}" >/dev/null 2>&1 || true
}

write_configs() {
    mkdir -p "$STATE"/{etc,log,run,state,dev,mysql,out}
    local etc="$STATE/etc" n k script
    for n in "${NODES[@]}"; do mkdir -p "$SPOOL/$n"; done
    mkdir -p "$SOCKETS/run"
    [[ $SOCKETS == "$STATE" ]] || { ln -sfn "$SPOOL" "$STATE/spool"; ln -sfn "$SOCKETS" "$STATE/sockets"; }
    # The handoff directory: root's, not writable by the jobs (docs/slurm-node.md).
    mkdir -p "$HANDOFF"
    chmod 0755 "$HANDOFF"
    # slurmd gives the Prolog a bare environment: small wrappers carry the handoff directory.
    for script in prolog epilog task_prolog; do
        printf '#!/bin/sh\nWATTFLOW_HANDOFF_DIR=%s\nexport WATTFLOW_HANDOFF_DIR\nexec /bin/sh %s\n' \
            "$HANDOFF" "$ROOT/deploy/slurm/$script.sh" >"$etc/$script.sh"
        chmod 0755 "$etc/$script.sh"
    done
    [[ -s $etc/jwt.key ]] || { head -c 32 /dev/urandom >"$etc/jwt.key"; chmod 0600 "$etc/jwt.key"; }
    # Placeholder character devices for the fake GPUs (NVIDIA's major number, 195).
    for n in "${NODES[@]}"; do
        mkdir -p "$STATE/dev/$n"
        for i in $(seq 0 $((GPUS_PER_NODE - 1))); do
            [[ -e $STATE/dev/$n/nvidia$i ]] || mknod "$STATE/dev/$n/nvidia$i" c 195 "$i"
        done
    done
    cat >"$etc/slurm.conf" <<EOF
ClusterName=wattflow
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$(node_port 0)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$etc/jwt.key
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=${WATTFLOW_SLURM_KILL_WAIT_S:-5}
MinJobAge=300
SchedulerParameters=sched_interval=1
MessageTimeout=10
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD_PORT
AccountingStoreFlags=job_comment
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
Prolog=$etc/prolog.sh
Epilog=$etc/epilog.sh
TaskProlog=$etc/task_prolog.sh
PrologFlags=Alloc
EOF
    for k in "${!NODES[@]}"; do
        echo "NodeName=${NODES[k]} NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$(node_port "$k")" \
            "CPUs=16 RealMemory=1000 Gres=gpu:$GPUS_PER_NODE State=UNKNOWN"
    done >>"$etc/slurm.conf"
    echo "PartitionName=gpu Nodes=$NODE_LIST Default=YES MaxTime=INFINITE State=UP" \
        "OverSubscribe=NO" >>"$etc/slurm.conf"
    {
        echo "AutoDetect=off"
        for n in "${NODES[@]}"; do
            echo "NodeName=$n Name=gpu File=$STATE/dev/$n/nvidia[0-$((GPUS_PER_NODE - 1))]"
        done
    } >"$etc/gres.conf"
    echo "CgroupPlugin=autodetect" >"$etc/cgroup.conf"
    cat >"$etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$etc/jwt.key
DbdHost=$HOST
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=root
StorageLoc=slurm_acct_db
EOF
    chmod 0600 "$etc/slurmdbd.conf"
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        return 0  # a munged already answers on the default socket (Slurm's CLI ignores others)
    fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
    [[ -s $STATE/etc/munge.key ]] || mungekey --create --keyfile="$STATE/etc/munge.key" >/dev/null
    chmod 0400 "$STATE/etc/munge.key"
    munged --force --key-file="$STATE/etc/munge.key" --pid-file="$STATE/run/munged.pid" \
        --log-file="$STATE/log/munged.log"
    wait_for 10 munged sh -c 'munge -n | unmunge'
}

start_mariadb() {
    pid_alive "$STATE/run/mariadb.pid" && return 0
    if [[ ! -d $STATE/mysql/mysql ]]; then
        mariadb-install-db --no-defaults --user=root --datadir="$STATE/mysql" \
            --auth-root-authentication-method=normal >"$STATE/log/mariadb-install.log" 2>&1
    fi
    mariadbd --no-defaults --user=root --datadir="$STATE/mysql" --port="$DB_PORT" \
        --bind-address=127.0.0.1 --socket="$MYSQL_SOCKET" \
        --pid-file="$STATE/run/mariadb.pid" --skip-name-resolve \
        --innodb-buffer-pool-size=64M --log-error="$STATE/log/mariadb.log" \
        >>"$STATE/log/mariadb.out" 2>&1 &
    disown
    wait_for 30 MariaDB mariadb --no-defaults -uroot -h127.0.0.1 -P"$DB_PORT" -e 'select 1'
}

start_daemons() {
    # slurmdbd reads slurmdbd.conf from the directory of SLURM_CONF.
    pid_alive "$STATE/run/slurmdbd.pid" || slurmdbd
    wait_for 30 slurmdbd sacctmgr -n list cluster
    if ! sacctmgr -n -P list cluster format=cluster | grep -qx wattflow; then
        sacctmgr -i add cluster wattflow >/dev/null
    fi
    if ! sacctmgr -n -P list account format=account | grep -qx wattflow; then
        sacctmgr -i add account wattflow Description=Wattflow Organization=wattflow >/dev/null
    fi
    # The executor's identity: a user with Operator rights, in the wattflow account.
    if ! sacctmgr -n -P list user format=user | grep -qx root; then
        sacctmgr -i add user root Account=wattflow AdminLevel=Operator >/dev/null
    else
        sacctmgr -i add user root Account=wattflow >/dev/null 2>&1 || true
    fi
    pid_alive "$STATE/run/slurmctld.pid" || slurmctld -f "$SLURM_CONF"
    wait_for 30 slurmctld scontrol ping
    for n in "${NODES[@]}"; do
        pid_alive "$STATE/run/slurmd-$n.pid" || slurmd -f "$SLURM_CONF" -N "$n"
    done
    wait_for 30 "nodes $NODE_LIST" sh -c \
        "sinfo -h -N -o '%N %t' | grep -Ev 'unk|down|drain|\\*' | wc -l | grep -qx ${#NODES[@]}"
    if ! pid_alive "$STATE/run/slurmrestd.pid"; then
        SLURM_JWT=daemon SLURMRESTD_SECURITY=disable_user_check \
            slurmrestd -f "$SLURM_CONF" -a rest_auth/jwt "127.0.0.1:$REST_PORT" \
            >"$STATE/log/slurmrestd.log" 2>&1 &
        echo $! >"$STATE/run/slurmrestd.pid"
        disown
    fi
    wait_for 15 slurmrestd bash -c "exec 3<>/dev/tcp/127.0.0.1/$REST_PORT"
}

print_env() {
    echo "SLURM_CONF=$SLURM_CONF"
    echo "WATTFLOW_SLURM_CONF=$SLURM_CONF"
    echo "WATTFLOW_SLURM_REST_URL=http://127.0.0.1:$REST_PORT"
    echo "WATTFLOW_SLURM_OUTPUT_DIR=$STATE/out"
    echo "WATTFLOW_SLURM_PARTITION=gpu"
    echo "WATTFLOW_SLURM_ACCOUNT=wattflow"
    echo "WATTFLOW_HANDOFF_DIR=$HANDOFF"
}

stop_pidfiles() {  # stop_pidfiles FILE...: TERM to all at once, KILL what is left after 10 s
    local pids=() f
    for f in "$@"; do
        pid_alive "$f" && pids+=("$(cat "$f")") && kill "${pids[-1]}" 2>/dev/null
    done
    for _ in $(seq 100); do
        local alive=0 p
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        ((alive)) || break
        sleep 0.1
    done
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && kill -9 "$p" 2>/dev/null; done
    rm -f "$@"
}

case "$cmd" in
up)
    [[ $(id -u) -eq 0 ]] || { say "run as root (daemons, device nodes and packages need it)"; exit 3; }
    t0=$SECONDS
    install_packages
    disable_units
    check_ports
    write_configs
    start_munge
    start_mariadb
    start_daemons
    say "up in $((SECONDS - t0))s: state $STATE, slurmctld :$CTLD_PORT, slurmrestd :$REST_PORT"
    print_env
    ;;
down)
    # Jobs first, so no slurmstepd (and its job) outlives the slurmd that started it.
    if pid_alive "$STATE/run/slurmctld.pid"; then
        scancel --full --partition=gpu >/dev/null 2>&1 || true
        for _ in $(seq 100); do
            [[ -z $(squeue -h 2>/dev/null) ]] && break
            sleep 0.1
        done
    fi
    # every node's slurmd this state dir ran, whatever WATTFLOW_SLURM_NODES says now
    stop_pidfiles "$STATE"/run/slurmrestd.pid "$STATE"/run/slurmd-*.pid "$STATE"/run/slurmctld.pid
    # then what they report to; munged only when this script started it (else no pid file)
    stop_pidfiles "$STATE"/run/{slurmdbd,mariadb,munged}.pid
    # a short spool of its own (see SPOOL above) goes with it
    [[ $SOCKETS == "$STATE" ]] || rm -rf -- "$SOCKETS" "$STATE/spool" "$STATE/sockets"
    say "down: $STATE"
    ;;
env)
    print_env
    ;;
*)
    die "usage: scripts/slurm.sh up|down|env [STATE_DIR]"
    ;;
esac

#!/usr/bin/env bash
# Idempotent set-up shared by `make run` and `make test`:
#   virtualenv + pinned requirements, PostgreSQL and Redis reachable (as root on Debian they are
#   installed when missing, and a PostgreSQL cluster is created on the configured port when none
#   serves it), the database created, migrations applied; with --test also a chromium for the
#   browser tests. Safe to run again and again: every step checks before it acts.
set -euo pipefail

cd "$(dirname "$0")/.."
WITH_TEST=0
[[ "${1:-}" == "--test" ]] && WITH_TEST=1

say() { echo "wattflow: $*"; }
die() { echo "wattflow: $*" >&2; exit 1; }

# --- 1. virtualenv -------------------------------------------------------------------------
PYTHON_BIN="${PYTHON_BIN:-python3.11}"
command -v "$PYTHON_BIN" >/dev/null || PYTHON_BIN=python3
if [[ ! -x .venv/bin/python ]]; then
    say "creating .venv with $PYTHON_BIN"
    "$PYTHON_BIN" -m venv .venv
fi
STAMP=.venv/.requirements-stamp
if [[ ! -f $STAMP || requirements.txt -nt $STAMP || requirements-dev.txt -nt $STAMP ]]; then
    say "installing requirements-dev.txt into .venv"
    .venv/bin/python -m pip install --quiet -r requirements-dev.txt
    touch "$STAMP"
fi
PY=.venv/bin/python

# --- 2. PostgreSQL and Redis ----------------------------------------------------------------
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/wattflow}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
read -r PG_HOST PG_PORT REDIS_HOST REDIS_PORT < <($PY scripts/service_addresses.py)

reachable() { $PY scripts/service_addresses.py --probe "$1" "$2"; }
is_local() { [[ "$1" == "127.0.0.1" || "$1" == "localhost" || "$1" == "::1" ]]; }
wait_for() {  # host port seconds
    for _ in $(seq 1 "$3"); do reachable "$1" "$2" && return 0; sleep 1; done
    return 1
}
COMPOSE_HINT="or start it with: docker compose -f docker/compose.yml up -d postgres redis"

APT_UPDATED=0
apt_install() {  # packages...: install from Debian's archive when we are root with apt-get
    [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null || return 1
    if [[ $APT_UPDATED == 0 ]]; then apt-get update -qq; APT_UPDATED=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# The local PostgreSQL cluster that listens on port $1 ("VERSION NAME"), if there is one.
cluster_on_port() {
    pg_lsclusters --no-header 2>/dev/null | awk -v port="$1" '$3 == port {print $1, $2; exit}'
}

start_local_postgres() {
    if ! command -v pg_ctlcluster >/dev/null; then
        say "installing PostgreSQL from Debian's archive"
        apt_install postgresql postgresql-contrib \
            || die "PostgreSQL is not reachable at $PG_HOST:$PG_PORT and cannot be installed here (needs root and apt-get; $COMPOSE_HINT)"
    fi
    local cluster version name
    cluster="$(cluster_on_port "$PG_PORT")"
    if [[ -z $cluster ]]; then
        # No cluster serves the configured port (a fresh install's `main` may listen on
        # another): create one there, trusting local connections as the README's URLs expect.
        version="$(ls /usr/lib/postgresql | sort -V | tail -n1)"
        name="wattflow${PG_PORT}"
        say "creating PostgreSQL $version cluster $name on port $PG_PORT"
        pg_createcluster --port "$PG_PORT" "$version" "$name" -- --auth=trust >/dev/null
        cluster="$version $name"
    fi
    read -r version name <<<"$cluster"
    say "starting local PostgreSQL $version/$name on port $PG_PORT"
    pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start || true
    wait_for "$PG_HOST" "$PG_PORT" 30 || die "PostgreSQL did not come up on $PG_HOST:$PG_PORT; $COMPOSE_HINT"
}

start_local_redis() {
    if ! command -v redis-server >/dev/null; then
        say "installing Redis from Debian's archive"
        apt_install redis-server \
            || die "Redis is not reachable at $REDIS_HOST:$REDIS_PORT and cannot be installed here (needs root and apt-get; $COMPOSE_HINT)"
    fi
    say "starting local Redis on port $REDIS_PORT"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no >/dev/null
    wait_for "$REDIS_HOST" "$REDIS_PORT" 15 || die "Redis did not come up on $REDIS_HOST:$REDIS_PORT; $COMPOSE_HINT"
}

if ! reachable "$PG_HOST" "$PG_PORT"; then
    is_local "$PG_HOST" || die "PostgreSQL is not reachable at $PG_HOST:$PG_PORT (DATABASE_URL)"
    start_local_postgres
fi
if ! reachable "$REDIS_HOST" "$REDIS_PORT"; then
    is_local "$REDIS_HOST" || die "Redis is not reachable at $REDIS_HOST:$REDIS_PORT (REDIS_URL)"
    start_local_redis
fi

# --- 3. database and schema ------------------------------------------------------------------
$PY scripts/service_addresses.py --create-database
$PY manage.py migrate --no-input -v 0
$PY manage.py merge_workload_spellings >/dev/null
say "database migrated"

# --- 4. test extras ----------------------------------------------------------------------------
if [[ $WITH_TEST == 1 && ! -x /usr/bin/chromium ]]; then
    say "installing Debian's chromium for the browser tests"
    apt_install chromium || die "chromium is missing and cannot be installed here (needs root and apt-get)"
fi
if [[ $WITH_TEST == 1 ]] && ! command -v prometheus >/dev/null; then
    # The /metrics test is scraped by a real Prometheus; without one it skips, loudly.
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        say "installing Debian's prometheus for the /metrics scrape test"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; } \
            || say "prometheus could not be installed: the scrape test will skip"
    else
        say "prometheus is missing (needs root and apt-get): the scrape test will skip"
    fi
fi

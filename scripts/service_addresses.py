"""Small helpers for scripts/bootstrap.sh, kept in Python to parse URLs properly.

- no argument: print "PG_HOST PG_PORT REDIS_HOST REDIS_PORT" from DATABASE_URL and REDIS_URL
- ``--probe HOST PORT``: exit 0 when a TCP connection succeeds within 1 s
- ``--create-database``: create DATABASE_URL's database when it does not exist
"""

import os
import socket
import sys
from urllib.parse import unquote, urlparse


def _addresses() -> tuple[str, int, str, int]:
    db = urlparse(os.environ["DATABASE_URL"])
    redis = urlparse(os.environ["REDIS_URL"])
    return (
        db.hostname or "127.0.0.1",
        db.port or 5432,
        redis.hostname or "127.0.0.1",
        (redis.port or 6379),
    )


def _probe(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _create_database() -> None:
    import psycopg
    from psycopg import sql

    db = urlparse(os.environ["DATABASE_URL"])
    name = unquote(db.path.lstrip("/"))
    if not name:
        raise SystemExit("wattflow: DATABASE_URL names no database")
    conninfo = {
        "host": db.hostname or "127.0.0.1",
        "port": db.port or 5432,
        "user": unquote(db.username or "postgres"),
        "dbname": "postgres",
    }
    if db.password:
        conninfo["password"] = unquote(db.password)
    with psycopg.connect(**conninfo, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            sys.stdout.write(f"wattflow: created database {name}\n")


def main(argv: list[str]) -> int:
    if not argv:
        sys.stdout.write("{} {} {} {}\n".format(*_addresses()))
        return 0
    if argv[0] == "--probe":
        return 0 if _probe(argv[1], int(argv[2])) else 1
    if argv[0] == "--create-database":
        _create_database()
        return 0
    sys.stderr.write(f"wattflow: unknown option {argv[0]}\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

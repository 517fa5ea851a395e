"""Fresh throwaway databases for the benchmarks (created and dropped by us only)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from urllib.parse import urlsplit

import pyqueue_sql
from pyqueue_sql import dialects

ADMIN = {
    "postgresql": os.environ.get("BENCH_POSTGRESQL_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mysql": os.environ.get("BENCH_MYSQL_DSN", "mysql://root@127.0.0.1:3306/"),
}


def _replace_db(admin: str, name: str) -> str:
    scheme, _, rest = admin.partition("://")
    hostpart, _, _ = rest.partition("/")
    return f"{scheme}://{hostpart}/{name}"


def create(dialect: str, tag: str) -> str:
    """Creates an empty database named pyqueue_bench_<tag>_<random>; returns its DSN."""
    name = f"pyqueue_bench_{tag}_{uuid.uuid4().hex[:8]}"
    admin = ADMIN[dialect]
    d = dialects.for_name(dialect)
    conn = d.connect(admin)
    try:
        cur = conn.cursor()
        if dialect == "postgresql":
            cur.execute(f'CREATE DATABASE "{name}"')
        else:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    finally:
        conn.close()
    return _replace_db(admin, name)


def drop(dialect: str, dsn: str) -> None:
    name = dsn.rsplit("/", 1)[1]
    assert name.startswith("pyqueue_bench_"), name
    d = dialects.for_name(dialect)
    conn = d.connect(ADMIN[dialect])
    try:
        cur = conn.cursor()
        if dialect == "postgresql":
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            # as PostgreSQL's WITH (FORCE): end the sessions still in it (a bench client cut
            # short leaves its statement running, and the DROP would wait for it)
            cur.execute("SELECT id FROM information_schema.processlist WHERE db = %s", (name,))
            for (session,) in cur.fetchall():
                try:
                    cur.execute(f"KILL {int(session)}")
                except Exception:  # it ended meanwhile
                    pass
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


def exit_on_sigterm() -> None:
    """SIGTERM (timeout, kill) exits through the finally blocks, so the databases are dropped."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def raw_connect(dialect: str, dsn: str, autocommit: bool = True):
    return dialects.for_name(dialect).connect(dsn, autocommit=autocommit)


def execute(dialect: str, dsn: str, *statements: str) -> list:
    """Runs statements in autocommit; returns the last one's rows."""
    conn = raw_connect(dialect, dsn)
    try:
        rows: list = []
        for sql in statements:
            cur = conn.cursor()
            cur.execute(sql)
            rows = list(cur.fetchall()) if cur.description else []
            cur.close()
        return rows
    finally:
        conn.close()


def install_pyqueue(dsn: str) -> None:
    from pyqueue_sql import migrate

    migrate.upgrade(dsn)


def install_commit(dialect: str, dsn: str, commit: str) -> None:
    """Installs the schema and routines of a git commit (its sql/<dialect>/schema.sql and
    routines.sql) with the server's own client, psql or mariadb/mysql, as `pyqueue-sql sql`
    output is installed: a change to the baseline measured against the baseline before it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    folder = "postgresql" if dialect == "postgresql" else "mysql"
    script = "".join(
        subprocess.run(
            ["git", "show", f"{commit}:sql/{folder}/{name}.sql"],
            cwd=root,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for name in ("schema", "routines")
    )
    url = urlsplit(dsn)
    if dialect == "postgresql":
        cmd = ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", dsn]
    else:
        client = shutil.which("mariadb") or "mysql"
        cmd = [client, "-h", url.hostname or "127.0.0.1", "-P", str(url.port or 3306)]
        cmd += ["-u", url.username or "root", url.path.lstrip("/")]
        if url.password:
            cmd.insert(1, f"-p{url.password}")
    subprocess.run(cmd, input=script, check=True, text=True, capture_output=True)


__all__ = [
    "create",
    "drop",
    "execute",
    "exit_on_sigterm",
    "install_commit",
    "install_pyqueue",
    "raw_connect",
    "pyqueue_sql",
]

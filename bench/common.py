"""What the suites share: the servers (ADMIN), fresh databases, a commit's sql/, the server's CPU, reports."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pyqueue_sql
from pyqueue_sql import dialects

ADMIN = {
    "postgresql": os.environ.get("BENCH_POSTGRESQL_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mysql": os.environ.get("BENCH_MYSQL_DSN", "mysql://root@127.0.0.1:3306/"),
}


def create(dialect: str, tag: str) -> str:
    """Creates an empty database named pyqueue_bench_<tag>_<random>; returns its DSN."""
    name = f"pyqueue_bench_{tag}_{uuid.uuid4().hex[:8]}"
    pg = dialect == "postgresql"
    execute(dialect, ADMIN[dialect], f'CREATE DATABASE "{name}"' if pg else f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")  # fmt: skip
    scheme, _, rest = ADMIN[dialect].partition("://")
    return f"{scheme}://{rest.partition('/')[0]}/{name}"


@contextlib.contextmanager
def database(dialect: str, tag: str, queue: str | None = None, install: bool = True, **options):
    """A fresh database for the with block, pyqueue-sql and the queue in it unless not install; dropped after."""
    dsn = create(dialect, tag)
    try:
        if install:
            install_pyqueue(dsn, queue, **options)
        yield dsn
    finally:
        drop(dialect, dsn)


def drop(dialect: str, dsn: str) -> None:
    name = dsn.rsplit("/", 1)[1]
    assert name.startswith("pyqueue_bench_"), name
    with contextlib.closing(raw_connect(dialect, ADMIN[dialect])) as conn:
        cur = conn.cursor()
        if dialect == "postgresql":
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            # as WITH (FORCE): end its sessions (a client cut short leaves a statement the DROP waits for)
            cur.execute("SELECT id FROM information_schema.processlist WHERE db = %s", (name,))
            for (session,) in cur.fetchall():
                with contextlib.suppress(Exception):  # it ended meanwhile
                    cur.execute(f"KILL {int(session)}")
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def command() -> str:
    """This run's command line as typed (python -m bench SUITE ...; runpy puts a path in sys.argv[0])."""
    return os.environ.get("BENCH_COMMAND") or " ".join(sys.argv)


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def exit_on_sigterm() -> None:
    """SIGTERM (timeout, kill) exits through the finally blocks, so the databases are dropped."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def raw_connect(dialect: str, dsn: str, autocommit: bool = True):
    return dialects.for_name(dialect).connect(dsn, autocommit=autocommit)


def query(conn, sql: str, params: tuple | None = None) -> list:
    """One statement's rows ([] when it has none); without params sent as it is (a literal % stays)."""
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        cur.close()


def execute(dialect: str, dsn: str, *statements: str) -> list:
    """Runs statements in autocommit; returns the last one's rows."""
    with contextlib.closing(raw_connect(dialect, dsn)) as conn:
        return [query(conn, sql) for sql in statements][-1] if statements else []


def settings(dialect: str, dsn: str, *names: str) -> dict[str, str]:
    """The server's settings of these names it has (pg_settings; MySQL/MariaDB: SHOW VARIABLES)."""
    marks = ", ".join(f"'{name}'" for name in names)
    pg = dialect == "postgresql"
    sql = "SELECT name, setting FROM pg_settings WHERE name" if pg else "SHOW VARIABLES WHERE Variable_name"
    return {str(k): str(v) for k, v in execute(dialect, dsn, f"{sql} IN ({marks})")}


def install_pyqueue(dsn: str, queue: str | None = None, **options) -> None:
    """`pyqueue-sql migrate` and the queue (the migrator imported here: ~0.5 s of CPU the workers skip)."""
    importlib.import_module("pyqueue_sql.migrate").upgrade(dsn)
    if queue:
        with pyqueue_sql.connect(dsn) as db:
            db.queue(queue).create(**options)


def install_pgmq(dsn: str, queue: str) -> None:
    """pgmq from the SQL its PyPI package ships (pgmq.install: no extension needed), and a queue."""
    from pgmq.install import install_pgmq_from_sql

    install_pgmq_from_sql(dsn=dsn)
    execute("postgresql", dsn, f"SELECT pgmq.create('{queue}')")


def install_commit(dialect: str, dsn: str, commit: str) -> None:
    """A git commit's sql/<dialect>/schema.sql and routines/ installed by psql or mariadb (an A/B)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=check)

    # routines/ holds one file per topic, run in name order (a commit before it: routines.sql)
    listing = git("ls-tree", "--name-only", f"{commit}:sql/{dialect}/routines", check=False)
    routines = ["routines.sql"]
    if listing.returncode == 0:
        routines = [f"routines/{name}" for name in sorted(listing.stdout.split()) if name.endswith(".sql")]
    script = "".join(
        git("show", f"{commit}:sql/{dialect}/{name}").stdout for name in ["schema.sql", *routines]
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


# ---- the server's CPU, read from /proc when the server runs on this machine ----


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _seconds(fields: list[str], children: bool = False) -> float:
    """utime + stime (with children, also the reaped children's cutime + cstime), in seconds."""
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int | None, tid: int | None = None) -> float | None:
    """Seconds of CPU a live process (or only its thread tid) has used so far; None: gone or not known."""
    fields = _stat(pid if tid is None else f"{pid}/task/{tid}") if pid is not None else None
    return _seconds(fields) if fields else None


def session_id(dialect: str, conn) -> int:
    """The server's process (PostgreSQL: the backend) or thread (MariaDB: PROCESSLIST.TID, one a
    connection) of a session, whose CPU /proc shows; MariaDB's read committed after it."""
    if dialect == "postgresql":
        return int(query(conn, "SELECT pg_backend_pid()")[0][0])
    tid = int(query(conn, "SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()")[0][0])
    conn.commit()
    return tid


def sessions_cpu(cur, strict: bool = False) -> dict[int, float] | None:
    """PostgreSQL: the CPU seconds of each other backend of the database (strict: None unless all are read)."""
    cur.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    seconds = {pid: process_cpu(pid) for (pid,) in cur.fetchall()}
    return (
        None if strict and None in seconds.values() else {p: s for p, s in seconds.items() if s is not None}
    )


def own_cpu(children: bool = False) -> float:
    """Seconds of CPU this process has used (getrusage), or with children its reaped children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def server_pid(dialect: str, dsn: str) -> int | None:
    """The server's process on this machine (PostgreSQL: the postmaster), or None (elsewhere, unknown)."""
    try:
        with contextlib.closing(raw_connect(dialect, dsn)) as conn:
            if dialect == "postgresql":  # the backend's parent, read while the connection keeps it alive
                fields = _stat(int(query(conn, "SELECT pg_backend_pid()")[0][0]))
                pid, names = int(fields[1]) if fields else 0, ("postgres",)
            else:
                pid = int(Path(str(query(conn, "SELECT @@pid_file")[0][0])).read_text().split()[0])
                names = ("mariadbd", "mysqld")
            return pid if Path(f"/proc/{pid}/comm").read_text().strip() in names else None
    except (OSError, ValueError, IndexError):
        return None


def server_cpu(dialect: str, pid: int | None) -> float | None:
    """The server's CPU seconds so far (PostgreSQL: the postmaster and its children; all it did), or None."""
    own = _stat(pid) if pid is not None else None
    if own is None:
        return None
    if dialect != "postgresql":
        return _seconds(own)
    total = _seconds(own, children=True)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(entry)  # (None: it ended meanwhile, and its time is in the reaped children)
            if fields is not None and int(fields[1]) == pid:
                total += _seconds(fields)
    return total


# ---- reports ----


def table(header: list[str] | tuple[str, ...], rows, right: str = "") -> list[str]:
    """A markdown table's lines; `right` holds one letter a column, "r" for a right-aligned one."""
    rule = ["---:" if right[i : i + 1] == "r" else "---" for i in range(len(header))]
    return [f"| {' | '.join(map(str, r))} |" for r in (header, rule, *rows)]


def write(out: str, name: str, markdown: str, data: object, tag: str | None = None) -> None:
    """<out>/<name>.md and .json; with a tag (the suite's prefix, or ""), the markdown on stdout too."""
    os.makedirs(out, exist_ok=True)
    Path(out, f"{name}.md").write_text(markdown)
    Path(out, f"{name}.json").write_text(json.dumps(data, indent=1, default=str))
    if tag is not None:
        print(f"\n{markdown}\n{tag}wrote {out}/{name}.md and {name}.json", flush=True)


def now_utc(fmt: str = "%Y-%m-%dT%H:%M:%SZ") -> str:
    """The time a run started, for its report and its file name: 2026-11-27T00:30:00Z (or fmt)."""
    return dt.datetime.now(dt.timezone.utc).strftime(fmt)


def spread(values, fmt: str = ".2f", empty: str = "") -> str:
    """median (min-max) of the values present (None left out); whole numbers as they are."""
    xs = [v for v in values if v is not None]
    if not xs:
        return empty
    if all(isinstance(v, int) for v in xs):
        return f"{statistics.median(xs):g} ({min(xs)}-{max(xs)})"
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}-{max(xs):{fmt}})"


def rotated(items, k: int) -> list:
    """items (any iterable) started at the k-th: the order of round k, so that no system is always first."""
    items = list(items)
    k %= max(1, len(items))
    return items[k:] + items[:k]


def parser(doc: str, *options: tuple) -> argparse.ArgumentParser:
    """A suite's command line: (flags, default, help) an option, of the default's type (False: a switch;
    None: a string; a tuple: the choices)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flags, default, text in options:
        if default is False:
            ap.add_argument(*flags.split(), action="store_true", help=text)
        elif isinstance(default, tuple):
            ap.add_argument(*flags.split(), choices=default, default=default[0], help=text)
        else:
            kind = type(default) if default is not None else str
            ap.add_argument(*flags.split(), type=kind, default=default, help=text)
    return ap


def names(text: str | None, known=(), ap: argparse.ArgumentParser | None = None, what: str = "") -> list[str]:
    """A comma-separated option's names; with known, the parser's error names those not in it."""
    out = [x.strip() for x in (text or "").split(",") if x.strip()]
    if ap is not None and set(out) - set(known):
        ap.error(f"unknown {what} {sorted(set(out) - set(known))}; known: {', '.join(known)}")
    return out


def chunks(n: int, size: int = 1000, start: int = 0):
    """The numbers start .. start + n - 1 in ranges of size (a bulk enqueue's calls)."""
    return (range(i, min(start + n, i + size)) for i in range(start, start + n, size))


# burndown.py --features: what each sets on the queue, chosen not to bind the worker (a limit above its handlers,
# a rate above its drain; limit8, rate500, groups1 bind it), or what the messages carry (groups, priorities).
FEATURES = {
    "plain": lambda q: None,
    "limit": lambda q: q.set_limit("noop", 64),
    "rate": lambda q: q.set_rate(None, 10000, 0.1),
    "groups": lambda q: q.set_group_limit(None, 8),
    "history": lambda q: q.create(history_retention=3600),
    "results": lambda q: q.set_result_retention(3600),
    "priorities": lambda q: None,
    "limit8": lambda q: q.set_limit("noop", 8),
    "rate500": lambda q: q.set_rate(None, 500, 1.0),
    "groups1": lambda q: q.set_group_limit(None, 1),
}
FEATURES_SAID = {
    "limit": '`set_limit("noop", 64)`',
    "rate": "`set_rate(None, 10000, 0.1)`",
    "groups": "200 FIFO groups, `set_group_limit(None, 8)`",
    "history": "history kept an hour",
    "results": "results kept an hour",
    "priorities": "ten priorities",
    "limit8": '`set_limit("noop", 8)`, binding',
    "rate500": "`set_rate(None, 500, 1.0)`, binding",
    "groups1": "200 FIFO groups, `set_group_limit(None, 1)`, binding",
}


def push_jobs(dsn: str, jobs: int, queue: str, start: int = 0, feature: str = "plain") -> None:
    """A backlog of no-op jobs (kind noop, payload {"n": i}), 1,000 a call (groups: 200; priorities: ten)."""
    extra = {"groups": lambda i: {"group": f"g{i % 200}"}, "priorities": lambda i: {"priority": i % 10}}
    with pyqueue_sql.connect(dsn) as db:
        for numbers in chunks(jobs, start=start):
            if how := extra.get(feature.rstrip("1")):  # groups1: the same 200 groups
                db.queue(queue).push_many(
                    [dict(key=f"j{i:09d}", kind="noop", payload={"n": i}, **how(i)) for i in numbers]
                )
            else:
                db.queue(queue).push_many([(f"j{i:09d}", "noop", {"n": i}) for i in numbers])

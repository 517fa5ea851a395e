"""What `pyqueue-sql migrate` costs a live fleet while it crosses a revision, on a queue table of N
live messages: the figures of docs/operations.md ("Upgrading").

    python scripts/measure_upgrade_lock.py mysql://root@127.0.0.1:3306/mysql [--rows 1000000]
    python scripts/measure_upgrade_lock.py DSN --revision nullable-column   # also PostgreSQL

Default (MySQL/MariaDB), 0002_installed -> 0003_ready_order, the first table change after 0.1.0:
in a database of its own (made from the server DSN given, dropped at the end), installs
0002_installed with the routines of the newest release (RELEASES: what runs while you upgrade, read
from git), writes N live messages into pyqueue_message (one INSERT ... SELECT, not through the
routines), of which --reserved hold a lease (as a claim leaves them: a token and scheduled_at an
hour ahead), then runs head's migrate while a producer pushes into another queue and a consumer
reserves and commits from it, both through the release's own statements (its queries.sql). Prints
the migrate's duration and each step's, and the longest push and reserve that overlapped it.

--revision nullable-column: head's schema, then one more revision adding a NULLable column to
pyqueue_message (the typical expand step), with a producer only (the figures measured before
0003_ready_order existed)."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pyqueue_sql
from pyqueue_sql import dialects, migrate
from pyqueue_sql.queries import parse_named

ROOT = Path(__file__).resolve().parents[1]

REVISION = """
from pyqueue_sql.migrate import run_routines, run_sql_file

revision = "9999_measure_nullable_column"
down_revision = {down!r}
branch_labels = None
depends_on = None


def upgrade():
    run_sql_file("9999_measure.up.sql", folder={folder!r})
    run_routines()


def downgrade():
    pass
"""
ADD_COLUMN = {
    "postgresql": "ALTER TABLE pyqueue_message ADD COLUMN measure_note text NULL;\n",
    "mysql": "ALTER TABLE pyqueue_message ADD COLUMN measure_note TEXT NULL, ALGORITHM=INSTANT;\n",
}
FILL = {
    "postgresql": """INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, scheduled_at,
                        scheduled_at_initially, created_at)
                     SELECT 'big', 'k' || g, 'job', '{"n": 1}', now(), now(), now()
                       FROM generate_series(1, %(rows)s) g""",
    "mysql": """INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, scheduled_at,
                   scheduled_at_initially, created_at)
                SELECT 'big', CONCAT('k', seq), 'job', '{"n": 1}', NOW(6), NOW(6), NOW(6)
                  FROM seq_1_to_{rows}""",
}
# The first --reserved messages leased as a claim leaves them (MySQL/MariaDB).
LEASE = """UPDATE pyqueue_message
              SET reserve_token = UUID(), reserved_by = 'measure', attempts = 1,
                  scheduled_at = NOW(6) + INTERVAL 1 HOUR
            WHERE queue_name = 'big' ORDER BY id LIMIT {n}"""


def sql(dsn: str, statement: str, params: dict | None = None) -> list[tuple]:
    connection = dialects.for_dsn(dsn).connect(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute(statement, params)
        rows = list(cursor.fetchall()) if cursor.description else []
        connection.commit()
        return rows
    finally:
        connection.close()


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def released() -> tuple[str, str]:
    """The newest release's version and commit (RELEASES)."""
    lines = [line.split() for line in (ROOT / "RELEASES").read_text().splitlines()]
    version, commit, _date = [parts for parts in lines if parts and not parts[0].startswith("#")][-1]
    return version, commit


def released_routines(commit: str, dialect: str) -> str:
    folder = f"sql/{dialect}/routines"
    names = sorted(
        n for n in _git("ls-tree", "--name-only", f"{commit}:{folder}").split() if n.endswith(".sql")
    )
    return "\n".join(_git("show", f"{commit}:{folder}/{name}").rstrip("\n") + "\n" for name in names)


def released_queries(commit: str, dialect: str) -> dict[str, str]:
    return parse_named(_git("show", f"{commit}:sql/{dialect}/queries.sql"))


class Timed:
    """Calls of one kind, each (start, duration)."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []
        self.errors: list[str] = []

    def during(self, t0: float, t1: float) -> list[float]:
        return [d for t, d in self.calls if t <= t1 and t + d >= t0]

    def before(self, t0: float) -> list[float]:
        return sorted(d for t, d in self.calls if t + d < t0)


def fleet(dsn: str, queries: dict[str, str], stop: threading.Event) -> dict[str, Timed]:
    """A producer (a push every 5 ms) and a consumer (a reserve, then a commit of what it got, every
    5 ms) on the queue 'probe', each on its own connection, sending the release's statements."""
    timed = {"push": Timed(), "reserve": Timed(), "commit": Timed()}

    def loop(role: str) -> None:
        connection = dialects.for_dsn(dsn).connect(dsn)
        cursor, n = connection.cursor(), 0
        try:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    if role == "producer":
                        cursor.execute(
                            queries["push"],
                            {
                                "queue": "probe",
                                "key": f"p{n}",
                                "kind": "probe",
                                "payload": "{}",
                                "run_at": None,
                                "priority": None,
                            },
                        )
                        cursor.fetchall()
                        timed["push"].calls.append((t0, time.monotonic() - t0))
                    else:
                        cursor.execute(
                            queries["reserve"],
                            {"queue": "probe", "worker": "measure", "timeout": 60, "n": 1, "kinds": None},
                        )
                        names = [d[0] for d in cursor.description or ()]
                        rows = [dict(zip(names, row)) for row in cursor.fetchall()]
                        if rows and not {"key", "p_key"} & set(rows[0]):
                            raise RuntimeError(f"queue_reserve's columns: {names}")
                        while cursor.nextset():
                            pass
                        timed["reserve"].calls.append((t0, time.monotonic() - t0))
                        for row in rows:
                            t1 = time.monotonic()
                            cursor.execute(
                                queries["commit"],
                                {
                                    "queue": "probe",
                                    "key": row.get("p_key", row.get("key")),
                                    "kind": row.get("p_kind", row.get("kind")),
                                    "token": row.get("token", row.get("reserve_token")),
                                },
                            )
                            cursor.fetchall()
                            timed["commit"].calls.append((t1, time.monotonic() - t1))
                    while cursor.nextset():
                        pass
                    connection.commit()
                except Exception as exc:  # reported at the end: a failed call is a finding
                    timed["push" if role == "producer" else "reserve"].errors.append(
                        f"{type(exc).__name__}: {exc}"
                    )
                    connection.rollback()
                n += 1
                time.sleep(0.005)
        finally:
            connection.close()

    threads = [threading.Thread(target=loop, args=(role,), daemon=True) for role in ("producer", "consumer")]
    for thread in threads:
        thread.start()
    timed["threads"] = threads  # type: ignore[assignment]
    return timed


class StepTimes(logging.Handler):
    """When migrate started each step (its log line 'pyqueue-sql: <step>')."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.steps.append((time.monotonic(), record.getMessage().removeprefix("pyqueue-sql: ")))


def ms(seconds: list[float]) -> str:
    return f"{max(seconds) * 1000:.0f} ms" if seconds else "-"


def measure_ready_order(dsn: str, rows: int, reserved: int) -> None:
    version, commit = released()
    dialect = dialects.for_dsn(dsn)
    routines, queries = released_routines(commit, dialect.name), released_queries(commit, dialect.name)
    head_routines = migrate.routines_script
    migrate.routines_script = lambda name, replace_in_place=False: (
        migrate._DROP_THEN_CREATE.sub(r"\3CREATE OR REPLACE \1 \2(", routines)
        if replace_in_place
        else routines
    )
    try:
        migrate.upgrade(dsn, "0002_installed")
    finally:
        migrate.routines_script = head_routines
    for queue in ("big", "probe"):
        sql(
            dsn,
            queries["create"],
            {
                "queue": queue,
                "visibility_timeout": None,
                "max_attempts": None,
                "dead_letter_queue": None,
                "history_retention": None,
            },
        )
    started = time.monotonic()
    sql(dsn, FILL[dialect.name].replace("{rows}", str(rows)))
    sql(dsn, LEASE.format(n=int(reserved)))
    print(
        f"{dialect.name}: 0002_installed with {version}'s routines; {rows} live messages ({reserved} leased) "
        f"written in {time.monotonic() - started:.1f} s"
    )
    stop = threading.Event()
    timed = fleet(dsn, queries, stop)
    steps = StepTimes()
    logger = logging.getLogger("pyqueue_sql.migrate")
    logger.addHandler(steps)
    logger.setLevel(logging.INFO)
    time.sleep(2)
    leased = sql(dsn, "SELECT COUNT(*) FROM pyqueue_message WHERE reserve_token IS NOT NULL")[0][0]
    t0 = time.monotonic()
    result = migrate.upgrade(dsn)
    t1 = time.monotonic()
    time.sleep(1)
    stop.set()
    for thread in timed.pop("threads"):  # type: ignore[union-attr]
        thread.join()
    logger.removeHandler(steps)
    print(
        f"{dialect.name}: migrate {result.before[0]} -> {result.after[0]} took {t1 - t0:.2f} s, {leased} leases live at its start"
    )
    marks = steps.steps + [(t1, "end")]
    for (at, name), (until, _next) in zip(marks, marks[1:]):
        print(f"  {until - at:7.2f} s  {name}")
    for call in ("push", "reserve", "commit"):
        during, before = timed[call].during(t0, t1), timed[call].before(t0)
        median = f"{before[len(before) // 2] * 1000:.1f} ms" if before else "-"
        print(
            f"  longest {call} during it: {ms(during)} over {len(during)} calls "
            f"(before it: median {median}, longest {ms(before)})"
        )
    errors = [e for t in timed.values() for e in t.errors]  # type: ignore[union-attr]
    print(f"  failed calls: {len(errors)}" + (f" (first: {errors[0]})" if errors else ""))
    backfilled = sql(dsn, "SELECT COUNT(*) FROM pyqueue_message WHERE ready_at = '1970-01-01 00:00:01'")[0][0]
    print(
        f"  rows left at ready_at's default (written by {version}'s routines after the backfill began): {backfilled}"
    )


def measure_nullable_column(dsn: str, rows: int) -> None:
    dialect = dialects.for_dsn(dsn)
    folder = Path(tempfile.mkdtemp())
    try:
        migrate.upgrade(dsn)
        with pyqueue_sql.connect(dsn) as db:
            db.queue("big").create()
            db.queue("probe").create()
        started = time.monotonic()
        sql(
            dsn,
            FILL[dialect.name].replace("{rows}", str(rows)),
            {"rows": rows} if dialect.name == "postgresql" else None,
        )
        print(f"{dialect.name}: {rows} live messages written in {time.monotonic() - started:.1f} s")

        migrations = folder / "migrations"
        shutil.copytree(migrate.migrations_dir(), migrations, ignore=shutil.ignore_patterns("__pycache__"))
        (folder / "sql" / dialect.name).mkdir(parents=True)
        (folder / "sql" / dialect.name / "9999_measure.up.sql").write_text(ADD_COLUMN[dialect.name])
        (migrations / "versions" / "9999_measure.py").write_text(
            REVISION.format(down=migrate.head(), folder=str(folder / "sql"))
        )
        migrate.migrations_dir = lambda: migrations

        stop, pushes = threading.Event(), []

        def producer() -> None:
            with pyqueue_sql.connect(dsn) as db:
                queue, n = db.queue("probe"), 0
                while not stop.is_set():
                    t0 = time.monotonic()
                    queue.push(f"p{n}", "probe", {})
                    pushes.append((t0, time.monotonic() - t0))
                    n += 1
                    time.sleep(0.005)

        thread = threading.Thread(target=producer)
        thread.start()
        time.sleep(1)
        t0 = time.monotonic()
        migrate.upgrade(dsn)
        t1 = time.monotonic()
        time.sleep(0.5)
        stop.set()
        thread.join()
        during = [d for t, d in pushes if t0 - 0.1 <= t <= t1]
        before = sorted(d for t, d in pushes if t < t0)
        print(
            f"{dialect.name}: migrate (ADD COLUMN NULL on {rows} rows, then the routines) took "
            f"{t1 - t0:.2f} s; longest push meanwhile {max(during) * 1000:.0f} ms over {len(during)} pushes "
            f"(before it: median {before[len(before) // 2] * 1000:.1f} ms)"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server_dsn")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reserved", type=int, default=50_000, help="of the rows, how many hold a lease")
    parser.add_argument("--revision", choices=("ready-order", "nullable-column"), default="ready-order")
    args = parser.parse_args()
    dialect = dialects.for_dsn(args.server_dsn)
    if args.revision == "ready-order" and dialect.name != "mysql":
        parser.error("0003_ready_order changes no PostgreSQL table: measure it on MySQL/MariaDB")
    name = f"pyqueue_measure_{uuid.uuid4().hex[:8]}"
    base = args.server_dsn.rsplit("/", 1)[0]
    admin = dialect.connect(args.server_dsn, autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE {name}")
    dsn = f"{base}/{name}"
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    try:
        if args.revision == "ready-order":
            measure_ready_order(dsn, args.rows, args.reserved)
        else:
            measure_nullable_column(dsn, args.rows)
    finally:
        admin.cursor().execute(f"DROP DATABASE {name}")
        admin.close()
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""What `pyqueue-sql migrate` locks, and for how long, on a queue table of N live messages: the
figures of docs/operations.md ("Upgrading").

    python scripts/measure_upgrade_lock.py postgresql://postgres@127.0.0.1:5432/postgres
    python scripts/measure_upgrade_lock.py mysql://root@127.0.0.1:3306/mysql [--rows 1000000]

In a database of its own (made from the server DSN given, dropped at the end): installs head,
writes N live messages into pyqueue_message (one INSERT ... SELECT, not through the routines:
only the table's size matters here), then runs migrate with one more revision that adds a
NULLable column to pyqueue_message (the typical expand step), while a producer pushes into
another queue in a loop. Prints the run's duration and the longest push meanwhile (what the
lock cost a live producer)."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pyqueue_sql
from pyqueue_sql import dialects, migrate

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


def sql(dsn: str, statement: str, params: dict | None = None) -> None:
    connection = dialects.for_dsn(dsn).connect(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute(statement, params)
        connection.commit()
    finally:
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server_dsn")
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    dialect = dialects.for_dsn(args.server_dsn)
    name = f"pyqueue_measure_{uuid.uuid4().hex[:8]}"
    base = args.server_dsn.rsplit("/", 1)[0]
    admin = dialect.connect(args.server_dsn, autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE {name}")
    dsn = f"{base}/{name}"
    folder = Path(tempfile.mkdtemp())
    try:
        migrate.upgrade(dsn)
        with pyqueue_sql.connect(dsn) as db:
            db.queue("big").create()
            db.queue("probe").create()
        started = time.monotonic()
        fill = FILL[dialect.name]
        sql(
            dsn,
            fill.replace("{rows}", str(args.rows)),
            {"rows": args.rows} if dialect.name == "postgresql" else None,
        )
        print(f"{dialect.name}: {args.rows} live messages written in {time.monotonic() - started:.1f} s")

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
            f"{dialect.name}: migrate (ADD COLUMN NULL on {args.rows} rows, then the routines) took "
            f"{t1 - t0:.2f} s; longest push meanwhile {max(during) * 1000:.0f} ms over {len(during)} pushes "
            f"(before it: median {before[len(before) // 2] * 1000:.1f} ms)"
        )
    finally:
        admin.cursor().execute(f"DROP DATABASE {name}")
        admin.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

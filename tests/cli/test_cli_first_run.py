"""What a new user meets first with the pyqueue-sql command, on both dialects: the walkthrough's
create of a queue whose dead-letter queue is not there yet, a missing driver, times with their
zone, the stats' dead column explained, a reserve on a paused queue, install hints that work."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import cli, dialects
from pyqueue_sql.display import format_time

from ..helpers import run_cli


def name(tag: str) -> str:
    return f"first.{tag}.{uuid.uuid4().hex[:8]}"


# -- the walkthrough: a dead-letter queue that does not exist yet ---------------------


def test_create_with_a_missing_dead_letter_queue_says_to_create_it_first(capsys, dsn):
    emails = name("emails")
    dead = f"{emails}.dead"
    code, out, err = run_cli(
        capsys, "create", emails, "--max-attempts", "3", "--dead-letter-queue", dead, "--dsn", dsn
    )
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert f'"{dead}" does not exist' in err  # the routine's own error, unchanged
    assert f"pyqueue-sql create {dead}`" in err  # ... and the command that fixes it
    with pyqueue_sql.connect(dsn) as db:
        assert emails not in {s.queue for s in db.settings()}  # nothing was created
    # the walkthrough's order: the dead-letter queue first, then the queue
    assert run_cli(capsys, "create", dead, "--dsn", dsn)[0] == 0
    code, out, err = run_cli(
        capsys, "create", emails, "--max-attempts", "3", "--dead-letter-queue", dead, "--dsn", dsn
    )
    assert code == 0, err
    assert out.startswith(f"created {emails}: ") and f"dead-letter queue {dead}" in out


def test_a_create_refused_for_another_reason_has_no_dead_letter_hint(capsys, dsn):
    code, _, err = run_cli(capsys, "create", name("q"), "--dead-letter-queue", "", "--dsn", dsn)
    assert code == 1 and "create it first" not in err and "create it with" not in err


# -- a missing driver ---------------------------------------------------------------------

ENTRY = """
import sys
sys.modules[sys.argv[1]] = None  # the driver is not installed
from pyqueue_sql.cli import main
sys.exit(main(sys.argv[2:]))
"""


# dialect -> (driver module, its extra), (asyncio driver module, its extra)
DRIVERS = {
    "postgresql": (("psycopg", "postgresql"), ("psycopg", "postgresql")),
    "mysql": (("pymysql", "mysql"), ("aiomysql", "asyncio")),
}


def test_each_dialect_names_its_drivers_and_their_extras():
    for name, (sync, asynchronous) in DRIVERS.items():
        dialect = dialects.for_name(name)
        assert (dialect.driver, dialect.async_driver) == (sync, asynchronous)


@pytest.mark.parametrize("command", ["migrate", "stats"])
def test_a_missing_driver_is_one_line_naming_the_extra(dsn, dialect, command):
    module, extra = DRIVERS[dialect][0]
    run_ = subprocess.run(
        [sys.executable, "-c", ENTRY, module, command, "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run_.returncode == 1, run_.stderr
    assert "Traceback" not in run_.stderr
    lines = run_.stderr.strip().splitlines()
    assert len(lines) == 1, run_.stderr
    assert lines[0].startswith("pyqueue-sql: error: ")
    assert f"pip install -e '.[{extra}]'" in lines[0]
    assert f"py3-none-any.whl[{extra}]'" in lines[0]
    assert "pyqueue-sql[" not in lines[0]


LIBRARY = """
import asyncio, sys
sys.modules[sys.argv[1]] = None
import pyqueue_sql
import pyqueue_sql.migrate
from pyqueue_sql import aio, errors
try:
    if sys.argv[2] == "async":
        asyncio.run(aio.connect(sys.argv[3]))
    elif sys.argv[2] == "migrate":
        pyqueue_sql.migrate.upgrade(sys.argv[3])
    else:
        pyqueue_sql.connect(sys.argv[3])
except ImportError as exc:
    assert isinstance(exc, errors.DriverNotInstalledError), type(exc)
    assert isinstance(exc, errors.QueueError)
    print(exc)
"""


@pytest.mark.parametrize("flavour", ["sync", "async", "migrate"])
def test_the_library_raises_driver_not_installed_naming_the_extra(dsn, dialect, flavour):
    """pyqueue_sql.connect, aio.connect and pyqueue_sql.migrate.upgrade (a DSN) with the driver
    missing: DriverNotInstalledError naming the extra, not the ModuleNotFoundError of the import
    (SQLAlchemy's, for migrate)."""
    module, extra = DRIVERS[dialect][1 if flavour == "async" else 0]
    run_ = subprocess.run(
        [sys.executable, "-c", LIBRARY, module, flavour, dsn], capture_output=True, text=True, timeout=60
    )
    assert run_.returncode == 0, run_.stderr
    assert f"{module!r}" in run_.stdout and f"pip install -e '.[{extra}]'" in run_.stdout


# -- times with their zone --------------------------------------------------------------


def test_format_time_says_utc_whatever_the_datetimes_zone():
    at = dt.datetime(2026, 11, 25, 7, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert format_time(at) == "2026-11-25 06:00:00 UTC"
    assert format_time(dt.datetime(2026, 11, 25, 6, 0)) == "2026-11-25 06:00:00 UTC"
    assert format_time(None) == "-"


def test_show_and_workers_print_times_in_utc(capsys, dsn, db):
    queue = db.queue(name("times")).create(history_retention=3600)
    queue.push("k", "kind", {"n": 1})
    code, out, err = run_cli(capsys, "show", queue.name, "k", "kind", "--dsn", dsn)
    assert code == 0, err
    info = queue.message("k", "kind")
    assert f"created at:   {format_time(info.created_at)}" in out
    created = next(line for line in out.splitlines() if line.startswith("created at:"))
    assert created.endswith(" UTC")
    registration = db.register_worker(f"first-{uuid.uuid4().hex[:6]}", queues=[queue.name])
    try:
        code, out, err = run_cli(capsys, "workers", "--dsn", dsn)
        assert code == 0, err
        row = next(line for line in out.splitlines() if registration.name in line)
        mine = next(w for w in db.workers() if w.worker_id == registration.worker_id)
        assert format_time(mine.started_at) in row and " UTC" in row
    finally:
        db.deregister_worker(registration)


# -- stats: what the dead column counts ------------------------------------------------------


def test_stats_says_dead_counts_every_message_ever_dead_lettered(capsys, dsn, db):
    dead = db.queue(name("dlq")).create()
    queue = db.queue(name("work")).create(max_attempts=1, dead_letter_queue=dead.name)
    queue.push("k", "kind", 1)
    [held] = queue.reserve()
    assert queue.fail(held, error="boom") == "dead_lettered"
    assert dead.redrive(queue, n=1) == 1
    code, out, err = run_cli(capsys, "stats", queue.name, "--dsn", dsn)
    assert code == 0, err
    header, _, row = out.splitlines()  # the table alone: what the column means is in --help
    assert header.split()[4] == "dead"  # the name SQL, Python and the dashboard use
    assert row.split()[:2] == [queue.name, "1"]  # the redriven message is ready again
    cells = row.split()
    assert cells[4] == "1"  # ... and the count of messages ever dead-lettered stays
    build = cli.build_parser()
    stats_help = build._subparsers._group_actions[0].choices["stats"].format_help()
    assert "redrive does not lower it" in " ".join(stats_help.split())


# -- reserve on a paused queue ----------------------------------------------------------------


def test_reserve_on_a_paused_queue_says_it_is_paused(capsys, dsn, db):
    queue = db.queue(name("paused")).create()
    queue.push("k", "kind", 1)
    queue.pause()
    code, out, err = run_cli(capsys, "reserve", queue.name, "--dsn", dsn)
    assert code == 0 and out == ""
    assert "paused" in err and f"pyqueue-sql resume {queue.name}" in err and "1 message(s) waiting" in err
    queue.resume()
    code, out, err = run_cli(capsys, "reserve", queue.name, "--dsn", dsn)
    assert code == 0 and json.loads(out)["key"] == "k"
    code, out, err = run_cli(capsys, "reserve", queue.name, "--dsn", dsn)
    assert code == 0 and out == "" and "paused:" not in err and "no message ready" in err


# -- install hints that work --------------------------------------------------------------------


def test_the_cli_hints_install_from_a_checkout_or_the_wheel():
    """The package is on no index: no hint anywhere in it (the CLI, the dashboard, the asyncio
    client, Spark, embedded PostgreSQL) says pip install 'pyqueue-sql[...]'."""
    import pathlib

    package = pathlib.Path(cli.__file__).parent.parent
    checked = sorted(package.rglob("*.py"))
    assert package / "spark.py" in checked and package / "cli" / "common.py" in checked
    assert [str(p) for p in checked if "pyqueue-sql[" in p.read_text(encoding="utf-8")] == []
    from pyqueue_sql.errors import install_command

    assert install_command("metrics") == (
        "pip install -e '.[metrics]' (from a checkout) or "
        f"pip install 'dist/pyqueue_sql-{pyqueue_sql.__version__}-py3-none-any.whl[metrics]' (after `make wheel`)"
    )


def test_the_walkthrough_from_a_fresh_queue_to_a_redrive(capsys, dsn):
    """A message's whole life from the shell, in the documented order: the dead-letter queue
    first, then the queue; three failed deliveries dead-letter it; show, dead-letters, redrive and
    stats say what happened."""
    emails = name("emails")
    dead = f"{emails}.dead"
    assert run_cli(capsys, "create", dead, "--dsn", dsn)[0] == 0
    code, out, err = run_cli(
        capsys, "create", emails, "--max-attempts", "3", "--dead-letter-queue", dead, "--history-retention",
        "3600", "--dsn", dsn,
    )  # fmt: skip
    assert code == 0, err
    assert (
        run_cli(capsys, "push", emails, "user-42", "welcome", '{"to": "a@example.com"}', "--dsn", dsn)[1]
        == "inserted\n"
    )
    outcomes = []
    for _ in range(3):
        code, out, err = run_cli(capsys, "reserve", emails, "--dsn", dsn)
        assert code == 0, err
        token = json.loads(out)["token"]
        code, out, err = run_cli(
            capsys, "rollback", emails, "user-42", "welcome", token, "--error", "smtp timeout", "--dsn", dsn
        )
        assert code == 0, err
        outcomes.append(out.split(":")[0])
    assert outcomes == ["rolled back", "rolled back", "dead-lettered"]
    code, out, err = run_cli(capsys, "show", emails, "user-42", "welcome", "--dsn", dsn)
    assert code == 0, err
    assert "state:        gone" in out and "dead_lettered" in out and "UTC" in out
    code, out, err = run_cli(capsys, "dead-letters", dead, "--dsn", dsn)
    assert code == 0 and emails in out and "smtp timeout" in out
    code, out, err = run_cli(capsys, "redrive", dead, emails, "-n", "100", "--dsn", dsn)
    assert code == 0 and out.startswith("redrove 1 message(s)")
    code, out, err = run_cli(capsys, "stats", emails, "--dsn", dsn)
    assert code == 0
    cells = out.splitlines()[2].split()
    assert cells[:2] == [emails, "1"] and cells[4] == "1"  # ready again; dead stays 1

"""pyqueue_sql.contrib.django in a real Django project (tests/django/project: settings for
PostgreSQL and MySQL/MariaDB, a model, views, tasks), driven as its user would: `manage.py
migrate`, the views through Django's test Client (`manage.py drive`, a command of the project),
`manage.py pyqueue_worker` in a subprocess. Every step runs in subprocesses of the Django under
test: Django 5.2 with the django-tasks backport (this virtualenv) and Django 6 (`django.tasks`,
Python >= 3.12: the virtualenv `make django6-venv` makes in .venv/django6)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import migrate
from pyqueue_sql.contrib.django.backend import parse_result_id
from tests.security.test_privileges import Accounts, _run

ROOT = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().parent / "project"
DJANGO6_PYTHON = ROOT / ".venv" / "django6" / "bin" / "python"
PYQUEUE_SQL = str(Path(sys.executable).with_name("pyqueue-sql"))


def _python(django: str) -> str:
    if django == "5.2":
        return sys.executable
    if not DJANGO6_PYTHON.exists():
        pytest.fail(
            f"no Django 6 virtualenv at {DJANGO6_PYTHON}: run `make django6-venv` (needs Python >= 3.12)"
        )
    return str(DJANGO6_PYTHON)


def _env(dsn: str, signal_log: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PYQUEUE_DJANGO_DSN": dsn, "PYTHONPATH": f"{PROJECT}{os.pathsep}{ROOT}"}
    if signal_log is not None:  # the project's receivers of Django's task signals write there
        env["PYQUEUE_DJANGO_SIGNAL_LOG"] = str(signal_log)
    return env


def _manage(
    python: str, dsn: str, *args: str, signal_log: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "manage.py", *args],
        cwd=PROJECT,
        env=_env(dsn, signal_log),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def _migrated_templates(servers):
    """(dialect, python) -> a database `manage.py migrate` ran on, made once per test process and
    Django; dropped at the end of the session."""
    made: dict[tuple[str, str], tuple] = {}
    yield made
    for server, name in made.values():
        server.drop(name)


@pytest.fixture
def migrated_database(server, _migrated_templates, _dropper, installed_database):
    """Makes databases the project's `manage.py migrate` ran on (its Django under test), copied
    from a template database migrated once per test process and Django, without a Django process
    per test (about 1 s of CPU each). PostgreSQL copies it whole (CREATE DATABASE ... TEMPLATE).
    MySQL/MariaDB has no templates: pyqueue-sql's schema is what the app's migrations run
    (install_schema), as installed_database makes it (migrate.upgrade, or an earlier test's
    database emptied, its Django tables dropped), and Django's own tables, every table the
    template has beside that schema's, are copied, and every row the install did not make (SHOW
    CREATE TABLE, INSERT IGNORE ... SELECT). The test of `manage.py migrate` itself starts from an empty database."""
    made: list[str] = []

    def make(python: str) -> str:
        key = (server.dialect, python)
        if key not in _migrated_templates:
            template = f"pyqueue_template_django_{os.getpid()}_{len(_migrated_templates)}"
            dsn = server.create(template)
            _migrated_templates[key] = (server, template)
            _ok(_manage(python, dsn, "migrate", "--no-input"))
        template = _migrated_templates[key][1]
        if server.dialect == "postgresql":
            name = f"pyqueue_t_django_{uuid.uuid4().hex[:10]}"
            made.append(name)
            return server.copy(template, name)
        dsn = installed_database("django")
        _copy_other_tables(server, template, dsn.rsplit("/", 1)[1])
        return dsn

    yield make
    for name in made:
        _dropper.drop(server, name)


def _copy_other_tables(server, source: str, target: str) -> None:
    """Copies into MySQL/MariaDB database `target` each table of `source` that `target` has not,
    with its indexes and foreign keys (those name tables of the same database), and every row of
    `source` whose key `target` has not."""
    conn = server._admin()
    try:
        with conn.cursor() as cur:
            listed = "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            cur.execute(listed + " AND table_type = 'BASE TABLE'", (source,))
            tables = {row[0] for row in cur.fetchall()}
            cur.execute(listed, (target,))
            installed = {row[0] for row in cur.fetchall()}
            cur.execute(f"USE `{target}`")
            cur.execute("SET SESSION foreign_key_checks = 0")
            for table in sorted(tables):
                if table not in installed:
                    cur.execute(f"SHOW CREATE TABLE `{source}`.`{table}`")
                    cur.execute(cur.fetchone()[1])
                # the rows the install did not make too (the queues of TASKS, made after migrate)
                cur.execute(f"INSERT IGNORE INTO `{target}`.`{table}` SELECT * FROM `{source}`.`{table}`")
        conn.commit()
    finally:
        conn.close()


@contextlib.contextmanager
def deployment(dsn: str):
    """The accounts of a deployment, after `manage.py migrate` ran as the admin (dsn): the web
    tier's (producer), the worker's (consumer); both may use the project's own table."""
    accounts = Accounts(dsn)
    try:
        web = accounts.with_capabilities("web", "producer")
        worker = accounts.with_capabilities("wrk", "consumer")
        for name in (web, worker):
            if accounts.dialect == "postgresql":
                _run(accounts.admin, f'GRANT SELECT, INSERT, UPDATE, DELETE ON shop_order TO "{name}"')
            else:
                database = accounts.dsn.rsplit("/", 1)[1].split("?")[0]
                _run(
                    accounts.admin,
                    f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{database}`.shop_order TO `{name}`@`%`",
                )
        yield accounts.dsn_for(web), accounts.dsn_for(worker)
    finally:
        accounts.close()


@pytest.mark.slow
@pytest.mark.parametrize("django", ["5.2", "6"])
def test_a_django_project_enqueues_in_its_transactions_and_the_worker_runs_its_tasks(
    fresh_database, dialect, django, tmp_path
):
    python = _python(django)
    dsn = fresh_database("django")

    # manage.py migrate installs pyqueue-sql's schema, and pyqueue-sql migrate finds it current
    _ok(_manage(python, dsn, "migrate", "--no-input"))
    assert migrate.current(dsn) == (migrate.head(),)
    cli = subprocess.run([PYQUEUE_SQL, "migrate", "--dsn", dsn], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.splitlines()[0] == f"already at {migrate.head()}"

    with deployment(dsn) as (web_dsn, worker_dsn):
        _a_deployment_runs(python, dsn, web_dsn, worker_dsn, django, tmp_path)

    # The app's migration back to zero removes the schema, as `pyqueue-sql migrate --downgrade` would
    _ok(_manage(python, dsn, "migrate", "pyqueue_sql", "zero", "--no-input"))
    assert migrate.current(dsn) == ()


def _a_deployment_runs(python, dsn, web_dsn, worker_dsn, django, tmp_path):
    """The web tier as a producer-only account, the worker as a consumer-only one."""
    # The views: one that raises inside atomic() leaves neither its order nor its job; one that
    # commits leaves both. Then a task that fails, one that takes its context, an async def one.
    signal_log = tmp_path / "signals.log"
    out = json.loads(_ok(_manage(python, web_dsn, "drive", "enqueue", signal_log=signal_log)))
    assert out["django"].startswith("5.2" if django == "5.2" else "6.")
    assert (out["broken_status"], out["placed_status"]) == (500, 201)
    assert out["orders"] == ["chair"]
    assert out["status_before"] == "READY"
    assert (out["later_status"], out["cancelled"]) == ("READY", True)
    assert out["later_after_cancel"] == ["FAILED", ["pyqueue_sql.errors.TaskCancelled"]]
    db = pyqueue_sql.connect(dsn)
    try:
        emails = db.queue("emails")
        assert emails.stats().ready == 1  # the rolled-back view's job is not there
        queue, kind, key = parse_result_id(out["confirm"])
        assert (queue, kind) == ("emails", "shop.tasks.confirm_order")
        message = emails.message(key, kind)
        assert message.priority == 10
        # reading a live message's arguments is the monitor's (queue_message): not the web tier's
        assert out["args_before"] == []
        assert (out["read_back_differs"], out["read_back_args"], out["enqueued_at_set"]) == ([], [], True)
        assert db.queue("default").stats().ready == 5
        queue, kind, key = parse_result_id(out["later"])
        assert db.queue(queue).result(key, kind).state == "cancelled"

        # manage.py pyqueue_worker runs them all and stores their results; SIGTERM stops it
        ids = [out[name] for name in ("confirm", "divide_ok", "divide_zero", "attempt", "shout", "exit")]
        worker = subprocess.Popen(
            [
                python,
                "manage.py",
                "pyqueue_worker",
                "--concurrency",
                "2",
                "--retry-base",
                "0.1",
                "--no-startup-delay",
            ],
            cwd=PROJECT,
            env=_env(worker_dsn, signal_log),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            for result_id in ids:
                queue, kind, key = parse_result_id(result_id)
                assert db.queue(queue).wait_result(key, kind, timeout=30).finished, result_id
        finally:
            worker.send_signal(signal.SIGTERM)
            stdout, stderr = worker.communicate(timeout=30)
        assert worker.returncode == 0, stderr
    finally:
        db.close()

    # Django's task signals: task_enqueued where the enqueue ran (also for the job rolled back with
    # its view, as Django's own backends send it at the enqueue), task_started and task_finished
    # in the worker, for each attempt
    sent = sorted(signal_log.read_text(encoding="utf-8").splitlines())
    assert sent == sorted(
        [f"enqueued {name} READY PyQueueBackend" for name in ("confirm_order",) * 2 + ("divide",) * 4]
        + [f"enqueued {name} READY PyQueueBackend" for name in ("attempt_of", "shout", "exit_now")]
        + [
            line
            for name, status in (
                ("confirm_order", "SUCCESSFUL"),
                ("divide", "SUCCESSFUL"),
                ("divide", "FAILED"),
                ("attempt_of", "SUCCESSFUL"),
                ("shout", "SUCCESSFUL"),
                ("exit_now", "FAILED"),  # SystemExit: a failure of the task, not the worker's exit
            )
            for line in (f"started {name} RUNNING PyQueueBackend", f"finished {name} {status} PyQueueBackend")
        ]
    )

    # get_result / TaskResult.refresh read the stored results, in the project's Django
    results = json.loads(_ok(_manage(python, web_dsn, "drive", "results", *ids)))
    assert results["confirm"] == {
        "status": "SUCCESSFUL",
        "attempts": 1,
        "value": {"order": results["confirm"]["value"]["order"], "item": "chair", "total": 12},
        "errors": [],
        "args": [results["confirm"]["value"]["order"]],  # kept with the result by the worker
        "times_in_order": True,  # enqueued <= started <= last attempted <= finished, all recorded
        "traceback_ends": [],
    }
    assert (results["divide_zero"]["args"], results["divide_zero"]["times_in_order"]) == ([1, 0], True)
    assert results["divide_ok"]["value"] == 2.0
    assert results["divide_zero"]["status"] == "FAILED"
    assert results["divide_zero"]["errors"] == ["builtins.ZeroDivisionError"]
    assert results["divide_zero"]["traceback_ends"] == [  # the worker's traceback, not only the error
        ["Traceback (most recent call last):", "ZeroDivisionError: division by zero"]
    ]
    assert results["attempt"]["value"] == "ctx: attempt 1 of shop.tasks.attempt_of"
    assert results["shout"]["value"] == "HEY"
    assert results["exit"]["status"] == "FAILED"
    assert results["exit"]["errors"] == ["builtins.SystemExit"]
    assert results["exit"]["traceback_ends"] == [["Traceback (most recent call last):", "SystemExit: 3"]]
    assert results["view"] == {"status": "SUCCESSFUL", "errors": [], "value": results["confirm"]["value"]}


def test_manage_py_migrate_installs_nothing_in_a_database_pyqueue_sql_cannot_use(tmp_path):
    """A project's other database (SQLite here) is migrated without pyqueue-sql's schema, and
    without an error: the app's migration installs it only in PostgreSQL and MySQL/MariaDB."""
    script = (
        "import django, sqlite3, sys\n"
        "from django.conf import settings\n"
        "from django.core.management import call_command\n"
        "settings.configure(INSTALLED_APPS=['pyqueue_sql.contrib.django'], DATABASES={'default': "
        "{'ENGINE': 'django.db.backends.sqlite3', 'NAME': sys.argv[1]}})\n"
        "django.setup()\n"
        "call_command('migrate', verbosity=0)\n"
        "print(sorted(r[0] for r in sqlite3.connect(sys.argv[1]).execute(\"SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'\")))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "app.sqlite3")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['django_migrations']"


def test_the_dsn_of_pyqueue_sqls_own_connections_comes_from_databases_or_the_backends_dsn_option():
    """What the worker, get_result and the schema's migration connect to: built from DATABASES
    (quoted; a Unix socket's folder as libpq's host=), or the DSN option of the backend of that
    database."""
    script = (
        "import django\n"
        "from django.conf import settings\n"
        "settings.configure(\n"
        "    DATABASES={\n"
        "        'default': {'ENGINE': 'django.db.backends.postgresql', 'NAME': 'app db', 'USER': 'a@b',\n"
        "                    'PASSWORD': 'p:w/@x', 'HOST': '::1', 'PORT': '5433'},\n"
        "        'local': {'ENGINE': 'django.db.backends.postgresql', 'NAME': 'app', 'HOST': '/run/pg'},\n"
        "        'orders': {'ENGINE': 'django.db.backends.mysql', 'NAME': 'shop', 'USER': 'shop'},\n"
        "    },\n"
        "    TASKS={'default': {'BACKEND': 'pyqueue_sql.contrib.django.PyQueueBackend',\n"
        "                       'OPTIONS': {'DATABASE': 'orders', 'DSN': 'mysql://worker@db/shop'}}},\n"
        ")\n"
        "django.setup()\n"
        "from pyqueue_sql.contrib.django.connection import backend_dsn\n"
        "for alias in ('default', 'local', 'orders'):\n"
        "    print(backend_dsn(alias))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "postgresql://a%40b:p%3Aw%2F%40x@[::1]:5433/app%20db",
        "postgresql:///app?host=%2Frun%2Fpg",
        "mysql://worker@db/shop",
    ]


@pytest.mark.parametrize("django", ["5.2", "6"])
def test_the_system_checks_report_a_database_the_backend_cannot_use(django):
    done = subprocess.run(
        [_python(django), str(Path(__file__).with_name("system_checks.py"))],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "(pyqueue_sql.E001) TASKS['missing']:",
        "(pyqueue_sql.E002) TASKS['lite']:",
        "(pyqueue_sql.E003) TASKS['my']:",
    ]


@pytest.mark.parametrize("django", ["5.2", "6"])
def test_the_system_checks_report_the_app_missing_from_installed_apps(django):
    done = subprocess.run(
        [_python(django), str(Path(__file__).with_name("system_checks.py")), "without-app"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(
        set(done.stdout.splitlines())
        - {
            "(pyqueue_sql.E001) TASKS['missing']:",
            "(pyqueue_sql.E002) TASKS['lite']:",
            "(pyqueue_sql.E003) TASKS['my']:",
        }
    ) == [f"(pyqueue_sql.E004) TASKS['{alias}']" for alias in ("lite", "missing", "my", "pg")]


# --batch's stop, against a stand-in for the worker: the messages it holds, started or not
BATCH_IDLE = """
from types import SimpleNamespace
from pyqueue_sql.contrib.django.management.commands.pyqueue_worker import Command

class Worker:
    stopping = False
    def __init__(self):
        self.on_idle, self.waiting, self.stops = [], (), []
    def status(self):
        return SimpleNamespace(running=("default/k1/t",), waiting=self.waiting)
    def stop(self, reason=None):
        self.stops.append(reason)
        self.stopping = True

worker = Worker()
Command()._limits(worker, {"batch": True})
(idle,) = worker.on_idle
worker.waiting = ("emails/k2/t",)
idle(worker)
print(len(worker.stops))
worker.waiting = ()
idle(worker)
print(worker.stops)
"""


@pytest.mark.parametrize("django", ["5.2", "6"])
def test_batch_stops_once_every_message_it_reserved_has_reached_its_handler(django):
    """A look that finds nothing while a message an earlier look reserved waits for its handler
    thread does not stop the worker: the stop would hand that message back unstarted (it would
    not run). Once every held message has started (those finish after the stop), it stops."""
    done = subprocess.run(
        [_python(django), "-c", BATCH_IDLE], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["0", "['--batch: no task left']"]


FORGED = "k\n12:00:00 INFO    worker stopped (FORGED)\x1b[2J"


@pytest.mark.slow
@pytest.mark.parametrize("django", ["5.2", "6"])
def test_the_worker_imports_nothing_a_producer_names_and_runs_a_task_only_on_its_own_queue(
    migrated_database, dialect, django, tmp_path
):
    """The attacker holds only the producer capability and pushes with plain SQL: a kind naming a
    module with a side effect at import (importable by the worker), and a real task of the project
    onto a queue that is not its own. The worker (manage.py pyqueue_worker) imports neither, runs
    neither, and fails both messages with a line saying why; a real task on its own queue runs."""
    python = _python(django)
    dsn = migrated_database(python)
    planted = tmp_path / "planted"
    planted.mkdir()
    evidence = tmp_path / "imported"
    (planted / "sidefx_probe.py").write_text(
        f"open({str(evidence)!r}, 'w').write('imported')\ndef anything():\n    return 'ran'\n",
        encoding="utf-8",
    )
    signal_log = tmp_path / "signals.log"
    accounts = Accounts(dsn)
    try:
        attacker = accounts.raw(accounts.with_capabilities("atk", "producer"))
        pushes = [
            ("default", "k-import", "sidefx_probe.anything", '{"args": [], "kwargs": {}}'),
            ("default", "k-import2", "os.system", '{"args": ["true"], "kwargs": {}}'),
            ("default", "k-wrong-queue", "shop.tasks.confirm_order", '{"args": [1], "kwargs": {}}'),
            ("emails", "k-wrong-queue2", "shop.tasks.divide", '{"args": [6, 3], "kwargs": {}}'),
            ("default", "k-own", "shop.tasks.divide", '{"args": [6, 3], "kwargs": {}}'),
            # log forging: a key and a kind that would start lines of their own and clear the screen
            ("default", FORGED, "shop.tasks.divide", '{"args": [1, 0], "kwargs": {}}'),
            ("default", "k-forged-kind", "x" + FORGED, '{"args": [], "kwargs": {}}'),
        ]
        for queue, key, kind, payload in pushes:
            if dialect == "postgresql":
                _run(attacker, "SELECT queue_push(%s, %s, %s, %s::jsonb)", (queue, key, kind, payload))
            else:
                _run(attacker, "CALL queue_push(%s, %s, %s, %s, NULL, NULL)", (queue, key, kind, payload))
        if dialect == "postgresql" and not attacker.autocommit:
            attacker.commit()
        env = _env(dsn, signal_log)
        env["PYTHONPATH"] += os.pathsep + str(planted)  # the module is importable by the worker
        done = subprocess.run(
            [python, "manage.py", "pyqueue_worker", "--batch", "--no-startup-delay", "--retry-base", "0.1"],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
    finally:
        accounts.close()
    assert not evidence.exists(), "the worker imported a module a message named"
    with pyqueue_sql.connect(dsn) as db:
        states = {key: db.queue(queue).result(key, kind) for queue, key, kind, _ in pushes}
    assert states["k-own"].state == "succeeded" and states["k-own"].result == 2.0
    for key in ("k-import", "k-import2", "k-wrong-queue", "k-wrong-queue2", "k-forged-kind", FORGED):
        assert states[key].state == "failed", (key, states[key])
        assert states[key].attempts == 1  # given up at once, not retried
    assert "no task of the project has the kind 'sidefx_probe.anything'" in states["k-import"].last_error
    assert "runs on its own queue 'emails', not on 'default'" in states["k-wrong-queue"].last_error
    assert "runs on its own queue 'default', not on 'emails'" in states["k-wrong-queue2"].last_error
    # neither task was started: Django's signals saw only the one on its own queue
    assert sorted(signal_log.read_text(encoding="utf-8").splitlines()) == [
        "finished divide FAILED PyQueueBackend",
        "finished divide SUCCESSFUL PyQueueBackend",
        "started divide RUNNING PyQueueBackend",
        "started divide RUNNING PyQueueBackend",
    ]
    # the worker's log: the forged text stays inside its records (escaped), nothing clears the screen
    assert "\x1b" not in done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("12:00:00")]
    # one failed attempt (divide by zero), logged with one traceback (Django's record of it)
    assert done.stderr.count("Traceback (most recent call last)") == 1
    assert done.stderr.count("ZeroDivisionError: division by zero") == 2  # the worker's line, the traceback's
    assert "12:00:00 INFO    worker stopped (FORGED)\\x1b[2J" in done.stderr
    assert (
        "queue default: 5 task(s) of the project: shop.tasks.attempt_of, shop.tasks.divide, shop.tasks.exit_now, "
        "shop.tasks.flaky, shop.tasks.shout" in done.stderr
    )


@pytest.mark.slow
@pytest.mark.parametrize("django", ["5.2", "6"])
def test_manage_py_test_of_a_project_using_the_backend_drops_its_test_database(
    fresh_database, dialect, server, django
):
    """Django's test runner drops the test database at the end: the backend's own connections
    (get_result's, in the test's thread and another) are closed before, or PostgreSQL refuses."""
    python = _python(django)
    dsn = fresh_database("django")
    name = dsn.rsplit("/", 1)[1].split("?")[0]
    try:
        done = _manage(python, dsn, "test", "shop", "--noinput", "-v", "2", timeout=120)
        assert done.returncode == 0, done.stderr
        assert "Ran 1 test" in done.stderr and "OK" in done.stderr
        assert f"Destroying test database for alias 'default' ('test_{name}')" in done.stderr
    finally:
        leftover = _test_databases(dsn, f"test_{name}")
        if leftover:
            server.drop(f"test_{name}")
    assert leftover == []


def _test_databases(dsn: str, name: str) -> list:
    from pyqueue_sql import dialects

    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        if dialects.for_dsn(dsn).name == "postgresql":
            return _run(conn, "SELECT datname FROM pg_database WHERE datname = %s", (name,))
        return _run(
            conn, "SELECT schema_name FROM information_schema.schemata WHERE schema_name = %s", (name,)
        )
    finally:
        conn.close()


@pytest.mark.slow
@pytest.mark.parametrize("django", ["5.2", "6"])
def test_the_admin_pages_over_the_queues_follow_the_admin_users_permissions(
    migrated_database, dialect, django
):
    """The admin's pages, rendered through Django's test client for each kind of user: refused to
    the anonymous, to non-staff (the login page) and to staff without the app's permissions (403);
    a viewer sees the messages, a message's payload, no action; cancel needs the change
    permission, remove the delete one, redrive (a dead-letter queue of the backend's queue) the
    change one; the actions run the routines; a queue not of the backend is refused."""
    python = _python(django)
    dsn = migrated_database(python)
    out = json.loads(_ok(_manage(python, dsn, "drive", "admin")))
    assert out["anonymous"] == {"list": 302, "keys_shown": 0}
    assert out["not_staff"] == {"list": 302, "keys_shown": 0}
    assert out["staff_without"] == {"list": 403, "keys_shown": 0}
    seen = {"list": 200, "keys_shown": 3, "message": 200, "payload_shown": True, "markup_escaped": True}
    assert out["viewer"] == {**seen, "other_queue": 403, "actions": []}
    assert out["operator"] == {**seen, "other_queue": 403, "actions": ["cancel"]}
    assert out["owner"] == {**seen, "other_queue": 403, "actions": ["cancel", "remove"]}
    assert out["index_lists_it"] is True
    assert (out["viewer_cancel"], out["operator_cancel"]) == (403, 302)
    assert (out["operator_remove"], out["owner_remove"]) == (403, 302)
    assert (out["viewer_redrive"], out["operator_redrive"]) == (403, 302)
    assert out["states"] == ["cancelled", "unknown", "ready"]  # cancelled, removed, left alone
    assert out["redriven"] is True
    # the state filter lists finished tasks too, from their results (queue_results), without actions
    assert out["finished_cancelled"] == {"list": 200, "keys_shown": [True, False, False], "actions": []}


@pytest.mark.parametrize("django", ["5.2"])
def test_the_backend_cancels_only_its_own_queues_and_the_admin_offers_no_cancel_of_a_dead_letter(
    migrated_database, dialect, django
):
    """As the one who holds a result id of another application's queue (billing's): the backend's
    cancel refuses it as get_result does, and billing's message stays. On a dead-letter queue's page
    the admin offers no cancel (queue_cancel refuses a dead letter), and a forged cancel posted
    there is answered with a message, not an error page; the dead letter stays."""
    python = _python(django)
    dsn = migrated_database(python)
    out = json.loads(_ok(_manage(python, dsn, "drive", "out_of_reach")))
    assert out["get_result"] == "TaskResultDoesNotExist"
    assert out["cancel"] is False
    assert out["billing_live"] is True
    assert out["dead_actions"] == ["remove"]
    assert out["dead_cancel"] == 302
    assert out["dead_cancel_said"] == [
        "default.dead is a dead-letter queue: its messages are removed or redriven, not cancelled"
    ]
    assert out["dead_letter_live"] is True


@pytest.mark.parametrize("django", ["5.2"])
def test_prune_deletes_the_results_older_than_the_age_of_the_queues_named(migrated_database, dialect, django):
    """manage.py prune_pyqueue_results: results finished before --min-age-days go, of the queues
    named only (--queue-name, '*' for all); younger ones stay; each queue keeps its retention."""
    python = _python(django)
    dsn = migrated_database(python)
    with pyqueue_sql.connect(dsn) as db:
        for queue in ("default", "emails"):
            for key in ("old", "new"):
                db.queue(queue).push(key, "shop.tasks.divide", {"args": [1, 1], "kwargs": {}})
            assert len(db.queue(queue).pop(2)) == 2  # finished: 'succeeded' results, kept a day
        twenty_days = (
            "now() - interval '20 days'" if dialect == "postgresql" else "UTC_TIMESTAMP(6) - INTERVAL 20 DAY"
        )
        _run(db.connection, f"UPDATE pyqueue_result SET finished_at = {twenty_days} WHERE p_key = 'old'")
        if dialect == "postgresql" and not db.connection.autocommit:
            db.connection.commit()

        def kept() -> list[str]:
            return [
                f"{queue}/{key}"
                for queue in ("default", "emails")
                for key in ("old", "new")
                if db.queue(queue).result(key, "shop.tasks.divide").state == "succeeded"
            ]

        assert kept() == ["default/old", "default/new", "emails/old", "emails/new"]
        assert _ok(_manage(python, dsn, "prune_pyqueue_results", "--min-age-days", "14")).splitlines() == [
            "default: 1 row(s) deleted",
            "Deleted 1 row(s)",
        ]
        assert kept() == ["default/new", "emails/old", "emails/new"]
        _ok(_manage(python, dsn, "prune_pyqueue_results", "--queue-name", "*", "--min-age-days", "30"))
        assert kept() == ["default/new", "emails/old", "emails/new"]  # 20 days is not 30
        _ok(_manage(python, dsn, "prune_pyqueue_results", "--queue-name", "*"))
        assert kept() == ["default/new", "emails/new"]
        assert {s.queue: s.result_retention for s in db.settings()} == {
            "default": dt.timedelta(days=1),
            "emails": dt.timedelta(days=1),
        }
    refused = _manage(python, dsn, "prune_pyqueue_results", "--queue-name", "other")
    assert refused.returncode == 1 and "not queues of TASKS['default']: other" in refused.stderr


@pytest.mark.parametrize("django", ["5.2"])
def test_prune_with_a_status_deletes_only_the_old_results_of_that_status(migrated_database, dialect, django):
    """manage.py prune_pyqueue_results --status FAILED: the failed results older than the age go
    (queue_purge_results), the succeeded ones and the young failed one stay."""
    python = _python(django)
    dsn = migrated_database(python)
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue("default")
        q.create(max_attempts=1)
        for key in ("old-ok", "old-bad", "new-bad"):
            q.push(key, "shop.tasks.divide", {"args": [1, 1], "kwargs": {}})
            [r] = q.reserve()
            if key.endswith("bad"):
                assert q.fail(r, "ZeroDivisionError") == "dropped"
            else:
                assert q.commit(r)
        twenty_days = (
            "now() - interval '20 days'" if dialect == "postgresql" else "UTC_TIMESTAMP(6) - INTERVAL 20 DAY"
        )
        _run(
            db.connection, f"UPDATE pyqueue_result SET finished_at = {twenty_days} WHERE p_key LIKE 'old-%%'"
        )
        if dialect == "postgresql" and not db.connection.autocommit:
            db.connection.commit()
        out = _ok(_manage(python, dsn, "prune_pyqueue_results", "--status", "FAILED", "--min-age-days", "14"))
        assert out.splitlines() == ["default: 1 failed row(s) deleted", "Deleted 1 row(s)"]
        assert [(r.key, r.state) for r in q.results()] == [("new-bad", "failed"), ("old-ok", "succeeded")]
    refused = _manage(python, dsn, "prune_pyqueue_results", "--status", "PENDING")
    assert refused.returncode != 0 and "status must be one of" in refused.stderr


@pytest.mark.slow
@pytest.mark.parametrize("django", ["5.2"])
def test_the_worker_options_of_db_worker(migrated_database, dialect, django):
    """--max-tasks stops the worker after that many tasks, --exclude-queues leaves a queue alone,
    --worker-id names it, --batch runs what is ready and exits; each exit is the worker's own."""
    python = _python(django)
    dsn = migrated_database(python)
    kind = "shop.tasks.divide"
    with pyqueue_sql.connect(dsn) as db:
        for key in ("a", "b", "c"):
            db.queue("default").push(key, kind, {"args": [6, 3], "kwargs": {}})
        db.queue("emails").push("e", "shop.tasks.confirm_order", {"args": [1], "kwargs": {}})

        def states() -> list[str]:
            found = [db.queue("default").result(k, kind).state for k in ("a", "b", "c")]
            return [*found, db.queue("emails").result("e", "shop.tasks.confirm_order").state]

        common = ["--no-startup-delay", "--concurrency", "1", "--interval", "0.2"]
        first = _manage(
            python, dsn, "pyqueue_worker", *common, "--queue-name", "*", "--exclude-queues", "emails",
            "--max-tasks", "2", "--worker-id", "w-first", timeout=60,
        )  # fmt: skip
        assert first.returncode == 0, first.stderr
        assert "--max-tasks: 2 task(s) finished" in first.stderr and "w-first" in first.stderr
        assert sorted(states()[:3]) == ["ready", "succeeded", "succeeded"] and states()[3] == "ready"
        ran = [db.queue("default").result(k, kind) for k in ("a", "b", "c")]
        # the worker's id recorded with each task it ran (TaskResult.worker_ids), readable from SQL
        assert [r.progress["django_task"]["worker_ids"] for r in ran if r.state == "succeeded"] == [
            ["w-first"]
        ] * 2
        second = _manage(
            python, dsn, "pyqueue_worker", *common, "--exclude-queues", "emails", "--batch", timeout=60
        )
        assert second.returncode == 0, second.stderr
        assert "--batch: no task left" in second.stderr
        assert states() == ["succeeded", "succeeded", "succeeded", "ready"]  # emails never served
    refused = _manage(python, dsn, "pyqueue_worker", "--max-tasks", "0")
    assert refused.returncode == 2 and "must be at least 1" in refused.stderr


@pytest.mark.slow
@pytest.mark.parametrize("django", ["5.2"])
def test_the_worker_with_reload_restarts_on_a_code_change_and_serves(migrated_database, dialect, django):
    """--reload: the worker runs under Django's autoreloader; a change of a module it imported (the
    tasks module's time touched) restarts it, and the restarted worker runs a task."""
    import queue as queue_module
    import threading
    import time

    python = _python(django)
    dsn = migrated_database(python)
    worker = subprocess.Popen(
        [python, "manage.py", "pyqueue_worker", "--reload", "--no-startup-delay", "--interval", "0.2"],
        cwd=PROJECT,
        env=_env(dsn),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the reloader's child too: stopped with the group
    )
    lines: queue_module.Queue = queue_module.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in worker.stderr], daemon=True).start()

    def wait_for(text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.5)
            except queue_module.Empty:
                continue
            seen.append(line)
            if text in line:
                return line
        pytest.fail(f"no {text!r} in {seen}")

    try:
        first = wait_for("worker registered as")
        # the autoreloader looks at the imported modules' files every second: it has seen the
        # tasks module's time once before the change below
        time.sleep(3)
        os.utime(PROJECT / "shop" / "tasks.py")  # a code change, as the autoreloader sees one
        wait_for("tasks.py changed: stopping the worker before the reload")
        wait_for("worker stopped")  # the old worker, before the new process starts
        second = wait_for("worker registered as")
        assert second != first  # a new process: another registration
        with pyqueue_sql.connect(dsn) as db:
            db.queue("default").push("after-reload", "shop.tasks.divide", {"args": [8, 2], "kwargs": {}})
            done = db.queue("default").wait_result("after-reload", "shop.tasks.divide", timeout=30)
        assert (done.state, done.result) == ("succeeded", 4.0)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("django", ["6"])
def test_a_retried_task_keeps_its_first_start_and_each_attempts_worker(migrated_database, dialect, django):
    """A task that fails once and then succeeds, each attempt run by another worker: what the
    worker recorded (read with queue_result) has started_at of the first attempt,
    last_attempted_at of the second, and the worker id of each attempt."""
    from pyqueue_sql.tasks import new_key

    python = _python(django)
    dsn = migrated_database(python)
    key = new_key()
    with pyqueue_sql.connect(dsn) as db, deployment(dsn) as (_, worker_dsn):
        # (the workers are consumers: an admin worker would set the project's max_attempts back)
        db.queue("default").create(max_attempts=2)
        db.queue("default").push(key, "shop.tasks.flaky", {"args": [], "kwargs": {}})
        for worker_id in ("w-one", "w-two"):  # one attempt each
            _ok(_manage(
                python, worker_dsn, "pyqueue_worker", "--no-startup-delay", "--concurrency", "1", "--retry-base",
                "0.1", "--retry-jitter", "0", "--interval", "0.2", "--max-tasks", "1", "--worker-id", worker_id,
            ))  # fmt: skip
        done = db.queue("default").wait_result(key, "shop.tasks.flaky", timeout=10)
    assert (done.state, done.result, done.attempts) == ("succeeded", 2, 2)
    recorded = done.progress["django_task"]
    assert recorded["worker_ids"] == ["w-one", "w-two"]
    started, last = (dt.datetime.fromisoformat(recorded[k]) for k in ("started_at", "last_attempted_at"))
    assert started < last <= done.finished_at


@pytest.mark.parametrize("django", ["5.2"])
def test_every_task_backends_close_leaves_no_session_open_on_the_database(migrated_database, dialect, django):
    """A project's tests read results inside override_settings(TASKS=...) (Django drops those
    backends when it ends), through aget_result (run in an executor's thread) and from a thread of
    their own; after every task backend's close(), Django's connections closed and gc.collect(),
    no session of the backend's is left on the database, which the test runner can then drop."""
    python = _python(django)
    dsn = migrated_database(python)
    out = json.loads(_ok(_manage(python, dsn, "drive", "teardown")))
    assert out["after"] == out["before"] == 0, out


def _cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) process pid has used so far (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
@pytest.mark.parametrize("django", ["5.2"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_worker_signalled_while_a_task_runs_exits_as_soon_as_the_task_ends(
    migrated_database, dialect, django, signum
):
    """`manage.py pyqueue_worker` signalled while a 2 s task runs lets the task finish, then the
    process is gone at once: it does next to nothing after its "worker stopped" line (the
    interpreter's teardown of Django and the project took 0.2 s of CPU there, over a second of wall
    time on a loaded machine, which the signal's sender waited out). Shown by the CPU the process
    uses after that line (load does not stretch it) and by the exit within 4 s of the signal."""
    if not Path(f"/proc/{os.getpid()}/stat").exists():
        pytest.skip("reads a process's CPU time from /proc")
    python = _python(django)
    dsn = migrated_database(python)
    worker = subprocess.Popen(
        [python, "manage.py", "pyqueue_worker", "--no-startup-delay", "--queue-name", "emails"],
        cwd=PROJECT,
        env=_env(dsn),
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: dict[str, float] = {}
    lines: list[str] = []

    def read() -> None:
        for line in worker.stderr:
            lines.append(line)
            for mark in ("worker registered", "state=RUNNING", "state=SUCCESSFUL", "worker stopped"):
                if mark in line:
                    if mark == "worker stopped":
                        try:
                            seen[mark] = _cpu_seconds(worker.pid)
                        except FileNotFoundError:  # exited and reaped before this line was read
                            seen["gone before its last line was read"] = time.monotonic()
                    else:
                        seen[mark] = time.monotonic()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        _wait_until(lambda: "worker registered" in seen, 60, lines)
        key = uuid.uuid4().hex
        with pyqueue_sql.connect(dsn) as db:
            db.queue("emails").push(key, "shop.tasks.nap", {"args": [2], "kwargs": {}})
        _wait_until(lambda: "state=RUNNING" in seen, 30, lines)
        worker.send_signal(signum)
        sent = time.monotonic()
        _, status, usage = os.wait4(worker.pid, 0)
        gone = time.monotonic()
        worker.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if worker.returncode is None:
            worker.kill()
            worker.wait()
    reader.join(5)
    assert worker.returncode == 0, "".join(lines)
    assert "state=SUCCESSFUL" in seen, "".join(lines)  # the running task finished
    assert "worker stopped" in "".join(lines), "".join(lines)
    if "worker stopped" in seen:  # else: the process was gone before its line could be read
        after_stopped = usage.ru_utime + usage.ru_stime - seen["worker stopped"]
        assert after_stopped < 0.1, (after_stopped, "".join(lines))
    assert gone - sent < 4, (gone - sent, "".join(lines))
    with pyqueue_sql.connect(dsn) as db:
        assert db.queue("emails").result(key, "shop.tasks.nap").state == "succeeded"


def _wait_until(ready, seconds: float, lines: list[str]) -> None:
    end = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < end, "".join(lines)
        time.sleep(0.005)

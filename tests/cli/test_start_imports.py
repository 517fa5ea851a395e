"""What a start costs: `import pyqueue_sql` loads the package's logging guard and nothing else, each
public name loads its module when first used, and `pyqueue-sql worker` reaches its first job without
the other commands, the dashboard, the migrator, Django, Spark, OpenTelemetry, pydantic or the other
dialect's driver. Checked by the modules a fresh interpreter holds (a mechanism, not a time that
load moves; the time itself: `python -X importtime -c 'import pyqueue_sql'`)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import cli

ROOT = Path(__file__).resolve().parents[2]

# Loaded only by what uses them: optional integrations, other commands, the migrator.
HEAVY = (
    "django",
    "pyspark",
    "opentelemetry",
    "starlette",
    "uvicorn",
    "jinja2",
    "pydantic",
    "sqlalchemy",
    "alembic",
    "prometheus_client",
    "pyqueue_sql.dashboard",
    "pyqueue_sql.migrate",
    "pyqueue_sql.spark",
    "pyqueue_sql.contrib",
    "pyqueue_sql.demo",
    "pyqueue_sql.aio",
    "pyqueue_sql.cli.admin",
    "pyqueue_sql.cli.queues",
    "pyqueue_sql.cli.messages",
    "pyqueue_sql.cli.dashboard",
)
# ... and by `import pyqueue_sql` alone, not even the client, the worker, the tasks or a driver.
NOT_BY_IMPORT = (*HEAVY, "pyqueue_sql.client", "pyqueue_sql.worker", "pyqueue_sql.tasks", "asyncio")
NOT_BY_IMPORT += ("psycopg", "pymysql", "aiomysql")
DRIVERS = {"postgresql": "psycopg", "mysql": "pymysql"}


def loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def modules_after(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_import_pyqueue_sql_loads_none_of_the_client_worker_tasks_or_integrations():
    assert loaded(modules_after("import pyqueue_sql"), NOT_BY_IMPORT) == []


def test_every_public_name_resolves_to_its_modules_object_when_first_used():
    code = textwrap.dedent(
        """
        import importlib, pyqueue_sql
        from pyqueue_sql import *
        for name in pyqueue_sql.__all__:
            module = importlib.import_module("pyqueue_sql." + pyqueue_sql._LAZY[name])
            assert globals()[name] is getattr(module, name) is getattr(pyqueue_sql, name), name
        assert set(pyqueue_sql.__all__) <= set(dir(pyqueue_sql))
        """
    )
    modules_after(code)
    assert set(pyqueue_sql._LAZY) == set(pyqueue_sql.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        pyqueue_sql.Nothing  # noqa: B018


def test_a_command_loads_its_group_alone_and_the_groups_table_matches_the_parsers():
    for group in set(cli.GROUPS.values()):
        module = importlib.import_module(f"pyqueue_sql.cli.{group}")
        assert set(module.PARSERS) == {c for c, g in cli.GROUPS.items() if g == group}, group
    assert sorted(cli.GROUPS) == sorted(cli.COMMANDS)
    assert cli.command_in(["--dsn", "stats", "worker", "m:f"]) == ("worker",)
    assert cli.command_in(["--help", "worker"]) == cli.command_in(["nothing"]) == ()
    modules = modules_after("from pyqueue_sql import cli\ncli.build_parser(*cli.command_in(['stats', 'q']))")
    assert [m for m in modules if m.startswith("pyqueue_sql.cli.")] == [
        "pyqueue_sql.cli.common",
        "pyqueue_sql.cli.queues",
    ]


PROBE = """
import json, os, sys

def handle(job):
    path = os.environ["PROBE_OUT"]
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            json.dump(sorted(sys.modules), f)
        os.replace(path + ".tmp", path)
"""


def test_the_worker_command_runs_its_first_job_without_what_it_does_not_use(dsn, dialect, db, tmp_path):
    """OpenTelemetry is installed here but nothing set a tracer provider: the worker does not import
    it for spans that would record nothing (pyqueue_sql.tracing.in_use)."""
    queue = db.queue(f"start.{uuid.uuid4().hex[:12]}").create()
    queue.push("k", "kind", {})
    (tmp_path / "start_probe.py").write_text(PROBE)
    out = tmp_path / "modules.json"
    env = os.environ | {"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}", "PROBE_OUT": str(out)}
    env.pop("OTEL_PYTHON_TRACER_PROVIDER", None)
    command = [sys.executable, "-m", "pyqueue_sql.cli", "worker", "start_probe:handle", "--queue", queue.name]
    proc = subprocess.Popen(
        [*command, "--dsn", dsn, "--no-status"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert out.exists(), err
    modules = json.loads(out.read_text())
    other_driver = DRIVERS["mysql" if dialect == "postgresql" else "postgresql"]
    assert DRIVERS[dialect] in modules
    assert loaded(modules, (*HEAVY, other_driver)) == []
    # a plain handler function: nothing imported the tasks, so the target is no App and no Task
    assert loaded(modules, ("pyqueue_sql.tasks",)) == []

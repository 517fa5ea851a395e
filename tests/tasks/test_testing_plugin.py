"""pyqueue_sql.testing, the pytest plugin applications get with the package: its fixture gives a
test an empty migrated database (on the server PYQUEUE_TEST_DSN names: both dialects here), and
App.run_pending runs a sample application's jobs there and reports them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])

SAMPLE_TEST = """
import pyqueue_sql
from pyqueue_sql import App, GiveUp

app = App(queue="mail")


@app.task
def send_welcome(to: str) -> None:
    if to == "nobody":
        raise GiveUp("no such user")


def test_one(pyqueue_dsn, pyqueue_db):
    assert pyqueue_db.stats() == []  # empty: no queue yet
    app.dsn = pyqueue_dsn
    app.create_queues(max_attempts=3)
    send_welcome.defer(to="a@example.com")
    send_welcome.defer(to="nobody")
    report = app.run_pending()
    assert report.succeeded == 1 and report.failed == 1, report
    assert report.errors == ["GiveUp: no such user"]
    app.close()


def test_two_gets_its_own_database(pyqueue_db):
    assert pyqueue_db.stats() == []
"""


@pytest.mark.slow  # a pytest run of its own, building a database per test
def test_the_plugin_gives_each_test_an_empty_migrated_database(server, tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE_TEST)
    env = {**os.environ, "PYQUEUE_TEST_DSN": server.admin_dsn, "PYTHONPATH": ROOT}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "test_sample.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout


def test_the_plugin_is_registered_by_the_package():
    from importlib.metadata import entry_points

    names = {ep.value for ep in entry_points(group="pytest11")}
    if "pyqueue_sql.testing" not in names:
        pytest.skip("the installed metadata predates the entry point: pip install -e . again")
    assert "pyqueue_sql.testing" in names

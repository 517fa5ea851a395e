"""The pyqueue-sql command, run in-process against the test databases."""

from __future__ import annotations

import json
import uuid

import pytest

from pyqueue_sql import cli, migrate


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", ["postgresql", "mysql"])
def test_sql_prints_the_install_and_uninstall_scripts(capsys, name):
    code, out, _ = run(capsys, "sql", "--dialect", name)
    assert code == 0
    assert "queue_reserve" in out and "pyqueue_message" in out
    assert ("--single-transaction" in out) == (name == "postgresql")
    code, out, _ = run(capsys, "sql", "--dialect", name, "--uninstall")
    assert code == 0 and "DROP" in out


def test_create_push_reserve_commit_stats(capsys, dsn):
    queue = f"cli.{uuid.uuid4().hex[:8]}"
    assert run(capsys, "create", queue, "--max-attempts", "4", "--dsn", dsn)[0] == 0
    code, out, _ = run(capsys, "push", queue, "k1", "greet", '{"to": "x"}', "--dsn", dsn)
    assert code == 0 and "inserted" in out
    code, out, _ = run(capsys, "push", queue, "k1", "greet", '{"to": "x"}', "--dsn", dsn)
    assert code == 0 and "duplicate" in out
    run(capsys, "push", queue, "k2", "greet", "[1, 2]", "--priority", "3", "--dsn", dsn)
    code, out, _ = run(capsys, "reserve", queue, "-n", "5", "--commit", "--dsn", dsn)
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(m["key"], m["payload"]) for m in lines] == [("k2", [1, 2]), ("k1", {"to": "x"})]
    code, out, _ = run(capsys, "stats", queue, "--dsn", dsn)
    assert code == 0 and queue in out and "ready" in out
    row = next(line for line in out.splitlines() if line.startswith(queue)).split()
    assert row[1:5] == ["0", "0", "0", "0"]  # committed: nothing left


def test_user_errors_are_one_line_and_non_zero(capsys, dsn):
    code, _, err = run(capsys, "push", "no-such-queue", "k", "kind", "{}", "--dsn", dsn)
    assert code == 1 and "does not exist" in err and "Traceback" not in err
    code, _, err = run(capsys, "push", "q", "k", "kind", "{not json", "--dsn", dsn)
    assert code == 2 and "JSON" in err


def test_no_dsn_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    code, _, err = run(capsys, "stats")
    assert code == 2 and "PYQUEUE_DSN" in err


def test_migrate_reports_the_head(capsys, fresh_database):
    target = fresh_database()
    code, out, _ = run(capsys, "migrate", "--dsn", target)
    assert code == 0 and f"revision: {migrate.head()} (head)" in out


def test_demo_against_the_test_database(capsys, dsn):
    code, out, err = run(capsys, "demo", "--dsn", dsn, "--messages", "600")
    assert code == 0, err
    assert "order-poison" in out and "demo.orders.dead" in out


def test_demo_on_embedded_postgresql_needs_no_server(capsys, monkeypatch, tmp_path):
    """What `make demo` does on a machine with nothing installed."""
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    code, out, err = run(capsys, "demo", "--messages", "400", "--data-dir", str(tmp_path / "pg"))
    assert code == 0, err
    assert "order-poison" in out

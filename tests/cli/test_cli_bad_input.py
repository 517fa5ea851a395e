"""Every verb of the command line (but `worker` and `workers`, tested with the worker) driven with a
bad value of each of its options and arguments, on both dialects: exit code not 0, exactly one line
on stderr, and no traceback (an exception leaving cli.main is one). Global options before the verb,
`stats --json` and its single-table output."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from pyqueue_sql import cli

NO_TOKEN = "00000000-0000-4000-8000-000000000000"
# (verb, arguments); {q} is a real queue, {dsn} the test database, {none} a queue that does not exist
BAD = [
    ("migrate", ["--revision", "no-such-revision", "--dsn", "{dsn}"]),
    ("migrate", ["--adopt", "--downgrade", "--dsn", "{dsn}"]),
    ("migrate", ["--downgrade", "--revision", "no-such-revision", "--dsn", "{dsn}"]),
    ("migrate", ["--dsn", "oracle://x/y"]),
    ("migrate", ["--bogus"]),
    ("migrate", ["--check", "--downgrade", "--dsn", "{dsn}"]),
    ("version", ["--dsn", "oracle://x/y"]),
    ("version", ["extra"]),
    ("sql", ["--dialect", "oracle"]),
    ("sql", []),
    ("sql", ["--dialect", "postgresql", "--uninstall", "extra"]),
    ("grant", ["--role", "r", "--dialect", "postgresql"]),
    ("grant", ["--role", "r", "--producer"]),
    ("grant", ["--role", "r", "--producer", "--dialect", "oracle"]),
    ("grant", ["--role", "r", "--producer", "--apply"]),
    ("grant", ["--role", "r", "--producer", "--dialect", "mysql", "--dsn", "postgresql://x/y"]),
    ("grant", ["--producer", "--dialect", "postgresql"]),
    ("setup", ["no_such_module_{none}:app", "--dsn", "{dsn}"]),
    ("setup", ["tests.tasks.sample_app:greet.fn", "--dsn", "{dsn}"]),
    ("setup", []),
    ("create", ["{q}", "--visibility-timeout", "abc", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--visibility-timeout", "-5", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--visibility-timeout", "1e12", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--visibility-timeout", "nan", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--max-attempts", "0", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--max-attempts", "x", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--max-attempts", "99999999999", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--dead-letter-queue", "{none}", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--history-retention", "-1", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--history-retention", "1e300", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--reset", "nope", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--result-retention", "0", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--result-retention", "1e9", "--dsn", "{dsn}"]),
    ("create", ["{q}", "--result-retention", "x", "--dsn", "{dsn}"]),
    ("create", ["", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "{bad", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "NaN", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "{}", "--run-in", "1e12", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "{}", "--run-in", "-1e12", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "{}", "--run-in", "inf", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "{}", "--run-in", "soon", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "{}", "--priority", "99999999999", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "{}", "--priority", "1.5", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "{}", "--priority", "-2147483649", "--dsn", "{dsn}"]),
    ("push", ["{q}", "", "x", "{}", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "", "{}", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "{}", "--group", "", "--dsn", "{dsn}"]),
    ("push", ["{none}", "k", "x", "{}", "--dsn", "{dsn}"]),
    ("rate", ["{q}", "x", "2", "--dsn", "{dsn}"]),
    ("rate", ["{q}", "x", "2", "60", "--remove", "--dsn", "{dsn}"]),
    ("rate", ["{q}", "x", "0", "60", "--dsn", "{dsn}"]),
    ("rate", ["{q}", "x", "2", "0", "--dsn", "{dsn}"]),
    ("rate", ["{q}", "", "2", "60", "--dsn", "{dsn}"]),
    ("rate", ["{none}", "x", "2", "60", "--dsn", "{dsn}"]),
    ("rates", ["{q}", "--dsn", "oracle://x/y"]),
    ("rates", ["{q}", "extra", "--dsn", "{dsn}"]),
    ("group-limit", ["{q}", "g", "--dsn", "{dsn}"]),
    ("group-limit", ["{q}", "g", "0", "--dsn", "{dsn}"]),
    ("group-limit", ["{q}", "g", "2", "--remove", "--dsn", "{dsn}"]),
    ("push", ["{q}", "k", "x", "{}", "--dsn", "nope://x"]),
    ("publish", ["", "k", "x", "{}", "--dsn", "{dsn}"]),
    ("publish", ["a..b", "k", "x", "{}", "--dsn", "{dsn}"]),
    ("publish", ["a.b", "k", "x", "{bad", "--dsn", "{dsn}"]),
    ("publish", ["a.b", "k", "x", "{}", "--run-in", "1e12", "--dsn", "{dsn}"]),
    ("publish", ["a.b", "k", "x", "{}", "--priority", "x", "--dsn", "{dsn}"]),
    ("publish", ["a.b", "k", "x", "{}", "--priority", "99999999999", "--dsn", "{dsn}"]),
    ("bind", ["", "{q}", "--dsn", "{dsn}"]),
    ("bind", ["a.b", "{none}", "--dsn", "{dsn}"]),
    ("unbind", ["a.b", "{q}", "--dsn", "{dsn}"]),
    ("bindings", ["--queue"]),
    ("groups", ["{q}", "-n", "0", "--dsn", "{dsn}"]),
    ("groups", ["{q}", "-n", "x", "--dsn", "{dsn}"]),
    ("groups", ["{q}", "-n", "5000", "--dsn", "{dsn}"]),
    ("groups", ["{none}", "--dsn", "{dsn}"]),
    ("reserve", ["{q}", "-n", "0", "--dsn", "{dsn}"]),
    ("reserve", ["{q}", "-n", "x", "--dsn", "{dsn}"]),
    ("reserve", ["{q}", "-n", "100000000000", "--dsn", "{dsn}"]),
    ("reserve", ["{q}", "--timeout", "-1", "--dsn", "{dsn}"]),
    ("reserve", ["{q}", "--timeout", "1e12", "--dsn", "{dsn}"]),
    ("reserve", ["{q}", "--timeout", "x", "--dsn", "{dsn}"]),
    ("reserve", ["{none}", "--dsn", "{dsn}"]),
    ("commit", ["{q}", "k", "x", "not-a-token", "--dsn", "{dsn}"]),
    ("commit", ["{q}", "k", "x", NO_TOKEN, "--dsn", "{dsn}"]),
    ("commit", ["{none}", "k", "x", NO_TOKEN, "--dsn", "{dsn}"]),
    ("rollback", ["{q}", "k", "x", "not-a-token", "--dsn", "{dsn}"]),
    ("rollback", ["{q}", "k", "x", NO_TOKEN, "--delay", "1e12", "--dsn", "{dsn}"]),
    ("rollback", ["{q}", "k", "x", NO_TOKEN, "--delay", "x", "--dsn", "{dsn}"]),
    ("rollback", ["{q}", "k", "x", NO_TOKEN, "--error", "boom", "--dsn", "{dsn}"]),
    ("remove", ["{q}", "k", "x", "--dsn", "{dsn}"]),
    ("remove", ["{none}", "k", "x", "--dsn", "{dsn}"]),
    ("show", ["{q}", "k", "x", "--dsn", "{dsn}"]),
    ("show", ["{none}", "k", "x", "--dsn", "{dsn}"]),
    ("result", ["{q}", "k", "x", "--dsn", "{dsn}"]),
    ("result", ["{none}", "k", "x", "--dsn", "{dsn}"]),
    ("result", ["{q}", "", "x", "--dsn", "{dsn}"]),
    ("result", ["{q}", "k", "x", "--wait", "-1", "--dsn", "{dsn}"]),
    ("result", ["{q}", "k", "x", "--wait", "soon", "--dsn", "{dsn}"]),
    ("result", ["{q}", "k", "x", "--wait", "1e12", "--dsn", "{dsn}"]),
    ("cancel", ["{q}", "k", "x", "--dsn", "{dsn}"]),
    ("cancel", ["{none}", "k", "x", "--dsn", "{dsn}"]),
    ("cancel", ["{q}", "k", "", "--dsn", "{dsn}"]),
    ("cancel", ["{q}", "k" * 300, "x", "--dsn", "{dsn}"]),
    ("worker", ["tests.tasks.sample_app:app", "--retry-base", "600", "--dsn", "{dsn}"]),
    ("results", ["{none}", "--dsn", "{dsn}"]),
    ("results", ["{q}", "-n", "0", "--dsn", "{dsn}"]),
    ("results", ["{q}", "--state", "lost", "--dsn", "{dsn}"]),
    ("results", ["{q}", "--before", "yesterday", "--dsn", "{dsn}"]),
    ("pause", ["{none}", "--dsn", "{dsn}"]),
    ("resume", ["{none}", "--dsn", "{dsn}"]),
    ("drop", ["{none}", "--yes", "--dsn", "{dsn}"]),
    ("drop", ["{q}", "--yes", "--no"]),
    ("dead-letters", ["{none}", "--dsn", "{dsn}"]),
    ("dead-letters", ["{q}", "--json=yes", "--dsn", "{dsn}"]),
    ("redrive", ["{q}", "{none}", "--dsn", "{dsn}"]),
    ("redrive", ["{none}", "{q}", "--dsn", "{dsn}"]),
    ("redrive", ["{q}", "{q}", "-n", "0", "--dsn", "{dsn}"]),
    ("redrive", ["{q}", "{q}", "-n", "x", "--dsn", "{dsn}"]),
    ("release", ["{none}", "--dsn", "{dsn}"]),
    ("release", ["{q}", "--worker", "", "--dsn", "{dsn}"]),
    ("release", ["{q}", "--worker", "w" * 300, "--dsn", "{dsn}"]),
    ("release", ["{q}", "--worker"]),
    ("settings", ["{none}", "--dsn", "{dsn}"]),
    ("stats", ["{none}", "--dsn", "{dsn}"]),
    ("stats", ["--json", "{none}", "--dsn", "{dsn}"]),
    ("stats", ["{q}", "{none}", "--dsn", "{dsn}"]),
    ("stats", ["--dsn", "nope://x"]),
    ("stats", ["--dsn", ""]),
    ("demo", ["--messages", "0"]),
    ("demo", ["--messages", "x"]),
    ("demo", ["--timeout", "x"]),
    ("demo", ["--timeout", "1e12"]),
    ("demo", ["--dsn", "nope://x"]),
    ("dashboard", ["--port", "0", "--dsn", "{dsn}"]),
    ("dashboard", ["--port", "70000", "--dsn", "{dsn}"]),
    ("dashboard", ["--port", "x", "--dsn", "{dsn}"]),
    ("dashboard", ["--host", "0.0.0.0", "--dsn", "{dsn}"]),
    ("dashboard", ["--allowed-host", "not a host", "--dsn", "{dsn}"]),
    ("dashboard", ["--dsn", "nope://x"]),
]


def _drive(capsys, argv: list[str]) -> tuple[int, str, str]:
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse's own exit (a bad command line)
        code = exc.code
    except BaseException as exc:  # a traceback: what the user must never see
        pytest.fail(f"{argv!r} raised {exc!r}")
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("verb", "args"), BAD, ids=[f"{v}-{i}" for i, (v, _) in enumerate(BAD)])
def test_bad_input_is_one_line_and_a_failure(capsys, monkeypatch, dsn, queue, verb, args):
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    monkeypatch.delenv("PYQUEUE_DASHBOARD_TOKEN", raising=False)
    none = f"no-such-{uuid.uuid4().hex[:8]}"
    argv = [verb] + [a.replace("{q}", queue.name).replace("{dsn}", dsn).replace("{none}", none) for a in args]
    code, out, err = _drive(capsys, argv)
    assert code not in (0, None), (argv, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, (argv, err)
    assert "Traceback" not in err and "Traceback" not in out
    assert lines[0].startswith("pyqueue-sql"), err


def test_every_verb_is_driven():
    assert set(cli.COMMANDS) - {"worker", "workers"} <= {verb for verb, _ in BAD}


def test_the_dsn_before_the_verb(capsys, monkeypatch, dsn, queue):
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    queue.push("k", "x", {})
    code, out, err = _drive(capsys, ["--dsn", dsn, "stats", queue.name])
    assert code == 0, err
    assert queue.name in out
    code, out, err = _drive(capsys, ["--dsn", dsn, "stats", queue.name, "--dsn", dsn])
    assert code == 0, err
    code, _, err = _drive(capsys, ["--dsn", dsn, "stats", "--dsn", dsn + "x"])
    assert code == 2 and "twice" in err and len(err.strip().splitlines()) == 1
    code, _, err = _drive(capsys, ["--dsn", dsn, "sql", "--dialect", "mysql"])
    assert code == 2 and "sql takes no --dsn" in err


def test_a_dsn_where_the_verb_belongs_is_named_not_echoed(capsys, monkeypatch):
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    secret = "Pw-" + uuid.uuid4().hex[:10]
    for argv in (
        [f"postgresql://app:{secret}@db.example/app", "push", "q", "k", "x", "{}"],
        [f"mysql://app:{secret}@db.example/app", "stats"],
        ["stats", "q", "extra", f"postgresql://app@db.example/app?password={secret}"],
    ):
        code, out, err = _drive(capsys, argv)
        assert code == 2, err
        assert secret not in err + out
        assert len(err.strip().splitlines()) == 1
    code, _, err = _drive(capsys, [f"postgresql://app:{secret}@db.example/app", "stats"])
    assert "--dsn" in err and "DSN" in err


def test_stats_json_and_one_table_without_a_footnote(capsys, dsn, make_queue):
    a, b = make_queue(), make_queue()
    a.push("k1", "x", {})
    a.push("k2", "x", {}, run_at=dt.timedelta(hours=1))
    code, out, err = _drive(capsys, ["stats", a.name, "--json", "--dsn", dsn])
    assert code == 0 and err == ""
    [row] = [json.loads(line) for line in out.splitlines()]
    assert row == {
        "queue": a.name,
        "ready": 1,
        "delayed": 1,
        "reserved": 0,
        "dead": 0,
        "oldest_ready_age_s": row["oldest_ready_age_s"],
        "paused": False,
        "last_minute": None,  # it keeps no history: nothing tells
    }
    assert isinstance(row["oldest_ready_age_s"], (int, float))
    code, out, _ = _drive(capsys, ["stats", "--json", "--dsn", dsn])
    names = [json.loads(line)["queue"] for line in out.splitlines()]
    assert a.name in names and b.name in names
    # the table: its header says "dead", as SQL, Python and the dashboard do; nothing under it
    code, out, err = _drive(capsys, ["stats", a.name, "--dsn", dsn])
    assert code == 0 and err == ""
    header, rule, line = out.splitlines()
    assert header.split()[:5] == ["queue", "ready", "delayed", "reserved", "dead"]
    assert "(ever)" not in out and line.split()[0] == a.name

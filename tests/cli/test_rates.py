"""`pyqueue-sql rate` and `rates` typed as a user types them, on both dialects: what they print,
their exit status, `*` for the whole queue, --remove, --json, and one line on stderr for every bad
command line or refused value. The first and the last command of a session run as processes; the
others run in this process (cli.main, as the process does: a process each cost a second or more
of interpreter start on a loaded machine, and prove nothing more)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid

import pytest

from tests.helpers import run_cli


def sh(dsn, *argv):
    """(exit status, stdout, stderr) of `pyqueue-sql ARGV --dsn DSN` run as a process."""
    env = {k: v for k, v in os.environ.items() if k != "PYQUEUE_DSN"}
    done = subprocess.run(
        [sys.executable, "-m", "pyqueue_sql.cli", *[str(a) for a in argv], "--dsn", dsn],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    return done.returncode, done.stdout, done.stderr


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_rate_sets_lists_and_removes(dsn, queue, capsys):
    code, out, err = sh(dsn, "rate", queue.name, "mail", 2, 60)
    assert (code, out.strip()) == (0, f"rate of kind mail in {queue.name}: at most 2 per 60s"), err
    code, out, err = run_cli(capsys, "rate", queue.name, "*", 10, 3600.5, "--dsn", dsn)
    assert (code, out.strip()) == (
        0,
        f"rate of every kind together in {queue.name}: at most 10 per 3600.5s",
    ), err
    for key in "abc":
        queue.push(key, "mail", {})
    assert len(queue.reserve(n=3)) == 2

    code, out, err = run_cli(capsys, "rates", queue.name, "--dsn", dsn)
    assert code == 0, err
    header, rule, *rows = out.splitlines()
    assert re.split(r"\s{2,}", header) == ["queue", "kind", "n", "per", "in window", "next free at"]
    cells = [re.split(r"\s{2,}", row.strip()) for row in rows]
    assert [c[:5] for c in cells] == [
        [queue.name, "*", "10", "3600.5s", "2"],
        [queue.name, "mail", "2", "60s", "2"],
    ]
    assert cells[1][5].endswith(" UTC")

    code, out, err = run_cli(capsys, "rates", queue.name, "--json", "--dsn", dsn)
    assert code == 0, err
    whole, mail = [json.loads(line) for line in out.splitlines()]
    assert whole["kind"] is None and (whole["n"], whole["per_s"], whole["in_window"]) == (10, 3600.5, 2)
    assert (mail["kind"], mail["n"], mail["per_s"]) == ("mail", 2, 60.0) and mail["next_free_at"]

    code, out, err = run_cli(capsys, "rate", queue.name, "mail", "--remove", "--dsn", dsn)
    assert (code, out.strip()) == (0, f"no rate for kind mail in {queue.name}"), err
    code, out, err = run_cli(capsys, "rate", queue.name, "*", "--remove", "--dsn", dsn)
    assert (code, out.strip()) == (0, f"no rate for every kind together in {queue.name}"), err
    code, out, err = sh(dsn, "rates", queue.name)
    assert (code, out.strip()) == (0, "no rates (set one with `pyqueue-sql rate QUEUE KIND N PER`)"), err
    assert [r.key for r in queue.reserve(n=3)] == ["c"]


@pytest.mark.parametrize(
    ("argv", "status", "text"),
    [
        (["{q}", "mail", "2"], 2, "give N and PER, or --remove"),
        (["{q}", "mail", "2", "60", "--remove"], 2, "--remove takes no N PER"),
        (["{q}", "mail", "0", "60"], 2, "must be at least 1"),
        (["{q}", "mail", "two", "60"], 2, "not an integer"),
        (["{q}", "mail", "2", "soon"], 2, "not a number of seconds"),
        (["{q}", "mail", "2", "0"], 2, "per must be more than 0 seconds and at most 1 day"),
        (["{q}", "mail", "2", "86401"], 2, "per must be more than 0 seconds and at most 1 day"),
        (["{q}", "mail", "10001", "60"], 2, "n must be a whole number from 1 to 10000"),
        (["{q}", "", "2", "60"], 2, "kind"),
        (["{none}", "mail", "2", "60"], 1, "{none}"),
    ],
)
def test_a_bad_rate_is_one_line_and_changes_nothing(dsn, queue, capsys, argv, status, text):
    none = f"t.none.{uuid.uuid4().hex[:8]}"
    argv = [a.replace("{q}", queue.name).replace("{none}", none) for a in argv]
    code, out, err = run_cli(capsys, "rate", *argv, "--dsn", dsn)
    line = one_line(err)
    assert code == status and out == "", (code, out, err)
    assert line.startswith("pyqueue-sql") and text.replace("{none}", none) in line, line
    assert queue.rates() == []

"""`pyqueue-sql group-limit` and the `groups` table's limit and heads columns, typed as a user
types them, on both dialects: a named group's k, `*` for the queue's default, --remove, and one
line on stderr for a bad command line or a refused value. As in test_rates.py, the first and the
last command of a session run as processes, the others in this process (cli.main)."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.helpers import run_cli

from .test_rates import one_line, sh


def test_group_limit_sets_shows_and_removes(dsn, queue, capsys):
    for i in range(3):
        queue.push(f"a-{i}", "job", {}, group="acct-1")
    queue.push("b-0", "job", {}, group="acct-2")
    code, out, err = sh(dsn, "group-limit", queue.name, "acct-1", 2)
    assert (code, out.strip()) == (0, f"group limit of group acct-1 in {queue.name}: up to 2 in flight"), err
    code, out, err = run_cli(capsys, "group-limit", queue.name, "*", 3, "--dsn", dsn)
    assert code == 0 and out.strip() == (
        f"group limit of every group without its own (the default) in {queue.name}: up to 3 in flight"
    ), err
    assert len(queue.reserve(n=10)) == 3  # two of acct-1, the one of acct-2

    code, out, err = run_cli(capsys, "groups", queue.name, "--dsn", dsn)
    assert code == 0, err
    header, _, *rows = out.splitlines()
    assert re.split(r"\s{2,}", header)[-2:] == ["limit", "heads"]
    cells = {r.split()[0]: re.split(r"\s{2,}", r.strip()) for r in rows}
    assert cells["acct-1"][-3:] == ["3", "2", "2"] and cells["acct-2"][-3:] == ["1", "3", "1"]

    code, out, err = run_cli(capsys, "group-limit", queue.name, "acct-1", "--remove", "--dsn", dsn)
    assert code == 0 and "removed: back to the queue's default" in out, err
    code, out, err = sh(dsn, "group-limit", queue.name, "*", "--remove")
    assert code == 0 and "removed: back to 1 at a time" in out, err
    assert {g.group_key: g.group_limit for g in queue.groups()} == {"acct-1": 1, "acct-2": 1}


@pytest.mark.parametrize(
    ("argv", "status", "text"),
    [
        (["{q}", "g"], 2, "give K, or --remove"),
        (["{q}", "g", "2", "--remove"], 2, "--remove takes no K"),
        (["{q}", "g", "0"], 2, "must be at least 1"),
        (["{q}", "g", "10001"], 1, "k must be a whole number from 1 to 10000"),
        (["{none}", "g", "2"], 1, "{none}"),
    ],
)
def test_a_bad_group_limit_is_one_line(dsn, queue, capsys, argv, status, text):
    none = f"t.none.{uuid.uuid4().hex[:8]}"
    argv = [a.replace("{q}", queue.name).replace("{none}", none) for a in argv]
    code, out, err = run_cli(capsys, "group-limit", *argv, "--dsn", dsn)
    line = one_line(err)
    assert code == status and out == "", (code, out, err)
    assert line.startswith("pyqueue-sql") and text.replace("{none}", none) in line, line

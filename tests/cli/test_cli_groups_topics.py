"""The command line of FIFO groups and topics: push --group and groups; bind, unbind, bindings and
publish. Bindings and topics are shared by the whole test database, so every pattern and topic here
starts with a word of the test's own."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from ..helpers import run_cli


def table_rows(out: str) -> list[list[str]]:
    """The rows of a text table (below its header and rule), split on runs of two spaces or more."""
    lines = out.splitlines()
    assert set(lines[1]) <= {"-", " "}, out
    return [re.split(r"\s{2,}", line.strip()) for line in lines[2:]]


def reserve_keys(capsys, dsn, queue, n=10):
    code, out, err = run_cli(capsys, "reserve", queue, "-n", n, "--dsn", dsn)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture
def word():
    """A topic word no other test uses."""
    return f"t{uuid.uuid4().hex[:10]}"


# -- FIFO groups ------------------------------------------------------------------------


def test_push_with_a_group_delivers_the_group_in_order(capsys, dsn, queue):
    for key in ("a1", "a2"):
        code, out, err = run_cli(
            capsys, "push", queue.name, key, "kind", "{}", "--group", "acct-1", "--dsn", dsn
        )
        assert (code, out.strip()) == (0, "inserted"), err
    code, out, _ = run_cli(capsys, "push", queue.name, "a1", "kind", "{}", "--group", "acct-1", "--dsn", dsn)
    assert (code, out.strip()) == (0, "duplicate")
    run_cli(capsys, "push", queue.name, "b1", "kind", "{}", "--group", "acct-2", "--dsn", dsn)
    run_cli(capsys, "push", queue.name, "plain", "kind", "{}", "--dsn", dsn)

    code, out, err = run_cli(capsys, "groups", queue.name, "--dsn", dsn)
    assert code == 0, err
    assert out.splitlines()[0].split() == [
        "group",
        "head",
        "key",
        "head",
        "kind",
        "head",
        "state",
        "messages",
    ]
    assert table_rows(out) == [
        ["acct-1", "a1", "kind", "ready", "2"],
        ["acct-2", "b1", "kind", "ready", "1"],
    ]
    code, out, _ = run_cli(capsys, "groups", queue.name, "-n", "1", "--dsn", dsn)
    assert code == 0 and [r[0] for r in table_rows(out)] == ["acct-1"]

    # one message per group at a time: a2 waits for a1
    held = reserve_keys(capsys, dsn, queue.name)
    assert sorted(m["key"] for m in held) == ["a1", "b1", "plain"]
    assert reserve_keys(capsys, dsn, queue.name) == []
    code, out, _ = run_cli(capsys, "groups", queue.name, "--dsn", dsn)
    assert table_rows(out)[0] == ["acct-1", "a1", "kind", "reserved", "2"]
    [a1] = [m for m in held if m["key"] == "a1"]
    assert run_cli(capsys, "commit", queue.name, "a1", "kind", a1["token"], "--dsn", dsn)[0] == 0
    assert [m["key"] for m in reserve_keys(capsys, dsn, queue.name)] == ["a2"]


def test_groups_of_a_queue_without_any(capsys, dsn, queue):
    queue.push("plain", "kind", {})
    code, out, err = run_cli(capsys, "groups", queue.name, "--dsn", dsn)
    assert code == 0 and out.strip() == f"no groups in {queue.name}", err


def test_group_errors_are_one_line(capsys, dsn, queue):
    code, out, err = run_cli(capsys, "push", queue.name, "k", "kind", "{}", "--group", "", "--dsn", dsn)
    assert code == 1 and out == "" and "group" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = run_cli(capsys, "groups", "no-such-queue", "--dsn", dsn)
    assert code == 1 and "does not exist" in err
    code, _, err = run_cli(capsys, "groups", queue.name, "-n", "0", "--dsn", dsn)  # argparse's exit
    assert code == 2 and "at least 1" in err


# -- topics -----------------------------------------------------------------------------


def test_bind_publish_bindings_unbind(capsys, dsn, make_queue, word):
    billing, audit = make_queue(), make_queue()
    code, out, err = run_cli(capsys, "bind", f"{word}.*.created", billing.name, "--dsn", dsn)
    assert (code, out.strip()) == (0, f"bound: {word}.*.created -> {billing.name}"), err
    code, out, _ = run_cli(capsys, "bind", f"{word}.*.created", billing.name, "--dsn", dsn)
    assert (code, out.strip()) == (0, f"already bound: {word}.*.created -> {billing.name}")
    assert run_cli(capsys, "bind", f"{word}.#", audit.name, "--dsn", dsn)[0] == 0

    code, out, err = run_cli(capsys, "bindings", "--queue", billing.name, "--dsn", dsn)
    assert code == 0, err
    assert out.splitlines()[0].split() == ["pattern", "queue", "created", "at"]
    [row] = table_rows(out)
    assert row[:2] == [f"{word}.*.created", billing.name]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", row[2])  # its zone said
    code, out, _ = run_cli(capsys, "bindings", "--dsn", dsn)
    mine = [r[:2] for r in table_rows(out) if r[0].startswith(word)]
    assert sorted(mine) == sorted([[f"{word}.*.created", billing.name], [f"{word}.#", audit.name]])

    topic = f"{word}.eu.created"
    code, out, err = run_cli(capsys, "publish", topic, "order-7", "created", '{"order": 7}', "--dsn", dsn)
    assert code == 0, err
    # both of this test's queues; another test's catch-all binding could add its own queue
    assert int(re.fullmatch(r"published to (\d+) queue\(s\)", out.strip()).group(1)) >= 2
    for q in (billing, audit):
        info = q.message("order-7", "created")
        assert (info.state, info.payload) == ("ready", {"order": 7})
    code, out, _ = run_cli(capsys, "publish", topic, "order-7", "created", '{"order": 7}', "--dsn", dsn)
    assert code == 0 and out.startswith("published to 0 queues") and "already" in out
    code, out, _ = run_cli(
        capsys,
        "publish",
        f"{word}.signup",
        "u1",
        "signup",
        "{}",
        "--run-in",
        "3600",
        "--priority",
        "4",
        "--dsn",
        dsn,
    )
    assert code == 0 and out.startswith("published to ")
    info = audit.message("u1", "signup")
    assert (info.state, info.priority) == ("delayed", 4)
    assert billing.message("u1", "signup") is None

    code, out, err = run_cli(capsys, "unbind", f"{word}.#", audit.name, "--dsn", dsn)
    assert (code, out.strip()) == (0, f"unbound: {word}.# -> {audit.name}"), err
    code, out, err = run_cli(capsys, "unbind", f"{word}.#", audit.name, "--dsn", dsn)
    assert code == 1 and out == "" and f"no binding {word}.# -> {audit.name}" in err
    code, out, _ = run_cli(capsys, "bindings", "--queue", audit.name, "--dsn", dsn)
    assert code == 0 and out.startswith("no bindings")


def test_publish_without_a_matching_binding_is_not_an_error(capsys, dsn, word):
    code, out, err = run_cli(capsys, "publish", f"{word}.nobody", "k", "kind", "[1]", "--dsn", dsn)
    assert code == 0 and out.startswith("published to 0 queues") and word in out, err


def test_topic_errors_are_one_line(capsys, dsn, queue, word):
    code, out, err = run_cli(capsys, "bind", f"{word}.ab*", queue.name, "--dsn", dsn)
    assert code == 1 and out == "" and "pattern" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "publish", f"{word}.#", "k", "kind", "{}", "--dsn", dsn)
    assert code == 1 and "topic" in err
    code, _, err = run_cli(capsys, "publish", f"{word}.x", "k", "kind", "{not json", "--dsn", dsn)
    assert code == 2 and "JSON" in err
    code, _, err = run_cli(capsys, "bind", f"{word}.x", "no-such-queue", "--dsn", dsn)
    assert code == 1 and "does not exist" in err
    for argv in (("bind", f"{word}.x"), ("unbind", f"{word}.x")):  # no QUEUE
        code, _, _ = run_cli(capsys, *argv, "--dsn", dsn)  # argparse's exit
        assert code == 2

"""The client's calls follow the SQL topics: pyqueue_sql/calls/<topic>.py runs only statements of
that topic's section of queries.sql (sql/README.md's list), and no module of the client is longer
than CLIENT_MODULE_MAX_LINES. Read from the source with ast."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pyqueue_sql

PACKAGE = Path(pyqueue_sql.__file__).parent
ROOT = PACKAGE.parent
CLIENT_MODULE_MAX_LINES = 600
RUNS_A_STATEMENT = ("statement_call", "statement_call_sets")


def statement_topics(dialect: str = "postgresql") -> dict[str, str]:
    """queries.sql's statement name -> its topic, as a module name ("fast paths": fast_paths,
    "history and dead letters": history)."""
    topics, topic = {}, None
    for line in (ROOT / "sql" / dialect / "queries.sql").read_text(encoding="utf-8").splitlines():
        if m := re.match(r"-- ==== (.+?) ====", line):
            topic = m.group(1).split(" and ")[0].replace(" ", "_")
        elif m := re.match(r"-- name: (\w+)", line):
            topics[m.group(1)] = topic
    return topics


def statements_run(path: Path) -> set[str]:
    """The statement names a module passes to statement_call / statement_call_sets: a declared
    statement (statements.PUSH: "push"), or a name as text."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in RUNS_A_STATEMENT
            and node.args
        ):
            first = node.args[0]
            if isinstance(first, ast.Attribute) and first.attr.isupper():
                found.add(first.attr.lower())
            elif isinstance(first, ast.Constant):
                found.add(first.value)
    return found


def misplaced(calls: Path, topics: dict[str, str]) -> list[str]:
    return [
        f"{path.name} runs {name!r} of topic {topics.get(name)!r}"
        for path in sorted(calls.glob("*.py"))
        if path.stem not in ("__init__", "base")
        for name in sorted(statements_run(path))
        if topics.get(name) != path.stem
    ]


def test_each_calls_module_runs_the_statements_of_its_topic():
    topics, mysql = statement_topics(), statement_topics("mysql")
    assert {n: t for n, t in mysql.items() if n in topics and topics[n] != t} == {}
    topics.update(mysql)
    modules = [p for p in (PACKAGE / "calls").glob("*.py") if p.stem not in ("__init__", "base")]
    assert len(modules) >= 14 and all(statements_run(p) for p in modules)
    assert misplaced(PACKAGE / "calls", topics) == []


def test_the_check_finds_a_statement_of_another_topic(tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    (calls / "produce.py").write_text("def f():\n    yield statement_call('push', queue=1)\n")
    (calls / "settle.py").write_text("def f():\n    yield statement_call_sets('push_batch')\n")
    assert misplaced(calls, statement_topics()) == ["settle.py runs 'push_batch' of topic 'produce'"]


def test_no_module_of_the_client_is_longer_than_the_limit():
    modules = [
        PACKAGE / "client.py",
        PACKAGE / "rows.py",
        PACKAGE / "sansio.py",
        *(PACKAGE / "calls").glob("*.py"),
    ]
    lengths = {
        p.relative_to(PACKAGE).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in modules
    }
    assert {p: n for p, n in lengths.items() if n > CLIENT_MODULE_MAX_LINES} == {}

"""No module of the package names a statement of queries.sql by a bare string: every call of the
runner (Dialect.run and its siblings, statement_call, Call, Database.call, Dialect.statement, a
lookup in queries()) takes a declaration of pyqueue_sql.statements, whose parameters and columns
tests/schema/test_statements.py holds against both dialects. Read from the source with ast."""

from __future__ import annotations

import ast
from pathlib import Path

import pyqueue_sql

PACKAGE = Path(pyqueue_sql.__file__).parent
# function name -> the position of its statement argument
BY_NAME = {"statement_call": 0, "statement_call_sets": 0, "Call": 0}
BY_METHOD = {
    "run": 1,
    "run_sets": 1,
    "run_async": 1,
    "run_sets_async": 1,
    "run_in_own_transaction": 1,
    "run_in_own_transaction_async": 1,
    "statement": 0,
    "call": 0,
    "call_sets": 0,
}


def _is_text(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def bare_statements(source: str) -> list[str]:
    """Where a module's code passes a statement as a bare string: 'line: the call'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        at = None
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                at = BY_NAME.get(node.func.id)
            elif isinstance(node.func, ast.Attribute):
                at = BY_METHOD.get(node.func.attr)
            if at is not None and len(node.args) > at and _is_text(node.args[at]):
                found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name | ast.Attribute)
            and ast.unparse(node.value.func).split(".")[-1] in ("queries",)
            and _is_text(node.slice)
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return sorted(found, key=lambda where: int(where.split(":")[0]))


def test_no_package_module_names_a_statement_by_a_bare_string():
    found = {
        f"{p.relative_to(PACKAGE).as_posix()}:{where}"
        for p in sorted(PACKAGE.rglob("*.py"))
        for where in bare_statements(p.read_text(encoding="utf-8"))
    }
    assert found == set()


def test_the_check_finds_each_way_of_naming_a_statement_by_a_string():
    source = "\n".join(
        [
            "yield statement_call('push', queue=q)",
            "d.run(conn, 'push', {})",
            "await d.run_in_own_transaction_async(conn, 'commit', {})",
            "db.call('ingest_flush', queue=q)",
            "d.statement('unlisten')",
            "queries.queries('mysql')['load_ingest_csv']",
            "yield statement_call(statements.PUSH, queue=q)",
            "d.run(conn, statements.PUSH, {})",
            "worker.run()",
        ]
    )
    assert [line.split(":")[0] for line in bare_statements(source)] == ["1", "2", "3", "4", "5", "6"]


def test_rows_come_in_the_declared_order_whatever_order_the_server_sends_the_columns():
    from pyqueue_sql.dialects.base import in_declared_order
    from pyqueue_sql.statements import STATS

    row = ("q", 1, 2, 3, 4, 0.5, False)
    same = [row]
    assert in_declared_order(STATS, STATS.columns, same) is same  # the common case: untouched
    assert in_declared_order(STATS, [c.encode() for c in STATS.columns], same) is same
    shuffled = ("paused", "dead", "queue", "ready", "delayed", "reserved", "oldest_ready_age_s", "extra")
    got = in_declared_order(STATS, shuffled, [(False, 4, "q", 1, 2, 3, 0.5, "x")])
    assert got == [row]
    # a result without a declared column (a schema from before it) is read as it comes
    older = [("q", 1, 2, 3, 4, 0.5)]
    assert in_declared_order(STATS, STATS.columns[:-1], older) is older

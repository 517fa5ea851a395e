"""Every test a page cites by name (a backticked `test_...`, as contract.md names the tests that
carry a guarantee) is a test function of the suite: renaming or removing one fails here until the
page follows."""

from __future__ import annotations

import ast
import gc
import re

from . import blocks as doc

CITED = re.compile(r"`(test_\w+)`")


def _suite_tests() -> set[str]:
    """The names of the suite's test functions. The files are parsed with the garbage collector
    held off, as tests/client/test_layout.py does (a leaked connection's finalizer running inside
    ast.parse fails it on CPython 3.11)."""
    names = set()
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for path in (doc.ROOT / "tests").rglob("test_*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith(
                    "test_"
                ):
                    names.add(node.name)
    finally:
        if was_enabled:
            gc.enable()
    return names


def test_every_cited_test_exists():
    tests = _suite_tests()
    missing = [
        f"{path.name}: {name}"
        for path in doc.documents()
        for name in sorted(set(CITED.findall(path.read_text(encoding="utf-8"))))
        if name not in tests
    ]
    assert not missing, "\n".join(missing)


def test_the_check_sees_a_missing_name():
    assert CITED.findall("tested by `test_pop_counts` and `test_no_such_thing`") == [
        "test_pop_counts",
        "test_no_such_thing",
    ]
    assert "test_no_such_thing" not in _suite_tests() and "test_every_cited_test_exists" in _suite_tests()

"""Each push and publish routine has a *_with_headers sibling that repeats its body (a plain
routine calling its sibling with NULL headers was measured slower: see the comment above
queue_push_with_headers in sql/postgresql/routines/04_produce.sql). The two copies must stay in
step: compared token by token, the sibling may only add what headers need (the argument, its
check, the column and its value) and drop the plain routine's DEFAULTs; any other difference
fails here, so that a change made to one copy is made to the other (a change right beside a
headers line can pass unseen: the comparison is by runs of tokens). Reads files only."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DIALECTS = ("postgresql", "mysql")
TWINS = (
    "queue_push",
    "queue_push_batch",
    "queue_push_grouped",
    "queue_push_batch_grouped",
    "queue_publish",
    "queue_publish_batch",
)
TOKEN = re.compile(r"'[^']*'|\w+|[^\w\s]")
# What the sibling adds mentions one of these: the argument, its local, its check, the column, the
# batch's JSON path or unnested column (h), or a refusal's text naming headers.
HEADERS = {
    "in_headers",
    "v_headers",
    "headers",
    "h",
    "pyqueue__check_headers",
    "pyqueue__check_batch_headers",
}
# The plain routine's only own tokens: PostgreSQL's DEFAULTs (the sibling has none, so that no call
# is ambiguous) and, on MySQL, the refusal of batch arguments it does not take.
PLAIN_ONLY = {"DEFAULT", "NULL"}


def routine(dialect: str, name: str) -> list[str]:
    """The tokens of a routine's definition, comments left out."""
    text = "\n".join(
        p.read_text(encoding="utf-8") for p in sorted((ROOT / "sql" / dialect / "routines").glob("*.sql"))
    )
    start = f"CREATE OR REPLACE FUNCTION {name}(" if dialect == "postgresql" else f"CREATE PROCEDURE {name}("
    end = "\n$$;\n" if dialect == "postgresql" else "\nEND //\n"
    at = text.index(start)
    code = "\n".join(line.split("--")[0] for line in text[at : text.index(end, at)].splitlines())
    return TOKEN.findall(code)


def differences(name: str, plain: list[str], sibling: list[str]) -> list[str]:
    wrong = []
    matcher = difflib.SequenceMatcher(a=plain, b=sibling, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        removed, added = plain[i1:i2], sibling[j1:j2]
        if tag == "equal" or (removed, added) == ([name], [f"{name}_with_headers"]):
            continue
        about_headers = any(t in HEADERS or (t.startswith("'") and "headers" in t) for t in added)
        if added and not about_headers:
            wrong.append(f"only in {name}_with_headers: {' '.join(added)}")
        if any(t not in PLAIN_ONLY and not (t.startswith("'") and about_headers) for t in removed):
            wrong.append(f"only in {name}: {' '.join(removed)}")
    return wrong


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", TWINS)
def test_a_with_headers_sibling_differs_from_its_routine_only_by_the_headers(dialect, name):
    assert differences(name, routine(dialect, name), routine(dialect, f"{name}_with_headers")) == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_difference_that_is_not_about_headers_is_found(dialect):
    plain, sibling = routine(dialect, "queue_push"), routine(dialect, "queue_push_with_headers")
    slower = [*sibling[:-1], "DO", "SLEEP", "(", "1", ")", ";", sibling[-1]]
    found = differences("queue_push", plain, slower)
    assert (
        found
        and all(w.startswith("only in queue_push_with_headers: ") for w in found)
        and "SLEEP" in found[0]
    )
    found = differences("queue_push", [*plain[:-1], "x", ";", plain[-1]], sibling)
    assert found and all(w.startswith("only in queue_push: ") for w in found) and "x" in found[0]

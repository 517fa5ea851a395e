"""Each push and publish routine and its *_with_headers sibling have one body, written once: both
are thin SECURITY DEFINER wrappers over one SECURITY INVOKER pyqueue__* routine (pgmq's pattern),
the plain one passing NULL headers. One pair keeps two copies on purpose: MariaDB's queue_push,
whose nested CALL cost a single push 12-14 % more server CPU (docs/performance.md, Decisions);
those two copies may differ only on the headers lines listed below, so that a change made to one
copy is made to the other. Reads files only."""

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
# The pairs written out twice, and every line on which the sibling differs from the plain routine
# ("-": only in the plain routine, "+": only in the sibling; whitespace and comments left out).
COPIES = {
    ("mysql", "queue_push"): {
        ("-", "IN in_priority DECIMAL(65,30))"),
        ("+", "IN in_priority DECIMAL(65,30),"),
        ("+", "IN in_headers LONGTEXT CHARACTER SET utf8mb4)"),
        ("+", "DECLARE v_headers LONGTEXT CHARACTER SET utf8mb4;"),
        ("+", "CALL pyqueue__check_headers(in_headers, v_headers);"),
        ("-", "scheduled_at_initially, created_at, attempts)"),
        ("+", "scheduled_at_initially, created_at, attempts, headers)"),
        ("-", "v_at, v_now, 0);"),
        ("+", "v_at, v_now, 0, v_headers);"),
    },
}


def sql(dialect: str) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8") for p in sorted((ROOT / "sql" / dialect / "routines").glob("*.sql"))
    )


def definition(dialect: str, name: str, text: str | None = None) -> list[str]:
    """A routine's definition, a line each, comments and blank lines left out, spaces collapsed."""
    text = sql(dialect) if text is None else text
    start = f"CREATE OR REPLACE FUNCTION {name}(" if dialect == "postgresql" else f"CREATE PROCEDURE {name}("
    end = "\n$$;\n" if dialect == "postgresql" else "\nEND //\n"
    at = text.index(start)
    lines = (" ".join(line.split("--")[0].split()) for line in text[at : text.index(end, at)].splitlines())
    return [line for line in lines if line]


def parameters(lines: list[str]) -> list[str]:
    """The names of a definition's parameters (one a line, as every routine file writes them)."""
    signature = lines[
        1 : next(i for i, line in enumerate(lines) if line.startswith(("RETURNS", "SQL SECURITY")))
    ]
    return [m[1] for line in signature if (m := re.match(r"(?:IN )?(in_\w+) ", line))]


def body(dialect: str, lines: list[str]) -> list[str]:
    """The tokens between the definition's BEGIN and its end."""
    code = " ".join(lines)
    return TOKEN.findall(code[code.index(" BEGIN ") + len(" BEGIN ") :].removesuffix(" END;"))


def wrapper_problems(dialect: str, name: str, text: str | None = None) -> list[str]:
    """What keeps name and its sibling from being thin wrappers over one pyqueue__* body."""
    helper = "pyqueue__" + name.removeprefix("queue_")
    plain, sibling = definition(dialect, name, text), definition(dialect, f"{name}_with_headers", text)
    impl = definition(dialect, helper, text)
    args = parameters(sibling)
    flag = dialect == "mysql" and "batch" in name  # MySQL's batches: whether to read the members "headers"
    problems = []
    if parameters(impl) != args + (["in_with_headers"] if flag else []):
        problems.append(f"{helper} does not take {name}_with_headers' arguments")
    if parameters(plain) != args[:-1]:
        problems.append(f"{name} does not take {name}_with_headers' arguments but the headers")
    word = "RETURN" if dialect == "postgresql" else "CALL"
    for routine, passed in (
        (plain, [*args[:-1], "NULL"] + (["FALSE"] if flag else [])),
        (sibling, args + (["TRUE"] if flag else [])),
    ):
        call = [word, helper, "(", *" , ".join(passed).split(), ")", ";"]
        if body(dialect, routine) != call:
            problems.append(f"{routine[0]}: the body is not {' '.join(call)}")
        if not any("SECURITY DEFINER" in line for line in routine):
            problems.append(f"{routine[0]}: not SECURITY DEFINER")
    if any("SECURITY DEFINER" in line for line in impl) or (
        dialect == "mysql" and "SQL SECURITY INVOKER" not in impl
    ):
        problems.append(f"{helper}: not SECURITY INVOKER")
    return problems


def differences(plain: list[str], sibling: list[str], name: str) -> set[tuple[str, str]]:
    sibling = [line.replace(f"{name}_with_headers(", f"{name}(") for line in sibling]
    return {
        (line[0], line[1:].strip())
        for line in difflib.unified_diff(plain, sibling, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    }


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", TWINS)
def test_a_routine_and_its_with_headers_sibling_share_one_body(dialect, name):
    if (dialect, name) in COPIES:
        plain, sibling = definition(dialect, name), definition(dialect, f"{name}_with_headers")
        assert differences(plain, sibling, name) == COPIES[(dialect, name)]
    else:
        assert wrapper_problems(dialect, name) == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_wrapper_that_does_more_than_call_the_body_is_found(dialect):
    text = sql(dialect)
    call = "RETURN pyqueue__publish(" if dialect == "postgresql" else "CALL pyqueue__publish("
    at = text.index(call)
    slower = text[:at] + (
        "PERFORM pg_catalog.pg_sleep(1);\n    " if dialect == "postgresql" else "DO SLEEP(1);\n    "
    )
    found = wrapper_problems(dialect, "queue_publish", slower + text[at:])
    assert len(found) == 1 and "queue_publish(" in found[0] and "the body is not" in found[0]
    invoker = text.replace("SQL SECURITY INVOKER", "SQL SECURITY DEFINER").replace(
        "RETURNS integer\nLANGUAGE plpgsql\nAS $$",
        "RETURNS integer\nLANGUAGE plpgsql\nSECURITY DEFINER\nAS $$",
    )
    assert wrapper_problems(dialect, "queue_publish", invoker) == ["pyqueue__publish: not SECURITY INVOKER"]


def test_a_copy_changed_beside_a_headers_line_is_found():
    plain, sibling = definition("mysql", "queue_push"), definition("mysql", "queue_push_with_headers")
    at = next(i for i, line in enumerate(sibling) if "attempts, headers)" in line)
    changed = [*sibling[:at], sibling[at].replace("attempts,", "attempts, 0 +"), *sibling[at + 1 :]]
    found = differences(plain, changed, "queue_push") - COPIES[("mysql", "queue_push")]
    assert found == {("+", "scheduled_at_initially, created_at, attempts, 0 + headers)")}
    found = COPIES[("mysql", "queue_push")] - differences([*plain, "DO SLEEP(1);"], sibling, "queue_push")
    assert found == set() and ("-", "DO SLEEP(1);") in differences(
        [*plain, "DO SLEEP(1);"], sibling, "queue_push"
    )

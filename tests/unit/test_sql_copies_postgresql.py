"""The PostgreSQL SQL written twice on purpose, and kept alike: each copy may differ from its source
only on the lines listed here, so that a change made to one is made to the other. Reads files only.

- queue_push's body (pyqueue__push) checks its message inline, without the nested calls of
  pyqueue__check_message and pyqueue__check_run_at, which the other producer routines make: each
  nested PL/pgSQL call costs a few microseconds of a push (docs/performance.md, Decisions: "push,
  reserve and commit check plainly valid arguments in one inlined expression").
- schema.sql and routines/01_preamble.sql each refuse an insecure install schema first, the same
  two statements: either file may run without the other (the migrations run routines/ again alone).
  The preamble's also pins the search_path for the routines' SET search_path FROM CURRENT.
"""

from __future__ import annotations

import difflib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PG = ROOT / "sql" / "postgresql"


def routines() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted((PG / "routines").glob("*.sql")))


def lines(text: str) -> list[str]:
    """A line each, comments and blank lines left out, spaces collapsed."""
    out = (
        " ".join(line.split(" --")[0].split())
        for line in text.splitlines()
        if not line.lstrip().startswith("--")
    )
    return [line for line in out if line]


def body(name: str, text: str | None = None) -> list[str]:
    """The lines of a function's body, between its BEGIN and its END."""
    text = routines() if text is None else text
    at = text.index(f"CREATE OR REPLACE FUNCTION {name}(")
    code = lines(text[at : text.index("\n$$;\n", at)])
    return code[code.index("BEGIN") + 1 : len(code) - 1 - code[::-1].index("END;")]


def differences(source: list[str], copy: list[str]) -> set[tuple[str, str]]:
    """The lines only in the source ("-") and only in the copy ("+")."""
    return {
        (line[0], line[1:])
        for line in difflib.unified_diff(source, copy, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    }


# pyqueue__check_message and pyqueue__check_run_at, then the same checks as pyqueue__push writes them
# (from its occurrence-key test to its run_at test): the lines that differ on purpose.
PUSH_CHECKS = {
    # its fast path checks the names in one expression, its slow one calls pyqueue__check_name as the helper
    ("-", "PERFORM pyqueue__check_name('p_key', in_key, 255);"),
    ("-", "PERFORM pyqueue__check_name('p_kind', in_kind, 128);"),
    # pyqueue__occurrence_key's LIKE, written out
    ("-", "IF pyqueue__occurrence_key(in_key) THEN"),
    ("+", "IF in_key LIKE '%@____-__-__T__:__:__Z' THEN"),
    # the queue's max_payload and the time of the call are locals there
    ("-", "IF v_bytes > in_max THEN"),
    ("+", "IF v_bytes > v_max THEN"),
    ("-", "PERFORM pyqueue__refuse_payload(v_bytes, in_max);"),
    ("+", "PERFORM pyqueue__refuse_payload(v_bytes, v_max);"),
    ("-", "IF NOT pg_catalog.isfinite(coalesce(in_run_at, in_now)) THEN"),
    ("+", "IF NOT pg_catalog.isfinite(coalesce(in_run_at, v_now)) THEN"),
    ("-", "RETURN coalesce(in_run_at, in_now);"),
}


def push_checks(text: str | None = None) -> set[tuple[str, str]]:
    helpers = body("pyqueue__check_message", text) + body("pyqueue__check_run_at", text)
    push = body("pyqueue__push", text)
    start = next(i for i, line in enumerate(push) if "LIKE '%@____-__-__T__:__:__Z'" in line)
    end = next(
        i
        for i, line in enumerate(push)
        if line.startswith("RAISE EXCEPTION 'pyqueue:invalid_argument: run_at")
    )
    return differences(helpers, push[start : end + 2])


def guard(text: str) -> list[str]:
    """The statements before the first line that is neither a comment nor part of the two DO blocks."""
    code = lines(text)
    ends = [i for i, line in enumerate(code) if line == "$$;"]
    return code[: ends[1] + 1]


def test_queue_push_checks_its_message_as_the_other_producer_routines_do():
    assert push_checks() == PUSH_CHECKS


def test_a_change_to_one_copy_of_the_push_checks_is_found():
    text = routines()
    changed = text.replace("IF v_bytes > v_max THEN", "IF v_bytes >= v_max THEN", 1)
    assert push_checks(changed) - PUSH_CHECKS == {("+", "IF v_bytes >= v_max THEN")}


def test_schema_sql_and_the_preamble_refuse_an_insecure_schema_alike():
    schema = guard((PG / "schema.sql").read_text(encoding="utf-8"))
    preamble = guard((PG / "routines" / "01_preamble.sql").read_text(encoding="utf-8"))
    assert schema[0] == "DO $$" and "pyqueue.install_refused" in " ".join(schema)
    assert differences(schema, preamble) == {
        (
            "+",
            "PERFORM pg_catalog.set_config('search_path', pg_catalog.quote_ident(v_schema) || ', pg_temp', false);",
        )
    }

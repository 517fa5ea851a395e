"""`python -m bench mutants` run with its default tests kills every built-in mutant docs/reliability.md
says is killed only if the test that kills it is among those defaults: each killer the page names
(`killed: `<test>``, a bare file name being one of tests/contract) lies in bench/mutants.py's KILLERS."""

from __future__ import annotations

import re
from pathlib import Path

from bench.mutants import DEFAULT_TESTS, KILLERS, MODEL

ROOT = Path(__file__).resolve().parents[2]


def named_killers() -> set[str]:
    text = (ROOT / "docs" / "reliability.md").read_text()
    found = set()
    for name in re.findall(r"killed: `([^`]+)`", text):
        path = name.split("::")[0]
        if path.endswith(".py"):
            found.add(path if path.startswith("tests/") else f"tests/contract/{path}")
    return found


def covered(path: str) -> bool:
    for killer in KILLERS:
        where = killer.split("::")[0]
        if path == where and "::" not in killer or path.startswith(where.rstrip("/") + "/"):
            return True
    return False


def test_every_killer_the_reliability_page_names_is_a_default_test():
    killers = named_killers()
    assert len(killers) > 20 and all((ROOT / k).is_file() for k in killers), sorted(killers)
    assert [k for k in sorted(killers) if not covered(k)] == []


def test_the_defaults_hold_both_models_and_the_dead_letter_cancel_test():
    assert DEFAULT_TESTS.split()[0] == MODEL  # the model first: it kills most mutants, fast
    assert "tests/concurrency/test_model.py::test_random_interleavings_match_the_model" in KILLERS
    assert covered("tests/security/test_dead_letter_cancel.py")
    assert not covered("tests/security/test_privileges.py")  # a file, not its folder

"""tests/README.md stays true: its table of folders names every folder of tests/ that holds tests,
and every path its tables name exists, so a moved or new test file or folder fails here until the
page says where it went."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
README = (TESTS / "README.md").read_text(encoding="utf-8")
# A backticked path under tests/ in a table row: a folder ending in "/" or a .py file.
NAMED = re.compile(r"`((?:[\w-]+/)*(?:[\w-]+\.py|[\w-]+/))`")


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("|--")]


def folders_listed() -> set[str]:
    return {row.split("|")[1].strip().strip("`") for row in table_rows(section("Folders"))[1:]}


def folders_with_tests() -> set[str]:
    return {f"{path.parent.relative_to(TESTS)}/" for path in TESTS.glob("*/test_*.py")}


def test_every_folder_with_tests_is_in_the_table():
    assert not folders_with_tests() - folders_listed(), sorted(folders_with_tests() - folders_listed())


def test_every_path_the_page_names_exists():
    named = {path for row in table_rows(README) for path in NAMED.findall(row)}
    named |= set(NAMED.findall(section("Folders")))
    missing = sorted(path for path in named if "<" not in path and not (TESTS / path).exists())
    assert not missing, f"tests/README.md names paths that do not exist: {missing}"


def test_the_checks_see_a_missing_folder_and_a_missing_file():
    assert "contract/" in folders_listed() and "unit/" in folders_listed()
    assert NAMED.findall("| `nowhere/test_nothing.py`, `nowhere/` |") == [
        "nowhere/test_nothing.py",
        "nowhere/",
    ]
    assert not (TESTS / "nowhere/test_nothing.py").exists()

"""tests/README.md stays true: its table of folders names every folder of tests/ that holds tests,
and every path its tables name exists, so a moved or new test file or folder fails here until the
page says where it went. And the files of tests/contract are named after the SQL topics (the
files of sql/<dialect>/routines/, NN_<topic>.sql): test_<topic>.py or test_<topic>_<subject>.py."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROUTINES = TESTS.parent / "sql" / "postgresql" / "routines"
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


def sql_topics() -> set[str]:
    return {path.stem.split("_", 1)[1] for path in ROUTINES.glob("[0-9][0-9]_*.sql")}


def topic_of(test_file: str, topics: set[str]) -> str | None:
    """The topic a contract file is named after: the longest topic its name starts with."""
    stem = test_file.removeprefix("test_").removesuffix(".py")
    found = [t for t in topics if stem == t or stem.startswith(t + "_")]
    return max(found, key=len) if found else None


def test_contract_files_are_named_after_the_sql_topics():
    topics = sql_topics()
    assert {"produce", "reserve", "settle", "fast_paths"} <= topics, topics
    unnamed = [p.name for p in (TESTS / "contract").glob("test_*.py") if topic_of(p.name, topics) is None]
    assert not unnamed, f"tests/contract files not named after an SQL topic of {ROUTINES}: {unnamed}"


def test_the_topic_check_sees_a_file_named_otherwise():
    topics = {"settle", "fast_paths", "limits"}
    assert topic_of("test_settle_give_up.py", topics) == "settle"
    assert topic_of("test_fast_paths.py", topics) == "fast_paths"
    assert topic_of("test_limits.py", topics) == "limits"
    assert topic_of("test_settlement.py", topics) is None
    assert topic_of("test_contract.py", topics) is None

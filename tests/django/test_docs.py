"""docs/django.md shows the test project's own code: every python block of it that the docs
harness does not run (it needs a Django project) names a file of tests/django/project in its
`<!-- not run: ... -->` line, and its lines are that file's, consecutive and in order (compared
without their indentation: a block may show lines from inside an `if`)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.blocks import blocks

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "django.md"
NAMED = re.compile(r"tests/django/project/\S+\.py")


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def _contains(haystack: list[str], needle: list[str]) -> bool:
    return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def shown_but_not_in_the_project(page: Path) -> list[str]:
    problems = []
    for block in blocks(page):
        if block.language != "python" or not block.not_run:
            continue
        named = NAMED.search(block.not_run)
        if named is None:
            problems.append(f"{block.where}: names no file of tests/django/project ({block.not_run})")
        elif not _contains(_lines((ROOT / named.group()).read_text(encoding="utf-8")), _lines(block.text)):
            problems.append(f"{block.where}: not the lines of {named.group()}")
    return problems


def test_the_python_blocks_of_the_django_page_are_the_test_projects_code():
    checked = [b for b in blocks(PAGE) if b.language == "python" and b.not_run]
    assert len(checked) >= 6
    assert shown_but_not_in_the_project(PAGE) == []


def test_the_check_finds_a_block_that_differs_from_the_project(tmp_path):
    page = tmp_path / "django.md"
    page.write_text(
        PAGE.read_text(encoding="utf-8").replace(
            'raise RuntimeError("payment refused")', 'raise ValueError("payment refused")'
        ),
        encoding="utf-8",
    )
    found = shown_but_not_in_the_project(page)
    assert len(found) == 1 and "tests/django/project/shop/views.py" in found[0]

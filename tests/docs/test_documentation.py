"""Every code block of README.md and docs/*.md that a reader would run, run on both dialects
against the real servers (how each kind of block runs: tests/docs/blocks.py). The blocks of a
file run in order in one fresh database, so a tour's state carries from block to block; a
block that is not meant to run says why, and a block nobody runs fails the coverage test."""

from __future__ import annotations

import re

import pytest

from pyqueue_sql import migrate

from . import blocks as doc

FILES = doc.documents()
RUN = [
    p
    for p in FILES
    if p not in doc.contract_pages()  # run with docs/contract.md, in one database
    and any(b.language in doc.RUNNABLE and not b.not_run for c in doc.chapters(p) for b in doc.blocks(c))
]
EMPTY_START = "<!-- test: starts on an empty database -->"


def test_every_block_runs_or_says_why_not():
    """A block of a runnable language is run by a runner or marked as not run (with a reason);
    every other block names what it is, so a new block cannot slip in untested."""
    problems = []
    for path in FILES:
        for block in doc.blocks(path):
            why = doc.unrunnable(block)
            if why:
                problems.append(f"{block.where}: {why}")
            elif block.language in doc.RUNNABLE and block.not_run == "no-run":
                problems.append(f"{block.where}: say why it does not run: <!-- not run: why --> before it")
            elif block.output is not None and (block.language not in doc.RUNNABLE or block.not_run):
                problems.append(f"{block.where}: an output block under a block that does not run")
    assert not problems, "\n".join(problems)


def test_the_runner_refuses_an_unmarked_block(tmp_path):
    """The coverage rules catch a block with no language and an unknown one."""
    page = tmp_path / "page.md"
    page.write_text(
        "```\npyqueue-sql stats\n```\n\n```bash\nls\n```\n\n<!-- not run: a reason -->\n```sh\nx\n```\n"
    )
    found = doc.blocks(page)
    assert doc.unrunnable(found[0]) and doc.unrunnable(found[1])
    assert found[2].not_run == "a reason"


@pytest.mark.parametrize("strict", [False, True])
def test_output_comparison_can_fail(strict):
    doc.expect_output("...\na ... c\nd", "x\na b c\n\nd\n", "here", "r", strict)
    with pytest.raises(AssertionError):
        doc.expect_output("d\na b c", "a b c\nd\n", "here", "r", strict)
    with pytest.raises(AssertionError):  # a revision is shown as the command prints it
        doc.expect_output(
            "(none) -> 0001_baseline", "(none) -> 0002_installed\n", "here", "0002_installed", strict
        )


def test_every_printed_line_is_shown():
    """A line printed and not shown fails, wherever it is, unless a `...` line stands for it; a
    block that shows nothing must print nothing."""
    for shown, printed in [
        ("(none) -> r", "(none) -> r\nrevision: r (head)\n"),
        ("b", "a\nb\n"),
        ("a\nc", "a\nb\nc\n"),
        ("", "created orders.dead\n"),
        ("a\n...", ""),
    ]:
        with pytest.raises(AssertionError, match="not what is shown"):
            doc.expect_output(shown, printed, "here", "r", strict=True)
    doc.expect_output("a\n...", "a\nb\nc\n", "here", "r", strict=True)
    doc.expect_output("a\n...\nc", "a\nc\n", "here", "r", strict=True)
    doc.expect_output("", "\n  \n", "here", "r", strict=True)


def test_a_block_without_output_must_print_nothing(tmp_path, monkeypatch):
    """Run by the runner itself: a console command and a python block that show no output fail
    when they print, and pass once they say that their output is not shown."""
    monkeypatch.setattr(doc, "MISMATCHES", None)
    monkeypatch.setattr(doc, "STRICT", True)
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n$ echo hello\n```\n\n```python\nprint('hello')\n```\n\n"
        "<!-- output not shown: a greeting -->\n```console\n$ echo hello\n```\n\n"
        "```console\n$ echo hello\n...\n```\n\n"
        "<!-- output not shown: a greeting -->\n```python\nprint('hello')\n```\n"
    )
    found = doc.blocks(page)
    session = doc.Session("postgresql", "postgresql://nowhere/x", workdir=tmp_path)
    try:
        for block in found[:2]:
            with pytest.raises(AssertionError, match="not what is shown"):
                session.run(block)
        for block in found[2:]:
            session.run(block)
    finally:
        session.close()


def test_sql_statements_split_at_semicolons():
    assert doc.statements("SELECT 1;  -- one\n-- two\nSELECT\n  2;\nSELECT 3 \\gset\n") == [
        "SELECT 1;  -- one",
        "-- two\nSELECT\n  2;",
        "SELECT 3 \\gset",
    ]
    with pytest.raises(AssertionError):
        doc.statements("SELECT 1")


@pytest.mark.slow  # a database per file and dialect, CLI processes: about a minute in all
@pytest.mark.parametrize("path", RUN, ids=lambda p: p.name)
def test_blocks(path, dialect, fresh_database, tmp_path):
    """The file's blocks for this dialect, in order, in one database of their own."""
    todo = [
        b
        for page in doc.chapters(path)
        for b in doc.blocks(page)
        if b.language in doc.RUNNABLE and not b.not_run and dialect in b.dialects
    ]
    if not todo:
        pytest.skip(f"no {dialect} block to run in {path.name}")
    url = fresh_database(re.sub(r"\W", "_", path.stem.lower())[:12])
    text = "".join(page.read_text(encoding="utf-8") for page in doc.chapters(path))
    if EMPTY_START not in text:
        migrate.upgrade(url)
    session = doc.Session(dialect, url, revision=migrate.head(), workdir=tmp_path)
    try:
        for block in todo:
            session.run(block)
    finally:
        session.close()


LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def anchors(path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings, and its ``<a id="...">`` anchors."""
    found = set()
    text = path.read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add("#" + re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    found |= {"#" + a for a in re.findall(r'<a id="([^"]+)"></a>', text)}
    return found


def test_links_point_at_files_and_headings_that_exist():
    """Every relative link of README.md and docs/*.md names a file of the repository, and a
    heading of it when it has an #anchor."""
    broken = []
    for path in FILES:
        for target, anchor in LINK.findall(path.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            linked = (path.parent / target).resolve()
            if not linked.exists():
                broken.append(f"{path.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{path.name}: {target}{anchor}")
    for path in FILES:  # links inside the same page
        for anchor in re.findall(r"\]\((#[^)\s]+)\)", path.read_text(encoding="utf-8")):
            if anchor not in anchors(path):
                broken.append(f"{path.name}: {anchor}")
    assert not broken, "\n".join(broken)


def capability_table(path) -> dict[str, set[str]]:
    """capability -> the routines the second column of its row names (`queue_x` / `_y`
    shorthand expanded; `monitor` in an admin row stands for monitor's routines)."""
    from pyqueue_sql import privileges

    found = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = cells[0].strip("`") if cells else ""
        if len(cells) < 3 or name not in privileges.CAPABILITIES:
            continue
        routines, last = set(), ""
        for word in re.findall(r"`(queue_\w+|_\w+|monitor)`|\b(monitor)\b", cells[1]):
            word = word[0] or word[1]
            if word.startswith("_"):
                word = last.rsplit("_", 1)[0] + word
            if word == "queue_ingest":  # the table, not a routine
                continue
            if word == "monitor":
                routines |= set(privileges.CAPABILITIES["monitor"])
            else:
                routines.add(word)
                last = word
        found[name] = routines
    return found


@pytest.mark.parametrize("name", ["operations.md", "contract/19_privileges.md"])
def test_capability_tables_match_the_code(name):
    """The capability tables say what pyqueue_sql/privileges.py grants, routine for routine."""
    from pyqueue_sql import privileges

    table = capability_table(doc.ROOT / "docs" / name)
    assert set(table) == set(privileges.CAPABILITIES)
    for capability, routines in privileges.CAPABILITIES.items():
        assert table[capability] == set(routines), capability


def test_cli_reference_names_every_verb():
    """docs/cli.md's list of verbs holds every verb of pyqueue-sql's parser, and no other."""
    import argparse

    from pyqueue_sql.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    verbs = set(sub.choices)
    assert "dashboard" in verbs and "migrate" in verbs
    reference = (doc.ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    synopsis = reference.split("## Every verb", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    documented = set(re.findall(r"pyqueue-sql ([a-z-]+)", synopsis)) | set(
        re.findall(r"\| ([a-z-]+) [A-Z]", synopsis)
    )
    assert documented == verbs


def test_install_lines_name_what_resolves():
    """The package is on no index: installs go through the checkout or the wheel, and no page
    names a schema revision that migrations/versions does not hold."""
    revisions = {p.stem for p in (doc.ROOT / "migrations" / "versions").glob("[0-9]*.py")}
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        assert "pyqueue-sql[" not in text, f"{path.name}: pip install 'pyqueue-sql[...]' cannot resolve"
        stale = set(re.findall(r"\b00[0-9]{2}_[a-z_]+", text)) - revisions
        assert not stale, f"{path.name} names revisions that do not exist: {sorted(stale)}"


def test_the_readme_names_the_spark_download_the_makefile_makes():
    """`make demo` installs pyspark when Java is there: the README says so, with the size the
    Makefile's message gives (both measured against the sdist pip downloads)."""
    makefile = (doc.ROOT / "Makefile").read_text(encoding="utf-8")
    (size,) = set(re.findall(r"pyspark, a download of about (\d+) MB", makefile))
    readme = " ".join((doc.ROOT / "README.md").read_text(encoding="utf-8").split())
    section = readme.split("## Two commands", 1)[1].split("## ", 1)[0]
    assert f"downloads pyspark (about {size} MB" in section

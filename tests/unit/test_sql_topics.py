"""The SQL by topic (sql/README.md): the same routine files in both dialects, each routine under
the same topic and in the same order in both, no file past 1,500 lines, and queries.sql and
docs/contract.md in the order of the topics. Reads files only (no server)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SQL = ROOT / "sql"
DIALECTS = ("postgresql", "mysql")
MAX_LINES = 1500
CREATE = re.compile(r"^CREATE (?:OR REPLACE )?(?:FUNCTION|PROCEDURE|TRIGGER) (\w+)", re.MULTILINE)


def topics() -> list[tuple[str, str]]:
    """(file, topic) of sql/README.md's table of topics, in its order: the one list."""
    text = (SQL / "README.md").read_text(encoding="utf-8").split("\n## The topics\n", 1)[1]
    return re.findall(r"^\| `(\d\d_\w+\.sql)` \| ([^|]+?) \|", text, re.MULTILINE)


def routine_files(dialect: str) -> list[Path]:
    return sorted((SQL / dialect / "routines").glob("*.sql"))


def routines(path: Path) -> list[str]:
    """The routines a file creates, in its order (an overload counted once)."""
    return list(dict.fromkeys(CREATE.findall(path.read_text(encoding="utf-8"))))


def placed(dialect: str) -> dict[str, tuple[str, int]]:
    """routine -> (its file's name, its position in that file)."""
    return {name: (path.name, i) for path in routine_files(dialect) for i, name in enumerate(routines(path))}


def topic_index() -> dict[str, int]:
    """routine (of either dialect) -> the position of its topic in the list."""
    order = [file for file, _ in topics()]
    found = {}
    for dialect in DIALECTS:
        for name, (file, _) in placed(dialect).items():
            found.setdefault(name, order.index(file))
    return found


def test_the_readme_lists_the_files_of_both_dialects_numbered_in_order():
    listed = [file for file, _ in topics()]
    assert listed, "sql/README.md has no table of topics"
    assert [int(f[:2]) for f in listed] == list(range(1, len(listed) + 1))
    for dialect in DIALECTS:
        assert [p.name for p in routine_files(dialect)] == listed, dialect


def test_each_routine_file_starts_with_its_topic():
    for dialect in DIALECTS:
        for file, topic in topics():
            first = (SQL / dialect / "routines" / file).read_text(encoding="utf-8").splitlines()[0]
            assert first == f"-- ==== {topic} ====", f"{dialect}/{file}: {first!r}"


def test_no_sql_file_is_longer_than_1500_lines():
    long = {
        str(p.relative_to(SQL)): n
        for p in sorted(SQL.rglob("*.sql"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these by topic: {long}"


def test_a_routine_of_both_dialects_sits_under_the_same_topic_in_the_same_order():
    pg, my = placed("postgresql"), placed("mysql")
    both = set(pg) & set(my)
    assert len(both) > 90, "the routine names were not found"
    elsewhere = sorted(f"{n}: postgresql {pg[n][0]}, mysql {my[n][0]}" for n in both if pg[n][0] != my[n][0])
    assert not elsewhere, "\n".join(elsewhere)
    for file, _ in topics():
        in_pg = [n for n in sorted(both, key=lambda n: pg[n]) if pg[n][0] == file]
        in_my = [n for n in sorted(both, key=lambda n: my[n]) if my[n][0] == file]
        assert in_pg == in_my, f"{file}: the order differs between the dialects"


def test_every_contract_routine_is_in_both_dialects():
    """queue_ingest_enqueue is PostgreSQL's trigger on the ingest table (MySQL flushes instead)."""
    pg, my = placed("postgresql"), placed("mysql")
    contract = {n for n in set(pg) | set(my) if n.startswith("queue_")}
    assert contract - (set(pg) & set(my)) == {"queue_ingest_enqueue"}


def test_queries_sql_follows_the_topics():
    """Each named statement sits under the topic of the routine it calls, the sections in order."""
    index = topic_index()
    names = [topic for _, topic in topics()]
    for dialect in DIALECTS:
        section, seen, wrong = None, [], []
        for block in re.split(
            r"^(?=-- ==== )", (SQL / dialect / "queries.sql").read_text(encoding="utf-8"), flags=re.M
        ):
            title = re.match(r"-- ==== (.+) ====", block)
            if not title:
                continue
            section = title.group(1)
            assert section in names, f"{dialect}/queries.sql: {section!r} is not a topic"
            seen.append(names.index(section))
            for statement in block.split("\n-- name: ")[1:]:
                name, _, text = statement.partition("\n")
                code = " ".join(line for line in text.splitlines() if not line.startswith("--"))
                called = re.search(r"\b(queue_\w+)\s*\(", code)
                if called and called.group(1) in index and names[index[called.group(1)]] != section:
                    topic = names[index[called.group(1)]]
                    wrong.append(f"{name} calls {called.group(1)} ({topic}) but sits under {section}")
        assert seen == sorted(seen), f"{dialect}/queries.sql: sections out of the topics' order"
        assert not wrong, "\n".join(wrong)


def test_the_contract_page_follows_the_topics():
    """The contract's topic pages (docs/contract/, named after the topic files) hold their headings
    that name routines in the order of their topics."""
    index = topic_index()
    last, out_of_order = (0, ""), []
    pages = [ROOT / "docs" / "contract.md", *sorted((ROOT / "docs" / "contract").glob("*.md"))]
    text = "".join(page.read_text(encoding="utf-8") for page in pages)
    for heading in re.findall(r"^#{2,3} (.+)$", text, re.M):
        named = [index[n] for n in re.findall(r"\b(queue_\w+)", heading) if n in index]
        if not named:
            continue
        if min(named) < last[0]:
            out_of_order.append(f"{heading!r} after {last[1]!r}")
        last = (max(named), heading)
    assert not out_of_order, "\n".join(out_of_order)


def test_each_contract_page_is_named_after_a_topic_file_and_holds_its_routines():
    """docs/contract/NN_topic.md is named after sql/<dialect>/routines/NN_topic.sql, and each heading
    of it that names a routine names one of that file's routines."""
    order = [file for file, _ in topics()]
    index = topic_index()
    misplaced = []
    for page in sorted((ROOT / "docs" / "contract").glob("*.md")):
        assert page.stem + ".sql" in order, f"{page.name} is not named after a topic file of {order}"
        text = page.read_text(encoding="utf-8")
        for heading in re.findall(r"^#{2,3} (.+)$", text, re.M):
            for name in re.findall(r"\b(queue_\w+)", heading):
                if name in index and order[index[name]] != page.stem + ".sql":
                    misplaced.append(f"{page.name}: {heading!r} belongs to {order[index[name]]}")
    assert not misplaced, "\n".join(misplaced)

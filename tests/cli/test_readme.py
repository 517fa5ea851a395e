"""The README's own snippets, run as written (the alembic recipe runs in
test_alembic_app.py): the "Five minutes with SQL only" blocks statement by
statement on a plain connection, and the Python section's block as a script.
Each runs in a database of its own, so the README's queue names are free."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import migrate

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def code_block(heading: str, language: str) -> str:
    """The first ```language block after the line `heading`."""
    start = README.index("\n" + heading + "\n")
    match = re.compile(r"```" + language + r"\n(.*?)```", re.S).search(README, start)
    assert match, f"no {language} block after {heading!r}"
    return match.group(1)


def statements(block: str) -> list[str]:
    """The block's statements: comments and psql meta-commands left out, split at a ';' ending a line."""
    lines = [line.split("--")[0].rstrip() for line in block.splitlines()]
    text = "\n".join(line for line in lines if line.strip())
    return [s.strip() for s in re.split(r";\s*\n|;\s*$", text) if s.strip()]


@pytest.fixture
def readme_db(fresh_database):
    url = fresh_database("readme")
    migrate.upgrade(url)
    db = pyqueue_sql.connect(url)
    db.test_url = url
    yield db
    db.close()


def run_sql(db, sql: str) -> list[tuple]:
    cur = db.connection.cursor()
    try:
        cur.execute(sql)
        rows = list(cur.fetchall()) if cur.description else []
        if db.dialect.name == "mysql":
            while cur.nextset():
                pass
        return rows
    finally:
        cur.close()


@pytest.mark.slow
def test_five_minutes_with_sql_only(readme_db, dialect):
    """Every statement of the README's psql (or mysql) block, in order, with the
    tokens of the reserve put where the README writes '<token>'."""
    heading = "### psql" if dialect == "postgresql" else "### mysql / mariadb"
    tokens: dict[str, str] = {}
    results = []
    for sql in statements(code_block(heading, "sql")):
        match = re.search(r"'(img-\d+|[ab])', 'resize', '<token>'", sql)
        if match:
            sql = sql.replace("<token>", tokens[match.group(1)])
        rows = run_sql(readme_db, sql)
        results.append((sql, rows))
        if "queue_reserve" in sql:
            if dialect == "postgresql":  # SELECT p_key, p_kind, token, attempts FROM queue_reserve(...)
                tokens.update({r[0]: str(r[2]) for r in rows})
            else:  # CALL queue_reserve: (p_key, p_kind, payload, ..., token, ...)
                cur = readme_db.connection.cursor()
                cur.execute("SELECT p_key, reserve_token FROM pyqueue_message WHERE queue_name = 'jobs'")
                tokens.update({k: str(t) for k, t in cur.fetchall() if t is not None})
                cur.close()

    pushes = [rows[0][0] for sql, rows in results if sql.startswith("SELECT queue_push")]
    if dialect == "postgresql":
        assert pushes == [True, False, True, True]  # the second push is the duplicate
        assert sorted(tokens) == ["img-17", "img-19"]  # img-18 is delayed an hour
    else:
        assert sorted(tokens) == ["a", "b", "img-17"]  # img-18 is delayed an hour
    finished = [bool(rows[0][0]) for sql, rows in results if "queue_commit" in sql or "queue_rollback" in sql]
    assert finished == [True, True]  # both tokens still held
    stats = {row[0]: row for row in results[-1][1]}
    assert set(stats) == {"jobs", "jobs.dead"}
    ready, delayed, reserved = stats["jobs"][1:4]
    # img-18 waits an hour and the rolled-back message 5 s; what was committed is gone.
    assert (ready, delayed) == (0, 2)
    assert reserved == (0 if dialect == "postgresql" else 1)  # mysql: img-17 is still held (never finished)


@pytest.mark.slow
def test_python_section(readme_db):
    """The README's Python block as a script, with only the DSN replaced and a
    `handle` that fails the 640-wide resize: the comments in it must hold."""
    block = code_block("## Python", "python")
    assert 'pyqueue_sql.connect("postgresql://app@localhost/app")' in block
    script = block.replace(
        'pyqueue_sql.connect("postgresql://app@localhost/app")', "pyqueue_sql.connect(DSN)"
    )

    handled = []

    def handle(kind, payload):
        handled.append((kind, payload))
        if payload == {"width": 640}:
            raise ValueError("cannot resize to 640")

    namespace = {"DSN": readme_db.test_url, "handle": handle}
    exec(compile(script, "README.md (Python)", "exec"), namespace)

    jobs = namespace["jobs"]
    assert sorted(p.get("width", 0) for _, p in handled) == [0, 0, 640]  # img-17, a, b (18 is delayed)
    info = jobs.message("img-17", "resize")
    assert (info.state, info.attempts) == ("delayed", 1)
    assert info.last_error == "ValueError: cannot resize to 640"
    assert jobs.message("a", "resize") is None  # committed
    assert jobs.message("18", "resize").state == "delayed"  # the int key 18 is "18"
    stats = jobs.stats()
    assert (stats.ready, stats.delayed, stats.reserved) == (0, 2, 0)

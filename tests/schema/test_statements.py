"""The declared statements (pyqueue_sql.statements) hold for both dialects: each is a block of the
dialect's queries.sql (and each block is declared), its parameters are the block's ``%(name)s``
placeholders, and the columns the server returns for it are its row type's fields, in order, read
from the database itself: PostgreSQL describes a prepared statement, MySQL/MariaDB's procedures
are called (their result sets exist only when they run) in a queue of the test's own."""

from __future__ import annotations

import re
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import statements
from pyqueue_sql.queries import queries
from pyqueue_sql.statements import VALUE, Statement

DIALECTS = ("postgresql", "mysql")
PLACEHOLDER = re.compile(r"%\((\w+)\)[sb]")


def declared(dialect: str) -> dict[str, Statement]:
    return {n: s for n, s in statements.STATEMENTS.items() if s.only in (None, dialect)}


def placeholders(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(PLACEHOLDER.findall(text)))


def declaration_problems(dialect: str, blocks: dict[str, str], stmts: dict[str, Statement]) -> list[str]:
    """What differs between the declarations and a dialect's queries.sql blocks."""
    problems = [
        f"{name} is declared but {dialect}'s queries.sql has no such block"
        for name in stmts
        if name not in blocks
    ]
    problems += [
        f"{dialect}'s queries.sql block {name} is not declared" for name in blocks if name not in stmts
    ]
    for name, s in stmts.items():
        if name in blocks and set(placeholders(blocks[name])) != set(s.params_of(dialect)):
            problems.append(
                f"{name}: declared parameters {sorted(s.params_of(dialect))}, "
                f"{dialect}'s block takes {sorted(placeholders(blocks[name]))}"
            )
    return problems


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_declared_statement_is_a_block_of_the_dialect_with_its_parameters(dialect):
    assert declaration_problems(dialect, queries(dialect), declared(dialect)) == []


def test_the_check_finds_a_missing_block_and_other_parameters():
    blocks = dict(queries("postgresql"))
    del blocks["pause"]
    blocks["push"] = blocks["push"].replace("%(priority)s", "%(prio)s")
    blocks["extra"] = "SELECT 1"
    assert declaration_problems("postgresql", blocks, declared("postgresql")) == [
        "pause is declared but postgresql's queries.sql has no such block",
        "postgresql's queries.sql block extra is not declared",
        "push: declared parameters ['key', 'kind', 'payload', 'priority', 'queue', 'run_at'], "
        "postgresql's block takes ['key', 'kind', 'payload', 'prio', 'queue', 'run_at']",
    ]


# -- the columns, read from the server ----------------------------------------------------------


def expected_columns(s: Statement) -> tuple[str, ...] | None:
    """The columns a statement's result has by its declaration (None: one value, any name)."""
    return None if s.returns is VALUE else s.columns


def column_problems(name: str, expected: tuple[str, ...] | None, got: tuple[str, ...] | None) -> list[str]:
    if expected is None:
        return (
            []
            if got is not None and len(got) == 1
            else [f"{name}: one value declared, the server returns {got}"]
        )
    return (
        []
        if got == expected
        else [f"{name}: declared columns {list(expected)}, the server returns {got and list(got)}"]
    )


def test_the_column_check_finds_other_columns():
    assert column_problems("stats", statements.STATS.columns, ("queue", "ready")) == [
        "stats: declared columns ['queue', 'ready', 'delayed', 'reserved', 'dead', 'oldest_ready_age_s', "
        "'paused'], the server returns ['queue', 'ready']"
    ]
    assert column_problems("push", None, ("a", "b")) == [
        "push: one value declared, the server returns ('a', 'b')"
    ]
    assert column_problems("reserve", statements.RESERVE.columns, statements.RESERVE.columns) == []


def postgresql_columns(connection, text: str) -> tuple[str, ...] | None:
    """The result columns of a statement as PostgreSQL describes it prepared (None: no result)."""
    numbered: dict[str, int] = {}
    sql = PLACEHOLDER.sub(lambda m: f"${numbered.setdefault(m.group(1), len(numbered) + 1)}", text)
    pgconn = connection.pgconn
    name = b"pyqueue_describe"
    for res in (pgconn.prepare(name, sql.replace("%%", "%").encode()), pgconn.describe_prepared(name)):
        assert res.error_message == b"", (text, res.error_message)
    res = pgconn.describe_prepared(name)
    pgconn.exec_(b"DEALLOCATE pyqueue_describe")
    return tuple(res.fname(i).decode() for i in range(res.nfields)) if res.nfields else None


@pytest.mark.only_dialect("postgresql")  # PostgreSQL describes its statements without running them
def test_postgresql_returns_the_declared_columns(dsn):
    db = pyqueue_sql.connect(dsn)
    try:
        texts = queries("postgresql")
        problems = []
        for name, s in declared("postgresql").items():
            if s.template or s.positional or s.returns is None:
                continue
            problems += column_problems(
                name, expected_columns(s), postgresql_columns(db.connection, texts[name])
            )
        assert problems == []
    finally:
        db.close()


# What MySQL's row statements are called with, by parameter name (a queue of the test's own).
def mysql_arguments(queue: str) -> dict[str, object]:
    return {
        "queue": queue,
        "key": "k1",
        "kind": "job",
        "worker": "describe",
        "timeout": None,
        "n": 1,
        "kinds": None,
        "state": None,
        "key_prefix": None,
        "after_key": None,
        "after_kind": None,
        "since": None,
        "before": None,
        "mark": 0,
        "name": "describe",
        "host": "h",
        "pid": 1,
        "queues": None,
    }


def mysql_sets(db: pyqueue_sql.Database, s: Statement, args: dict[str, object]) -> list[tuple[str, ...]]:
    """The column names of each result set a CALL of s sends."""
    cur = db.connection.cursor()
    try:
        cur.execute(queries("mysql")[s], {p: args[p] for p in s.params_of("mysql")})
        sets = [tuple(c[0] for c in cur.description)] if cur.description else []
        cur.fetchall()
        while cur.nextset():
            if cur.description:
                sets.append(tuple(c[0] for c in cur.description))
                cur.fetchall()
        return sets
    finally:
        cur.close()


@pytest.mark.only_dialect("mysql")  # the procedures' result sets are read by calling them
def test_mysql_returns_the_declared_columns(dsn):
    db = pyqueue_sql.connect(dsn)
    queue = f"describe_{uuid.uuid4().hex[:8]}"
    try:
        q = db.queue(queue)
        q.create()
        q.set_result_retention(3600)
        q.push("k1", "job", {"n": 1})
        q.push("k2", "job", {"n": 2})
        args = mysql_arguments(queue)
        # the statements that read a held reservation get one; reserve first, then the others
        rows = db.connection.cursor()
        rows.execute(queries("mysql")[statements.RESERVE], {p: args[p] for p in statements.RESERVE.params})
        key, kind, _, token, *_ = rows.fetchone()
        while rows.nextset():
            pass
        rows.close()
        args.update(key=key, kind=kind, token=token, timeout=0.01)
        problems = []
        for name, s in declared("mysql").items():
            if s.template or s.positional or not isinstance(s.returns, type):
                continue
            sets = mysql_sets(db, s, args)
            if s is statements.COMMIT_RESERVE:
                # the reserved rows' set(s) first, the commit's result last (Codec.read_commit_reserve)
                got = sets[-1] + sets[0] if len(sets) > 1 else None
            else:
                got = sets[0] if sets else None
            problems += column_problems(name, expected_columns(s), got)
        assert problems == []
    finally:
        db.queue(queue).drop()
        db.close()

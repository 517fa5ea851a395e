"""The routines called in plain SQL, as psql or the mysql client runs them, for the tests that check
the contract without the Python client: ``SELECT * FROM f(...)`` on PostgreSQL, ``CALL p(...)`` on
MySQL/MariaDB, every result set of a CALL read (a procedure's last one is its status).

- ``statement(dialect, routine, n)``: the text that calls a routine with n arguments;
- ``run(conn, statement, params)``: one statement on a DB-API connection, the first result set's rows;
  ``call(conn, statement, *args)`` the same with the parameters as arguments;
- ``Sql``: the routines over a runner such as the ``raw`` fixture (fixture ``sql``, tests/conftest.py),
  with what the two dialects' drivers take and give differently (durations, JSON, arrays);
- ``Session``: a ``Sql`` on an autocommit connection of its own (fixture ``sql_session``), for the tests
  that hold transactions or race sessions against each other.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import Any

from pyqueue_sql import dialects

Runner = Callable[..., Sequence[Sequence[Any]]]

# A batch reserve's mark (docs/contract/05_reserve.md): its session reads from the first candidate
# its last batch reserve found until a read from the queue's start (PostgreSQL: from its bound) is
# due. MARK_IS (one parameter, the queue): whether the session's mark is that queue's (true or 1);
# MARK_KEPT: the mark stays live for 5 s (what a read from the start that took 0.25 s gives; real
# reads take far less); MARK_PASSED: its time is up (a second ago); MARK_AHEAD: a time no reserve sets; MARK_DUE: when it is up, and the
# server's clock; MARK_DROPPED: the next batch reserve reads from the start. MARK_ALWAYS: PostgreSQL
# takes the mark after every read from its bound, not only after a slow one (pyqueue.mark_after: a
# read as slow as a held horizon makes it, unset); MySQL/MariaDB always do.
MARK_ALWAYS = {
    "postgresql": "SELECT set_config('pyqueue.mark_after', '0', false)",
    "mysql": "DO 0",
}
MARK_DEFAULT = {  # PostgreSQL: a mark after a slow read only again
    "postgresql": "SELECT set_config('pyqueue.mark_after', '', false)",
    "mysql": "DO 0",
}
MARK_IS = {
    "postgresql": "SELECT current_setting('pyqueue.ready_queue', true)"
    " = format('%%I.%%I.%%I', current_database(), current_schema(), %s::text)",
    "mysql": "SELECT @pyqueue__ready_queue = CONCAT(DATABASE(), '.', %s)",
}
MARK_KEPT = {
    "postgresql": "SELECT set_config('pyqueue.ready_full', (clock_timestamp() + interval '5 s')::text, false)",
    "mysql": "SET @pyqueue__ready_full = UTC_TIMESTAMP(6) + INTERVAL 5 SECOND",
}
MARK_AHEAD = {  # an hour ahead: more than a reserve sets (60 s at most)
    "postgresql": "SELECT set_config('pyqueue.ready_full', (clock_timestamp() + interval '1 hour')::text, false)",
    "mysql": "SET @pyqueue__ready_full = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
}
MARK_PASSED = {
    "postgresql": "SELECT set_config('pyqueue.ready_full', (clock_timestamp() - interval '1 s')::text, false)",
    "mysql": "SET @pyqueue__ready_full = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
}
# when the session's next read from the start is due, and the server's clock now
MARK_DUE = {
    "postgresql": "SELECT NULLIF(current_setting('pyqueue.ready_full', true), '')::timestamptz, clock_timestamp()",
    "mysql": "SELECT CAST(@pyqueue__ready_full AS DATETIME(6)), UTC_TIMESTAMP(6)",
}
MARK_DROPPED = {
    "postgresql": "SELECT set_config('pyqueue.ready_full', '', false)",
    "mysql": "SET @pyqueue__ready_full = NULL",
}


def statement(dialect: str, routine: str, n: int, casts: Sequence[str | None] = ()) -> str:
    """``SELECT * FROM routine(%s, ...)`` on PostgreSQL (casts: a suffix per argument, such as
    ``::jsonb``, None or "" for none), ``CALL routine(%s, ...)`` on MySQL/MariaDB (casts ignored)."""
    pg = dialect == "postgresql"
    marks = ", ".join("%s" + ((casts[i] or "") if pg and i < len(casts) else "") for i in range(n))
    return f"SELECT * FROM {routine}({marks})" if pg else f"CALL {routine}({marks})"


def run(conn: Any, sql: str, params: Sequence[Any] | None = None) -> list[tuple]:
    """Runs one statement on a DB-API connection; returns its first result set's rows as tuples,
    after reading every other one (a MySQL CALL answers with several, the last its status)."""
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        rows = [tuple(row) for row in cur.fetchall()] if cur.description else []
        while getattr(cur, "nextset", None) and cur.nextset():
            pass
        return rows
    finally:
        cur.close()


def call(conn: Any, statement: str, *args: Any) -> list[tuple]:
    """run() with the parameters as arguments: ``call(conn, "CALL queue_push(%s, ...)", queue, ...)``."""
    return run(conn, statement, args or None)


class Sql:
    """The routines called as a psql or mysql client would, through ``raw(statement, params)``;
    durations in seconds (an interval on PostgreSQL), JSON as its text, arrays as lists (JSON arrays
    on MySQL/MariaDB)."""

    def __init__(self, raw: Runner, dialect: str) -> None:
        self.raw = raw
        self.dialect = dialect
        self.pg = dialect == "postgresql"

    def call(self, routine: str, *args: Any, casts: Sequence[str | None] = ()) -> list[tuple]:
        return [tuple(row) for row in self.raw(statement(self.dialect, routine, len(args), casts), args)]

    __call__ = call

    def one(self, routine: str, *args: Any, casts: Sequence[str | None] = ()) -> Any:
        """The first column of the routine's one row."""
        (row,) = self.call(routine, *args, casts=casts)
        return row[0]

    def dur(self, seconds: float) -> Any:
        return dt.timedelta(seconds=seconds) if self.pg else seconds

    def json_out(self, value: Any) -> Any:
        """A JSON column as Python: psycopg parses jsonb, PyMySQL returns JSON as its text."""
        if self.pg or not isinstance(value, (str, bytes)):
            return value
        return json.loads(value)

    @staticmethod
    def json_in(value: Any) -> str | None:
        return None if value is None else json.dumps(value)

    @staticmethod
    def text(value: Any) -> str | None:
        """A JSON argument as its text; a str is passed as it is (already JSON text)."""
        return value if value is None or isinstance(value, str) else json.dumps(value)

    def array(self, values: list) -> Any:
        return values if self.pg else json.dumps(values)

    def json_array(self, values: list) -> Any:
        """An array of JSON values: jsonb[] on PostgreSQL, one JSON array on MySQL/MariaDB."""
        return [self.json_in(v) for v in values] if self.pg else json.dumps(values)


class Session(Sql):
    """A Sql on an autocommit connection of its own, as a second psql or mysql session."""

    def __init__(self, dsn: str) -> None:
        dialect = dialects.for_dsn(dsn)
        self.conn = dialect.connect(dsn)
        super().__init__(lambda sql, params=None: run(self.conn, sql, params), dialect.name)

    def sql(self, statement: str, *args: Any) -> list[tuple]:
        """Runs a statement of any kind on this session."""
        return call(self.conn, statement, *args)

    def begin(self) -> None:
        self.sql("BEGIN" if self.pg else "START TRANSACTION")

    def commit(self) -> None:
        self.sql("COMMIT")

    def keep_mark(self, queue: str) -> None:
        """Checks that this session's batch reserve left a mark on the queue, and keeps it live
        for 5 s (MARK_KEPT)."""
        assert self.sql(MARK_IS[self.dialect], queue)[0][0], "the batch reserve left no mark"
        self.sql(MARK_KEPT[self.dialect])

    def close(self) -> None:
        self.conn.close()

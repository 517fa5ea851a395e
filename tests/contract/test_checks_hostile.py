"""Bad input: random and hostile values thrown at every routine from plain SQL.

The property, for every public routine of docs/contract.md and every argument:
a call is either a *clear error* or a *correct result*, and a refused call
writes nothing.

* clear error: a `pyqueue:<code>: <detail>` refusal with the contract's
  SQLSTATE (PostgreSQL 22023 / P0002, MySQL SIGNAL 45000 = errno 1644), or the
  server's own error for a value that does not even fit the parameter's type
  (PostgreSQL 22P02, 22007, 22008, 22003, 42883, 22P05 ... raised while binding
  the arguments, i.e. outside any PL/pgSQL frame; MySQL 1264/1292/1366 naming
  the `in_*` parameter). An error raised from inside a routine body that is not
  a pyqueue refusal (an overflow, a failed cast, a constraint violation, a
  truncation) leaks internals and fails the property.
* nothing half-written: a snapshot of every pyqueue table, restricted to the
  test's queues (and the whole tables' row counts), is the same before and after
  a refused call.
* nothing silently coerced: after a call that succeeded, every changed row holds
  names (queue, key, kind, worker) that were passed exactly, never a cut or
  converted variant.
* hostile but valid values (quotes, `DROP TABLE`, emoji, RTL, combining marks,
  the longest allowed names, multi-MB payloads) round-trip exactly.
* no SQL is built from user text: the routine sources in the catalog hold no
  dynamic SQL, and the Python layer never formats SQL text from values.
* each limit's refusal is the same `pyqueue:<code>: <detail>` on both dialects
  (worker registry queues and ids, the 100-year bound of durations, queue_wait's
  poll, the 128-character kinds filter), and the value just inside the limit works.

Runs are bounded (max_examples per routine, deadline off); every queue name
holds a uuid (the servers are shared).
"""

from __future__ import annotations

import ast
import datetime as dt
import decimal
import json
import os
import pathlib
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..conftest import UNDER_CI

MAX_EXAMPLES = int(os.environ.get("PYQUEUE_HOSTILE_EXAMPLES", "15"))  # raise it for a long hunt


def jload(text):
    """JSON as exact numbers: jsonb stores 1E100 as 1 followed by 100 zeros, which Python's
    float parsing would call a different number."""
    return json.loads(text, parse_float=decimal.Decimal, parse_int=decimal.Decimal)


# Under CI the examples are derandomized (the same ones every run: a red CI is then
# a regression, not a new random find); elsewhere every run explores new ones.
SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=UNDER_CI,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

PG_BIND_ERRORS = {"22P02", "22007", "22008", "22003", "42883", "22P05", "22021", "42804", "2202E", "54000"}
MY_BIND_ERRORS = {1264, 1265, 1292, 1366, 1406}
MY_SIGNAL = 1644
CODES = {"unknown_queue": {"P0002"}, "invalid_argument": {"22023"}, "invalid_payload": {"22023"}}
PYQUEUE_RE = re.compile(r"pyqueue:(unknown_queue|invalid_argument|invalid_payload): \S")

TABLES = [
    "pyqueue_queue",
    "pyqueue_message",
    "pyqueue_history",
    "pyqueue_notify",
    "pyqueue_limit",
    "pyqueue_limit_slot",
    "pyqueue_schedule",
    "queue_ingest",
]
MY_TABLES = TABLES + ["pyqueue_ingest_reject"]
BIG_TABLES = ("pyqueue_message", "pyqueue_history")  # whole-table part: MAX(id) on MySQL, none on PostgreSQL
NAME_COLUMNS = (
    "queue_name",
    "p_key",
    "p_kind",
    "dead_letter_queue",
    "to_queue",
    "reserved_by",
    "worker_name",
    "host",
)


class _Valid:
    def __repr__(self) -> str:
        return "VALID"


VALID = _Valid()  # "the context's valid value for this argument"


# ---------------------------------------------------------------------------
# plain SQL access, as psql / mysql see it
# ---------------------------------------------------------------------------


class Refused(Exception):
    """A call failed; .kind is 'pyqueue', 'bind' or 'leak'."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


@dataclass
class Ctx:
    dialect: str
    conn: Any
    prefix: str
    queue: str = ""
    dlq: str = ""
    other: str = ""
    key: str = "held"
    kind: str = "k"
    token: str = ""
    made: set = field(default_factory=set)

    # -- running SQL ---------------------------------------------------------
    def run(self, sql: str, params: Any = None) -> list[list[tuple]]:
        """Runs one statement; returns the rows of every result set, or raises Refused."""
        if self.dialect == "postgresql":
            import psycopg

            try:
                with self.conn.cursor() as cur:
                    cur.execute(sql, params)
                    return [cur.fetchall() if cur.description else []]
            except psycopg.Error as exc:
                raise classify_pg(exc) from exc
        import pymysql

        cur = self.conn.cursor()
        try:
            cur.execute(sql, params)
            sets = [list(cur.fetchall()) if cur.description else []]
            while cur.nextset():
                if cur.description:
                    sets.append(list(cur.fetchall()))
            return sets
        except pymysql.MySQLError as exc:
            raise classify_my(exc) from exc
        finally:
            cur.close()

    def rows(self, sql: str, params: Any = None) -> list[tuple]:
        return self.run(sql, params)[0]

    # -- state ----------------------------------------------------------------
    def names(self, args: tuple) -> list[str]:
        """The queue names a snapshot covers: the context's and every plain-text argument."""
        out = {self.queue, self.dlq, self.other} | self.made
        for a in args:
            if isinstance(a, str) and "\x00" not in a:
                # the argument, and what a silent cut or trim would have made of it
                out.update(
                    v for v in (a, a[:128], a[:255], a[:200], a.strip(), a.rstrip()) if 0 < len(v) <= 300
                )
        return sorted(out)

    def snapshot(self, args: tuple) -> dict:
        """One round trip: per table, the sorted row hashes of the rows of the covered queues (and of the
        test's workers), and the whole table's row count (the big tables: their highest id on MySQL)."""
        names = self.names(args)
        if self.dialect == "postgresql":
            parts = []
            for t in TABLES + ["pyqueue_worker"]:
                where = (
                    "x.worker_name LIKE %(p)s OR x.worker_name = ANY(%(n)s)"
                    if t == "pyqueue_worker"
                    else "x.queue_name = ANY(%(n)s)"
                )
                whole = (
                    "NULL" if t in BIG_TABLES else f"(SELECT count(*) FROM {t})"
                )  # no index to count cheaply
                parts.append(
                    f"'{t}', json_build_array({whole}, (SELECT array_agg(h ORDER BY h)"
                    f" FROM (SELECT md5(to_jsonb(x)::text) h FROM {t} x WHERE {where}) s))"
                )
            [(snap,)] = self.rows(
                f"SELECT json_build_object({', '.join(parts)})", {"n": names, "p": self.prefix + "%"}
            )
            return snap
        marks = ",".join(["%s"] * len(names))
        parts, params = [], []
        for t in MY_TABLES + ["pyqueue_worker"]:
            cols = ", ".join(f"x.`{c}`" for c in _my_columns(self, t))
            where = (
                f"x.worker_name LIKE %s OR x.worker_name IN ({marks})"
                if t == "pyqueue_worker"
                else f"x.queue_name IN ({marks})"
            )
            params += ([self.prefix + "%"] if t == "pyqueue_worker" else []) + names
            whole = f"(SELECT MAX(id) FROM {t})" if t in BIG_TABLES else f"(SELECT COUNT(*) FROM {t})"
            parts.append(
                f"{whole}, (SELECT GROUP_CONCAT(h ORDER BY h SEPARATOR ',') FROM"
                f" (SELECT MD5(JSON_ARRAY({cols})) h FROM {t} x WHERE {where}) s)"
            )
        [row] = self.rows(f"SELECT {', '.join(parts)}", params)
        return dict(zip([f"{t}{i}" for t in MY_TABLES + ["pyqueue_worker"] for i in "#*"], row))

    def drop_huge(self, args: tuple) -> None:
        """Deletes the multi-MB payloads a successful call stored, so that later snapshots stay cheap."""
        names = self.names(args)
        for t in ("pyqueue_message", "pyqueue_history", "pyqueue_schedule"):
            if self.dialect == "postgresql":
                self.rows(
                    f"DELETE FROM {t} WHERE queue_name = ANY(%s) AND octet_length(payload::text) > 100000",
                    (names,),
                )
            else:
                marks = ",".join(["%s"] * len(names))
                self.rows(
                    f"DELETE FROM {t} WHERE queue_name IN ({marks}) AND LENGTH(payload) > 100000", names
                )

    def odd_values(self, args: tuple) -> list:
        """Stored values no routine may write: times that are not finite (PostgreSQL 'infinity'), or
        zero/invalid (MySQL), durations out of range, max_attempts below 1, attempts below 0."""
        names = self.names(args)
        if self.dialect == "postgresql":
            return self.rows(
                "SELECT 'message', p_key FROM pyqueue_message WHERE queue_name = ANY(%(n)s)"
                "   AND (NOT isfinite(scheduled_at) OR NOT isfinite(scheduled_at_initially) OR attempts < 0"
                "        OR char_length(last_error) > 2000)"
                " UNION ALL SELECT 'queue', queue_name FROM pyqueue_queue WHERE queue_name = ANY(%(n)s)"
                "   AND (visibility_timeout <= interval '0' OR extract(epoch FROM visibility_timeout) > 3155760000"
                "        OR history_retention < interval '0'"
                "        OR extract(epoch FROM history_retention) > 3155760000 OR max_attempts < 1)"
                " UNION ALL SELECT 'schedule', p_key FROM pyqueue_schedule WHERE queue_name = ANY(%(n)s)"
                "   AND NOT isfinite(next_at)",
                {"n": names},
            )
        marks = ",".join(["%s"] * len(names))
        return self.rows(
            f"SELECT 'message', p_key FROM pyqueue_message WHERE queue_name IN ({marks})"
            f"   AND (attempts < 0 OR scheduled_at < '1000-01-01' OR scheduled_at IS NULL"
            f"        OR CAST(payload AS BINARY) REGEXP '\\\\xED[\\\\xA0-\\\\xBF]'"  # not UTF-8
            f"        OR CAST(last_error AS BINARY) REGEXP '\\\\xED[\\\\xA0-\\\\xBF]'"
            f"        OR CHAR_LENGTH(last_error) > 2000)"
            f" UNION ALL SELECT 'queue', queue_name FROM pyqueue_queue WHERE queue_name IN ({marks})"
            f"   AND (visibility_timeout <= 0 OR visibility_timeout > 3155760000 OR history_retention < 0"
            f"        OR history_retention > 3155760000 OR max_attempts < 1)",
            names + names,
        )

    def name_cells(self, args: tuple) -> set[str]:
        """Every name-like cell of the rows the snapshot covers."""
        names = self.names(args)
        cells: set[str] = set()
        if self.dialect == "postgresql":
            for sql in (
                "SELECT queue_name, p_key, p_kind, NULL, NULL, reserved_by FROM pyqueue_message"
                " WHERE queue_name = ANY(%s)",
                "SELECT queue_name, p_key, p_kind, NULL, to_queue, reserved_by FROM pyqueue_history"
                " WHERE queue_name = ANY(%s)",
                "SELECT queue_name, NULL, NULL, dead_letter_queue, NULL, NULL FROM pyqueue_queue"
                " WHERE queue_name = ANY(%s)",
                "SELECT queue_name, p_key, p_kind, NULL, NULL, NULL FROM pyqueue_schedule"
                " WHERE queue_name = ANY(%s)",
                "SELECT queue_name, NULL, p_kind, NULL, NULL, NULL FROM pyqueue_limit"
                " WHERE queue_name = ANY(%s)",
            ):
                for row in self.rows(sql, (names,)):
                    cells.update(c for c in row if c is not None)
            for row in self.rows(
                "SELECT worker_name, host FROM pyqueue_worker WHERE worker_name LIKE %s", (self.prefix + "%",)
            ):
                cells.update(c for c in row if c is not None)
        else:  # as bytes: text that is not UTF-8 must fail here clearly, not in the driver's decoding
            marks = ",".join(["%s"] * len(names))
            b = "CAST({} AS BINARY)".format
            for table, cols in (
                ("pyqueue_message", ("queue_name", "p_key", "p_kind", "reserved_by")),
                ("pyqueue_history", ("queue_name", "p_key", "p_kind", "to_queue", "reserved_by")),
                ("pyqueue_queue", ("queue_name", "dead_letter_queue")),
                ("pyqueue_schedule", ("queue_name", "p_key", "p_kind")),
                ("pyqueue_limit", ("queue_name", "p_kind")),
            ):
                for row in self.rows(
                    f"SELECT {', '.join(map(b, cols))} FROM {table} WHERE queue_name IN ({marks})", names
                ):
                    cells.update(_utf8(c, table) for c in row if c is not None)
            for row in self.rows(
                f"SELECT {b('worker_name')}, {b('host')}, {b('queues')} FROM pyqueue_worker"
                " WHERE worker_name LIKE %s",
                (self.prefix + "%",),
            ):
                cells.update(_utf8(c, "pyqueue_worker") for c in row[:2] if c is not None)
                if row[2] is not None:
                    _utf8(row[2], "pyqueue_worker")
        return cells


def _utf8(cell: bytes, table: str) -> str:
    try:
        return cell.decode("utf-8")
    except UnicodeDecodeError:
        raise AssertionError(f"{table} holds text that is not UTF-8: {cell[:40]!r}") from None


_MY_COLUMNS: dict[str, list[str]] = {}


def _my_columns(c: Ctx, table: str) -> list[str]:
    if table not in _MY_COLUMNS:
        _MY_COLUMNS[table] = [
            r[0]
            for r in c.rows(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s"
                " ORDER BY ORDINAL_POSITION",
                (table,),
            )
        ]
        assert _MY_COLUMNS[table], table
    return _MY_COLUMNS[table]


def classify_pg(exc) -> Refused:
    state = getattr(exc, "sqlstate", None)
    diag = getattr(exc, "diag", None)
    message = (diag.message_primary if diag is not None and diag.message_primary else str(exc)) or ""
    context = (diag.context if diag is not None else None) or ""
    m = PYQUEUE_RE.match(message)
    if m:
        if state in CODES[m.group(1)]:
            return Refused("pyqueue", message)
        return Refused("leak", f"{state} {message}")
    if state is None and "NUL (0x00)" in str(exc):
        return Refused("bind", str(exc))  # psycopg refuses a NUL in text before sending
    if state in PG_BIND_ERRORS and "PL/pgSQL" not in context and "SQL function" not in context:
        return Refused("bind", f"{state} {message}")
    return Refused("leak", f"{state} {message} [context: {context}]")


def classify_my(exc) -> Refused:
    code = exc.args[0] if exc.args else None
    message = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
    if code == MY_SIGNAL and PYQUEUE_RE.match(message):
        return Refused("pyqueue", message)
    if code in MY_BIND_ERRORS and re.search(r"\bin_\w+", message):
        return Refused("bind", f"{code} {message}")
    return Refused("leak", f"{code} {message}")


# ---------------------------------------------------------------------------
# hostile values per type
# ---------------------------------------------------------------------------


def hostile(fixed: list, *more: st.SearchStrategy, sweep: list | None = None) -> st.SearchStrategy:
    """A strategy of the fixed hostile values and random ones; .fixed keeps the values the sweep
    tries one by one (all fixed ones unless `sweep` names a subset)."""
    strategy = st.one_of(st.sampled_from(fixed), *more)
    strategy.fixed = list(fixed if sweep is None else sweep)
    return strategy


SQLISH = [
    "'; DROP TABLE pyqueue_message; --",
    "%s",
    "%(x)s",
    "\\",
    "\\'",
    "'",
    '"',
    "pyqueue_queue",
    "` OR 1=1 -- ",
    "$$",
    "$1",
    "x'); DELETE FROM pyqueue_queue; --",
    "/*",
    "NULL",
    "\\N",
    "?",
]
UNICODE = [
    "😀",
    "😀" * 64,
    "\u202eevil\u202c",
    "e\u0301",
    "ﬀ",
    "İı",
    "\u00a0",
    "\u200b",
    "中文キュー",
    "\t",
    "\n",
]
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


def names(limit: int, dialect: str, *, sqlish: bool = True) -> st.SearchStrategy:
    """Hostile values for a name argument of at most `limit` characters."""
    fixed = [
        None,
        "",
        " ",
        "a ",
        "a\u3000",
        "x" * (limit + 1),
        "😀" * (limit + 1),
        "y" * 10_000,
        "a\x00b",
        "\x00",
        "x" * (limit - 1) + " ",
    ]
    sweep = list(fixed) + ["'; DROP TABLE pyqueue_message; --", "%s", "\\'", "😀", "\u202eevil\u202c", "\n"]
    if sqlish:
        fixed += SQLISH + UNICODE
    if dialect == "mysql":
        raw = [b"\xff\xfe", b"ok\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]
        fixed += raw
        sweep += raw[1:3]
    return hostile(fixed, TEXT, sweep=sweep)


def ints(dialect: str) -> st.SearchStrategy:
    fixed = [
        None,
        0,
        -1,
        1,
        2,
        2**31 - 1,
        2**31,
        -(2**31) - 1,
        2**63,
        -(2**63),
        10**30,
        10**70,
        decimal.Decimal("2.5"),
        decimal.Decimal("1e-30"),
        decimal.Decimal("-0"),
        "abc",
        "1e3",
        " 7 ",
        "",
        "0x10",
        "1.0",
    ]
    if dialect == "postgresql":
        fixed += [2.5, float("nan"), float("inf"), -float("inf")]
    else:
        fixed += ["nan", "inf", "-inf", 1.5]
    return hostile(fixed, st.integers(min_value=-(2**40), max_value=2**40))


def durations(dialect: str) -> st.SearchStrategy:
    if dialect == "postgresql":
        fixed = [
            None,
            "-1 second",
            "0",
            "-0",
            "1 microsecond",
            "0.0000001 seconds",
            "100 years",
            "101 years",
            "36525 days",
            "36526 days",
            "3155760000 seconds",
            "3155760001 seconds",
            "1 mon -31 days",
            "178000000 years",
            "infinity",
            "-infinity",
            "abc",
            "",
            "1 day -86400 seconds",
            "P1Y",
            "-2147483648 days",
            "2147483647 months",
            "'; DROP TABLE pyqueue_queue; --",
        ]
        return hostile(fixed, st.integers(min_value=-(10**7), max_value=10**7).map(lambda s: f"{s} seconds"))
    fixed = [
        None,
        -1,
        0,
        decimal.Decimal("0.0000001"),
        decimal.Decimal("-0.000001"),
        3155760000,
        3155760001,
        10**20,
        10**30,
        "abc",
        "",
        "nan",
        "inf",
        "-inf",
        "1e400",
        " 5",
        "5s",
        1e-9,
        "'; DROP TABLE pyqueue_queue; --",
    ]
    return hostile(fixed, st.integers(min_value=-(10**7), max_value=10**7))


def short_durations(dialect: str) -> st.SearchStrategy:
    """For queue_wait's timeout: hostile ones, never a valid long wait."""
    if dialect == "postgresql":
        return hostile(
            [
                None,
                "0",
                "-1 second",
                "1 hour 1 second",
                "101 years",
                "abc",
                "178000000 years",
                "infinity",
                "-0",
            ]
        )
    return hostile([None, 0, -1, 3601, 10**20, "abc", "nan", decimal.Decimal("-0.000001")])


def times(dialect: str) -> st.SearchStrategy:
    if dialect == "postgresql":
        fixed = [
            None,
            "infinity",
            "-infinity",
            "9999-12-31 23:59:59.999999+00",
            "0001-01-01 00:00:00+00",
            "4713-01-01 00:00:00+00 BC",
            "294276-12-31 23:59:59+00",
            "294277-01-01 00:00:00+00",
            "2020-02-30 00:00:00+00",
            "abc",
            "",
            "epoch",
            "2000-01-01 00:00:00",
            "today",
            "allballs",
            "'; DROP TABLE pyqueue_message; --",
        ]
        return hostile(
            fixed,
            st.datetimes(
                min_value=dt.datetime(1, 1, 2),
                max_value=dt.datetime(9999, 12, 30),
                timezones=st.just(dt.timezone.utc),
            ),
        )
    fixed = [
        None,
        "9999-12-31 23:59:59.999999",
        "1000-01-01 00:00:00",
        "0000-00-00 00:00:00",
        "2020-02-30 00:00:00",
        "abc",
        "",
        "10000-01-01 00:00:00",
        "infinity",
        "2020-01-01 25:00:00",
        "2020-01-01T00:00:00Z",
        "2020-01-01 00:00:00+05:00",
        "0001-01-01 00:00:00",
        20200101,
        -1,
        "'; DROP TABLE pyqueue_message; --",
    ]
    return hostile(
        fixed, st.datetimes(min_value=dt.datetime(1000, 1, 2), max_value=dt.datetime(9999, 12, 30))
    )


HUGE_PAYLOAD = json.dumps({"blob": "x" * (3 * 1024 * 1024)})


def payloads(dialect: str) -> st.SearchStrategy:
    fixed = [
        None,
        "",
        " ",
        "{not json",
        '{"a":',
        "NaN",
        "Infinity",
        "undefined",
        "{'a': 1}",
        "null",
        "[]",
        "1",
        '"s"',
        '{"a":"\\u0000"}',
        '{"a":1,"a":2}',
        "1e400",
        '"\\ud800"',
        "[" * 5000 + "]" * 5000,
        '{"a": 1} trailing',
        "\ufeff{}",
        HUGE_PAYLOAD,
        "'; DROP TABLE pyqueue_message; --",
        '{"sql": "\'; DROP TABLE pyqueue_message; --"}',
        json.dumps({"e": "😀\u202e"}),
        "true",
        "false",
    ]
    if dialect == "mysql":
        fixed += [b'{"a":"\xff"}', b"\xff", b'"ok\xc3\x28"', b'"\xed\xa0\x80"']
    return hostile(fixed, TEXT)


def tokens(dialect: str) -> st.SearchStrategy:
    fixed = [
        None,
        "",
        "not-a-uuid",
        "00000000-0000-0000-0000-000000000000",
        str(uuid.uuid4()),
        "{" + str(uuid.uuid4()) + "}",
        str(uuid.uuid4()).upper(),
        str(uuid.uuid4()) + "\n",
        str(uuid.uuid4()).replace("-", ""),
        "'; DROP TABLE pyqueue_message; --",
        "x" * 10_000,
    ]
    return hostile(fixed)


def kinds_filter(dialect: str) -> st.SearchStrategy:
    if dialect == "postgresql":
        return hostile(
            [
                None,
                [],
                [None],
                [""],
                ["x" * 129],
                ["a "],
                ["k"] * 10_000,
                ["'; DROP TABLE pyqueue_message; --"],
                ["k", None],
                ["\x00"],
            ],
            st.lists(TEXT, max_size=4),
        )
    return hostile(
        [
            None,
            "",
            "[]",
            "[null]",
            "[1]",
            "{}",
            "not json",
            '"k"',
            '[["k"]]',
            '["' + "x" * 129 + '"]',
            '["a "]',
            json.dumps(["k"] * 10_000),
            '["\'; DROP TABLE pyqueue_message; --"]',
            '["k", null]',
            b'["\xff"]',
            '[""]',
            '{"0": "k"}',
        ],
        st.lists(TEXT, max_size=4).map(json.dumps),
    )


def cron(dialect: str) -> st.SearchStrategy:
    return hostile(
        [
            None,
            "",
            " ",
            "* * * * *",
            "61 * * * *",
            "*/0 * * * *",
            "0 0 31 2 *",
            "* * * * * *",
            "1- * * * *",
            "-1 * * * *",
            "99999999999999999999 * * * *",
            "*/99999999999 * * * *",
            "1,2,,3 * * * *",
            "\t* * * * *",
            "5-1 * * * *",
            "5\n * * * *",
            "5 *\n * * *",
            "* * * * 5\n",
            "0 0 1 1 0\n",
            "* * * * 8",
            "@daily",
            "0 9 * JAN MON",
            "'; DROP TABLE pyqueue_schedule; --",
            "* * * * *" * 1000,
            "０ * * * *",
            "٣ * * * *",
        ],
        TEXT,
    )


def text_array(limit: int, dialect: str) -> st.SearchStrategy:
    """PostgreSQL text[] arguments of batch routines."""
    return hostile(
        [None, [], [None], [""], ["x" * (limit + 1)], ["a "], ["a", "a"], ["a"] * 20_000],
        st.lists(st.one_of(st.just("a"), TEXT, st.none()), max_size=4),
    )


# ---------------------------------------------------------------------------
# the context: a queue with a dead-letter queue, a ready and a held message
# ---------------------------------------------------------------------------


@pytest.fixture
def ctx(db, dialect):
    c = Ctx(dialect=dialect, conn=db.connection, prefix=f"hx{uuid.uuid4().hex[:10]}")
    c.queue, c.dlq, c.other = c.prefix + ".main", c.prefix + ".dlq", c.prefix + ".other"
    if dialect == "postgresql":
        c.rows("SELECT queue_create(%s)", (c.dlq,))
        c.rows("SELECT queue_create(%s, interval '30 seconds', 3, %s, interval '1 day')", (c.queue, c.dlq))
        c.rows("SELECT queue_create(%s)", (c.other,))
        for q in (c.queue, c.other):  # hostile but valid payloads (3 MiB) above the default max_payload
            c.rows("SELECT queue_set_max_payload(%s, 268435456)", (q,))
        c.rows("SELECT queue_push(%s, 'ready', 'k', '{\"n\": 1}')", (c.queue,))
        c.rows("SELECT queue_push(%s, 'held', 'k', '{\"n\": 2}', NULL, 5)", (c.queue,))
        [(key, kind, token)] = c.rows(
            "SELECT p_key, p_kind, token::text FROM queue_reserve(%s, 'w', NULL, 1)", (c.queue,)
        )
    else:
        c.rows("CALL queue_create(%s, NULL, NULL, NULL, NULL)", (c.dlq,))
        c.rows("CALL queue_create(%s, 30, 3, %s, 86400)", (c.queue, c.dlq))
        c.rows("CALL queue_create(%s, NULL, NULL, NULL, NULL)", (c.other,))
        for q in (c.queue, c.other):  # hostile but valid payloads (3 MiB) above the default max_payload
            c.rows("CALL queue_set_max_payload(%s, 268435456)", (q,))
        c.rows("CALL queue_push(%s, 'ready', 'k', '{\"n\": 1}', NULL, NULL)", (c.queue,))
        c.rows("CALL queue_push(%s, 'held', 'k', '{\"n\": 2}', NULL, 5)", (c.queue,))
        [row] = c.rows("CALL queue_reserve(%s, 'w', NULL, 1, NULL)", (c.queue,))
        key, kind, token = row[0], row[1], row[3]
    assert key == "held"
    c.key, c.kind, c.token = key, kind, str(token)
    yield c
    _cleanup(c)


def _cleanup(c: Ctx) -> None:
    """Drops every queue of the test. The dead letter links go first: a queue that is the dead letter
    queue of another is refused by queue_drop, and left behind, a queue of a hostile name (MySQL takes
    'a\\x00b') would be found by a later test of this process that draws the same name."""
    queues = sorted(c.made) + [c.queue, c.other, c.dlq]
    for q in queues:
        c.rows("UPDATE pyqueue_queue SET dead_letter_queue = NULL WHERE queue_name = %s", (q,))
    for q in queues:
        try:
            c.rows("SELECT queue_drop(%s)" if c.dialect == "postgresql" else "CALL queue_drop(%s)", (q,))
        except Refused:
            pass
    left = c.rows(
        "SELECT queue_name FROM pyqueue_queue WHERE queue_name IN ({})".format(
            ",".join(["%s"] * len(queues))
        ),
        tuple(queues),
    )
    assert not left, f"queues left behind: {left}"
    for t in ("pyqueue_history", "pyqueue_schedule", "pyqueue_limit_slot", "pyqueue_limit", "pyqueue_notify"):
        for q in queues:
            c.rows(f"DELETE FROM {t} WHERE queue_name = %s", (q,))
    c.rows("DELETE FROM pyqueue_worker WHERE worker_name LIKE %s", (c.prefix + "%",))


# ---------------------------------------------------------------------------
# the routines: SQL per dialect, and the type of each argument
# ---------------------------------------------------------------------------


@dataclass
class Routine:
    name: str
    pg: str
    my: str
    args: list[tuple[str, Callable[[Ctx], Any], Callable[[str], st.SearchStrategy]]]

    def sql(self, dialect: str) -> str:
        return self.pg if dialect == "postgresql" else self.my


def q(c):
    return c.queue


def dlq(c):
    return c.dlq


def other(c):
    return c.other


def key(c):
    return c.key


def kind(c):
    return c.kind


def tok(c):
    return c.token


def none(c):
    return None


def payload_ok(c):
    return '{"ok": true}'


def one(c):
    return 1


def kinds_ok(c):
    return ["k"] if c.dialect == "postgresql" else '["k"]'


def dur_ok(c):
    return "10 seconds" if c.dialect == "postgresql" else 10


def fresh_queue(c: Ctx) -> str:
    """A queue made for this call (queue_drop may drop it)."""
    name = f"{c.prefix}.f{uuid.uuid4().hex[:6]}"
    c.made.add(name)
    c.rows(
        "SELECT queue_create(%s)"
        if c.dialect == "postgresql"
        else "CALL queue_create(%s, NULL, NULL, NULL, NULL)",
        (name,),
    )
    return name


def new_name(c: Ctx) -> str:
    name = f"{c.prefix}.n{uuid.uuid4().hex[:6]}"
    c.made.add(name)
    return name


def worker_name(c):
    return f"{c.prefix}-w"


def QN(d):
    return names(128, d)


def KEY(d):
    return names(255, d)


def KIND(d):
    return names(128, d)


def WORKER(d):
    return names(255, d)


def PAY(d):
    return payloads(d)


def TIME(d):
    return times(d)


def INT(d):
    return ints(d)


def DUR(d):
    return durations(d)


def TOK(d):
    return tokens(d)


def KINDS(d):
    return kinds_filter(d)


def batch_pg(d):  # (keys, kinds, payloads) arrays drawn together
    return text_array(255, d)


def pg_payload_array(d):
    return hostile(
        [None, [], [None], ["{not json"], ["null"], [HUGE_PAYLOAD], ['{"a":"\\u0000"}']],
        st.lists(
            st.one_of(payloads(d).filter(lambda p: not isinstance(p, bytes)), st.just("{}")), max_size=4
        ),
    )


def pg_int_array(d):
    return hostile(
        [None, [], [None], [2**31], [10**30], [2.5]],
        st.lists(
            st.one_of(st.none(), ints(d).filter(lambda v: isinstance(v, int) and -(2**31) <= v < 2**31)),
            max_size=4,
        ),
    )


def pg_time_array(d):
    return hostile(
        [None, [], [None], ["infinity"], ["-infinity"], ["abc"]],
        st.lists(st.one_of(st.none(), st.just("2000-01-01 00:00:00+00")), max_size=4),
    )


def pg_token_array(d):
    return hostile(
        [None, [], [None], ["abc"], [str(uuid.uuid4())] * 2],
        st.lists(st.sampled_from([str(uuid.uuid4()), None, ""]), max_size=4),
    )


def my_messages(d):
    good = {"p_key": "a", "p_kind": "k", "payload": {"n": 1}}
    fixed = [
        None,
        "",
        "[]",
        "{}",
        "[1]",
        "null",
        "not json",
        '[{"p_key":null,"p_kind":"k","payload":1}]',
        '[{"p_key":"a","p_kind":"k"}]',
        '[{"p_key":"a","payload":1}]',
        json.dumps([{**good, "run_at": "abc"}]),
        json.dumps([{**good, "run_at": "9999-12-31 23:59:59.999999"}]),
        json.dumps([{**good, "run_at": "2020-02-30 00:00:00"}]),
        json.dumps([{**good, "run_at": 5}]),
        json.dumps([{**good, "run_at": "2020-01-01 00:00:00\n"}]),
        json.dumps([{**good, "priority": "5\n"}]),
        json.dumps([{**good, "priority": 2.5}]),
        json.dumps([{**good, "priority": "x"}]),
        json.dumps([{**good, "priority": 10**20}]),
        json.dumps([{**good, "priority": 2**31}]),
        json.dumps([{**good, "p_key": "x" * 256}]),
        json.dumps([{**good, "p_kind": "y" * 129}]),
        json.dumps([{**good, "p_key": "a "}]),
        json.dumps([{**good, "p_key": 5}]),
        json.dumps([{**good, "p_key": ["a"]}]),
        json.dumps([good, good]),
        json.dumps([{**good, "p_key": f"m{i}"} for i in range(10_000)] + [{**good, "p_key": ""}]),
        json.dumps([{**good, "payload": None}]),
        json.dumps([{**good, "extra": 1}]),
        json.dumps([{**good, "p_key": "'; DROP TABLE pyqueue_message; --"}]),
        b'[{"p_key":"\xff"}]',
        b'[{"p_key":"\xed\xa0\x80","p_kind":"k","payload":1}]',
    ]
    return hostile(
        fixed,
        st.lists(
            st.fixed_dictionaries(
                {"p_key": st.one_of(TEXT, st.none()), "p_kind": st.just("k"), "payload": st.just(1)}
            ),
            max_size=3,
        ).map(json.dumps),
    )


def my_text_array(d):
    return hostile(
        [
            None,
            "",
            "[]",
            "[null]",
            "[1]",
            "{}",
            "nope",
            '["a "]',
            '["' + "x" * 256 + '"]',
            '["held"]',
            '["k"]',
        ],
        st.lists(st.one_of(TEXT, st.none()), max_size=3).map(json.dumps),
    )


def my_token_array(d):
    return hostile(
        [
            None,
            "",
            "[]",
            "[null]",
            "[1]",
            '["abc"]',
            json.dumps([str(uuid.uuid4())]),
            json.dumps([str(uuid.uuid4()).upper()]),
            "nope",
        ]
    )


def ctx_keys(c):
    return [c.key] if c.dialect == "postgresql" else json.dumps([c.key])


def ctx_kinds(c):
    return [c.kind] if c.dialect == "postgresql" else json.dumps([c.kind])


def ctx_tokens(c):
    return [c.token] if c.dialect == "postgresql" else json.dumps([c.token])


def ctx_payloads(c):
    return ["{}"]


def ctx_messages(c):
    return json.dumps([{"p_key": "b1", "p_kind": "k", "payload": {"n": 1}}])


def NAME200(d):
    return names(200, d)


def HOST(d):
    return names(255, d)


def QUEUES(d):
    if d == "postgresql":
        return hostile([None, [], [None], [""], ["x" * 129], ["a "]], st.lists(TEXT, max_size=3))
    return hostile(
        [None, "", "[]", "[null]", "[1]", "{}", "nope", '["a "]', b'["\xed\xa0\x80"]'],
        st.lists(TEXT, max_size=3).map(json.dumps),
    )


def WAIT(d):
    return short_durations(d)


def SETTING(d):
    """Hostile values for queue_reset_setting's setting name."""
    fixed = [
        None,
        "",
        " ",
        "MAX_ATTEMPTS",
        "max_attempts ",
        " max_attempts",
        "max_attempts\n",
        "paused",
        "notify_window",
        "queue_name",
        "x" * 10_000,
        "max_attempts\x00",
        "dead_letter_queue'; --",
    ] + SQLISH
    if d == "mysql":
        fixed += [b"max_attempts\xff", b"\xed\xa0\x80"]
    return hostile(fixed, TEXT)


def STATE(d):
    """Hostile values for queue_messages' state filter."""
    fixed = [
        "",
        " ",
        "READY",
        "ready ",
        " ready",
        "ready\n",
        "dead",
        "all",
        "x" * 10_000,
        "ready\x00",
    ] + SQLISH
    if d == "mysql":
        fixed += [b"ready\xff", b"\xed\xa0\x80"]
    return hostile(fixed, TEXT)


def ERROR(d):
    """Hostile error texts for queue_fail (longer than 2000 characters: stored cut, as documented)."""
    fixed = [
        None,
        "",
        " ",
        "x" * 2001,
        "y" * 100_000,
        "😀" * 2001,
        "e\u0301" * 1500,
        "\u202eevil\u202c",
        "a\x00b",
        "'; DROP TABLE pyqueue_message; --",
        "Traceback (most recent call last):\n  ...",
    ]
    if d == "mysql":
        fixed += [b"\xff\xfe", b"ok\xc3\x28", b"\xed\xa0\x80"]
    return hostile(fixed, TEXT)


def registered(c: Ctx) -> int:
    """A worker registered for this call (its id); the hostile secret is never its own."""
    name = f"{c.prefix}-r{uuid.uuid4().hex[:6]}"
    if c.dialect == "postgresql":
        [(wid, _)] = c.rows(
            "SELECT worker_id, secret FROM queue_worker_register(%s, NULL, NULL, NULL)", (name,)
        )
    else:
        [(wid, _)] = c.rows("CALL queue_worker_register(%s, NULL, NULL, NULL)", (name,))
    return int(wid)


def fresh_secret(c: Ctx) -> str:
    return str(uuid.uuid4())


def CRON(d):
    return cron(d)


def ROUTINES() -> list[Routine]:
    R = Routine
    return [
        R(
            "queue_create",
            "SELECT queue_create(%s, %s, %s, %s, %s)",
            "CALL queue_create(%s, %s, %s, %s, %s)",
            [
                ("queue", new_name, QN),
                ("visibility_timeout", dur_ok, DUR),
                ("max_attempts", one, INT),
                ("dead_letter_queue", dlq, QN),
                ("history_retention", none, DUR),
            ],
        ),
        R("queue_drop", "SELECT queue_drop(%s)", "CALL queue_drop(%s)", [("queue", fresh_queue, QN)]),
        R(
            "queue_push",
            "SELECT queue_push(%s, %s, %s, %s, %s, %s)",
            "CALL queue_push(%s, %s, %s, %s, %s, %s)",
            [
                ("queue", q, QN),
                ("p_key", lambda c: f"k{uuid.uuid4().hex[:8]}", KEY),
                ("p_kind", kind, KIND),
                ("payload", payload_ok, PAY),
                ("run_at", none, TIME),
                ("priority", none, INT),
            ],
        ),
        R(
            "queue_push_replace",
            "SELECT queue_push_replace(%s, %s, %s, %s, %s, %s)",
            "CALL queue_push_replace(%s, %s, %s, %s, %s, %s)",
            [
                ("queue", q, QN),
                ("p_key", lambda c: "ready", KEY),
                ("p_kind", kind, KIND),
                ("payload", payload_ok, PAY),
                ("run_at", none, TIME),
                ("priority", none, INT),
            ],
        ),
        R(
            "queue_push_batch",
            "SELECT queue_push_batch(%s, %s, %s, %s::jsonb[], %s::timestamptz[], %s)",
            "CALL queue_push_batch(%s, %s, %s, %s, %s, %s)",
            [
                ("queue", q, QN),
                ("p_keys", ctx_messages, None),
                ("p_kinds", none, None),
                ("payloads", none, None),
                ("run_ats", none, None),
                ("priorities", none, None),
            ],
        ),  # hostile values: _hostile()
        R(
            "queue_pop",
            "SELECT * FROM queue_pop(%s, %s)",
            "CALL queue_pop(%s, %s)",
            [("queue", other, QN), ("n", one, INT)],
        ),
        R(
            "queue_reserve",
            "SELECT * FROM queue_reserve(%s, %s, %s, %s, %s)",
            "CALL queue_reserve(%s, %s, %s, %s, %s)",
            [
                ("queue", other, QN),
                ("worker", none, WORKER),
                ("timeout", none, DUR),
                ("n", one, INT),
                ("kinds", none, KINDS),
            ],
        ),
        R(
            "queue_commit",
            "SELECT queue_commit(%s, %s, %s, %s)",
            "CALL queue_commit(%s, %s, %s, %s)",
            [("queue", q, QN), ("p_key", key, KEY), ("p_kind", kind, KIND), ("token", tok, TOK)],
        ),
        R(
            "queue_rollback",
            "SELECT queue_rollback(%s, %s, %s, %s, %s)",
            "CALL queue_rollback(%s, %s, %s, %s, %s)",
            [
                ("queue", q, QN),
                ("p_key", key, KEY),
                ("p_kind", kind, KIND),
                ("token", tok, TOK),
                ("delay", none, DUR),
            ],
        ),
        R(
            "queue_extend",
            "SELECT queue_extend(%s, %s, %s, %s, %s)",
            "CALL queue_extend(%s, %s, %s, %s, %s)",
            [
                ("queue", q, QN),
                ("p_key", key, KEY),
                ("p_kind", kind, KIND),
                ("token", tok, TOK),
                ("timeout", none, DUR),
            ],
        ),
        R(
            "queue_move",
            "SELECT queue_move(%s, %s, %s, %s, %s, %s)",
            "CALL queue_move(%s, %s, %s, %s, %s, %s)",
            [
                ("queue", q, QN),
                ("p_key", key, KEY),
                ("p_kind", kind, KIND),
                ("token", tok, TOK),
                ("to_queue", other, QN),
                ("payload", none, PAY),
            ],
        ),
        R(
            "queue_remove",
            "SELECT queue_remove(%s, %s, %s)",
            "CALL queue_remove(%s, %s, %s)",
            [("queue", other, QN), ("p_key", key, KEY), ("p_kind", kind, KIND)],
        ),
        R("queue_pause", "SELECT queue_pause(%s)", "CALL queue_pause(%s)", [("queue", other, QN)]),
        R("queue_resume", "SELECT queue_resume(%s)", "CALL queue_resume(%s)", [("queue", other, QN)]),
        R("queue_stats", "SELECT * FROM queue_stats(%s)", "CALL queue_stats(%s)", [("queue", q, QN)]),
        R("queue_channel", "SELECT queue_channel(%s)", "CALL queue_channel(%s)", [("queue", q, QN)]),
        R(
            "queue_set_notify_window",
            "SELECT queue_set_notify_window(%s, %s)",
            "CALL queue_set_notify_window(%s, %s)",
            [("queue", other, QN), ("window", none, DUR)],
        ),
        R(
            "queue_next_scheduled_at",
            "SELECT * FROM queue_next_scheduled_at(%s, %s)",
            "CALL queue_next_scheduled_at(%s, %s)",
            [("queue", q, QN), ("kinds", none, KINDS)],
        ),
        R(
            "queue_wait",
            "SELECT queue_wait(%s, %s, %s, %s)",
            "CALL queue_wait(%s, %s, %s, %s)",
            [
                ("queue", q, QN),
                (
                    "kinds",
                    none,
                    lambda d: hostile(
                        [None, [], [None], ["x" * 129]]
                        if d == "postgresql"
                        else [None, "[]", "[null]", "nope", "[1]"]
                    ),
                ),
                ("timeout", lambda c: "0" if c.dialect == "postgresql" else 0, WAIT),
                ("poll", none, DUR),
            ],
        ),
        R(
            "queue_commit_reserve",
            "SELECT * FROM queue_commit_reserve(%s, %s, %s, %s, %s, %s, %s, %s)",
            "CALL queue_commit_reserve(%s, %s, %s, %s, %s, %s, %s, %s)",
            [
                ("queue", q, QN),
                ("p_key", key, KEY),
                ("p_kind", kind, KIND),
                ("token", tok, TOK),
                ("worker", none, WORKER),
                ("timeout", none, DUR),
                ("n", one, INT),
                ("kinds", none, KINDS),
            ],
        ),
        R(
            "queue_commit_batch",
            "SELECT queue_commit_batch(%s, %s, %s, %s::uuid[]::text[])",
            "CALL queue_commit_batch(%s, %s, %s, %s)",
            [
                ("queue", q, QN),
                ("p_keys", ctx_keys, lambda d: text_array(255, d) if d == "postgresql" else my_text_array(d)),
                (
                    "p_kinds",
                    ctx_kinds,
                    lambda d: text_array(128, d) if d == "postgresql" else my_text_array(d),
                ),
                (
                    "tokens",
                    ctx_tokens,
                    lambda d: pg_token_array(d) if d == "postgresql" else my_token_array(d),
                ),
            ],
        ),
        R(
            "queue_ingest_flush",
            "SELECT * FROM queue_ingest_flush(%s)",
            "CALL queue_ingest_flush(%s)",
            [("queue", q, QN)],
        ),
        R(
            "queue_purge_history",
            "SELECT queue_purge_history(%s, %s)",
            "CALL queue_purge_history(%s, %s)",
            [("queue", q, QN), ("n", one, INT)],
        ),
        R(
            "queue_replay",
            "SELECT queue_replay(%s, %s, %s)",
            "CALL queue_replay(%s, %s, %s)",
            [("queue", q, QN), ("from", none, TIME), ("to", none, TIME)],
        ),
        R(
            "queue_redrive",
            "SELECT queue_redrive(%s, %s, %s)",
            "CALL queue_redrive(%s, %s, %s)",
            [("dead_queue", dlq, QN), ("to_queue", other, QN), ("n", one, INT)],
        ),
        R(
            "queue_set_limit",
            "SELECT queue_set_limit(%s, %s, %s)",
            "CALL queue_set_limit(%s, %s, %s)",
            [("queue", other, QN), ("p_kind", kind, KIND), ("capacity", none, INT)],
        ),
        R("queue_limits", "SELECT * FROM queue_limits(%s)", "CALL queue_limits(%s)", [("queue", q, QN)]),
        R(
            "queue_worker_register",
            "SELECT * FROM queue_worker_register(%s, %s, %s, %s)",
            "CALL queue_worker_register(%s, %s, %s, %s)",
            [
                ("name", worker_name, NAME200),
                ("host", none, HOST),
                ("pid", none, INT),
                ("queues", none, QUEUES),
            ],
        ),
        R(
            "queue_worker_heartbeat",
            "SELECT queue_worker_heartbeat(%s, %s)",
            "CALL queue_worker_heartbeat(%s, %s)",
            [("worker_id", registered, INT), ("secret", fresh_secret, TOK)],
        ),
        R(
            "queue_worker_deregister",
            "SELECT queue_worker_deregister(%s, %s)",
            "CALL queue_worker_deregister(%s, %s)",
            [("worker_id", registered, INT), ("secret", fresh_secret, TOK)],
        ),
        R(
            "queue_release_dead_workers",
            "SELECT queue_release_dead_workers(%s)",
            "CALL queue_release_dead_workers(%s)",
            [("older_than", lambda c: "100 years" if c.dialect == "postgresql" else 3155760000, DUR)],
        ),
        R(
            "queue_schedule_every",
            "SELECT queue_schedule_every(%s, %s, %s, %s, %s)",
            "CALL queue_schedule_every(%s, %s, %s, %s, %s)",
            [
                ("queue", other, QN),
                ("p_key", lambda c: "sched", lambda d: names(234, d)),
                ("p_kind", kind, KIND),
                ("payload", payload_ok, PAY),
                ("every", lambda c: "1 hour" if c.dialect == "postgresql" else 3600, DUR),
            ],
        ),
        R(
            "queue_schedule_cron",
            "SELECT queue_schedule_cron(%s, %s, %s, %s, %s)",
            "CALL queue_schedule_cron(%s, %s, %s, %s, %s)",
            [
                ("queue", other, QN),
                ("p_key", lambda c: "cron", lambda d: names(234, d)),
                ("p_kind", kind, KIND),
                ("payload", payload_ok, PAY),
                ("cron", lambda c: "0 9 * * 1-5", CRON),
            ],
        ),
        R(
            "queue_unschedule",
            "SELECT queue_unschedule(%s, %s, %s)",
            "CALL queue_unschedule(%s, %s, %s)",
            [("queue", other, QN), ("p_key", lambda c: "nothing", KEY), ("p_kind", kind, KIND)],
        ),
        R(
            "queue_schedules",
            "SELECT * FROM queue_schedules(%s)",
            "CALL queue_schedules(%s)",
            [("queue", q, QN)],
        ),
        R(
            "queue_reset_setting",
            "SELECT queue_reset_setting(%s, %s)",
            "CALL queue_reset_setting(%s, %s)",
            [("queue", other, QN), ("setting", lambda c: "visibility_timeout", SETTING)],
        ),
        R(
            "queue_settings",
            "SELECT * FROM queue_settings(%s)",
            "CALL queue_settings(%s)",
            [("queue", q, QN)],
        ),
        R(
            "queue_fail",
            "SELECT queue_fail(%s, %s, %s, %s, %s, %s)",
            "CALL queue_fail(%s, %s, %s, %s, %s, %s)",
            [
                ("queue", q, QN),
                ("p_key", key, KEY),
                ("p_kind", kind, KIND),
                ("token", tok, TOK),
                ("delay", none, DUR),
                ("error", lambda c: "boom", ERROR),
            ],
        ),
        R(
            "queue_message",
            "SELECT * FROM queue_message(%s, %s, %s)",
            "CALL queue_message(%s, %s, %s)",
            [("queue", q, QN), ("p_key", key, KEY), ("p_kind", kind, KIND)],
        ),
        R(
            "queue_message_history",
            "SELECT * FROM queue_message_history(%s, %s, %s)",
            "CALL queue_message_history(%s, %s, %s)",
            [("queue", q, QN), ("p_key", key, KEY), ("p_kind", kind, KIND)],
        ),
        R(
            "queue_messages",
            "SELECT * FROM queue_messages(%s, %s, %s, %s, %s, %s)",
            "CALL queue_messages(%s, %s, %s, %s, %s, %s)",
            [
                ("queue", q, QN),
                ("state", lambda c: "ready", STATE),
                ("key_prefix", none, KEY),
                ("after_key", none, KEY),
                ("after_kind", none, KIND),
                ("n", none, INT),
            ],
        ),
        R(
            "queue_throughput",
            "SELECT * FROM queue_throughput(%s, %s)",
            "CALL queue_throughput(%s, %s)",
            [("queue", q, QN), ("since", none, TIME)],
        ),
    ]


def _hostile(routine: Routine, dialect: str) -> list[st.SearchStrategy]:
    """The hostile values of each argument."""
    if routine.name == "queue_push_batch":
        if dialect == "postgresql":
            return [
                QN(dialect),
                text_array(255, dialect),
                text_array(128, dialect),
                pg_payload_array(dialect),
                pg_time_array(dialect),
                pg_int_array(dialect),
            ]
        return [
            QN(dialect),
            my_messages(dialect),
            hostile(["[]", "x", ""]),
            hostile(["[]", "1"]),
            hostile(["x", "null"]),
            hostile(["1", ""]),
        ]
    return [hostile(dialect) for _, _, hostile in routine.args]


def _arg_strategies(routine: Routine, dialect: str) -> st.SearchStrategy:
    """Mostly one hostile argument among valid ones (so that each argument's own check is reached),
    sometimes several at once."""
    hostile = _hostile(routine, dialect)
    n = len(hostile)

    def single(i: int) -> st.SearchStrategy:
        return st.tuples(*[hostile[j] if j == i else st.just(VALID) for j in range(n)])

    several = st.tuples(*[st.one_of(st.just(VALID), h) for h in hostile])
    return st.one_of(st.integers(0, n - 1).flatmap(single), st.integers(0, n - 1).flatmap(single), several)


def routine_ids() -> list[str]:
    return [r.name for r in ROUTINES()]


def _resolve(c: Ctx, routine: Routine, drawn: list) -> tuple:
    args = []
    for (_name, valid, _), value in zip(routine.args, drawn):
        if value is VALID:
            value = valid(c)
        args.append(value)
    if routine.name == "queue_push_batch" and c.dialect == "postgresql":
        defaults = [None, ["b1"], ["k"], ["{}"], None, None]
        args[1:] = [defaults[i] if drawn[i] is VALID else args[i] for i in range(1, 6)]
    return tuple(args)


def _allowed_names(c: Ctx, args: tuple, before: set[str]) -> Callable[[str], bool]:
    exact = set(before) | {c.queue, c.dlq, c.other, c.key, c.kind, "w", "ready", "held", "k", "b1", "a"}
    for a in args:
        if isinstance(a, str):
            exact.add(a)
        elif isinstance(a, list):
            exact.update(x for x in a if isinstance(x, str))
    json_texts = [a for a in args if isinstance(a, str) and a.lstrip().startswith(("[", "{"))]
    for text in json_texts:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                exact.add(item)
            elif isinstance(item, dict):
                exact.update(v for v in item.values() if isinstance(v, str))

    def ok(cell: str) -> bool:
        if cell in exact:
            return True
        base, at, _ = cell.rpartition("@")  # a schedule occurrence: p_key@time
        if at and base in exact:
            return True
        base, hash_, _ = cell.rpartition("#")  # worker#id
        return bool(hash_) and base in exact

    return ok


def _check_call(ctx: Ctx, routine: Routine, drawn: list, outcomes: dict) -> None:
    """The property for one call: a clear error and nothing written, or a result that stores exactly
    what was passed and nothing outside the contract."""
    args = _resolve(ctx, routine, drawn)
    before = ctx.snapshot(args)
    cells_before = ctx.name_cells(args)
    try:
        ctx.run(routine.sql(ctx.dialect), args)
    except Refused as refusal:
        assert refusal.kind != "leak", f"{routine.name}{_short(args)}: unclear error {refusal.message}"
        after = ctx.snapshot(args)
        assert after == before, f"{routine.name}{_short(args)} refused ({refusal.message}) but wrote"
        outcomes[refusal.kind] = outcomes.get(refusal.kind, 0) + 1
        return
    outcomes["ok"] = outcomes.get("ok", 0) + 1
    assert ctx.odd_values(args) == [], f"{routine.name}{_short(args)} stored values outside the contract"
    ok = _allowed_names(ctx, args, cells_before)
    for cell in ctx.name_cells(args) - cells_before:
        assert ok(cell), f"{routine.name}{_short(args)} stored {cell[:80]!r}, which was not passed as such"
    if routine.name == "queue_create" and isinstance(args[0], str):
        ctx.made.add(args[0])
    ctx.drop_huge(args)


@pytest.mark.slow
@pytest.mark.parametrize("routine", ROUTINES(), ids=routine_ids())
def test_every_fixed_hostile_value_of_every_argument(ctx, routine):
    """The sweep: each listed hostile value of each argument once, the other arguments valid."""
    outcomes: dict[str, int] = {}
    strategies = _hostile(routine, ctx.dialect)
    for i, strategy in enumerate(strategies):
        for value in strategy.fixed:
            drawn = [VALID] * len(strategies)
            drawn[i] = value
            _check_call(ctx, routine, drawn, outcomes)
    assert outcomes.get("pyqueue", 0) > 0, outcomes


@pytest.mark.slow
@pytest.mark.parametrize("routine", ROUTINES(), ids=routine_ids())
def test_random_hostile_arguments_get_a_clear_error_or_a_correct_result(ctx, routine):
    """Random values (hypothesis): mostly one hostile argument among valid ones, sometimes several."""
    outcomes: dict[str, int] = {}

    @SETTINGS
    @given(_arg_strategies(routine, ctx.dialect))
    def check(drawn):
        _check_call(ctx, routine, list(drawn), outcomes)

    check()
    assert sum(outcomes.values()) > 0, outcomes


def _short(args: tuple) -> str:
    return "(" + ", ".join(repr(a)[:60] for a in args) + ")"


# ---------------------------------------------------------------------------
# hostile but valid values round-trip exactly
# ---------------------------------------------------------------------------

VALID_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=60
).filter(lambda s: not s.endswith(" "))


def valid_names(limit: int) -> st.SearchStrategy:
    fixed = (
        SQLISH
        + [u for u in UNICODE if not u.endswith(" ")]
        + ["x" * limit, "😀" * limit, "é" * limit, "e\u0301" * (limit // 2), " lead", "a\tb", "a\nb", "a b"]
    )
    return st.one_of(
        st.sampled_from([f for f in fixed if len(f) <= limit and not f.endswith(" ")]), VALID_TEXT
    )


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(VALID_TEXT, inner, max_size=4),
    max_leaves=12,
)
PAYLOADS = st.one_of(
    JSON_VALUES.map(json.dumps),
    st.sampled_from(
        [
            HUGE_PAYLOAD,
            '{"sql": "\'; DROP TABLE pyqueue_message; --"}',
            '"%s"',
            '"\\\\"',
            '{"q": "\\""}',
            "null",
            json.dumps({"e": "😀\u202e e\u0301"}, ensure_ascii=False),
            "[" * 29 + "]" * 29,
        ]
    ),
)


def _pop_one(c: Ctx, queue: str) -> tuple:
    if c.dialect == "postgresql":
        return c.rows("SELECT p_key, p_kind, payload::text, priority FROM queue_pop(%s, 2)", (queue,))
    return [(r[0], r[1], r[2], r[3]) for r in c.rows("CALL queue_pop(%s, 2)", (queue,))]


@SETTINGS
@given(data=st.data())
def _round_trip_body(c: Ctx, data) -> None:
    key = data.draw(valid_names(255), "p_key")
    kind = data.draw(valid_names(128), "p_kind")
    payload = data.draw(PAYLOADS, "payload")
    priority = data.draw(st.sampled_from([None, 0, -(2**31), 2**31 - 1, 7]), "priority")
    replace = data.draw(st.booleans(), "via queue_push_replace")
    routine = "queue_push_replace" if replace else "queue_push"
    if c.dialect == "postgresql":
        [(res,)] = c.rows(
            f"SELECT {routine}(%s, %s, %s, %s, NULL, %s)", (c.other, key, kind, payload, priority)
        )
    else:
        [(res,)] = c.rows(
            f"CALL {routine}(%s, %s, %s, %s, NULL, %s)", (c.other, key, kind, payload, priority)
        )
    assert res in (True, 1, "inserted")
    got = _pop_one(c, c.other)
    assert len(got) == 1
    g_key, g_kind, g_payload, g_priority = got[0]
    assert (g_key, g_kind) == (key, kind)  # exactly: no truncation, no normalisation, no trimming
    assert jload(g_payload) == jload(payload)
    if c.dialect == "mysql":
        assert g_payload == payload  # MySQL keeps the JSON text as sent, byte for byte
    assert g_priority == (priority or 0)


@pytest.mark.slow
def test_hostile_but_valid_keys_kinds_payloads_round_trip(ctx):
    _round_trip_body(ctx)


def test_a_deeply_nested_payload_is_stored_or_refused_as_too_deep_for_mariadb(ctx):
    """PostgreSQL takes any depth; MariaDB's JSON functions refuse 32 levels and more, and the refusal
    says so instead of calling valid JSON invalid."""
    deep = "[" * 40 + "]" * 40
    if ctx.dialect == "postgresql":
        assert ctx.rows("SELECT queue_push(%s, 'deep', 'k', %s)", (ctx.other, deep)) == [(True,)]
        assert ctx.rows("SELECT payload::text FROM queue_pop(%s)", (ctx.other,)) == [
            (deep.replace("][", "], ["),)
        ]
        return
    before = ctx.snapshot(())
    with pytest.raises(Refused, match="nested 32 levels deep") as info:
        ctx.run("CALL queue_push(%s, 'deep', 'k', %s, NULL, NULL)", (ctx.other, deep))
    assert info.value.kind == "pyqueue"
    assert ctx.snapshot(()) == before


@SETTINGS
@given(data=st.data())
def _batch_round_trip_body(c: Ctx, data) -> None:
    keys = data.draw(st.lists(valid_names(255), min_size=1, max_size=5), "keys")
    payloads = [data.draw(PAYLOADS.filter(lambda p: len(p) < 100_000), "payload") for _ in keys]
    if c.dialect == "postgresql":
        [(n,)] = c.rows(
            "SELECT queue_push_batch(%s, %s, %s, %s::jsonb[])", (c.other, keys, ["k"] * len(keys), payloads)
        )
    else:
        messages = json.dumps(
            [{"p_key": k, "p_kind": "k", "payload": json.loads(p)} for k, p in zip(keys, payloads)]
        )
        [(n,)] = c.rows("CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)", (c.other, messages))
    first = {}
    for k, p in zip(keys, payloads):
        first.setdefault(k, p)  # duplicates within the batch: the first wins
    assert n == len(first)
    got = (
        c.rows("SELECT p_key, payload::text FROM queue_pop(%s, 10)", (c.other,))
        if c.dialect == "postgresql"
        else [(r[0], r[2]) for r in c.rows("CALL queue_pop(%s, 10)", (c.other,))]
    )
    assert {k: jload(p) for k, p in got} == {k: jload(p) for k, p in first.items()}


def test_hostile_but_valid_batches_round_trip(ctx):
    _batch_round_trip_body(ctx)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=valid_names(128 - 14))
def _queue_name_body(c: Ctx, name: str) -> None:
    queue = f"{c.prefix}{uuid.uuid4().hex[:3]}{name}"[:128]
    if queue.endswith(" "):
        queue = queue.rstrip() + "."
    c.made.add(queue)
    pg = c.dialect == "postgresql"
    c.rows("SELECT queue_create(%s)" if pg else "CALL queue_create(%s, NULL, NULL, NULL, NULL)", (queue,))
    c.rows(
        "SELECT queue_push(%s, %s, 'k', '[1]')" if pg else "CALL queue_push(%s, %s, 'k', '[1]', NULL, NULL)",
        (queue, queue),
    )
    [stats] = c.rows("SELECT * FROM queue_stats(%s)" if pg else "CALL queue_stats(%s)", (queue,))
    assert stats[0] == queue and stats[1] == 1
    [(channel,)] = c.rows("SELECT queue_channel(%s)" if pg else "CALL queue_channel(%s)", (queue,))
    assert re.fullmatch(r"pyqueue_[0-9a-f]{32}", channel)
    if pg:
        [(k, tok)] = c.rows("SELECT p_key, token FROM queue_reserve(%s, %s, NULL, 1)", (queue, name[:255]))
        assert c.rows("SELECT queue_commit(%s, %s, 'k', %s)", (queue, k, tok)) == [(True,)]
        c.rows("SELECT queue_drop(%s)", (queue,))
    else:
        [row] = c.rows("CALL queue_reserve(%s, %s, NULL, 1, NULL)", (queue, name[:255]))
        assert c.rows("CALL queue_commit(%s, %s, 'k', %s)", (queue, row[0], row[3])) == [(1,)]
        c.rows("CALL queue_drop(%s)", (queue,))
    assert k == queue if pg else row[0] == queue
    c.made.discard(queue)


def test_hostile_but_valid_queue_names_work_end_to_end(ctx):
    """Quotes, `DROP TABLE`, `%s`, emoji, RTL marks as queue names: a queue like any other, and its
    NOTIFY channel is an md5 identifier (nothing of the name reaches SQL text)."""
    _queue_name_body(ctx)


@pytest.mark.only_dialect("postgresql")
def test_postgresql_listen_on_a_hostile_queue_name_gets_its_wakeup(ctx, dsn):
    """The Python layer LISTENs through psycopg.sql.Identifier on queue_channel's name; a queue named
    like an injection still gets its wakeup."""
    import psycopg

    from pyqueue_sql import dialects

    queue = ctx.prefix + "\"; LISTEN x; NOTIFY y; --'"
    ctx.made.add(queue)
    ctx.rows("SELECT queue_create(%s)", (queue,))
    ctx.rows("SELECT queue_set_notify_window(%s, interval '0')", (queue,))
    [(channel,)] = ctx.rows("SELECT queue_channel(%s)", (queue,))
    listener = psycopg.connect(dsn.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
    try:
        dialects.PostgreSQL().listener.listen(listener, [channel])
        ctx.rows("SELECT queue_push(%s, 'k', 'k', '{}')", (queue,))
        got = [n for n in listener.notifies(timeout=10, stop_after=1)]
    finally:
        listener.close()
    assert [(n.channel, n.payload) for n in got] == [(channel, queue)]


# ---------------------------------------------------------------------------
# invalid UTF-8
# ---------------------------------------------------------------------------


@pytest.mark.only_dialect("mysql")
@pytest.mark.parametrize(
    "bad",
    [b"\xed\xa0\x80", b"a\xed\xbf\xbfb", b"\xff", b"ok\xc3\x28", b"\xf4\x90\x80\x80", b"\xc0\xaf"],
    ids=["surrogate", "surrogate-mid", "ff", "truncated", "over-max", "overlong"],
)
def test_mysql_invalid_utf8_is_refused_everywhere_it_could_be_stored(ctx, bad):
    """MariaDB's utf8mb4 accepts UTF-8-encoded UTF-16 surrogates (ED A0-BF ..): stored, such a key
    broke every strict UTF-8 reader of the row (PyMySQL's fetch, Python's decode). Other invalid
    bytes are refused by the server's argument conversion (1366)."""
    q = ctx.other
    calls = [
        ("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", (q, bad)),
        ("CALL queue_push(%s, 'k', %s, '{}', NULL, NULL)", (q, bad)),
        ("CALL queue_push(%s, 'k', 'k', %s, NULL, NULL)", (q, b'"' + bad + b'"')),
        ("CALL queue_push_replace(%s, 'k', 'k', %s, NULL, NULL)", (q, b'{"a": "' + bad + b'"}')),
        (
            "CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)",
            (q, b'[{"p_key": "' + bad + b'", "p_kind": "k", "payload": 1}]'),
        ),
        ("CALL queue_create(%s, NULL, NULL, NULL, NULL)", (bad,)),
        ("CALL queue_reserve(%s, %s, NULL, 1, NULL)", (ctx.queue, bad)),
        ("CALL queue_worker_register(%s, NULL, NULL, NULL)", (ctx.prefix.encode() + bad,)),
        ("CALL queue_worker_register(%s, %s, NULL, NULL)", (ctx.prefix + "-w", bad)),
        ("CALL queue_worker_register(%s, NULL, NULL, %s)", (ctx.prefix + "-w", b'["' + bad + b'"]')),
        ("CALL queue_schedule_every(%s, %s, 'k', '{}', 60)", (q, bad)),
        ("CALL queue_set_limit(%s, %s, 1)", (q, bad)),
    ]
    for sql, args in calls:
        before = ctx.snapshot(args)
        with pytest.raises(Refused) as info:
            ctx.run(sql, args)
        assert info.value.kind in ("pyqueue", "bind"), (sql, info.value.message)
        if info.value.kind == "pyqueue":
            assert "not valid UTF-8" in info.value.message
        assert ctx.snapshot(args) == before, sql


@pytest.mark.only_dialect("mysql")
def test_mysql_ingest_flush_rejects_invalid_utf8_rows(ctx):
    tag = ctx.prefix.encode()
    ctx.rows(
        "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES "
        "(%s, %s, 'k', '1'), (%s, 'ok', 'k', %s), (%s, 'fine', 'k', '2')",
        (ctx.other, tag + b"\xed\xa0\x80", ctx.other, b'"\xed\xa0\x80"', ctx.other),
    )
    [(enqueued, duplicates, rejected)] = ctx.rows("CALL queue_ingest_flush(%s)", (ctx.other,))
    assert (enqueued, duplicates, rejected) == (1, 0, 2)
    reasons = ctx.rows(
        "SELECT reason FROM pyqueue_ingest_reject WHERE queue_name = %s ORDER BY id", (ctx.other,)
    )
    assert [r for (r,) in reasons] == [
        "pyqueue:invalid_argument: queue_name, p_key or p_kind is not valid UTF-8 (a UTF-16 surrogate)",
        "pyqueue:invalid_payload: payload is not valid UTF-8 (it holds a UTF-16 surrogate)",
    ]
    ctx.rows("DELETE FROM pyqueue_ingest_reject WHERE queue_name = %s", (ctx.other,))
    assert [r[0] for r in ctx.rows("CALL queue_pop(%s, 5)", (ctx.other,))] == ["fine"]


@pytest.mark.only_dialect("mysql")
def test_mysql_surrogate_check_has_no_false_positives(ctx):
    """Valid text with the byte ED (Hangul: ED 80-9F ..; U+00ED is C3 AD), or with CD A0
    (U+0360: a case-insensitive latin1 match takes CD for ED and was seen to refuse it),
    is stored and read back exactly by a push, a batch and the ingest flush."""
    texts = ["한국어 텍스트", "\u0360x\u0340", "Í\u00a0Í\u00bf", "\ud7ff\ue000", "e\u0301\u00ed\u00a0"]
    for i, text in enumerate(texts):
        key = f"{ctx.prefix}-{i}-{text}"
        assert (
            ctx.rows(
                "CALL queue_push(%s, %s, %s, %s, NULL, NULL)",
                (ctx.other, key, text, json.dumps({"t": text}, ensure_ascii=False)),
            )[0][0]
            == 1
        )
    batch = [{"p_key": f"{ctx.prefix}-b-{t}", "p_kind": "k", "payload": t} for t in texts]
    assert ctx.rows(
        "CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)",
        (ctx.other, json.dumps(batch, ensure_ascii=False)),
    )[0][0] == len(texts)
    ctx.rows(
        "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, %s, %s, %s)",
        (ctx.other, f"{ctx.prefix}-i-{texts[0]}", texts[1], json.dumps(texts[2], ensure_ascii=False)),
    )
    [(enqueued, duplicates, rejected)] = ctx.rows("CALL queue_ingest_flush(%s)", (ctx.other,))
    assert (enqueued, duplicates, rejected) == (1, 0, 0)
    popped = ctx.rows("CALL queue_pop(%s, 100)", (ctx.other,))
    got = {(r[0], r[1]): json.loads(r[2]) for r in popped}
    expected = {(f"{ctx.prefix}-{i}-{t}", t): {"t": t} for i, t in enumerate(texts)}
    expected |= {(f"{ctx.prefix}-b-{t}", "k"): t for t in texts}
    expected[(f"{ctx.prefix}-i-{texts[0]}", texts[1])] = texts[2]
    assert got == expected


@pytest.mark.only_dialect("postgresql")
def test_postgresql_invalid_utf8_never_reaches_a_routine(ctx):
    """psycopg cannot send a str that is not UTF-8, nor a NUL in text (a client-side error); bytes
    converted on the server are refused by convert_from (22021) before the routine runs."""
    import psycopg

    before = ctx.snapshot(())
    for bad in (b"\xed\xa0\x80", b"\xff", b"ok\xc3\x28", b"a\x00b"):
        with pytest.raises(Refused) as info:
            ctx.run("SELECT queue_push(%s, convert_from(%s, 'UTF8'), 'k', '{}')", (ctx.other, bad))
        assert info.value.kind == "bind" and info.value.message.startswith("22021"), info.value.message
    with pytest.raises(Refused) as info:
        ctx.run("SELECT queue_push(%s, %s, 'k', '{}')", (ctx.other, "a\x00b"))
    assert info.value.kind == "bind"
    with pytest.raises(Refused) as info:  # a \u0000 escape cannot become jsonb text
        ctx.run("SELECT queue_push(%s, 'k', 'k', %s)", (ctx.other, '{"a": "\\u0000"}'))
    assert info.value.kind == "bind" and info.value.message.startswith("22P05")
    with pytest.raises(UnicodeEncodeError):
        ctx.conn.execute("SELECT queue_push(%s, %s, 'k', '{}')", (ctx.other, "\ud800"))
    assert ctx.snapshot(()) == before
    del psycopg


# ---------------------------------------------------------------------------
# no SQL built from user text
# ---------------------------------------------------------------------------


def _routine_sources(c: Ctx) -> dict[str, str]:
    if c.dialect == "postgresql":
        rows = c.rows(
            "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = current_schema() AND (p.proname LIKE 'queue\\_%%' OR"
            " p.proname LIKE 'pyqueue\\_\\_%%')"
        )
    else:
        rows = c.rows(
            "SELECT ROUTINE_NAME, ROUTINE_DEFINITION FROM information_schema.ROUTINES"
            " WHERE ROUTINE_SCHEMA = DATABASE() AND (ROUTINE_NAME LIKE 'queue\\_%%' OR"
            " ROUTINE_NAME LIKE 'pyqueue\\_\\_%%')"
        )
    return dict(rows)


def _strip_comments_and_strings(src: str) -> str:
    src = re.sub(r"--[^\n]*", " ", src)
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"'(?:[^']|'')*'", "''", src)


def test_no_routine_builds_sql_from_text(ctx):
    """No dynamic SQL anywhere: PL/pgSQL EXECUTE (and format() feeding it), MySQL PREPARE/EXECUTE.
    The ingest trigger's `EXECUTE FUNCTION` is DDL in the install script, not in any routine body."""
    sources = _routine_sources(ctx)
    contract = {r.name for r in ROUTINES()} | {"queue_workers"}
    assert contract <= set(sources), sorted(contract - set(sources))
    pattern = (
        re.compile(r"\bEXECUTE\b|\bformat\s*\(\s*'[^']*%[IL]", re.I)
        if ctx.dialect == "postgresql"
        else re.compile(r"\bPREPARE\b|\bEXECUTE\b|\bDEALLOCATE\b", re.I)
    )
    dynamic = {
        name: m.group(0)
        for name, src in sources.items()
        if (m := pattern.search(_constant_prepares_removed(_strip_comments_and_strings(src or ""))))
    }
    assert dynamic == {}
    # the check itself sees dynamic SQL when there is some
    assert pattern.search(_strip_comments_and_strings("BEGIN EXECUTE 'SELECT ' || x; END")) is not None
    if ctx.dialect == "mysql":
        for built in (
            "PREPARE s FROM @sql; EXECUTE s;",
            "PREPARE s FROM CONCAT('SELECT ', x); EXECUTE s;",
            "PREPARE s FROM 'SELECT 1'; PREPARE t FROM @q; EXECUTE t;",
        ):
            assert pattern.search(_constant_prepares_removed(_strip_comments_and_strings(built))) is not None


def _constant_prepares_removed(src: str) -> str:
    """MySQL: a statement prepared from a string literal (no text of the caller in it: e.g. reading a
    server variable that an older server lacks) is static SQL; drops it, and its EXECUTE and
    DEALLOCATE, so that only statements prepared from something else are left to find."""
    constant = set(re.findall(r"\bPREPARE\s+(\w+)\s+FROM\s+''\s*;", src, flags=re.I))
    prepared_otherwise = set(re.findall(r"\bPREPARE\s+(\w+)\s+FROM\s+(?!''\s*;)", src, flags=re.I))
    for name in constant - prepared_otherwise:
        src = re.sub(
            rf"\bPREPARE\s+{name}\s+FROM\s+''\s*;|\bEXECUTE\s+{name}\s*;"
            rf"|\bDEALLOCATE\s+PREPARE\s+{name}\s*;",
            " ",
            src,
            flags=re.I,
        )
    return src


def test_python_layer_formats_no_sql_from_values():
    """Every cursor.execute() in pyqueue_sql gets a named statement, a script read from the package,
    or psycopg.sql composition (LISTEN uses sql.Identifier); never an f-string, % or + built text."""
    root = pathlib.Path(__file__).resolve().parents[2] / "pyqueue_sql"
    bad = []
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("execute", "executemany", "callproc")
                and node.args
            ):
                continue
            arg = node.args[0]
            built = isinstance(arg, (ast.JoinedStr, ast.BinOp)) or (
                isinstance(arg, ast.Call)
                and isinstance(arg.func, ast.Attribute)
                and arg.func.attr == "format"
                and not (
                    isinstance(arg.func.value, ast.Call) and ast.unparse(arg.func.value.func) == "sql.SQL"
                )
            )
            if built:
                bad.append(f"{path.name}:{node.lineno}: {ast.unparse(arg)[:80]}")
            if isinstance(arg, ast.Call) and ast.unparse(arg.func).endswith("format"):
                kw = {k.arg: ast.unparse(k.value) for k in arg.keywords}
                if any(not v.startswith("sql.") for v in kw.values()):
                    bad.append(f"{path.name}:{node.lineno}: format() of a non-sql.* value")
    assert bad == []


def test_nul_in_a_json_string_through_the_python_client(db, dialect, make_queue):
    """jsonb cannot hold \\u0000: PostgreSQL refuses it (22P05), which the client reports as an
    InvalidPayloadError; MySQL keeps the JSON text and the NUL comes back as it went in."""
    from pyqueue_sql import InvalidPayloadError

    queue = make_queue()
    if dialect == "postgresql":
        with pytest.raises(InvalidPayloadError, match="Unicode escape"):
            queue.push("m", "k", {"a": "x\x00y"})
        assert queue.stats().ready == 0
    else:
        assert queue.push("m", "k", {"a": "x\x00y"})
        [r] = queue.reserve()
        assert r.payload == {"a": "x\x00y"}


# ---------------------------------------------------------------------------
# MySQL: strict mode inside the routines, whatever the caller's sql_mode
# ---------------------------------------------------------------------------


@pytest.mark.only_dialect("mysql")
def test_mysql_routines_run_in_strict_mode(ctx):
    modes = ctx.rows(
        "SELECT ROUTINE_NAME, SQL_MODE FROM information_schema.ROUTINES"
        " WHERE ROUTINE_SCHEMA = DATABASE() AND (ROUTINE_NAME LIKE 'queue\\_%%'"
        " OR ROUTINE_NAME LIKE 'pyqueue\\_\\_%%')"
    )
    assert len(modes) > 40
    lax = sorted(name for name, mode in modes if "STRICT_ALL_TABLES" not in mode.split(","))
    assert lax == []


@pytest.mark.only_dialect("mysql")
def test_mysql_non_strict_caller_still_gets_refusals_not_truncation(ctx):
    """In a non-strict session the server converts arguments loosely before the procedure runs (the
    documented caveat: '3x' arrives as 3); the procedures' own checks still refuse long names, bad
    JSON and out-of-range values, and nothing is cut to fit a column."""
    ctx.rows("SET SESSION sql_mode = ''")
    try:
        q = ctx.other
        for sql, args in [
            ("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", (q, "x" * 256)),
            ("CALL queue_push(%s, 'k', %s, '{}', NULL, NULL)", (q, "y" * 129)),
            ("CALL queue_push(%s, 'k', 'k', %s, NULL, NULL)", (q, "{nope")),
            ("CALL queue_push(%s, 'k', 'k', '{}', NULL, %s)", (q, 2**31)),
            ("CALL queue_create(%s, NULL, NULL, NULL, NULL)", ("q" * 129,)),
            ("CALL queue_reserve(%s, %s, NULL, 1, NULL)", (q, "w" * 256)),
            ("CALL queue_set_limit(%s, 'k', %s)", (q, 10_001)),
            ("CALL queue_worker_register(%s, %s, NULL, NULL)", (ctx.prefix, "h" * 256)),
        ]:
            before = ctx.snapshot(args)
            with pytest.raises(Refused) as info:
                ctx.run(sql, args)
            assert info.value.kind == "pyqueue", (sql, info.value.message)
            assert ctx.snapshot(args) == before
        # the documented caveat, pinned: a non-strict session converts '3x' to 3 before the call
        assert ctx.rows("CALL queue_push(%s, 'k3', 'k', '{}', NULL, '3x')", (q,)) == [(1,)]
        assert [r[3] for r in ctx.rows("CALL queue_pop(%s, 1)", (q,))] == [3]
    finally:
        ctx.rows("SET SESSION sql_mode = DEFAULT")


@pytest.mark.parametrize("cron_text", ["5\n * * * *", "5 *\n * * *", "* * * * 5\n"])
def test_a_newline_ending_a_cron_field_is_refused_on_both_dialects(ctx, cron_text):
    """MariaDB's PCRE `$` matches before a final newline, so a field check anchored with `$` alone
    would take '5\\n' for '5' (and '*\\n' would fail later in a CAST with a raw 1292): both dialects
    refuse a newline anywhere in the expression."""
    pg = ctx.dialect == "postgresql"
    args = (ctx.other, cron_text)
    before = ctx.snapshot(args)
    with pytest.raises(Refused) as info:
        ctx.run(
            "SELECT queue_schedule_cron(%s, 'c', 'k', '{}', %s)"
            if pg
            else "CALL queue_schedule_cron(%s, 'c', 'k', '{}', %s)",
            args,
        )
    assert info.value.kind == "pyqueue" and "pyqueue:invalid_argument: cron" in info.value.message
    assert ctx.snapshot(args) == before


def test_a_token_with_a_trailing_newline_is_malformed_on_both_dialects(ctx):
    pg = ctx.dialect == "postgresql"
    args = (ctx.queue, ctx.key, ctx.kind, ctx.token + "\n")
    with pytest.raises(Refused) as info:
        ctx.run("SELECT queue_commit(%s, %s, %s, %s)" if pg else "CALL queue_commit(%s, %s, %s, %s)", args)
    assert info.value.kind in ("pyqueue", "bind"), info.value.message
    # and the reservation is intact: the exact token still commits
    done = ctx.rows(
        "SELECT queue_commit(%s, %s, %s, %s)" if pg else "CALL queue_commit(%s, %s, %s, %s)",
        args[:3] + (ctx.token,),
    )
    assert done in ([(True,)], [(1,)])


# ---------------------------------------------------------------------------
# queue_ingest: hostile rows through plain INSERTs
# ---------------------------------------------------------------------------


@SETTINGS
@given(data=st.data())
def _ingest_body(c: Ctx, data) -> None:
    d = c.dialect
    pick = data.draw(st.integers(0, 5), "hostile column")
    good_key = f"g{uuid.uuid4().hex[:10]}"
    row = [c.other, f"h{uuid.uuid4().hex[:10]}", "k", '{"n": 1}', None, None]
    column = [names(128, d), names(255, d), names(128, d), payloads(d), times(d), ints(d)][pick]
    row[pick] = data.draw(column, "value")
    if d == "mysql" and isinstance(row[5], float):
        row[5] = repr(row[5])
    good = [c.other, good_key, "k", "[1]", None, 7]
    args = tuple(row) + tuple(good)
    before = c.snapshot(args)
    insert = (
        "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload, run_at, priority)"
        " VALUES (%s, %s, %s, %s, %s, %s), (%s, %s, %s, %s, %s, %s)"
    )
    try:
        c.run(insert, args)
    except Refused as refusal:
        # PostgreSQL: the trigger's pyqueue refusal, or a value that does not fit the column;
        # MySQL: only the latter. Either way the statement left nothing behind.
        # (a plain INSERT: MySQL's conversion errors name the column, or only the value)
        column_error = refusal.kind == "bind" or refusal.message.split(" ", 1)[0] in {
            str(e) for e in MY_BIND_ERRORS
        }
        assert refusal.kind == "pyqueue" and d == "postgresql" or column_error, refusal.message
        assert c.snapshot(args) == before
        assert c.rows(
            "SELECT count(*) FROM queue_ingest WHERE p_key IN (%s, %s)",
            (row[1] if isinstance(row[1], str) and "\x00" not in row[1] else "-", good_key),
        ) == [(0,)]
        return
    if d == "mysql":
        c.rows("CALL queue_ingest_flush(NULL)")
        assert c.rows("SELECT count(*) FROM queue_ingest WHERE p_key = %s", (good_key,)) == [(0,)]
        rejected = (
            [r for (r,) in c.rows("SELECT reason FROM pyqueue_ingest_reject WHERE p_key = %s", (row[1],))]
            if isinstance(row[1], (str, bytes))
            else []
        )
        rejected += (
            [
                r
                for (r,) in c.rows(
                    "SELECT reason FROM pyqueue_ingest_reject WHERE ingest_id >"
                    " (SELECT COALESCE(MAX(ingest_id), 0) - 2 FROM pyqueue_ingest_reject)"
                    " AND p_key IS NULL"
                )
            ]
            if row[1] is None
            else []
        )
        for reason in rejected:
            assert PYQUEUE_RE.match(reason), reason
        c.rows(
            "DELETE FROM pyqueue_ingest_reject WHERE p_key = %s OR p_key IS NULL",
            (row[1] if isinstance(row[1], (str, bytes)) else "-",),
        )
    # the good row is live and exact; the hostile one is live and exact, or was refused
    pg = d == "postgresql"
    live = c.rows(
        "SELECT p_key, p_kind, payload::text, priority FROM pyqueue_message WHERE queue_name = %s"
        if pg
        else "SELECT p_key, p_kind, payload, priority FROM pyqueue_message WHERE queue_name = %s",
        (c.other,),
    )
    c.rows("DELETE FROM pyqueue_message WHERE queue_name = %s", (c.other,))
    by_key = {k: (kind, p, prio) for k, kind, p, prio in live}
    kind, payload, prio = by_key.pop(good_key)
    assert (kind, json.loads(payload), prio) == ("k", [1], 7)
    if by_key:
        [(k, (kind, payload, prio))] = by_key.items()
        assert (k, kind) == (row[1], row[2])
        assert _same_json(payload, row[3])
        assert prio == (0 if row[5] is None else decimal.Decimal(str(row[5])))
    elif d == "mysql":
        assert rejected, "a row that was neither enqueued nor rejected"


def _same_json(a: str, b: str) -> bool:
    try:
        return jload(a) == jload(b)
    except RecursionError:  # deeper than Python's parser goes: compare the text without blanks
        return re.sub(r"\s", "", a) == re.sub(r"\s", "", b)


def test_hostile_rows_through_queue_ingest(ctx):
    """A hostile value in one column of a two-row INSERT: PostgreSQL enqueues both exactly or fails
    the statement with nothing enqueued; MySQL's flush enqueues each row exactly or rejects it with a
    pyqueue reason (never drops it)."""
    _ingest_body(ctx)


@pytest.mark.only_dialect("mysql")
def test_mysql_zero_dates_in_queue_ingest_are_rejected_not_poisoning_the_flush(ctx):
    """A session without NO_ZERO_DATE (the server default here) can INSERT run_at '0000-00-00' or
    '2020-00-10', which the strict flush cannot convert: the row is rejected with its value in the
    reason (not a raw 1292 failing every flush, for every queue) and the others are enqueued."""
    q = ctx.other
    ctx.rows("SET SESSION sql_mode = 'STRICT_TRANS_TABLES'")
    try:
        ctx.rows(
            "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload, run_at) VALUES"
            " (%s, 'z1', 'k', '1', '0000-00-00 00:00:00'), (%s, 'z2', 'k', '1', '2020-00-10 00:00:00'),"
            " (%s, 'ok', 'k', '1', NULL)",
            (q, q, q),
        )
    finally:
        ctx.rows("SET SESSION sql_mode = DEFAULT")
    assert ctx.rows("CALL queue_ingest_flush(%s)", (q,)) == [(1, 0, 2)]
    rejects = ctx.rows(
        "SELECT p_key, run_at, reason FROM pyqueue_ingest_reject WHERE queue_name = %s ORDER BY id", (q,)
    )
    assert rejects == [
        ("z1", None, "pyqueue:invalid_argument: run_at is not a valid time (0000-00-00 00:00:00.000000)"),
        ("z2", None, "pyqueue:invalid_argument: run_at is not a valid time (2020-00-10 00:00:00.000000)"),
    ]
    ctx.rows("DELETE FROM pyqueue_ingest_reject WHERE queue_name = %s", (q,))
    assert [r[0] for r in ctx.rows("CALL queue_pop(%s, 5)", (q,))] == ["ok"]


# ---------------------------------------------------------------------------
# the exact refusal of each limit, from plain SQL (the `raw` fixture): the
# sweep above proves a clear error; these pin which error, and that the same
# bad input gets the same `pyqueue:<code>: <detail>` on both dialects
# ---------------------------------------------------------------------------
def refused(raw, sql, params=None) -> str:
    """Runs sql, which must fail with a pyqueue error; returns the message."""
    with pytest.raises(Exception) as info:
        raw(sql, params)
    message = str(info.value)
    assert "pyqueue:" in message, message
    return message


def workers_named(raw, name):
    return raw("SELECT count(*) FROM pyqueue_worker WHERE worker_name = %s", (name,))[0][0]


# -- worker registry: the queues list holds queue names; ids start at 1 -----

BAD_QUEUES = [
    ("empty", [""], '[""]'),
    ("space-ended", ["emails "], '["emails "]'),
    ("too long", ["x" * 129], '["' + "x" * 129 + '"]'),
    ("null element", [None], "[null]"),
]


@pytest.mark.parametrize("pg,my", [(p, m) for _, p, m in BAD_QUEUES], ids=[i for i, _, _ in BAD_QUEUES])
def test_worker_register_refuses_queues_that_are_not_names(raw, dialect, pg, my):
    name = f"bad-queues-{dialect}-{len(pg[0] or '')}-{my[:3]}"
    if dialect == "postgresql":
        msg = refused(raw, "SELECT queue_worker_register(%s, NULL, NULL, %s::text[])", (name, pg))
    else:
        msg = refused(raw, "CALL queue_worker_register(%s, NULL, NULL, %s)", (name, my))
    assert "pyqueue:invalid_argument: queues must be NULL or" in msg
    assert workers_named(raw, name) == 0


@pytest.mark.only_dialect("mysql")  # a PostgreSQL text[] cannot hold a number or an object
@pytest.mark.parametrize("bad", ["[1]", '[["q"]]', '[{"a": 1}]'])
def test_mysql_worker_register_refuses_non_string_queue_names(raw, dialect, bad):
    msg = refused(raw, "CALL queue_worker_register('bad-queues-json', NULL, NULL, %s)", (bad,))
    assert "pyqueue:invalid_argument: queues must be NULL or a JSON array of names" in msg
    assert workers_named(raw, "bad-queues-json") == 0


def test_worker_register_accepts_the_longest_queue_name(raw, dialect):
    longest = "x" * 128
    if dialect == "postgresql":
        wid = raw(
            "SELECT worker_id FROM queue_worker_register('longest-queue-name', NULL, NULL, ARRAY['q', %s])",
            (longest,),
        )[0][0]
    else:
        wid = raw(
            "CALL queue_worker_register('longest-queue-name', NULL, NULL, %s)", (f'["q", "{longest}"]',)
        )[0][0]
    assert wid >= 1
    assert workers_named(raw, "longest-queue-name") == 1
    raw("DELETE FROM pyqueue_worker WHERE worker_id = %s", (wid,))


@pytest.mark.parametrize("routine", ["queue_worker_heartbeat", "queue_worker_deregister"])
@pytest.mark.parametrize("bad_id", [0, -1])
def test_worker_id_below_one_is_refused_on_both_dialects(raw, dialect, routine, bad_id):
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    msg = refused(raw, f"{verb} {routine}(%s, %s)", (bad_id, str(uuid.uuid4())))
    assert "pyqueue:invalid_argument: worker_id must be a whole number from 1" in msg


@pytest.mark.parametrize("routine", ["queue_worker_heartbeat", "queue_worker_deregister"])
def test_unregistered_worker_id_answers_false_on_both_dialects(raw, dialect, routine):
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    assert not raw(f"{verb} {routine}(%s, %s)", (2**62, str(uuid.uuid4())))[0][0]


@pytest.mark.parametrize("routine", ["queue_worker_heartbeat", "queue_worker_deregister"])
@pytest.mark.parametrize("secret", [None, "", "not-a-secret", "x" * 37])
def test_a_missing_or_malformed_worker_secret_is_refused_or_false(raw, dialect, routine, secret):
    """NULL is refused (invalid_argument); a secret that is not the worker's answers false or is
    refused as malformed (PostgreSQL's uuid parameter refuses text that is not a uuid before the
    call); the registration is never touched."""
    verb = "SELECT" if dialect == "postgresql" else "CALL"
    name = f"rs-{uuid.uuid4().hex[:6]}"
    if dialect == "postgresql":
        [(wid,)] = raw("SELECT worker_id FROM queue_worker_register(%s, NULL, NULL, NULL)", (name,))
    else:
        [(wid, _)] = raw("CALL queue_worker_register(%s, NULL, NULL, NULL)", (name,))
    try:
        if secret is None:
            assert "pyqueue:invalid_argument" in refused(raw, f"{verb} {routine}(%s, %s)", (wid, secret))
        else:
            try:
                answer = raw(f"{verb} {routine}(%s, %s)", (wid, secret))[0][0]
            except Exception as exc:  # noqa: BLE001 - a refusal, or PostgreSQL: not a uuid
                assert "pyqueue:invalid_argument" in str(exc) or (
                    dialect == "postgresql" and "uuid" in str(exc)
                ), str(exc)
            else:
                assert not answer
        assert raw("SELECT count(*) FROM pyqueue_worker WHERE worker_id = %s", (wid,))[0][0] == 1
    finally:
        raw("DELETE FROM pyqueue_worker WHERE worker_id = %s", (wid,))


# -- durations: "at most 100 years" means the same on both dialects ---------


def test_older_than_just_over_100_years_is_refused(raw, dialect):
    # PostgreSQL compares intervals with a 360-day year: compared as an interval,
    # '101 years' (= 36 360 days) would pass as "under 36 525 days".
    if dialect == "postgresql":
        msg = refused(raw, "SELECT queue_release_dead_workers(interval '101 years')")
        assert raw("SELECT queue_release_dead_workers(interval '100 years')")[0][0] == 0
    else:
        msg = refused(raw, "CALL queue_release_dead_workers(%s)", (101 * 31557600,))
        assert raw("CALL queue_release_dead_workers(%s)", (100 * 31557600,))[0][0] == 0
    assert "pyqueue:invalid_argument: older_than must not exceed 100 years" in msg


def test_schedule_every_just_over_100_years_is_refused(queue, raw, dialect):
    if dialect == "postgresql":
        msg = refused(
            raw, "SELECT queue_schedule_every(%s, 's', 'k', '{}', interval '36526 days')", (queue.name,)
        )
    else:
        msg = refused(raw, "CALL queue_schedule_every(%s, 's', 'k', '{}', %s)", (queue.name, 36526 * 86400))
    assert "pyqueue:invalid_argument: every must not exceed 100 years" in msg
    assert queue.stats().delayed == 0


# -- queue_wait: a poll under 1 ms is refused, not silently raised to 1 ms --


@pytest.mark.parametrize("poll_ms", [0.9, 0.001])
def test_wait_refuses_a_poll_under_one_millisecond(queue, raw, dialect, poll_ms):
    if dialect == "postgresql":
        msg = refused(
            raw,
            "SELECT queue_wait(%s, NULL, interval '0', %s * interval '1 millisecond')",
            (queue.name, poll_ms),
        )
    else:
        msg = refused(raw, "CALL queue_wait(%s, NULL, 0, %s)", (queue.name, poll_ms / 1000))
    assert "pyqueue:invalid_argument: poll must be at least 1 millisecond" in msg


def test_wait_accepts_a_poll_of_one_millisecond(queue, raw, dialect):
    queue.push("k", "kind", 1)
    if dialect == "postgresql":
        ready = raw("SELECT queue_wait(%s, NULL, interval '0', interval '1 millisecond')", (queue.name,))
    else:
        ready = raw("CALL queue_wait(%s, NULL, 0, 0.001)", (queue.name,))
    assert bool(ready[0][0]) is True


# -- kinds filters: a kind over 128 characters is refused on both dialects --
# (cut to 128, it would reserve the messages of that shorter kind)


@pytest.mark.parametrize("routine", ["reserve", "next_scheduled_at", "wait"])
def test_kinds_filter_refuses_a_kind_over_128_characters(queue, raw, dialect, routine):
    short = "x" * 128
    queue.push("k", short, 1)
    long_kind = short + "y"
    if dialect == "postgresql":
        sql = {
            "reserve": "SELECT * FROM queue_reserve(%s, 'w', NULL, 1, ARRAY[%s])",
            "next_scheduled_at": "SELECT * FROM queue_next_scheduled_at(%s, ARRAY[%s])",
            "wait": "SELECT queue_wait(%s, ARRAY[%s], interval '0')",
        }[routine]
        msg = refused(raw, sql, (queue.name, long_kind))
    else:
        sql = {
            "reserve": "CALL queue_reserve(%s, 'w', NULL, 1, %s)",
            "next_scheduled_at": "CALL queue_next_scheduled_at(%s, %s)",
            "wait": "CALL queue_wait(%s, %s, 0, NULL)",
        }[routine]
        msg = refused(raw, sql, (queue.name, f'["{long_kind}"]'))
    assert "pyqueue:invalid_argument: kinds must not hold a kind longer than 128 characters" in msg
    stats = queue.stats()
    assert (stats.ready, stats.reserved) == (1, 0)  # the 128-character kind was not handed out


def test_kinds_filter_of_exactly_128_characters_still_matches(queue, raw, dialect):
    kind = "é" * 128
    queue.push("k", kind, 1)
    if dialect == "postgresql":
        rows = raw("SELECT p_kind FROM queue_reserve(%s, 'w', NULL, 1, ARRAY[%s])", (queue.name, kind))
    else:
        rows = [(r[1],) for r in raw("CALL queue_reserve(%s, 'w', NULL, 1, %s)", (queue.name, f'["{kind}"]'))]
    assert [r[0] for r in rows] == [kind]

"""A member name written with JSON escapes is checked as the name it decodes to.

"header\\u0073" is "headers" and "pyqueue.expires\\u005fat" is "pyqueue.expires_at" to every JSON reader
that decodes names (a client, MariaDB's JSON_TABLE, PostgreSQL's jsonb); a check that looks for the
plain text of a name must not let the escaped spelling through. A producer, in plain SQL as any
caller may send it, pushes headers under escaped names: oversize headers and a pyqueue.expires_at
that is not a time are refused in one line, nothing is written, and the test clock (advance_clock,
which rewrites every stored expiry) still works. Escaped names that spell nothing reserved are
taken as before."""

from __future__ import annotations

import json
import re

import pytest

from pyqueue_sql.timetravel import advance_clock
from tests.plainsql import statement
from tests.security.test_privileges import Accounts

BAD_EXPIRY = "pyqueue.expires_at must be"
OVERSIZE = "more than 8192 bytes"
LATER = "2030-01-01T00:00:00.000000Z"


@pytest.fixture
def accounts(dsn):
    made = Accounts(dsn)
    yield made
    made.close()


class Producer:
    """A producer-only account's plain connection; each push is given its JSON as text."""

    def __init__(self, accounts: Accounts) -> None:
        self.dialect = accounts.dialect
        self.pg = self.dialect == "postgresql"
        self.conn = accounts.raw(accounts.with_capabilities("esc", "producer"))

    def _call(self, routine: str, args: list, casts: tuple) -> None:
        cur = self.conn.cursor()
        try:
            cur.execute(statement(self.dialect, routine, len(args), casts), args)
            while getattr(cur, "nextset", None) and cur.nextset():
                pass
            if self.pg and not self.conn.autocommit:
                self.conn.commit()
        except Exception:
            if self.pg and not self.conn.autocommit:
                self.conn.rollback()
            raise
        finally:
            cur.close()

    def push(self, queue: str, key: str, headers_text: str) -> None:
        casts = (None, None, None, "::jsonb", "::timestamptz", "::integer", "::jsonb")
        self._call("queue_push_with_headers", [queue, key, "job", "{}", None, None, headers_text], casts)

    def push_batch(self, queue: str, elements: list[tuple[str, str, str]]) -> None:
        """elements: (key, the member name of the headers as written, the headers' JSON text)."""
        if self.pg:  # the headers are an array beside the keys: there is no member to name
            casts = (None, "::text[]", "::text[]", "::jsonb[]", "::timestamptz[]", "::integer[]", "::jsonb[]")
            keys = [k for k, _, _ in elements]
            args = [
                queue,
                keys,
                ["job"] * len(keys),
                ["{}"] * len(keys),
                None,
                None,
                [h for _, _, h in elements],
            ]
            self._call("queue_push_batch_with_headers", args, casts)
            return
        text = (
            "["
            + ", ".join(
                f'{{"p_key": {json.dumps(k)}, "p_kind": "job", "payload": {{}}, "{member}": {h}}}'
                for k, member, h in elements
            )
            + "]"
        )
        self._call("queue_push_batch_with_headers", [queue, text, None, None, None, None, None], ())


@pytest.fixture
def producer(accounts):
    return Producer(accounts)


def refused(expected: str, call) -> None:
    with pytest.raises(Exception, match=re.escape(expected)):  # noqa: PT011 - the driver's error, by its text
        call()


def test_escaped_names_cannot_carry_headers_past_their_checks(producer, make_queue, db):
    queue = make_queue()
    oversize = json.dumps({"h": "x" * 20_000})
    not_a_time = '{"pyqueue.expires_at": "not a time"}'
    escaped_expiry = '{"pyqueue.expires\\u005fat": "not a time"}'
    both = f'{{"pyqueue.expires_at": "{LATER}", "pyqueue.expires\\u005fat": "not a time"}}'
    if not producer.pg:  # the headers as an escaped member of each element: MySQL/MariaDB's batch shape
        refused(OVERSIZE, lambda: producer.push_batch(queue.name, [("a", "header\\u0073", oversize)]))
        refused(BAD_EXPIRY, lambda: producer.push_batch(queue.name, [("b", "header\\u0073", not_a_time)]))
        refused(
            OVERSIZE,
            lambda: producer.push_batch(
                queue.name, [("c", "headers", "{}"), ("d", "he\\u0061ders", oversize)]
            ),
        )
    for headers in (escaped_expiry, both):
        refused(BAD_EXPIRY, lambda h=headers: producer.push_batch(queue.name, [("e", "headers", h)]))
        refused(BAD_EXPIRY, lambda h=headers: producer.push(queue.name, "f", h))
    assert queue.stats().ready == 0  # nothing of a refused push stays
    assert advance_clock(db, 60) == 60  # every stored expiry is a time the test clock can move


def test_escaped_names_that_spell_nothing_reserved_are_taken(producer, make_queue, db):
    queue = make_queue()
    producer.push(queue.name, "a", '{"caf\\u00e9": 1}')
    member = "headers" if producer.pg else "header\\u0073"
    producer.push_batch(queue.name, [("b", member, f'{{"caf\\u00e9": 2, "pyqueue.expires_at": "{LATER}"}}')])
    assert queue.message("a", "job").headers == {"café": 1}
    assert queue.message("b", "job").headers == {"café": 2, "pyqueue.expires_at": LATER}
    assert advance_clock(db, 60) == 60

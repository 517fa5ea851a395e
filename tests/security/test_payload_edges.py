"""What a push accepts, every client reads back (docs/contract.md, "Payloads"): a producer holding
only its capability pushes, in plain SQL, payloads at the edges of what each dialect's JSON takes
(an integer of 4,500 digits, an exponent past a float's range, nesting as deep as the server holds,
unicode escapes, NUL). Each is either refused by the push (one error, nothing written) or read back
exactly by every client path: reserve and message() on both clients, dead_letters() on both, and
`pyqueue-sql dead-letters --json` / `show`, with no traceback."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from decimal import Decimal

import pytest

from pyqueue_sql import aio
from pyqueue_sql.dialects import UnreadableJSON, load_json

from ..helpers import run_cli
from .test_privileges import accounts  # noqa: F401 - the fixture is used by name

HUGE = "7" * 4500  # past Python's 4,300 digits of int()


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def _depth_is(depth: int):
    """A check that a value is `depth` empty lists nested in each other (walked without recursion)."""

    def check(value) -> bool:
        for _ in range(depth - 1):
            if type(value) is not list or len(value) != 1:
                return False
            value = value[0]
        return value == []

    return check


# name: (JSON text as the producer sends it, its check on PostgreSQL, on MySQL/MariaDB); a check
# of None: that server refuses the push.
CASES = {
    "integer of 4,500 digits": (
        f'{{"n": {HUGE}, "m": -{HUGE}}}',
        lambda v: v == {"n": Decimal(HUGE), "m": Decimal("-" + HUGE)},
    ),
    "numbers past a float's range": (
        '{"f": 1e400, "g": -1.5e400, "h": 1e5000, "x": 1.5, "i": 12}',
        # jsonb keeps 1e400 as the integer it is: a 401-digit int, and 1e5000 past int()'s digits
        lambda v: v == {"f": 10**400, "g": -15 * 10**399, "h": Decimal("1e5000"), "x": 1.5, "i": 12},
    ),
    "unicode escapes": (
        r'{"s": "\u00e9\ud83d\ude00\u2028\"\\"}',
        lambda v: v == {"s": 'é\U0001f600\u2028"\\'},
    ),
    "lone surrogate": (r'{"s": "\ud800"}', None),
}
PG_ONLY = {
    "NUL": (r'{"s": "a\u0000b"}', None),  # jsonb cannot hold it: refused
    "arrays nested 2,000 deep": (_deep(2000), _depth_is(2000)),
    "arrays nested 10,000 deep": (_deep(10000), _depth_is(10000)),
}


def _unreadable(value) -> bool:
    """Stored text that is not JSON: read as an UnreadableJSON naming why (a display: its note)."""
    if isinstance(value, str):
        return value.startswith("(unreadable: not JSON this client reads: ")
    return isinstance(value, UnreadableJSON) and value.reason.startswith("not JSON this client reads: ")


MYSQL_ONLY = {
    "NUL": (r'{"s": "a\u0000b"}', lambda v: v == {"s": "a\x00b"}),
    # JSON_VALID lets these through (a sign, a point or an exponent without digits, an escape JSON
    # does not have): not JSON, so no client can read them; each message fails alone, named
    "number forms that are not JSON": ('{"a": -, "b": 1., "c": [1e]}', _unreadable),
    "an escape that is not JSON": (r'{"s": "\x41"}', _unreadable),
    "arrays nested 31 deep": (_deep(31), _depth_is(31)),
    "arrays nested 32 deep": (_deep(32), None),  # JSON_VALID's limit: refused
}


def _push_sql(dialect: str) -> str:
    if dialect == "postgresql":
        return "SELECT queue_push(%s, %s, %s, %s::jsonb)"
    return "CALL queue_push(%s, %s, %s, %s, NULL, NULL)"


def _push(conn, dialect: str, queue: str, key: str, text: str, kind: str = "edge") -> str | None:
    """Pushes as the producer; None, or the server's error when it refused."""
    cur = conn.cursor()
    try:
        cur.execute(_push_sql(dialect), (queue, key, kind, text))
        if cur.description:
            cur.fetchall()
        while dialect != "postgresql" and cur.nextset():
            pass
    except Exception as exc:  # noqa: BLE001 - the refusal is what the caller checks
        return " ".join(str(exc).split())
    finally:
        cur.close()
    return None


@pytest.fixture
def queues(db):
    suffix = uuid.uuid4().hex[:10]
    dead = db.queue(f"edge.dead.{suffix}").create(visibility_timeout=30)
    source = db.queue(f"edge.{suffix}").create(
        visibility_timeout=30, max_attempts=3, dead_letter_queue=dead.name
    )
    yield source, dead
    with contextlib.suppress(Exception):
        source.drop()
        dead.drop()


def test_every_payload_a_push_accepts_is_read_back_by_every_client_path(
    accounts,  # noqa: F811
    queues,
    db,
    dsn,
    dialect,
    capsys,
):
    source, dead = queues
    cases = {**CASES, **(PG_ONLY if dialect == "postgresql" else MYSQL_ONLY)}
    producer = accounts.raw(accounts.with_capabilities("edge", "producer"))
    if dialect == "postgresql":
        producer.autocommit = True

    accepted = {}
    for i, (name, (text, check)) in enumerate(cases.items()):
        refused = _push(producer, dialect, source.name, f"k{i}", text)
        if check is None:
            assert refused is not None, f"{name}: the push took what no client reads"
            assert "\n" not in refused
        else:
            assert refused is None, f"{name}: {refused}"
            accepted[f"k{i}"] = (name, check)
    assert source.stats().ready == len(accepted)  # nothing of a refused push was written

    def checked(where: str, key: str, value) -> None:
        name, check = accepted[key]
        assert check(value), f"{where} read {name} as something else"

    # the asyncio client: reserve (every message in one call) and message(), then handed back
    async def read_async() -> None:
        adb = await aio.connect(dsn)
        try:
            queue = adb.queue(source.name)
            held = await queue.reserve(n=len(accepted) + 1, timeout=30)
            assert sorted(r.key for r in held) == sorted(accepted)
            for r in held:
                checked("AsyncQueue.reserve", r.key, r.payload)
                checked("AsyncQueue.message", r.key, (await queue.message(r.key, "edge")).payload)
                assert await queue.rollback(r)
        finally:
            await adb.close()

    asyncio.run(read_async())

    # the sync client: reserve and message(), then each given up into the dead-letter queue
    held = source.reserve(n=len(accepted) + 1, timeout=30)
    assert sorted(r.key for r in held) == sorted(accepted)
    for r in held:
        checked("Queue.reserve", r.key, r.payload)
        checked("Queue.message", r.key, source.message(r.key, "edge").payload)
        assert source.give_up(r, "edge") == "dead_lettered"

    letters = dead.dead_letters()
    assert sorted(d.key for d in letters) == sorted(accepted)
    for d in letters:
        checked("Queue.dead_letters", d.key, d.payload)
        checked("Queue.message (dead letter)", d.key, dead.message(d.key, "edge").payload)

    async def dead_letters_async() -> list:
        adb = await aio.connect(dsn)
        try:
            return await adb.queue(dead.name).dead_letters()
        finally:
            await adb.close()

    for d in asyncio.run(dead_letters_async()):
        checked("AsyncQueue.dead_letters", d.key, d.payload)

    # the command line: one JSON line a dead letter, read back to the same values; show, no traceback
    capsys.readouterr()  # what the grant printed
    code, out, err = run_cli(capsys, "dead-letters", dead.name, "--json", "--dsn", dsn)
    assert code == 0 and "Traceback" not in err, err
    lines = out.splitlines()
    assert len(lines) == len(accepted)
    for line in lines:
        row = load_json(line)
        checked("pyqueue-sql dead-letters --json", row["key"], row["payload"])
    for key in accepted:
        code, out, err = run_cli(capsys, "show", dead.name, key, "edge", "--dsn", dsn)
        assert code == 0 and "Traceback" not in err, err
        [payload_line] = [line for line in out.splitlines() if line.startswith("payload:")]
        checked("pyqueue-sql show", key, load_json(payload_line.removeprefix("payload:").strip()))

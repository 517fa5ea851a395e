"""MySQL/MariaDB: a session's clock never moves the queue's.

Any account may run ``SET timestamp = <t>`` in its own session, and that moves what NOW() and
UTC_TIMESTAMP() read there, inside the SQL SECURITY DEFINER procedures too: with it, every due time,
lease, rate window and expiry the procedures compute. Every contract procedure that reads the clock
refuses a session whose clock is more than a second off the server's, in one line and before it reads
or writes anything, and runs on the server's clock otherwise (pyqueue__check_clock, 02_checks.sql).

Which procedures read the clock is found here from sql/mysql/routines: a clock function in a
procedure's body or in a helper it calls, however deep. Each is called as an account holding only a
capability that includes it, with its clock moved an hour either way and ten years on. The attacks
themselves are run as a consumer through the client: a message delayed by an hour, a rate of one an
hour, a lease past max_reservation, a message past its pyqueue.expires_at."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from pyqueue_sql import InvalidArgumentError
from pyqueue_sql.capabilities import CAPABILITIES
from tests.plainsql import run as _run
from tests.security.test_privileges import Accounts

pytestmark = pytest.mark.only_dialect("mysql")

ROUTINES = Path(__file__).resolve().parents[2] / "sql" / "mysql" / "routines"
REFUSED = "the session clock is not the server clock (SET timestamp)"
HOUR = 3600
MOVES = {"an hour on": HOUR, "an hour back": -HOUR, "ten years on": 10 * 365 * 86400}
# every function of MySQL/MariaDB that reads the session's clock (SYSDATE reads the server's)
CLOCK = re.compile(
    r"\b(UTC_TIMESTAMP|NOW|CURRENT_TIMESTAMP|LOCALTIMESTAMP|LOCALTIME|CURDATE|CURTIME|CURRENT_DATE"
    r"|CURRENT_TIME|UTC_DATE|UTC_TIME|UNIX_TIMESTAMP)\b",
    re.IGNORECASE,
)
# the capability an account walks each procedure with: the narrowest that holds it
ORDER = ("consumer", "producer", "pipeline", "ingest", "monitor", "admin")


def routines_reading_the_clock() -> list[str]:
    """The contract procedures (queue_*) whose body, or a helper's they call however deep, reads the
    session's clock."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(ROUTINES.glob("*.sql")))
    bodies = {
        m.group(2): re.sub(r"--[^\n]*", "", m.group(3))
        for m in re.finditer(r"^CREATE (PROCEDURE|FUNCTION) (\w+)\s*\((.*?)^END //", text, re.S | re.M)
    }
    calls = {
        name: {c for c in re.findall(r"\b((?:queue|pyqueue)_\w+)\s*\(", body) if c in bodies and c != name}
        for name, body in bodies.items()
    }
    reading = {name for name, body in bodies.items() if CLOCK.search(body)} - {"pyqueue__check_clock"}
    while more := {n for n in bodies if n not in reading and calls[n] & reading} - {"pyqueue__check_clock"}:
        reading |= more
    return sorted(n for n in reading if n.startswith("queue_"))


def move_clock(conn, seconds: float) -> None:
    _run(conn, f"SET timestamp = UNIX_TIMESTAMP(SYSDATE(6)) + {seconds}")


@pytest.fixture
def accounts(dsn):
    made = Accounts(dsn)
    yield made
    made.close()


def test_the_walk_finds_the_routines_that_read_the_clock():
    found = routines_reading_the_clock()
    for name in ("queue_push", "queue_reserve", "queue_pop", "queue_extend", "queue_commit", "queue_wait"):
        assert name in found
    assert len(found) > 50


def test_every_routine_reading_the_clock_refuses_a_moved_session_clock(accounts, db):
    found = routines_reading_the_clock()
    arity = dict(
        _run(
            db.connection,
            "SELECT r.ROUTINE_NAME, COUNT(p.PARAMETER_NAME) FROM information_schema.ROUTINES r"
            " LEFT JOIN information_schema.PARAMETERS p ON p.SPECIFIC_SCHEMA = r.ROUTINE_SCHEMA"
            " AND p.SPECIFIC_NAME = r.ROUTINE_NAME AND p.ORDINAL_POSITION > 0"
            " WHERE r.ROUTINE_SCHEMA = DATABASE() AND r.ROUTINE_TYPE = 'PROCEDURE' GROUP BY r.ROUTINE_NAME",
        )
    )
    caller = {}
    for name in found:
        capability = next((c for c in ORDER if name in CAPABILITIES[c]), None)
        assert capability is not None, f"{name} reads the clock but no capability calls it"
        caller[name] = capability
    conns = {c: accounts.raw(accounts.with_capabilities(f"clk{c[:4]}", c)) for c in set(caller.values())}
    failures = []
    for name in found:
        conn = conns[caller[name]]
        call = f"CALL {name}({', '.join(['NULL'] * int(arity[name]))})"
        for how, seconds in MOVES.items():
            move_clock(conn, seconds)
            try:
                _run(conn, call)
            except Exception as exc:  # noqa: BLE001 - checked just below
                if REFUSED not in str(exc):
                    failures.append(f"{name} ({caller[name]}, clock {how}): {exc}")
            else:
                failures.append(f"{name} ({caller[name]}, clock {how}): ran")
            finally:
                _run(conn, "SET timestamp = DEFAULT")
    assert not failures, "\n".join(failures)


@pytest.fixture
def consumer(accounts, db):
    """A consumer-only account's client, and a function that moves its session's clock."""
    client = accounts.client(accounts.with_capabilities("clkc", "consumer"))
    return client, lambda seconds: move_clock(client.connection, seconds)


def refused(call) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(REFUSED)):
        call()


def test_a_consumer_cannot_reserve_a_delayed_message_early(consumer, make_queue):
    queue = make_queue()
    assert queue.push("later", "job", {}, run_at=dt.timedelta(hours=1))
    client, move = consumer
    mine = client.queue(queue.name)
    for seconds in MOVES.values():
        move(seconds)
        refused(mine.reserve)
        refused(mine.pop)
    move(0)  # within the second: runs, on the server's clock
    assert mine.reserve() == []
    assert queue.message("later", "job").state == "delayed"


def test_a_consumer_cannot_outrun_a_rate_with_its_clock(consumer, make_queue):
    queue = make_queue()
    queue.set_rate(None, 1, per=HOUR)
    assert queue.push_many([(f"k{i}", "job", {}) for i in range(3)]) == 3
    client, move = consumer
    mine = client.queue(queue.name)
    assert len(mine.reserve()) == 1
    for hours in (1, 2, 3):
        move(hours * HOUR)
        refused(mine.reserve)
    move(0)
    assert mine.reserve() == []  # the hour's one reservation is taken
    assert queue.stats().ready == 2


def test_a_consumer_cannot_hold_a_lease_past_max_reservation(consumer, make_queue, db):
    queue = make_queue()
    queue.set_max_reservation(dt.timedelta(hours=12))
    assert queue.push("k", "job", {})
    client, move = consumer
    mine = client.queue(queue.name)
    move(10 * 365 * 86400)
    refused(lambda: mine.reserve(timeout=12 * HOUR))
    move(0)
    [held] = mine.reserve(timeout=12 * HOUR)
    move(10 * 365 * 86400)
    refused(lambda: mine.extend(held, timeout=12 * HOUR))
    [(now,)] = _run(db.connection, "SELECT UTC_TIMESTAMP(6)")
    until = queue.message("k", "job").scheduled_at.replace(tzinfo=None)
    assert until <= now + dt.timedelta(hours=12, seconds=1)


def test_a_consumer_is_not_handed_an_expired_message(consumer, make_queue, db):
    queue = make_queue()
    [(now,)] = _run(db.connection, "SELECT UTC_TIMESTAMP(6)")
    expired = (now - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert queue.push("old", "job", {}, headers={"pyqueue.expires_at": expired})
    client, move = consumer
    mine = client.queue(queue.name)
    for seconds in (-HOUR, -10 * 365 * 86400 // 2):
        move(seconds)
        refused(mine.reserve)
        refused(mine.pop)
    move(0)
    assert mine.reserve() == []
    assert queue.message("old", "job") is None  # ended as cancelled, never handed out


def test_a_clock_moved_within_the_second_is_put_back_on_the_servers(accounts, make_queue, db):
    """Within the tolerance the call runs on the server's clock, and the session's clock is the
    server's after it: what it writes is stamped with the server's time."""
    queue = make_queue()
    producer = accounts.raw(accounts.with_capabilities("clkp", "producer"))
    [(before,)] = _run(db.connection, "SELECT UTC_TIMESTAMP(6)")
    move_clock(producer, -0.9)
    _run(producer, "CALL queue_push(%s, 'k', 'job', '{}', NULL, NULL)", (queue.name,))
    [(created,)] = _run(
        db.connection, "SELECT created_at FROM pyqueue_message WHERE queue_name = %s", (queue.name,)
    )
    assert created >= before
    [(session, server)] = _run(producer, "SELECT @@session.timestamp, UNIX_TIMESTAMP(SYSDATE(6))")
    assert abs(float(session) - float(server)) < 0.5

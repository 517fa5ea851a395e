"""MySQL/MariaDB: queue_commit and queue_reserve skip their helpers' checks when the arguments are
plainly valid; whatever is not plainly valid still gets the full checks and the same refusals,
and an unknown queue is refused even with well-formed arguments. In autocommit mode one message
is reserved, and committed, in a few statements; whatever that short way does not cover (a top
priority with nothing ready, a message due for dead-lettering, history, groups, a row another
transaction holds) goes the general way with the same outcome, and a commit that archives is
one transaction: a failure after the archiving keeps no history row. A batch in autocommit mode
from a queue of priority 0 is reserved in a few statements too, in FIFO order, each message once,
without holding up pushes; a message below priority 0 or one due for dead-lettering sends it the
general way."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pymysql
import pytest

import pyqueue_sql
from pyqueue_sql.dialects import mysql_connect_args
from tests.plainsql import call

pytestmark = pytest.mark.only_dialect("mysql")

TOKEN = "0f8fad5b-d9cb-469f-a165-70867728950e"


@pytest.fixture
def sql(mysql_sql):
    return mysql_sql


@pytest.fixture
def queue(sql):
    name = f"fast.{uuid.uuid4().hex[:10]}"
    sql("CALL queue_create(%s, NULL, NULL, NULL, NULL)", name)
    return name


def refusal(sql, statement, *args) -> str:
    with pytest.raises(pymysql.MySQLError) as refused:
        sql(statement, *args)
    return refused.value.args[1].split(":")[1]


def test_well_formed_calls_on_an_unknown_queue_are_refused(sql):
    missing = f"missing.{uuid.uuid4().hex[:10]}"
    assert refusal(sql, "CALL queue_commit(%s, 'k', 'k', %s)", missing, TOKEN) == "unknown_queue"
    assert refusal(sql, "CALL queue_reserve(%s, 'w', NULL, 1, NULL)", missing) == "unknown_queue"


def test_a_commit_that_holds_nothing_on_a_known_queue_is_false(sql, queue):
    assert sql("CALL queue_commit(%s, 'k', 'k', %s)", queue, TOKEN) == [(0,)]


@pytest.mark.parametrize(
    ("key", "kind", "token"),
    [
        ("k ", "k", TOKEN),
        ("k", "", TOKEN),
        ("k" * 256, "k", TOKEN),
        ("k", "k", "not-a-token"),
        ("k", "k", TOKEN + "\n"),
        ("k", "k", None),
        (None, "k", TOKEN),
    ],
)
def test_a_commit_with_bad_arguments_is_refused(sql, queue, key, kind, token):
    assert refusal(sql, "CALL queue_commit(%s, %s, %s, %s)", queue, key, kind, token) == "invalid_argument"


@pytest.mark.parametrize(
    ("worker", "timeout", "n", "kinds"),
    [
        ("w", None, 0, None),
        ("w", None, 2.5, None),
        ("w", None, 2147483648, None),
        ("w", 0, 1, None),
        ("w", -1, 1, None),
        ("w", 3155760001, 1, None),
        ("w" * 256, None, 1, None),
        ("w", None, 1, "[]"),
        ("w", None, 1, "not json"),
    ],
)
def test_a_reserve_with_bad_arguments_is_refused(sql, queue, worker, timeout, n, kinds):
    statement = "CALL queue_reserve(%s, %s, %s, %s, %s)"
    assert refusal(sql, statement, queue, worker, timeout, n, kinds) == "invalid_argument"


def test_a_plain_reserve_and_commit_still_work(sql, queue):
    sql("CALL queue_push(%s, 'm', 'k', '{}', NULL, NULL)", queue)
    [row] = sql("CALL queue_reserve(%s, NULL, NULL, NULL, NULL)", queue)
    assert sql("CALL queue_commit(%s, %s, %s, %s)", queue, row[0], row[1], row[3].upper()) == [(1,)]


def connect(dsn: str, **overrides) -> pymysql.connections.Connection:
    return pymysql.connect(**{**mysql_connect_args(dsn), **overrides})


def _keys(rows) -> list[str]:
    return [row[0] for row in rows]


def _in_threads(count: int, target, seconds: float = 60) -> None:
    """Runs target(slot) for slots 0..count-1 in threads at once; all must end within seconds."""
    threads = [threading.Thread(target=target, args=(slot,)) for slot in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds)
    assert not any(thread.is_alive() for thread in threads)


def test_a_single_reserve_whose_top_priority_has_nothing_ready_takes_the_next_priority(sql, queue):
    sql("CALL queue_push(%s, 'later', 'k', '{}', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 9)", queue)
    sql("CALL queue_push(%s, 'low', 'k', '{}', NULL, 1)", queue)
    sql("CALL queue_push(%s, 'lower', 'k', '{}', NULL, 0)", queue)
    assert _keys(sql("CALL queue_reserve(%s, 'w', NULL, 1, NULL)", queue)) == ["low"]
    assert _keys(sql("CALL queue_reserve(%s, 'w', NULL, 1, NULL)", queue)) == ["lower"]
    assert sql("CALL queue_reserve(%s, 'w', NULL, 1, NULL)", queue) == []


def test_a_single_reserve_below_priority_0_keeps_the_order_of_priorities(sql, queue):
    sql("CALL queue_push(%s, 'negative', 'k', '{}', NULL, -1)", queue)
    sql("CALL queue_push(%s, 'zero', 'k', '{}', NULL, 0)", queue)
    sql("CALL queue_push(%s, 'zero-later', 'k', '{}', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, 0)", queue)
    assert _keys(sql("CALL queue_reserve(%s, 'w', NULL, 1, NULL)", queue)) == ["zero"]
    assert _keys(sql("CALL queue_reserve(%s, 'w', NULL, 1, NULL)", queue)) == ["negative"]
    assert sql("CALL queue_reserve(%s, 'w', NULL, 1, NULL)", queue) == []


def test_a_single_reserve_dead_letters_an_exhausted_message_and_hands_out_the_next(sql):
    name = f"fast.{uuid.uuid4().hex[:10]}"
    sql("CALL queue_create(%s, NULL, NULL, NULL, NULL)", f"{name}.dlq")
    sql("CALL queue_create(%s, NULL, 1, %s, NULL)", name, f"{name}.dlq")
    sql("CALL queue_push(%s, 'first', 'k', '{}', NULL, NULL)", name)
    [first] = sql("CALL queue_reserve(%s, 'w', 0.01, 1, NULL)", name)
    assert first[0] == "first"
    sql("DO SLEEP(0.05)")  # the only allowed delivery of "first" expired: it is the oldest ready one
    sql("CALL queue_push(%s, 'second', 'k', '{}', NULL, NULL)", name)
    [second] = sql("CALL queue_reserve(%s, 'w', NULL, 1, NULL)", name)
    assert (second[0], second[5]) == ("second", 1)
    assert sql("SELECT p_key FROM pyqueue_message WHERE queue_name = %s", f"{name}.dlq") == [("first",)]


def test_a_single_reserve_skips_a_message_another_transaction_holds_without_waiting(dsn, sql, queue):
    for key in ("m0", "m1"):
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, key)
    holder = connect(dsn, autocommit=False)
    other = connect(dsn)
    try:
        call(other, "SET SESSION innodb_lock_wait_timeout = 1")
        assert _keys(call(holder, "CALL queue_reserve(%s, 'holder', NULL, 1, NULL)", queue)) == ["m0"]
        assert _keys(call(other, "CALL queue_reserve(%s, 'other', NULL, 1, NULL)", queue)) == ["m1"]
        assert call(other, "CALL queue_reserve(%s, 'other', NULL, 1, NULL)", queue) == []
        holder.rollback()  # m0 was never handed out for good
        assert _keys(call(other, "CALL queue_reserve(%s, 'other', NULL, 1, NULL)", queue)) == ["m0"]
    finally:
        holder.close()
        other.close()


def test_single_reserves_racing_in_autocommit_hand_out_every_message_once(dsn, sql, queue):
    keys = [f"m{i}" for i in range(200)]
    for key in keys:
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, key)
    got: list[list[str]] = [[] for _ in range(4)]

    def consume(slot: int) -> None:
        conn = connect(dsn)
        try:
            while rows := call(conn, "CALL queue_reserve(%s, 'w', NULL, 1, NULL)", queue):
                [row] = rows
                assert call(conn, "CALL queue_commit(%s, %s, %s, %s)", queue, row[0], row[1], row[3]) == [
                    (1,)
                ]
                got[slot].append(row[0])
        finally:
            conn.close()

    _in_threads(4, consume)
    assert sorted(key for part in got for key in part) == sorted(keys)
    assert sql("SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue) == [(0,)]


def test_a_commit_in_autocommit_that_fails_after_archiving_keeps_no_history_row(sql):
    """queue_commit on a queue with history archives the message, then deletes it; a trigger refuses
    the delete. Called plainly in autocommit mode the two are one transaction of the call's own, so
    the history row goes with the failed call (MySQL 8.0 cannot tell autocommit mode from inside a
    procedure: there the caller's transaction, as the Python client opens, is what holds them)."""
    ((server,),) = sql("SELECT VERSION()")
    name = f"fast.{uuid.uuid4().hex[:10]}"
    sql("CALL queue_create(%s, NULL, NULL, NULL, 86400)", name)
    sql("CALL queue_push(%s, 'm', 'k', '{}', NULL, NULL)", name)
    [row] = sql("CALL queue_reserve(%s, 'w', NULL, 1, NULL)", name)
    trigger = f"refuse_{uuid.uuid4().hex[:10]}"
    sql(
        f"CREATE TRIGGER {trigger} BEFORE DELETE ON pyqueue_message FOR EACH ROW"
        f" IF OLD.queue_name = '{name}' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused'; END IF"
    )
    try:
        with pytest.raises(pymysql.MySQLError, match="refused"):
            sql("CALL queue_commit(%s, %s, %s, %s)", name, row[0], row[1], row[3])
        assert sql("SELECT @@in_transaction") == [(0,)]
    finally:
        sql(f"DROP TRIGGER {trigger}")
    kept = 0 if "mariadb" in server.lower() else 1  # MySQL 8.0: each statement committed on its own
    assert sql("SELECT COUNT(*) FROM pyqueue_history WHERE queue_name = %s", name) == [(kept,)]
    sql("DELETE FROM pyqueue_history WHERE queue_name = %s", name)
    assert sql("CALL queue_commit(%s, %s, %s, %s)", name, row[0], row[1], row[3]) == [(1,)]
    assert sql("SELECT outcome FROM pyqueue_history WHERE queue_name = %s", name) == [("committed",)]


def test_a_commit_reserve_in_autocommit_that_fails_keeps_neither_its_claim_nor_its_history_row(sql):
    """queue_commit_reserve reserves the next message, then archives and deletes the previous one;
    a trigger refuses the delete. Called plainly in autocommit mode on MariaDB the call is one
    transaction of its own: the claim of the next message goes with the failure too (MySQL 8.0,
    which cannot tell autocommit mode from inside a procedure, keeps what each statement did)."""
    ((server,),) = sql("SELECT VERSION()")
    name = f"fast.{uuid.uuid4().hex[:10]}"
    sql("CALL queue_create(%s, NULL, NULL, NULL, 86400)", name)
    for key in ("first", "second"):
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", name, key)
    [row] = sql("CALL queue_reserve(%s, 'w', NULL, 1, NULL)", name)
    trigger = f"refuse_{uuid.uuid4().hex[:10]}"
    sql(
        f"CREATE TRIGGER {trigger} BEFORE DELETE ON pyqueue_message FOR EACH ROW"
        f" IF OLD.queue_name = '{name}' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused'; END IF"
    )
    statement = "CALL queue_commit_reserve(%s, %s, %s, %s, 'w', NULL, 1, NULL)"
    try:
        with pytest.raises(pymysql.MySQLError, match="refused"):
            sql(statement, name, row[0], row[1], row[3])
        assert sql("SELECT @@in_transaction") == [(0,)]
    finally:
        sql(f"DROP TRIGGER {trigger}")
    held = sql("SELECT p_key FROM pyqueue_message WHERE queue_name = %s AND reserve_token IS NOT NULL", name)
    history = sql("SELECT COUNT(*) FROM pyqueue_history WHERE queue_name = %s", name)
    if "mariadb" in server.lower():
        assert (held, history) == ([("first",)], [(0,)])
    else:  # MySQL 8.0: each statement committed on its own
        assert (sorted(held), history) == ([("first",), ("second",)], [(1,)])
    assert _keys(sql(statement, name, row[0], row[1], row[3])) == ["second"]
    assert sql("SELECT outcome FROM pyqueue_history WHERE queue_name = %s", name) == [("committed",)]


def test_commit_reserves_racing_in_autocommit_hand_out_every_message_once(dsn, sql, queue):
    keys = [f"m{i}" for i in range(200)]
    for key in keys:
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, key)
    got: list[list[str]] = [[] for _ in range(4)]
    statement = "CALL queue_commit_reserve(%s, %s, %s, %s, 'w', NULL, 1, NULL)"

    def consume(slot: int) -> None:
        conn = connect(dsn)
        try:
            previous = (None, None, None)
            while True:
                cur = conn.cursor()
                cur.execute(statement, (queue, *previous))
                rows = list(cur.fetchall())
                cur.nextset()
                committed = cur.fetchall()[0][0]
                while cur.nextset():
                    pass
                assert committed == (None if previous[0] is None else 1)
                if not rows:
                    return
                [row] = rows
                got[slot].append(row[0])
                previous = (row[0], row[1], row[3])
        finally:
            conn.close()

    _in_threads(4, consume)
    assert sorted(key for part in got for key in part) == sorted(keys)
    assert sql("SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue) == [(0,)]


def test_commit_reserves_racing_on_a_queue_with_limits_rarely_deadlock(dsn, sql, queue):
    """On a queue with concurrency limits the committed message is a slot's holder, which the
    slot-taking reads of racing calls lock: committed before the reserve (its row lock taken
    before the slot rows), racing calls deadlocked on most messages. Through the client, which
    runs a deadlocked call again, every message is handed out once and the limit holds."""
    messages = 150  # (300 proved no more: committing first deadlocked on two messages in three)
    sql("CALL queue_set_limit(%s, 'k', 3)", queue)
    sql(
        "CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)",
        queue,
        json.dumps([{"p_key": f"m{i}", "p_kind": "k", "payload": {}} for i in range(messages)]),
    )
    done: list[str] = []
    retries: list[int] = []
    failures: list[BaseException] = []

    def consume(_slot: int) -> None:
        try:
            with pyqueue_sql.connect(dsn) as db:
                q = db.queue(queue)
                held = None
                while True:
                    committed, got = q.commit_reserve(held, timeout=60)
                    if held is not None:
                        assert committed is True
                        done.append(held.key)
                    held = got[0] if got else None
                    if held is None:  # the limit is taken, or nothing is left
                        stats = q.stats()
                        if stats.ready + stats.delayed + stats.reserved == 0:
                            break
                        time.sleep(0.005)
                retries.append(db.serialization_retries)
        except BaseException as exc:  # reported below, with the thread's failure
            failures.append(exc)

    _in_threads(8, consume, seconds=120)
    assert not failures, failures
    assert sorted(done) == sorted(f"m{i}" for i in range(messages))
    # committing first, the calls deadlocked about 200 times on 300 messages; after the reserve, a few
    assert sum(retries) < messages // 4, retries


@pytest.mark.parametrize("in_transaction", [False, True], ids=["autocommit", "in-transaction"])
def test_a_commit_reserve_of_an_expired_reservation_commits_it_and_does_not_take_it_again(
    dsn, sql, queue, in_transaction
):
    """A reservation whose lease ran out while nobody took it still commits (as queue_commit
    does): the call's reserve must not take that message, ready again, before the commit."""
    sql("CALL queue_push(%s, 'first', 'k', '{}', NULL, NULL)", queue)
    [row] = sql("CALL queue_reserve(%s, 'w', 0.01, 1, NULL)", queue)
    time.sleep(0.1)  # expired: ready again, ahead of a message pushed now
    sql("CALL queue_push(%s, 'second', 'k', '{}', NULL, NULL)", queue)
    conn = connect(dsn, autocommit=True)
    try:
        cur = conn.cursor()
        if in_transaction:
            cur.execute("START TRANSACTION")
        cur.execute(
            "CALL queue_commit_reserve(%s, %s, %s, %s, 'w', 60, 1, NULL)", (queue, row[0], row[1], row[3])
        )
        reserved = _keys(cur.fetchall())
        cur.nextset()
        [(committed,)] = cur.fetchall()
        while cur.nextset():
            pass
        if in_transaction:
            cur.execute("COMMIT")
    finally:
        conn.close()
    assert (committed, reserved) == (1, ["second"])


def _push_all(sql, queue: str, keys: list[str]) -> None:
    sql(
        "CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)",
        queue,
        json.dumps([{"p_key": key, "p_kind": "k", "payload": {}} for key in keys]),
    )


def test_a_batch_reserve_in_autocommit_takes_the_oldest_in_fifo_order_with_distinct_tokens(sql, queue):
    keys = [f"m{i}" for i in range(8)]
    for key in keys:
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, key)
    rows = sql("CALL queue_reserve(%s, 'w', NULL, 5, NULL)", queue)
    assert _keys(rows) == keys[:5]
    assert [row[5] for row in rows] == [1] * 5
    assert len({row[3] for row in rows}) == 5
    assert all(uuid.UUID(row[3]).version == 4 for row in rows)
    held = sql(
        "SELECT p_key, reserved_by, attempts FROM pyqueue_message WHERE queue_name = %s"
        " AND scheduled_at > UTC_TIMESTAMP(6) ORDER BY p_key",
        queue,
    )
    assert held == [(key, "w", 1) for key in keys[:5]]
    statement = "CALL queue_commit_batch(%s, %s, %s, %s)"
    tokens = json.dumps([row[3] for row in rows])
    assert sql(statement, queue, json.dumps(_keys(rows)), json.dumps(["k"] * 5), tokens) == [(5,)]
    assert _keys(sql("CALL queue_reserve(%s, 'w', NULL, 5, NULL)", queue)) == keys[5:]


def test_a_batch_reserve_of_more_than_are_ready_takes_them_all_but_not_the_delayed(sql, queue):
    for key in ("m0", "m1", "m2"):
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, key)
    sql("CALL queue_push(%s, 'later', 'k', '{}', UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, NULL)", queue)
    rows = sql("CALL queue_reserve(%s, 'w', NULL, 10, NULL)", queue)
    assert _keys(rows) == ["m0", "m1", "m2"]
    for row in rows:
        assert sql("CALL queue_commit(%s, %s, %s, %s)", queue, row[0], row[1], row[3]) == [(1,)]
    assert sql("CALL queue_reserve(%s, 'w', NULL, 10, NULL)", queue) == []
    assert sql("SELECT p_key, attempts FROM pyqueue_message WHERE queue_name = %s", queue) == [("later", 0)]


def test_a_batch_reserve_with_a_message_below_priority_0_keeps_the_order_of_priorities(sql, queue):
    sql("CALL queue_push(%s, 'negative', 'k', '{}', NULL, -1)", queue)
    sql("CALL queue_push(%s, 'zero', 'k', '{}', NULL, 0)", queue)
    rows = sql("CALL queue_reserve(%s, 'w', NULL, 5, NULL)", queue)
    assert [(row[0], row[4], row[5]) for row in rows] == [("zero", 0, 1), ("negative", -1, 1)]


def test_a_batch_reserve_dead_letters_an_exhausted_message_and_hands_out_the_others(sql):
    name = f"fast.{uuid.uuid4().hex[:10]}"
    sql("CALL queue_create(%s, NULL, NULL, NULL, NULL)", f"{name}.dlq")
    sql("CALL queue_create(%s, NULL, 1, %s, NULL)", name, f"{name}.dlq")
    sql("CALL queue_push(%s, 'first', 'k', '{}', NULL, NULL)", name)
    [first] = sql("CALL queue_reserve(%s, 'w', 0.01, 1, NULL)", name)
    assert first[0] == "first"
    sql("DO SLEEP(0.05)")  # the only allowed delivery of "first" expired: it is among the oldest ready ones
    for key in ("second", "third"):
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", name, key)
    rows = sql("CALL queue_reserve(%s, 'w', NULL, 5, NULL)", name)
    assert [(row[0], row[5]) for row in rows] == [("second", 1), ("third", 1)]
    assert sql("SELECT p_key FROM pyqueue_message WHERE queue_name = %s", f"{name}.dlq") == [("first",)]


@pytest.mark.parametrize("threads", [4, 8])
def test_batch_reserves_racing_in_autocommit_hand_out_every_message_once(dsn, sql, queue, threads):
    keys = [f"m{i}" for i in range(3000)]
    for start in range(0, len(keys), 500):
        _push_all(sql, queue, keys[start : start + 500])
    got: list[list[str]] = [[] for _ in range(threads)]
    failures: list[BaseException] = []

    def consume(slot: int) -> None:
        conn = connect(dsn)
        try:
            n = 10 + 40 * slot // max(threads - 1, 1)  # 10 .. 50
            while rows := call(conn, "CALL queue_reserve(%s, 'w', NULL, %s, NULL)", queue, n):
                assert 0 < len(rows) <= n
                assert [row[5] for row in rows] == [1] * len(rows)
                statement = "CALL queue_commit_batch(%s, %s, %s, %s)"
                committed = call(
                    conn,
                    statement,
                    queue,
                    json.dumps(_keys(rows)),
                    json.dumps([row[1] for row in rows]),
                    json.dumps([row[3] for row in rows]),
                )
                assert committed == [(len(rows),)]
                got[slot].extend(_keys(rows))
        except BaseException as exc:  # reported below, with the thread's failure
            failures.append(exc)
        finally:
            conn.close()

    _in_threads(threads, consume, seconds=120)
    assert not failures, failures
    assert sorted(key for part in got for key in part) == sorted(keys)
    assert sql("SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue) == [(0,)]


def test_a_push_does_not_wait_for_a_batch_reserve_in_progress(dsn, sql, queue):
    """A trigger slows the claiming UPDATE of a batch reserve down while it holds the rows it read;
    a push meanwhile, even of a message due between those rows (where a gap lock would be), goes
    through at once."""
    push = "CALL queue_push(%s, %s, 'k', '{}', UTC_TIMESTAMP(6) - INTERVAL %s SECOND, NULL)"
    for key, ago in (("m0", 60), ("m1", 40), ("m2", 20)):
        sql(push, queue, key, ago)
    trigger = f"slow_{uuid.uuid4().hex[:10]}"
    sql(
        f"CREATE TRIGGER {trigger} BEFORE UPDATE ON pyqueue_message FOR EACH ROW"
        f" IF OLD.queue_name = '{queue}' AND NEW.reserved_by = 'slow' THEN DO SLEEP(0.5); END IF"
    )
    reserved: list = []
    reserver = threading.Thread(
        target=lambda: reserved.append(sql("CALL queue_reserve(%s, 'slow', NULL, 3, NULL)", queue))
    )
    pusher = connect(dsn)
    try:
        call(pusher, "SET SESSION innodb_lock_wait_timeout = 1")
        reserver.start()
        time.sleep(0.3)  # the reserve holds m0..m2 now, in its UPDATE
        started = time.monotonic()
        between = "CALL queue_push(%s, 'between', 'k', '{}', UTC_TIMESTAMP(6) - INTERVAL 50 SECOND, NULL)"
        call(pusher, between, queue)  # due between m0 and m1
        call(pusher, "CALL queue_push(%s, 'after', 'k', '{}', NULL, NULL)", queue)
        pushed_in = time.monotonic() - started
        still_reserving = reserver.is_alive()
    finally:
        pusher.close()
        reserver.join(30)  # (the reserve's connection is sql's)
        sql(f"DROP TRIGGER {trigger}")
    assert still_reserving
    # a push that waited would have failed at innodb_lock_wait_timeout (1 s): the reserve holds
    # its rows for 1.5 s; the bound leaves room for a loaded machine
    assert pushed_in < 1.0
    [rows] = reserved
    assert _keys(rows) == ["m0", "m1", "m2"]


def test_a_batch_reserve_takes_the_next_messages_in_place_of_those_another_transaction_holds(dsn, sql, queue):
    for i in range(6):
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, f"m{i}")
    holder = connect(dsn, autocommit=False)
    other = connect(dsn)
    try:
        # a reserve that waited for the held rows would wait 3 s, then fall back to the general way
        call(other, "SET SESSION innodb_lock_wait_timeout = 3")
        reserve = "CALL queue_reserve(%s, %s, NULL, %s, NULL)"
        assert _keys(call(holder, reserve, queue, "holder", 2)) == ["m0", "m1"]
        started = time.monotonic()
        assert _keys(call(other, reserve, queue, "other", 3)) == ["m2", "m3", "m4"]
        assert time.monotonic() - started < 1.5  # it skipped them (SKIP LOCKED), never waited
        holder.rollback()  # m0 and m1 were never handed out for good
        assert _keys(call(other, reserve, queue, "other", 3)) == ["m0", "m1", "m5"]
    finally:
        holder.close()
        other.close()


def test_a_batch_reserve_in_a_session_with_a_short_group_concat_max_len_goes_the_short_way(dsn, sql, queue):
    # The short way collects ids with GROUP_CONCAT and raises the session's limit for its call when
    # it is short; a raise the server refused would roll the short way back into the general way,
    # which answers alike (so only the session's rollback counter shows it).
    _push_all(sql, queue, [f"m{i}" for i in range(12)])
    conn = connect(dsn)
    try:
        call(conn, "SET SESSION group_concat_max_len = 100")
        rolled_back = "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'COM_ROLLBACK'"
        before = int(call(conn, rolled_back)[0][0])
        rows = call(conn, "CALL queue_reserve(%s, 'w', NULL, 10, NULL)", queue)
        assert _keys(rows) == [f"m{i}" for i in range(10)]
        assert int(call(conn, rolled_back)[0][0]) == before
        assert call(conn, "SELECT @@SESSION.group_concat_max_len") == [(100,)]
    finally:
        conn.close()


def _reserve_all(sql, queue: str, n: int):
    return sql("CALL queue_reserve(%s, 'w', NULL, %s, NULL)", queue, n)


@pytest.mark.parametrize("kinds", ["one", "two"])
def test_a_commit_batch_of_one_kind_or_of_several_commits_each_held_message(sql, queue, kinds):
    # One kind: the DELETE joins the keys and tokens only; several: the kinds too.
    for i in range(6):
        kind = "a" if kinds == "one" or i % 2 else "b"
        sql("CALL queue_push(%s, %s, %s, '{}', NULL, NULL)", queue, f"m{i}", kind)
    rows = _reserve_all(sql, queue, 6)
    held = [(row[0], row[1], row[3]) for row in rows]
    stale = held[:1]  # committed once: a second commit of it holds nothing
    statement = "CALL queue_commit_batch(%s, %s, %s, %s)"
    assert sql(statement, queue, *(json.dumps([h[i] for h in stale]) for i in range(3))) == [(1,)]
    # the same key with the other kind names no reservation: not deleted, not counted
    wrong_kind = [(held[1][0], "c", held[1][2])]
    assert sql(statement, queue, *(json.dumps([h[i] for h in wrong_kind]) for i in range(3))) == [(0,)]
    assert sql(statement, queue, *(json.dumps([h[i] for h in held]) for i in range(3))) == [(5,)]
    assert sql("SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", queue) == [(0,)]


def test_a_commit_batch_written_with_json_escapes_is_read_element_by_element(sql, queue):
    # Arrays the whole-array check does not match (escapes, other spacing, upper-case tokens) are
    # checked element by element: valid ones commit, and a bad element is still named.
    keys = ['quote"d', "back\\slash", "é" * 200, "plain"]
    for key in keys:
        sql("CALL queue_push(%s, %s, 'k', '{}', NULL, NULL)", queue, key)
    rows = _reserve_all(sql, queue, 4)
    assert sorted(_keys(rows)) == sorted(keys)
    tokens = [row[3].upper() for row in rows]
    tokens[0] = "".join(f"\\u{ord(c):04x}" for c in tokens[0])  # the same token, escaped
    escaped_tokens = "[" + " ,\n ".join(f'"{t}"' for t in tokens) + "]"
    statement = "CALL queue_commit_batch(%s, %s, %s, %s)"
    bad = escaped_tokens.replace(tokens[2], tokens[2][:-1] + "G")
    with pytest.raises(pymysql.MySQLError) as named:
        sql(statement, queue, json.dumps(_keys(rows)), json.dumps(["k"] * 4), bad)
    assert named.value.args[1].startswith("pyqueue:invalid_argument: element 3 ")
    assert sql(statement, queue, json.dumps(_keys(rows)), json.dumps(["k"] * 4), escaped_tokens) == [(4,)]


@pytest.mark.parametrize(
    ("keys", "kinds", "tokens", "element"),
    [
        (["a", "b "], ["k", "k"], [TOKEN, TOKEN], 2),
        (["a", "b" * 256], ["k", "k"], [TOKEN, TOKEN], 2),
        (["a", ""], ["k", "k"], [TOKEN, TOKEN], 2),
        (["a", 7], ["k", "k"], [TOKEN, TOKEN], 2),
        (["a", "b"], ["k", "k" * 129], [TOKEN, TOKEN], 2),
        (["a", "b"], ["k", {"k": 1}], [TOKEN, TOKEN], 2),
        (["a", "b"], ["k", "k"], [TOKEN, TOKEN + "0"], 2),
        (["a", "b", "c "], ["k", "k", "k"], [TOKEN, "x", TOKEN], 2),
    ],
    ids=[
        "space-ended-key",
        "long-key",
        "empty-key",
        "number-key",
        "long-kind",
        "object-kind",
        "long-token",
        "first-of-two",
    ],
)
def test_a_commit_batch_names_its_first_bad_element(sql, queue, keys, kinds, tokens, element):
    with pytest.raises(pymysql.MySQLError) as refused:
        sql(
            "CALL queue_commit_batch(%s, %s, %s, %s)",
            queue,
            json.dumps(keys),
            json.dumps(kinds),
            json.dumps(tokens),
        )
    assert refused.value.args[1].startswith("pyqueue:invalid_argument: ")
    assert f"element {element} " in refused.value.args[1]

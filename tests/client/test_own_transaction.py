"""MySQL/MariaDB: the client runs some calls (commit, commit_batch, extend, ...: the dialect's
own_transaction_statements) in a transaction of its own when the caller has none. On a connection
the client opened they go to the server as one round trip (START TRANSACTION; CALL ...; COMMIT);
on a connection without multi-statement queries, as three. Either way a call that fails there
keeps nothing it wrote and leaves no transaction open. On MariaDB a reserve and a commit are plain
CALLs: the procedure opens the transaction itself where it needs one (a reserve only in a
SERIALIZABLE session: otherwise its page reads must see what is committed now, not a transaction's
snapshot; a commit where it writes in several statements)."""

from __future__ import annotations

import datetime as dt
import time

import pymysql
import pytest
from pymysql.constants import COMMAND

import pyqueue_sql
from pyqueue_sql import dialects, migrate
from pyqueue_sql.dialects import mysql_connect_args

pytestmark = pytest.mark.only_dialect("mysql")

REFUSAL = "refused by the test"


def _three_trips(dsn: str) -> pyqueue_sql.Database:
    """A Database over a connection opened without CLIENT.MULTI_STATEMENTS (PyMySQL's default)."""
    return pyqueue_sql.Database(pymysql.connect(**mysql_connect_args(dsn)), dialects.for_dsn(dsn), owned=True)


def _count_queries(db: pyqueue_sql.Database) -> list[str]:
    """Notes the text of every query the connection sends (BEGIN and COMMIT included); the
    queries still run on the server."""
    sent: list[str] = []
    connection = db.connection
    real = connection._execute_command

    def execute_command(command, sql):
        if command == COMMAND.COM_QUERY:
            sent.append(sql.decode() if isinstance(sql, bytes) else sql)
        return real(command, sql)

    connection._execute_command = execute_command
    return sent


def _mariadb(db: pyqueue_sql.Database) -> bool:
    return "MariaDB" in db.connection.get_server_info()


def test_a_reserve_and_a_commit_are_one_round_trip_each(db, queue):
    queue.push("m", "k", {"n": 1})
    sent = _count_queries(db)
    [r] = db.queue(queue.name).reserve(worker="w")
    # MariaDB: the procedures open what transaction they need themselves (see self_contained_on_mariadb)
    begin = "" if _mariadb(db) else "START TRANSACTION; "
    assert len(sent) == 1 and sent[0].startswith(f"{begin}CALL queue_reserve("), sent
    assert db.queue(queue.name).commit(r) is True
    assert len(sent) == 2 and sent[1].startswith(f"{begin}CALL queue_commit("), sent
    assert db.queue(queue.name).commit(r) is False  # the answer of the CALL, not of START TRANSACTION
    assert queue.stats().ready == queue.stats().reserved == 0


def test_without_multi_statement_queries_the_same_calls_take_three(dsn, queue):
    queue.push("m", "k", {"n": 1})
    queue.push("n", "k", {"n": 2})
    db = _three_trips(dsn)
    try:
        sent = _count_queries(db)
        taken = db.queue(queue.name).reserve(2, worker="w")
        assert [r.key for r in taken] == ["m", "n"]
        assert db.queue(queue.name).commit_many(taken) == 2
        reserve = ["CALL queue_reserve"] if _mariadb(db) else ["BEGIN", "CALL queue_reserve", "COMMIT"]
        assert [s.split("(")[0] for s in sent] == [*reserve, "BEGIN", "CALL queue_commit_batch", "COMMIT"]
    finally:
        db.close()


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_on_mariadb_a_reserve_opens_a_transaction_only_in_a_serializable_session(fresh_database, isolation):
    """A reserve whose dead-lettering fails (a trigger refuses the copy) after it claimed the
    exhausted message. In a SERIALIZABLE session the client ran it in a transaction of its own, and
    the claim goes with the error; at REPEATABLE READ on MariaDB it ran in autocommit, as from plain
    SQL, and the message stays claimed under a token nobody holds until that claim expires (then it
    is dead-lettered by a later reserve)."""
    url = fresh_database("own_transaction")
    migrate.upgrade(url)
    db = pyqueue_sql.connect(url)
    other = pyqueue_sql.connect(url)
    try:
        db.queue("c.dlq").create()
        q = db.queue("c").create(max_attempts=1, dead_letter_queue="c.dlq")
        q.push("dead-0", "job", {})
        [r] = q.reserve(timeout=0.01)
        time.sleep(0.05)  # its last allowed delivery expired: the next reserve dead-letters it
        cur = other.connection.cursor()
        row = "SELECT scheduled_at, attempts, reserve_token FROM pyqueue_message WHERE queue_name = 'c'"
        cur.execute(row)
        before = cur.fetchall()
        cur.execute(
            "CREATE TRIGGER refuse_dead_letters BEFORE INSERT ON pyqueue_message FOR EACH ROW"
            f" BEGIN IF NEW.queue_name = 'c.dlq' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{REFUSAL}';"
            " END IF; END"
        )
        own = db.connection.cursor()
        own.execute(f"SET SESSION TRANSACTION ISOLATION LEVEL {isolation}")
        with pytest.raises(pymysql.MySQLError, match=REFUSAL):
            q.reserve()
        cur.execute(row)
        after = cur.fetchall()
        if isolation == "SERIALIZABLE" or not _mariadb(db):  # MySQL 8.0: always in a transaction
            assert after == before
        else:
            assert after[0][2] != before[0][2] == r.token  # claimed again, under another token
        own.execute("SELECT @@in_transaction")
        assert own.fetchall()[0][0] == 0
    finally:
        db.close()
        other.close()


@pytest.mark.parametrize("trips", ["one", "three"])
def test_a_call_that_fails_in_its_own_transaction_keeps_nothing_it_wrote(fresh_database, trips):
    """queue_commit archives the message (a history row), then deletes it; a trigger refuses the
    delete. The history row written before the error must go with the failed call: left in an open
    transaction, it would be committed by the next call's START TRANSACTION."""
    url = fresh_database("own_transaction")
    migrate.upgrade(url)
    db = pyqueue_sql.connect(url) if trips == "one" else _three_trips(url)
    other = pyqueue_sql.connect(url)
    try:
        q = db.queue("q").create(history_retention=dt.timedelta(days=1))
        q.push("m", "k", {"n": 1})
        [r] = q.reserve(worker="w")
        cur = other.connection.cursor()
        cur.execute(
            "CREATE TRIGGER refuse_delete BEFORE DELETE ON pyqueue_message FOR EACH ROW"
            f" SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{REFUSAL}'"
        )
        with pytest.raises(pymysql.MySQLError, match=REFUSAL):
            q.commit(r)
        own = db.connection.cursor()
        own.execute("SELECT @@in_transaction")
        assert own.fetchall()[0][0] == 0
        q.push("next", "k", {"n": 2})
        # the next call's START TRANSACTION would commit what an open transaction still held
        assert [m.key for m in q.reserve(worker="w")] == ["next"]
        cur.execute("SELECT COUNT(*) FROM pyqueue_history WHERE queue_name = 'q'")
        assert cur.fetchall()[0][0] == 0
        assert q.stats().reserved == 2  # "m" is still there, reserved (and "next" now)
        cur.execute("DROP TRIGGER refuse_delete")
        assert q.commit(r) is True
        assert [h.outcome for h in q.message_history("m", "k")] == ["committed"]
    finally:
        db.close()
        other.close()


def test_the_asyncio_client_keeps_nothing_of_a_call_that_fails_in_its_own_transaction(fresh_database):
    """The same failing commit through pyqueue_sql.aio (aiomysql connections always allow
    multi-statement queries)."""
    import asyncio

    from pyqueue_sql import aio

    url = fresh_database("own_transaction")
    migrate.upgrade(url)
    other = pyqueue_sql.connect(url)

    async def scenario():
        async with await aio.connect(url) as db:
            q = await db.queue("q").create(history_retention=dt.timedelta(days=1))
            await q.push("m", "k", {"n": 1})
            [r] = await q.reserve(worker="w")
            cur = other.connection.cursor()
            cur.execute(
                "CREATE TRIGGER refuse_delete BEFORE DELETE ON pyqueue_message FOR EACH ROW"
                f" SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = '{REFUSAL}'"
            )
            with pytest.raises(pymysql.MySQLError, match=REFUSAL):
                await q.commit(r)
            async with db.connection.cursor() as own:
                await own.execute("SELECT @@in_transaction")
                assert (await own.fetchall())[0][0] == 0
            await q.push("next", "k", {"n": 2})
            assert [m.key for m in await q.reserve(worker="w")] == ["next"]
            cur.execute("SELECT COUNT(*) FROM pyqueue_history WHERE queue_name = 'q'")
            assert cur.fetchall()[0][0] == 0
            cur.execute("DROP TRIGGER refuse_delete")
            assert await q.commit(r) is True

    try:
        asyncio.run(scenario())
    finally:
        other.close()

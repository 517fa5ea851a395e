"""MySQL/MariaDB in a database whose default character set is latin1 (MariaDB's
compiled-in default, and common in older databases): the routines must not
depend on the database default. Installed by the migrations, then the contract
is exercised with names and payloads outside latin1."""

from __future__ import annotations

import json
import time

import pymysql
import pytest

from pyqueue_sql import migrate
from pyqueue_sql.dialects import mysql_connect_args
from tests.plainsql import call

pytestmark = [pytest.mark.only_dialect("mysql"), pytest.mark.slow]

KEY = "ключ-€-鍵-🙂"  # none of it is latin1
KIND = "sortе-ü"
PAYLOAD = {"text": "Grüße, 世界 🙂", "n": 1}


@pytest.fixture
def latin1_dsn(dialect, fresh_database):
    dsn = fresh_database("latin1")
    conn = pymysql.connect(**mysql_connect_args(dsn))
    try:
        with conn.cursor() as cur:
            cur.execute("ALTER DATABASE CHARACTER SET latin1 COLLATE latin1_swedish_ci")
            cur.execute("SELECT @@character_set_database")
            assert cur.fetchone()[0] == "latin1"
    finally:
        conn.close()
    migrate.upgrade(dsn)
    return dsn


@pytest.fixture
def sql(latin1_dsn):
    conn = pymysql.connect(**mysql_connect_args(latin1_dsn))

    yield lambda statement, *args: call(conn, statement, *args)
    conn.close()


def test_the_database_default_is_latin1_and_the_tables_are_utf8mb4(sql):
    assert sql("SELECT @@character_set_database")[0][0] == "latin1"
    charsets = {
        row[0]
        for row in sql(
            "SELECT DISTINCT CHARACTER_SET_NAME FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = DATABASE() AND CHARACTER_SET_NAME IS NOT NULL"
            " AND TABLE_NAME NOT LIKE 'pyqueue\\_alembic%%'"
        )
    }
    assert charsets == {"utf8mb4"}


def test_reserve_delivers_and_does_not_dead_letter_in_a_latin1_database(sql):
    """The reported scenario: every reserve failed with 1253 after claiming the
    row, so attempts climbed and the message was dead-lettered undelivered."""
    sql("CALL queue_create('q.dead', NULL, NULL, NULL, NULL)")
    sql("CALL queue_create('q', NULL, 2, 'q.dead', NULL)")
    assert sql("CALL queue_push('q', %s, %s, %s, NULL, NULL)", KEY, KIND, json.dumps(PAYLOAD)) == [(1,)]
    delivered = []
    for _ in range(3):
        delivered += sql("CALL queue_reserve('q', 'w', NULL, 1, NULL)")
    assert len(delivered) == 1
    key, kind, payload, token, _priority, attempts = delivered[0][:6]
    assert (key, kind, json.loads(payload), attempts) == (KEY, KIND, PAYLOAD, 1)
    assert sql("SELECT COUNT(*) FROM pyqueue_dead_letters")[0][0] == 0
    assert sql("CALL queue_commit('q', %s, %s, %s)", KEY, KIND, token) == [(1,)]
    stats = {row[0]: row[1:5] for row in sql("CALL queue_stats(NULL)")}
    assert stats == {"q": (0, 0, 0, 0), "q.dead": (0, 0, 0, 0)}


def test_expired_deliveries_count_once_each_in_a_latin1_database(sql):
    sql("CALL queue_create('d', NULL, NULL, NULL, NULL)")
    sql("CALL queue_create('e', NULL, 2, 'd', NULL)")
    sql("CALL queue_push('e', %s, %s, '{}', NULL, NULL)", KEY, KIND)
    seen = []
    for _ in range(3):
        seen += [row[5] for row in sql("CALL queue_reserve('e', 'w', 0.05, 1, NULL)")]
        time.sleep(0.1)
    assert seen == [1, 2]  # the third reserve dead-letters it instead
    dead = sql("CALL queue_dead_letters('d')")
    assert [(r[1], r[2], r[3], r[6]) for r in dead] == [("e", KEY, KIND, 2)]
    assert dead[0][10] == "reservation expired on its last allowed delivery"  # last_error, the 11th column


def test_the_contract_works_in_a_latin1_database(sql):
    sql("CALL queue_create('s.dead', NULL, NULL, NULL, NULL)")
    sql("CALL queue_create('s', 30, 3, 's.dead', 3600)")
    sql("CALL queue_create('s.next', NULL, NULL, NULL, NULL)")
    # push, push_batch (keys, kinds and payloads outside latin1)
    assert sql("CALL queue_push('s', %s, %s, %s, NULL, 5)", KEY, KIND, json.dumps(PAYLOAD)) == [(1,)]
    batch = [{"p_key": f"{KEY}-{i}", "p_kind": KIND, "payload": {"i": i, "t": "€🙂"}} for i in range(4)]
    assert sql("CALL queue_push_batch('s', %s, NULL, NULL, NULL, NULL)", json.dumps(batch)) == [(4,)]
    assert sql("CALL queue_push_batch('s', %s, NULL, NULL, NULL, NULL)", json.dumps(batch)) == [(0,)]
    # reserve by kind filter, then commit
    rows = sql("CALL queue_reserve('s', 'wörker', NULL, 1, %s)", json.dumps([KIND]))
    assert [(r[0], json.loads(r[2])) for r in rows] == [(KEY, PAYLOAD)]
    assert sql("CALL queue_message('s', %s, %s)", KEY, KIND)[0][2] == "reserved"
    assert sql("CALL queue_commit('s', %s, %s, %s)", KEY, KIND, rows[0][3]) == [(1,)]
    history = sql("CALL queue_message_history('s', %s, %s)", KEY, KIND)
    assert [(h[1], h[4]) for h in history] == [("committed", "wörker")]
    # rollback, fail (an error text outside latin1), extend, move
    r = sql("CALL queue_reserve('s', NULL, NULL, 1, NULL)")[0]
    assert sql("CALL queue_rollback('s', %s, %s, %s, NULL)", r[0], r[1], r[3]) == [(1,)]
    r = sql("CALL queue_reserve('s', NULL, NULL, 1, NULL)")[0]
    assert sql("CALL queue_fail('s', %s, %s, %s, NULL, %s)", r[0], r[1], r[3], "Fehler: 失敗 🙁") == [
        ("retry",)
    ]
    assert sql("CALL queue_message('s', %s, %s)", r[0], r[1])[0][9] == "Fehler: 失敗 🙁"
    r = sql("CALL queue_reserve('s', NULL, NULL, 1, NULL)")[0]
    token = sql("CALL queue_extend('s', %s, %s, %s, 60)", r[0], r[1], r[3])[0][0]
    assert token is not None
    assert sql(
        "CALL queue_move('s', %s, %s, %s, 's.next', %s)", r[0], r[1], token, json.dumps({"moved": "ü"})
    ) == [(1,)]
    # pop returns exactly what was stored
    popped = sql("CALL queue_pop('s.next', 10)")
    assert [(p[0], p[1], json.loads(p[2])) for p in popped] == [(r[0], KIND, {"moved": "ü"})]
    # commit_reserve and commit_batch
    got = sql("CALL queue_commit_reserve('s', NULL, NULL, NULL, 'w', NULL, 2, NULL)")
    assert len(got) == 2
    assert sql(
        "CALL queue_commit_batch('s', %s, %s, %s)",
        json.dumps([g[0] for g in got]),
        json.dumps([g[1] for g in got]),
        json.dumps([g[3] for g in got]),
    ) == [(2,)]
    # stats, settings
    stats = {row[0]: row[1:5] for row in sql("CALL queue_stats(NULL)")}
    assert stats["s"] == (1, 0, 0, 0)
    assert sql("CALL queue_settings('s')")[0][:5] == ("s", 30, 3, "s.dead", 3600)
    # ingest flush
    sql(
        "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES ('s', %s, %s, %s), ('s', %s, %s, %s)",
        f"{KEY}-ingest",
        KIND,
        json.dumps(PAYLOAD),
        f"{KEY}-ingest",
        KIND,
        "{}",
    )
    assert sql("CALL queue_ingest_flush('s')") == [(1, 1, 0)]
    assert sql("CALL queue_message('s', %s, %s)", f"{KEY}-ingest", KIND)[0][3] is not None
    # schedules
    assert sql("CALL queue_schedule_every('s', %s, %s, %s, 3600)", KEY, KIND, json.dumps(PAYLOAD))
    assert [row[1] for row in sql("CALL queue_schedules('s')")] == [KEY]
    assert sql("CALL queue_unschedule('s', %s, %s)", KEY, KIND) == [(1,)]
    # limits
    sql("CALL queue_set_limit('s', %s, 1)", KIND)
    limited = sql("CALL queue_reserve('s', NULL, NULL, 5, NULL)")
    assert len(limited) == 1
    assert sql("CALL queue_limits('s')") == [("s", KIND, 1, 1)]
    # dead letters and redrive
    sql("CALL queue_create('s', NULL, 1, NULL, NULL)")
    assert sql(
        "CALL queue_fail('s', %s, %s, %s, NULL, 'kaputt ü')", limited[0][0], limited[0][1], limited[0][3]
    ) == [("dead_lettered",)]
    dead = sql("CALL queue_dead_letters('s.dead')")
    assert [(d[1], d[2], d[10]) for d in dead] == [("s", limited[0][0], "kaputt ü")]
    assert sql("CALL queue_redrive('s.dead', 's', 10)") == [(1,)]
    # workers
    worker_id, secret = sql("CALL queue_worker_register('wörker', 'hôst', 1, %s)", json.dumps(["s"]))[0]
    assert sql("CALL queue_worker_heartbeat(%s, %s)", worker_id, secret) == [(1,)]
    assert sql("CALL queue_worker_deregister(%s, %s)", worker_id, secret) == [(1,)]

"""MySQL/MariaDB: queue_commit_reserve on a queue with concurrency limits, called in autocommit
mode by 24 real connections at once, each looping commit-previous + reserve-next over kinds limited
to 3 and 1 plus an unlimited kind, never hands a deadlock (1213) to its caller (the contract
promises none in autocommit mode), and never has more reservations of a limited kind live than
its capacity."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pymysql
import pytest

from pyqueue_sql.dialects import mysql_connect_args
from tests.plainsql import call

pytestmark = [pytest.mark.only_dialect("mysql"), pytest.mark.slow]

# 24: with 8, calls whose reserves locked two kinds' slot rows in opposite orders deadlocked, but rarely
# ten times in a row (the call runs again up to 10 times), so the test passed alone and failed under load;
# with 24 such calls fail in every run.
CONNECTIONS = 24
SECONDS = 6.0
CAPACITY = {"three": 3, "one": 1}


def test_commit_reserve_on_limited_kinds_never_deadlocks_in_autocommit(dsn):
    admin = pymysql.connect(**mysql_connect_args(dsn))
    queue = f"crl.{uuid.uuid4().hex[:10]}"
    call(admin, "CALL queue_create(%s, 30, 1000, NULL, NULL)", queue)
    for kind, capacity in CAPACITY.items():
        call(admin, "CALL queue_set_limit(%s, %s, %s)", queue, kind, capacity)
    kinds = ["three", "one", "free"]
    messages = [{"p_key": f"m{i}", "p_kind": kinds[i % 3], "payload": i} for i in range(6000)]
    call(admin, "CALL queue_push_batch(%s, %s, NULL, NULL, NULL, NULL)", queue, json.dumps(messages))

    errors: list[BaseException] = []
    over: list[tuple] = []
    done = [0] * CONNECTIONS
    stop = time.monotonic() + SECONDS

    def consume(index: int) -> None:
        conn = pymysql.connect(**mysql_connect_args(dsn))
        held = (None, None, None)
        try:
            while time.monotonic() < stop:
                try:
                    rows = call(
                        conn, "CALL queue_commit_reserve(%s, %s, %s, %s, 'w', NULL, 1, NULL)", queue, *held
                    )
                except pymysql.MySQLError as exc:
                    errors.append(exc)
                    held = (None, None, None)
                    continue
                held = (rows[0][0], rows[0][1], rows[0][3]) if rows else (None, None, None)
                done[index] += 1
        finally:
            if held[0] is not None:
                call(conn, "CALL queue_commit(%s, %s, %s, %s)", queue, *held)
            conn.close()

    def watch() -> None:
        conn = pymysql.connect(**mysql_connect_args(dsn))
        try:
            while time.monotonic() < stop:
                for _queue, kind, capacity, in_use in call(conn, "CALL queue_limits(%s)", queue):
                    if in_use > capacity:
                        over.append((kind, in_use, capacity))
                time.sleep(0.02)
        finally:
            conn.close()

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(CONNECTIONS)]
    threads.append(threading.Thread(target=watch))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert sum(done) > 40, done  # the loop really ran
        assert not errors, f"{len(errors)} calls failed, first: {errors[0]!r}"
        assert not over, over[:5]
    finally:
        call(admin, "CALL queue_drop(%s)", queue)
        admin.close()

"""Worker registry: register, heartbeat, deregister, release the messages of dead workers."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import cli, errors

from ..helpers import RELEASE_AFTER, silence_worker


def _age(db, worker_id):
    return next(w for w in db.workers() if w.worker_id == worker_id)


def test_register_heartbeat_list_deregister(db):
    w = db.register_worker("billing", queues=["emails", "invoices"], host="host-1", pid=4242)
    assert w.reserve_as == f"billing#{w.worker_id}"
    info = _age(db, w.worker_id)
    assert (info.name, info.host, info.pid, info.queues, info.reserve_as) == (
        "billing",
        "host-1",
        4242,
        ["emails", "invoices"],
        w.reserve_as,
    )
    assert info.heartbeat_at >= info.started_at
    time.sleep(0.05)
    assert db.heartbeat_worker(w)
    assert _age(db, w.worker_id).heartbeat_at > info.heartbeat_at
    assert db.deregister_worker(w)
    assert not db.deregister_worker(w)
    assert not db.heartbeat_worker(w)
    assert all(x.worker_id != w.worker_id for x in db.workers())


def test_only_the_registration_s_secret_touches_it(db, connect):
    """Heartbeat and deregister need the secret register handed out: another
    secret (or another worker's) is treated like an unknown id."""
    mine = db.register_worker("mine")
    other = connect().register_worker("other")
    assert isinstance(mine, pyqueue_sql.WorkerRegistration)
    assert type(mine.secret) is str and len(mine.secret) == 36
    assert other.secret and mine.secret != other.secret
    assert "secret" not in repr(mine) and mine.secret not in repr(mine)
    forged = dataclasses.replace(mine, secret=str(uuid.uuid4()))
    stolen = dataclasses.replace(mine, secret=other.secret)
    before = _age(db, mine.worker_id).heartbeat_at
    time.sleep(0.05)
    for bad in (forged, stolen):
        assert not db.heartbeat_worker(bad)
        assert not db.deregister_worker(bad)
    assert _age(db, mine.worker_id).heartbeat_at == before
    assert db.heartbeat_worker(mine) and db.deregister_worker(mine)
    assert db.deregister_worker(other)
    with pytest.raises(errors.InvalidArgumentError):
        db.heartbeat_worker(mine.worker_id)  # a bare id proves nothing


def test_release_dead_workers_makes_their_messages_ready_now(db, queue, make_queue):
    other = make_queue()
    dead = db.register_worker("dead")
    alive = db.register_worker("alive")
    queue.push_many([(f"m{i}", "k", i) for i in range(5)])
    other.push("o", "k", 0)
    mine = queue.reserve(n=3, worker=dead.reserve_as, timeout=600)
    mine += other.reserve(worker=dead.reserve_as, timeout=600)
    theirs = queue.reserve(n=1, worker=alive.reserve_as, timeout=600)
    stranger = queue.reserve(n=1, worker="not-registered", timeout=600)
    assert queue.stats().ready == 0
    silence_worker(db.connection, db.dialect.name, dead.worker_id)
    assert db.heartbeat_worker(alive)
    # dead's heartbeat is an hour old; alive's is RELEASE_AFTER s away from counting
    assert db.release_dead_workers(RELEASE_AFTER) == 4
    ids = {w.worker_id for w in db.workers()}
    assert dead.worker_id not in ids and alive.worker_id in ids
    assert queue.stats().ready == 3 and other.stats().ready == 1
    # the released tokens no longer work; the attempt was counted
    assert not any(queue.commit(r) for r in mine[:3])
    again = queue.reserve(n=10, timeout=60)
    assert sorted(r.key for r in again) == sorted(r.key for r in mine[:3])
    assert all(r.attempts == 2 for r in again)
    assert queue.commit(theirs[0]) and queue.commit(stranger[0])
    assert db.release_dead_workers(RELEASE_AFTER) == 0
    db.deregister_worker(alive)


def test_released_message_on_its_last_attempt_is_dead_lettered(db, make_queue):
    dlq = make_queue()
    queue = make_queue(max_attempts=1, dead_letter_queue=dlq.name)
    dead = db.register_worker("dead")
    queue.push("m", "k", 1)
    queue.reserve(worker=dead.reserve_as, timeout=600)
    silence_worker(db.connection, db.dialect.name, dead.worker_id)
    assert db.release_dead_workers(RELEASE_AFTER) == 1
    assert queue.reserve() == []  # its last allowed delivery is spent: dead-lettered instead
    assert dlq.stats().ready == 1 and queue.stats().dead == 1


def test_release_frees_a_limit_slot(db, queue):
    queue.set_limit("lim", 1)
    queue.push_many([("a", "lim", 1), ("b", "lim", 2)])
    dead = db.register_worker("dead")
    assert len(queue.reserve(n=2, worker=dead.reserve_as, timeout=600)) == 1
    assert queue.reserve() == []
    silence_worker(db.connection, db.dialect.name, dead.worker_id)
    assert db.release_dead_workers(RELEASE_AFTER) == 1
    assert len(queue.reserve(n=2, timeout=60)) == 1


def test_register_and_release_refuse_bad_arguments(db, raw, dialect):
    with pytest.raises(errors.InvalidArgumentError):
        db.register_worker("")
    with pytest.raises(errors.InvalidArgumentError):
        db.register_worker("x" * 201)
    with pytest.raises(errors.InvalidArgumentError):
        db.register_worker("w", pid=-1)
    with pytest.raises(errors.InvalidArgumentError):
        db.release_dead_workers(0)
    with pytest.raises(errors.InvalidArgumentError):
        db.release_dead_workers(-5)
    with pytest.raises(errors.InvalidArgumentError, match="older_than must be at least 30 seconds"):
        db.release_dead_workers(29.999)  # a worker heartbeats every 10 s: no sign that it is dead
    call = (
        "SELECT queue_release_dead_workers(NULL)"
        if dialect == "postgresql"
        else "CALL queue_release_dead_workers(NULL)"
    )
    with pytest.raises(Exception, match="pyqueue:invalid_argument"):
        raw(call)


def _columns(db, sql):
    cur = db.connection.cursor()
    try:
        cur.execute(sql)
        columns = [c[0] for c in cur.description]
        cur.fetchall()
        while db.dialect.name == "mysql" and cur.nextset():
            pass
    finally:
        cur.close()
    return columns


def test_registry_from_plain_sql(raw, dialect):
    wrong = str(uuid.uuid4())
    if dialect == "postgresql":
        [(wid, secret)] = raw("SELECT * FROM queue_worker_register('psql-worker', 'h', 7, ARRAY['q1'])")
        secret = str(secret)
        assert raw("SELECT queue_worker_heartbeat(%s, %s::uuid)", (wid, wrong)) == [(False,)]
        assert raw("SELECT queue_worker_heartbeat(%s, %s::uuid)", (wid, secret)) == [(True,)]
        rows = raw("SELECT * FROM queue_workers() WHERE worker_id = %s", (wid,))
        assert [(r[1], r[2], r[3], r[4], r[8]) for r in rows] == [
            ("psql-worker", "h", 7, ["q1"], f"psql-worker#{wid}")
        ]
        assert secret not in repr(rows), "queue_workers() shows the secret"
        assert raw("SELECT queue_release_dead_workers(interval '1 hour')") == [(0,)]
        assert raw("SELECT queue_worker_deregister(%s, %s::uuid)", (wid, wrong)) == [(False,)]
        assert raw("SELECT queue_worker_deregister(%s, %s::uuid)", (wid, secret)) == [(True,)]
        with pytest.raises(Exception, match="pyqueue:invalid_argument"):
            raw("SELECT queue_worker_heartbeat(%s, NULL)", (wid,))
    else:
        [(wid, secret)] = [
            tuple(r) for r in raw("CALL queue_worker_register('mysql-worker', 'h', 7, '[\"q1\"]')")
        ]
        assert [tuple(r) for r in raw("CALL queue_worker_heartbeat(%s, %s)", (wid, wrong))] == [(0,)]
        assert [tuple(r) for r in raw("CALL queue_worker_heartbeat(%s, %s)", (wid, secret))] == [(1,)]
        rows = [r for r in raw("CALL queue_workers()") if r[0] == wid]
        assert [(r[1], r[2], r[3], r[8]) for r in rows] == [("mysql-worker", "h", 7, f"mysql-worker#{wid}")]
        assert secret not in repr(rows), "queue_workers() shows the secret"
        assert [tuple(r) for r in raw("CALL queue_release_dead_workers(3600)")] == [(0,)]
        assert [tuple(r) for r in raw("CALL queue_worker_deregister(%s, %s)", (wid, wrong))] == [(0,)]
        assert [tuple(r) for r in raw("CALL queue_worker_deregister(%s, %s)", (wid, secret))] == [(1,)]
        with pytest.raises(Exception, match="pyqueue:invalid_argument"):
            raw("CALL queue_worker_heartbeat(%s, NULL)", (wid,))


def test_queue_workers_has_no_secret_column(db, dialect):
    columns = _columns(
        db, "SELECT * FROM queue_workers()" if dialect == "postgresql" else "CALL queue_workers()"
    )
    assert "reserve_as" in columns and "secret" not in columns


def test_cli_workers_lists_and_releases(capsys, db, dsn):
    w = db.register_worker("cli-worker", queues=["jobs"])
    assert cli.main(["workers", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "cli-worker" in out and "jobs" in out and str(w.worker_id) in out
    silence_worker(db.connection, db.dialect.name, w.worker_id)
    assert cli.main(["workers", "--dsn", dsn, "--release-older-than", str(RELEASE_AFTER)]) == 0
    out = capsys.readouterr().out
    assert "released" in out and "cli-worker" not in out


def test_register_takes_at_most_1000_queue_names_and_says_so(connect, dsn, dialect):
    """As a consumer (who holds queue_worker_register): a list of 1001 names is refused with one
    line naming the cap, whichever form it takes on the wire; 1000 names are registered."""
    from tests.security.test_privileges import Accounts, _run

    accounts = Accounts(dsn)
    try:
        consumer = accounts.raw(accounts.with_capabilities("reg", "consumer"))
        names = [f"q{i}" for i in range(1001)]
        if dialect == "postgresql":
            call, many, fits = "SELECT * FROM queue_worker_register('w', NULL, NULL, %s)", names, names[:1000]
        else:
            call, many, fits = (
                "CALL queue_worker_register('w', NULL, NULL, %s)",
                *map(json.dumps, (names, names[:1000])),
            )
        with pytest.raises(Exception, match="queues names 1001 queues; a worker registers at most 1000"):
            _run(consumer, call, (many,))
        if dialect == "postgresql" and not consumer.autocommit:
            consumer.rollback()
        assert len(_run(consumer, call, (fits,))) == 1
    finally:
        accounts.close()

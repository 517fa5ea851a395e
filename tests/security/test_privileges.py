"""Least privilege: application accounts call routines, never tables.

Every test makes real PostgreSQL roles / MySQL accounts (unique names, dropped
at the end), grants them capabilities with `pyqueue-sql grant --apply`, connects
as them and checks what they may and may not do. Each denial is a real
permission error from the server (PermissionDeniedError through the client).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
import uuid
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

import pyqueue_sql
from pyqueue_sql import cli, dialects, migrate, privileges
from pyqueue_sql.errors import ConnectionFailedError, PermissionDeniedError
from pyqueue_sql.queries import script, split_script
from tests.plainsql import run as _run

PASSWORD = "pq-privileges-test"
# table or view -> a column of it
TABLES = {
    "pyqueue_message": "queue_name",
    "pyqueue_queue": "queue_name",
    "pyqueue_history": "queue_name",
    "pyqueue_dead_letters": "dead_letter_queue",
}
MYSQL_DENIED = (1044, 1142, 1143, 1227, 1370)


def _dsn_as(dsn: str, user: str | None, database: str | None = "") -> str:
    """dsn with another user (password PASSWORD) and, when database is not '', another database."""
    parts = urlsplit(dsn)
    netloc = parts.netloc.rpartition("@")[2]
    if user is not None:
        netloc = f"{quote(user, safe='')}:{PASSWORD}@{netloc}"
    path = parts.path if database == "" else "/" + (database or "")
    return urlunsplit(parts._replace(netloc=netloc, path=path))


def _database_of(dsn: str) -> str:
    return urlsplit(dsn).path.lstrip("/")


def _is_denial(dialect: str, exc: BaseException) -> bool:
    if isinstance(exc, ConnectionFailedError) and exc.reason == "authorization" and exc.__cause__ is not None:
        exc = exc.__cause__  # refused at connect: the server's denial is the cause
    if dialect == "postgresql":
        return getattr(exc, "sqlstate", None) == "42501"
    return bool(exc.args) and exc.args[0] in MYSQL_DENIED


def assert_denied(dialect: str, conn, sql: str) -> None:
    """The statement fails with the server's permission error (and nothing else)."""
    try:
        _run(conn, sql)
    except Exception as exc:  # noqa: BLE001 - checked just below
        assert _is_denial(dialect, exc), f"{sql!r} failed, but not for lack of privilege: {exc!r}"
        if dialect == "postgresql" and not conn.autocommit:
            conn.rollback()
        return
    pytest.fail(f"{sql!r} succeeded for an account that should not be allowed to run it")


class Accounts:
    """Roles (PostgreSQL) / accounts 'name'@'%' (MySQL) made for one test, dropped afterwards."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.dialect = dialects.for_dsn(dsn).name
        self.admin = dialects.for_dsn(dsn).connect(dsn)
        self.made: list[str] = []
        self.databases: list[str] = []
        self.opened: list = []

    def create(self, tag: str) -> str:
        name = f"pq_{tag}_{uuid.uuid4().hex[:10]}"
        if self.dialect == "postgresql":
            _run(self.admin, f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{PASSWORD}'")
        else:
            _run(self.admin, f"CREATE USER `{name}`@`%` IDENTIFIED BY '{PASSWORD}'")
        self.made.append(name)
        return name

    def role_arg(self, name: str) -> str:
        return name if self.dialect == "postgresql" else f"{name}@%"

    def grant(self, name: str, *capabilities: str, dsn: str | None = None) -> None:
        argv = [
            "grant",
            "--role",
            self.role_arg(name),
            *(f"--{c}" for c in capabilities),
            "--apply",
            "--dsn",
            dsn or self.dsn,
        ]
        assert cli.main(argv) == 0

    def with_capabilities(self, tag: str, *capabilities: str) -> str:
        name = self.create(tag)
        if capabilities:
            self.grant(name, *capabilities)
        return name

    def dsn_for(self, name: str, database: str | None = "") -> str:
        return _dsn_as(self.dsn, name, database)

    def client(self, name: str) -> pyqueue_sql.Database:
        db = pyqueue_sql.connect(self.dsn_for(name))
        self.opened.append(db)
        return db

    def raw(self, name: str, database: str | None = ""):
        target = self.dsn_for(name, database)
        conn = dialects.for_dsn(target).connect(target)
        self.opened.append(conn)
        return conn

    def close(self) -> None:
        for conn in self.opened:
            with contextlib.suppress(Exception):
                conn.close()
        for name in self.made:
            with contextlib.suppress(Exception):
                if self.dialect == "postgresql":
                    _run(self.admin, f'DROP OWNED BY "{name}"')  # its grants (and schemas) in this database
                    _run(self.admin, f'DROP ROLE "{name}"')
                else:
                    _run(self.admin, f"DROP USER `{name}`@`%`")
        for database in self.databases:
            with contextlib.suppress(Exception):
                _run(self.admin, f"DROP DATABASE IF EXISTS `{database}`")
        self.admin.close()


@pytest.fixture
def accounts(dsn):
    made = Accounts(dsn)
    yield made
    made.close()


@pytest.fixture
def admin_queue(db):
    """A queue created by the installing (admin) account."""
    q = db.queue(f"priv.{uuid.uuid4().hex[:12]}").create(visibility_timeout=30)
    yield q
    with contextlib.suppress(Exception):
        q.drop()


def _other_queue(db) -> pyqueue_sql.Queue:
    return db.queue(f"priv.{uuid.uuid4().hex[:12]}")


# -- the capabilities -------------------------------------------------------------


def test_producer_pushes_but_cannot_reserve_pop_commit_or_manage(accounts, admin_queue, db):
    consumer = accounts.client(accounts.with_capabilities("cons", "consumer"))
    producer = accounts.client(accounts.with_capabilities("prod", "producer"))
    q = producer.queue(admin_queue.name)
    assert q.push("k1", "kind", {"n": 1}) is True
    assert q.push("k1", "kind", {"n": 1}) is False  # dedup works through the routine
    assert q.push_many([("k2", "kind", 2), ("k3", "kind", 3)]) == 2
    assert q.push_replace("k4", "kind", 4) == "inserted"
    assert admin_queue.stats().ready == 4
    # FIFO groups and topics are pushes too
    assert q.push("g1", "kind", 1, group="grp") is True
    assert q.push_many([("g2", "kind", 2, None, None, "grp")]) == 1
    topic = f"priv{uuid.uuid4().hex[:10]}"
    assert db.bind(f"{topic}.#", admin_queue.name)
    assert producer.publish(f"{topic}.a", "t1", "kind", 1) == 1
    assert producer.publish_many([(f"{topic}.b", "t2", "kind", 2)]) == 1
    assert admin_queue.stats().ready == 7  # g2 waits behind g1 in its group

    [held] = consumer.queue(admin_queue.name).reserve()
    for attempt in (
        lambda: q.reserve(),
        lambda: q.pop(),
        lambda: q.commit(held),
        lambda: q.rollback(held),
        lambda: q.extend(held),
        lambda: q.remove("k2", "kind"),
        lambda: q.create(),
        lambda: q.drop(),
        lambda: q.pause(),
        lambda: q.stats(),
        lambda: producer.stats(),
        lambda: _other_queue(producer).create(),
        lambda: q.wait(timeout=0.01),
        lambda: q.dead_letters(),
        lambda: q.groups(),
        lambda: producer.bind(f"{topic}.*", admin_queue.name),
        lambda: producer.unbind(f"{topic}.#", admin_queue.name),
        lambda: producer.bindings(),
    ):
        with pytest.raises(PermissionDeniedError):
            attempt()
    # nothing was taken or changed by the refused calls
    stats = admin_queue.stats()
    assert (stats.ready, stats.reserved, stats.paused) == (6, 1, False)
    assert [b.pattern for b in db.bindings(admin_queue.name)] == [f"{topic}.#"]
    assert consumer.queue(admin_queue.name).commit(held)


def test_consumer_reserves_and_commits_but_cannot_push_move_or_manage(accounts, admin_queue, db):
    """Design: consumers take and finish work; pushing new work is the producer
    capability and handing a message on to another queue (queue_move) is the
    pipeline capability: a consumer alone can neither put content into a queue
    nor take a message out of max_attempts' reach."""
    admin_queue.push_many([(f"k{i}", "kind", i) for i in range(7)])
    other = _other_queue(db).create()
    try:
        consumer = accounts.client(accounts.with_capabilities("cons", "consumer"))
        q = consumer.queue(admin_queue.name)
        first, second = q.reserve(n=2)
        assert q.commit(first)
        assert q.rollback(second)
        [third] = q.reserve()
        third = q.extend(third, timeout=60)
        assert third is not None
        committed, more = q.commit_reserve(third, n=1)
        assert committed and len(more) == 1
        assert q.commit_many(more) == 1
        assert len(q.pop(1)) == 1
        [failing] = q.reserve()
        assert q.fail(failing, error="boom") == "retry"
        assert q.channel()
        q.next_scheduled_at()
        assert q.wait(timeout=0.01, poll=0.01) in (True, False)
        reg = consumer.register_worker(queues=[q.name])
        assert consumer.heartbeat_worker(reg)
        assert consumer.deregister_worker(reg)
        [held] = q.reserve()
        for attempt in (
            lambda: q.push("new", "kind", 1),
            lambda: q.push_many([("n2", "kind", 1)]),
            lambda: q.push_replace("k5", "kind", 1),
            lambda: q.push("new", "kind", 1, group="g"),
            lambda: q.push_many([("n2", "kind", 1, None, None, "g")]),
            lambda: consumer.publish("priv.topic", "new", "kind", 1),
            lambda: consumer.publish_many([("priv.topic", "new", "kind", 1)]),
            lambda: consumer.bind("priv.#", q.name),
            lambda: q.create(),
            lambda: q.drop(),
            lambda: q.pause(),
            lambda: q.remove("k5", "kind"),
            lambda: q.stats(),
            lambda: q.set_limit("kind", 1),
            lambda: q.schedule_every("s", "kind", 1, 60),
            lambda: q.move(held, other.name),
            lambda: q.move(held, q.name, payload={"x": 1}),
            lambda: q.settings(),
            lambda: q.reset_setting("max_attempts"),
            lambda: q.message(held.key, held.kind),
            lambda: q.message_history(held.key, held.kind),
        ):
            with pytest.raises(PermissionDeniedError):
                attempt()
        # the refused moves changed nothing: still held by this consumer, nothing in the other queue
        assert other.stats().ready == 0
        assert admin_queue.stats().reserved == 1
        assert q.commit(held)
    finally:
        other.drop()


# -- pipeline: queue_move ---------------------------------------------------------


def test_pipeline_moves_what_it_holds_and_consumer_alone_cannot(accounts, admin_queue, db):
    """queue_move puts a (rewritten) payload into any queue: only an account granted
    pipeline may call it. A pipeline stage gets consumer (to hold the message) and
    pipeline; pipeline alone reserves, pushes and reads nothing."""
    target = _other_queue(db).create()
    try:
        admin_queue.push_many([("a", "kind", {"amount": 1}), ("b", "kind", {"amount": 2})])
        consumer = accounts.client(accounts.with_capabilities("cons", "consumer")).queue(admin_queue.name)
        stage = accounts.client(accounts.with_capabilities("pipe", "consumer", "pipeline")).queue(
            admin_queue.name
        )
        only = accounts.client(accounts.with_capabilities("only", "pipeline")).queue(admin_queue.name)

        [r] = consumer.reserve()
        with pytest.raises(PermissionDeniedError):
            consumer.move(r, target.name, payload={"amount": 1_000_000})
        assert target.stats().ready == 0
        assert consumer.rollback(r)

        [r] = stage.reserve()
        assert stage.move(r, target.name, payload={"amount": r.payload["amount"] * 10})
        [moved] = target.pop(1)
        assert (moved.key, moved.payload) == (r.key, {"amount": r.payload["amount"] * 10})

        for attempt in (
            lambda: only.reserve(),
            lambda: only.pop(),
            lambda: only.push("x", "kind", 1),
            lambda: only.stats(),
            lambda: only.create(),
        ):
            with pytest.raises(PermissionDeniedError):
                attempt()
    finally:
        target.drop()


def test_a_move_into_its_own_queue_keeps_the_attempt_count(accounts, db):
    """Moving a message back into the queue it came from does not reset its
    attempts, so max_attempts and dead-lettering still apply; a move into another
    queue starts it at 0 there."""
    dead = db.queue(f"priv.{uuid.uuid4().hex[:12]}.dead").create()
    src = db.queue(f"priv.{uuid.uuid4().hex[:12]}").create(max_attempts=2, dead_letter_queue=dead.name)
    elsewhere = _other_queue(db).create(max_attempts=2)
    try:
        src.push("loop", "kind", {"n": 0})
        stage = accounts.client(accounts.with_capabilities("pipe", "consumer", "pipeline"))
        q = stage.queue(src.name)
        [r] = q.reserve()
        assert r.attempts == 1
        assert q.move(r, src.name, payload={"n": 1})
        [r] = q.reserve()
        assert (r.attempts, r.payload) == (2, {"n": 1})  # counted on, not reset
        assert q.move(r, src.name, payload={"n": 2})
        # a third delivery would exceed max_attempts: dead-lettered instead of handed out
        assert q.reserve(n=5) == []
        [letter] = dead.dead_letters()
        assert (letter.key, letter.from_queue, letter.attempts, letter.payload) == (
            "loop",
            src.name,
            2,
            {"n": 2},
        )

        # a move into another queue starts the count there at 0
        src.push("away", "kind", {})
        [r] = q.reserve()
        assert q.rollback(r)
        [r] = q.reserve()
        assert r.attempts == 2
        assert q.move(r, elsewhere.name)
        [there] = stage.queue(elsewhere.name).reserve()
        assert (there.key, there.attempts) == ("away", 1)
    finally:
        for queue in (src, elsewhere, dead):
            queue.drop()


# -- the worker registry: each worker its own -----------------------------------------


def _call(db, name: str, **params):
    return db.call(name, **params)[0][0]


def test_a_worker_touches_only_its_own_registration(accounts, db):
    """Two consumer accounts: one cannot heartbeat or deregister the other's
    worker (its id is visible to monitors) without the secret that register
    returned to the other: false, as for an unknown id, and nothing changes."""
    mine = accounts.client(accounts.with_capabilities("wa", "consumer"))
    theirs = accounts.client(accounts.with_capabilities("wb", "consumer"))
    reg = mine.register_worker(name="owner", queues=["q"])
    intruder = theirs.register_worker(name="intruder", queues=["q"])
    assert reg.secret and intruder.secret and reg.secret != intruder.secret

    def row():
        [w] = [w for w in db.workers() if w.worker_id == reg.worker_id]
        return (w.name, w.heartbeat_at)

    before = row()
    assert str(reg.secret) not in repr(db.workers())  # queue_workers does not show secrets
    time.sleep(0.05)
    for secret in (str(uuid.uuid4()), str(intruder.secret)):
        assert not _call(theirs, "worker_heartbeat", worker_id=reg.worker_id, secret=secret)
        assert not _call(theirs, "worker_deregister", worker_id=reg.worker_id, secret=secret)
    with pytest.raises(pyqueue_sql.InvalidArgumentError):
        _call(theirs, "worker_heartbeat", worker_id=reg.worker_id, secret=None)
    with pytest.raises(pyqueue_sql.InvalidArgumentError):
        _call(theirs, "worker_deregister", worker_id=reg.worker_id, secret=None)
    assert row() == before  # still registered, heartbeat untouched
    # the same account without the secret fares no better: the secret is the proof, not the account
    assert not _call(mine, "worker_heartbeat", worker_id=reg.worker_id, secret=str(uuid.uuid4()))
    # its owner, with the secret
    assert mine.heartbeat_worker(reg)
    assert row()[1] > before[1]
    assert mine.deregister_worker(reg)
    assert theirs.deregister_worker(intruder)
    assert not [w for w in db.workers() if w.worker_id in (reg.worker_id, intruder.worker_id)]


def test_monitor_reads_and_admin_manages_but_neither_pushes_nor_reserves(accounts, admin_queue, db):
    dead = db.queue(f"priv.{uuid.uuid4().hex[:12]}.dead").create()
    src = db.queue(f"priv.{uuid.uuid4().hex[:12]}").create(max_attempts=1, dead_letter_queue=dead.name)
    try:
        src.push("gone", "kind", {"x": 1})
        [r] = src.reserve()
        assert src.rollback(r)  # one attempt allowed: dead-lettered
        monitor = accounts.client(accounts.with_capabilities("mon", "monitor"))
        assert [d.key for d in monitor.queue(dead.name).dead_letters()] == ["gone"]
        assert {s.queue for s in monitor.stats()} >= {src.name, dead.name}
        monitor.limits(), monitor.workers(), monitor.schedules()
        assert monitor.queue(src.name).settings().dead_letter_queue == dead.name
        assert {s.queue for s in monitor.settings()} >= {src.name, dead.name}
        assert monitor.queue(dead.name).message("gone", "kind").state == "ready"
        assert monitor.queue(src.name).message("gone", "kind") is None
        monitor.queue(src.name).message_history("gone", "kind")
        assert monitor.queue(src.name).groups() == []
        admin = accounts.client(accounts.with_capabilities("adm", "admin"))
        fresh = _other_queue(admin).create(max_attempts=3)
        pattern = f"priv{uuid.uuid4().hex[:10]}.#"
        assert admin.bind(pattern, fresh.name)
        assert [(b.pattern, b.queue) for b in monitor.bindings(fresh.name)] == [(pattern, fresh.name)]
        for attempt in (
            lambda: monitor.bind(pattern, src.name),
            lambda: monitor.unbind(pattern, fresh.name),
            lambda: admin.publish(pattern.replace("#", "x"), "k", "kind", 1),
            lambda: monitor.publish(pattern.replace("#", "x"), "k", "kind", 1),
            lambda: admin.queue(fresh.name).push("k", "kind", 1, group="g"),
        ):
            with pytest.raises(PermissionDeniedError):
                attempt()
        assert admin.unbind(pattern, fresh.name)
        assert admin.bindings(fresh.name) == []
        assert fresh.settings().max_attempts == 3
        fresh.reset_setting("max_attempts")
        assert fresh.settings().max_attempts == 10
        with pytest.raises(PermissionDeniedError):
            monitor.queue(fresh.name).reset_setting("max_attempts")
        fresh.pause()
        fresh.resume()
        assert admin.queue(dead.name).redrive(src.name) == 1
        assert fresh.stats().ready == 0
        for who in (monitor, admin):
            q = who.queue(admin_queue.name)
            for attempt in (lambda: q.push("k", "kind", 1), lambda: q.reserve(), lambda: q.pop()):
                with pytest.raises(PermissionDeniedError):
                    attempt()
        with pytest.raises(PermissionDeniedError):
            monitor.queue(admin_queue.name).drop()
        fresh.drop()
    finally:
        src.drop()
        dead.drop()


def test_no_application_account_touches_tables_or_internal_helpers(accounts, dialect, dsn):
    database = _database_of(dsn)
    helper = (
        "SELECT pyqueue__queue('x')"
        if dialect == "postgresql"
        else f"CALL `{database}`.pyqueue__queue('x', @a, @b, @c, @d)"
    )
    helper2 = (
        "SELECT pyqueue__check_name('queue', 'x', 128)"
        if dialect == "postgresql"
        else f"CALL `{database}`.pyqueue__raise('unknown_queue', 'x')"
    )
    for capability in privileges.CAPABILITIES:
        conn = accounts.raw(accounts.with_capabilities(capability[:4], capability))
        for table, column in TABLES.items():
            assert_denied(dialect, conn, f"SELECT * FROM {table}")
            assert_denied(dialect, conn, f"DELETE FROM {table}")
            assert_denied(dialect, conn, f"UPDATE {table} SET {column} = {column}")
            assert_denied(dialect, conn, f"INSERT INTO {table} ({column}) VALUES ('x')")
        for table in ("pyqueue_limit", "pyqueue_worker", "pyqueue_schedule", "pyqueue_notify"):
            assert_denied(dialect, conn, f"SELECT * FROM {table}")
        assert_denied(dialect, conn, helper)
        assert_denied(dialect, conn, helper2)
        if capability != "ingest":
            assert_denied(dialect, conn, "INSERT INTO queue_ingest (queue_name) VALUES ('x')")
            assert_denied(dialect, conn, "SELECT * FROM queue_ingest")
        assert_denied(dialect, conn, "DELETE FROM queue_ingest")
        assert_denied(dialect, conn, "UPDATE queue_ingest SET payload = 'x'")


def _all_routine_calls(dialect: str, admin_conn, database: str) -> list[str]:
    """A call of every routine we install (contract and helpers), every argument NULL."""
    if dialect == "postgresql":
        # (SELECT NULL::type), not a NULL constant: the planner folds a STRICT function
        # of a NULL constant to NULL without calling it (so without checking EXECUTE).
        rows = _run(
            admin_conn,
            """
            SELECT p.proname,
                   array_to_string(ARRAY(SELECT format('(SELECT NULL::%s)', format_type(a.t, NULL))
                                           FROM unnest(p.proargtypes) WITH ORDINALITY a(t, i) ORDER BY a.i), ', ')
              FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = current_schema() AND (p.proname LIKE 'queue\\_%%' OR p.proname LIKE 'pyqueue\\_\\_%%')
               AND p.prorettype <> 'trigger'::regtype
             ORDER BY 1""",
        )
        return [f"SELECT {name}({args})" for name, args in rows]
    rows = _run(
        admin_conn,
        """
        SELECT r.ROUTINE_NAME,
               GROUP_CONCAT(CASE WHEN p.PARAMETER_MODE = 'IN' THEN 'NULL' ELSE CONCAT('@o', p.ORDINAL_POSITION) END
                            ORDER BY p.ORDINAL_POSITION SEPARATOR ', ')
          FROM information_schema.ROUTINES r
          LEFT JOIN information_schema.PARAMETERS p
            ON p.SPECIFIC_SCHEMA = r.ROUTINE_SCHEMA AND p.SPECIFIC_NAME = r.ROUTINE_NAME
         WHERE r.ROUTINE_SCHEMA = %s
         GROUP BY r.ROUTINE_NAME ORDER BY 1""",
        (database,),
    )
    return [f"CALL `{database}`.`{name}`({args or ''})" for name, args in rows]


def test_an_account_without_grants_can_call_nothing(accounts, dialect, dsn):
    """Proves EXECUTE is not open to PUBLIC (PostgreSQL's default for new functions)."""
    database = _database_of(dsn)
    calls = _all_routine_calls(dialect, accounts.admin, database)
    assert len(calls) >= 50
    nobody = accounts.create("none")
    if dialect == "postgresql":
        conn = accounts.raw(nobody)
        # and the catalog agrees: no routine or relation of ours has a PUBLIC entry in its ACL
        public = _run(
            accounts.admin,
            """
            SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
             WHERE n.nspname = current_schema() AND (p.proname LIKE 'queue\\_%%' OR p.proname LIKE 'pyqueue\\_\\_%%')
               AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0))""",
        )
        assert public == []
    else:
        conn = accounts.raw(nobody, database=None)  # it may not even USE the database
        # refused at connect: the package's connection error, the server's denial as its cause
        with pytest.raises(ConnectionFailedError) as refused:
            accounts.raw(nobody)
        assert refused.value.reason == "authorization"
        assert _is_denial(dialect, refused.value.__cause__)
    for call in calls:
        assert_denied(dialect, conn, call)


def test_every_installed_routine_has_a_capability_or_is_internal(accounts, dialect, dsn):
    """A routine added later must be placed in pyqueue_sql.privileges (and revoked from
    PUBLIC in routines.sql): otherwise no role could ever be granted it."""
    database = _database_of(dsn)
    names = {
        call.split("(")[0].split()[-1].replace(f"`{database}`.", "").strip("`")
        for call in _all_routine_calls(dialect, accounts.admin, database)
    }
    contract = {n for n in names if n.startswith("queue_")}
    assert contract == set(privileges.ROUTINES)
    assert all(n.startswith("pyqueue__") for n in names - contract)


def _routine_of(call: str) -> str:
    return call.split("(")[0].split()[-1].split(".")[-1].strip("`")


def _limit_statement_time(dialect: str, conn) -> None:
    _run(conn, "SET statement_timeout = '20s'" if dialect == "postgresql" else "SET max_statement_time = 20")


@pytest.mark.slow
def test_each_capability_calls_exactly_its_routines(fresh_database, dialect):
    """The capability table, checked whole: for every capability, an account granted
    only it calls every installed routine (all arguments NULL, in a database of its
    own): the server lets through exactly the routines the capability lists (they may
    then refuse the NULLs: any error but a permission error) and refuses every other
    one, the internal helpers included, with its permission error."""
    dsn = fresh_database("caps")
    migrate.upgrade(dsn)
    made = Accounts(dsn)
    try:
        calls = _all_routine_calls(dialect, made.admin, _database_of(dsn))
        assert {_routine_of(c) for c in calls if _routine_of(c).startswith("queue_")} == set(
            privileges.ROUTINES
        )
        for capability, allowed in privileges.CAPABILITIES.items():
            conn = made.raw(made.with_capabilities(capability[:4], capability))
            _limit_statement_time(dialect, conn)
            for call in calls:
                if _routine_of(call) not in allowed:
                    assert_denied(dialect, conn, call)
                    continue
                try:
                    _run(conn, call)
                except Exception as exc:  # noqa: BLE001 - only a denial is wrong here
                    assert not _is_denial(dialect, exc), f"{capability}: {call} refused: {exc!r}"
    finally:
        made.close()


def test_capability_descriptions_cover_every_capability():
    assert list(privileges.DESCRIPTIONS) == list(privileges.CAPABILITIES)
    assert privileges.PIPELINE == ("queue_move",)
    assert "queue_move" not in privileges.CONSUMER
    assert set(privileges.MONITOR) <= set(privileges.ADMIN)
    everything = [r for rs in privileges.CAPABILITIES.values() for r in rs]
    # a routine in two capabilities is one of these (revoking either capability revokes it)
    shared = {r for r in everything if everything.count(r) > 1}
    assert shared == set(privileges.MONITOR) | {
        "queue_release_dead_workers",
        "queue_result_channel",  # producer, consumer and monitor: whoever waits for or gives results
        "queue_cancel",  # producer and admin
    }
    assert privileges.capabilities_with("queue_move") == ["pipeline"]
    assert privileges.capabilities_with("queue_stats") == ["monitor", "admin"]
    # a worker keeps what it holds of a limited kind within the limit: it reads them as a consumer
    assert privileges.capabilities_with("queue_limits") == ["consumer", "monitor", "admin"]
    assert privileges.capabilities_with("pyqueue__queue") == []


# -- what the definer rights must not open -----------------------------------------


@pytest.mark.only_dialect("postgresql")
def test_search_path_hijack_still_writes_the_real_tables(accounts, admin_queue, dsn):
    """A producer with a schema of its own puts pg_temp and that schema first and
    shadows our tables and a helper: queue_push still writes pyqueue_message of the
    installation (the routines' search_path is pinned: <schema>, pg_temp last)."""
    name = accounts.with_capabilities("hijack", "producer")
    evil = f"evil_{uuid.uuid4().hex[:8]}"
    _run(accounts.admin, f'CREATE SCHEMA "{evil}" AUTHORIZATION "{name}"')
    [(schema,)] = _run(accounts.admin, "SELECT current_schema()")
    conn = accounts.raw(name)
    _run(conn, f'SET search_path = pg_temp, "{evil}", "{schema}"')
    fake_columns = "(queue_name varchar(128), p_key varchar(255), p_kind varchar(128), payload jsonb)"
    _run(conn, f"CREATE TEMP TABLE pyqueue_message {fake_columns}")
    _run(conn, f'CREATE TABLE "{evil}".pyqueue_message {fake_columns}')
    _run(conn, f'CREATE TABLE "{evil}".pyqueue_queue (queue_name varchar(128))')
    _run(
        conn,
        f"""CREATE FUNCTION "{evil}".pyqueue__check_name(text, text, integer) RETURNS void
                   LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked'; END $$""",
    )
    _run(
        conn,
        f"""CREATE FUNCTION "{evil}".pyqueue__notify(text) RETURNS void
                   LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hijacked'; END $$""",
    )
    [(inserted,)] = _run(
        conn,
        f'SELECT "{schema}".queue_push(%s, %s, %s, %s::jsonb)',
        (admin_queue.name, "k", "kind", json.dumps({"real": True})),
    )
    assert inserted is True
    assert _run(conn, "SELECT count(*) FROM pg_temp.pyqueue_message") == [(0,)]
    assert _run(conn, f'SELECT count(*) FROM "{evil}".pyqueue_message') == [(0,)]
    assert admin_queue.stats().ready == 1
    [r] = admin_queue.reserve()
    assert (r.key, r.payload) == ("k", {"real": True})


@pytest.mark.only_dialect("mysql")
def test_own_database_tables_do_not_shadow_the_real_ones(accounts, admin_queue, dsn):
    """MySQL's counterpart of the search_path attack: an account working in a database
    of its own, with tables named like ours, calls queue_push of the installation:
    the procedure writes its own database's tables."""
    database = _database_of(dsn)
    name = accounts.with_capabilities("hijack", "producer")
    own = f"pq_own_{uuid.uuid4().hex[:10]}"
    accounts.databases.append(own)
    _run(accounts.admin, f"CREATE DATABASE `{own}`")
    _run(accounts.admin, f"GRANT ALL ON `{own}`.* TO `{name}`@`%`")
    conn = accounts.raw(name, database=own)
    _run(
        conn,
        "CREATE TABLE pyqueue_message (queue_name VARCHAR(128), p_key VARCHAR(255), "
        "p_kind VARCHAR(128), payload JSON)",
    )
    _run(conn, "CREATE TABLE pyqueue_queue (queue_name VARCHAR(128))")
    rows = _run(
        conn,
        f"CALL `{database}`.queue_push(%s, 'k', 'kind', '{{\"real\": true}}', NULL, NULL)",
        (admin_queue.name,),
    )
    assert [tuple(int(v) for v in row) for row in rows] == [(1,)]
    assert _run(conn, "SELECT COUNT(*) FROM pyqueue_message") == [(0,)]
    [r] = admin_queue.reserve()
    assert (r.key, r.payload) == ("k", {"real": True})


# -- ingest --------------------------------------------------------------------------


def test_ingest_account_inserts_into_queue_ingest_and_the_messages_arrive(
    accounts, admin_queue, dialect, dsn
):
    name = accounts.with_capabilities("ing", "ingest")
    conn = accounts.raw(name)
    _run(
        conn,
        "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES "
        "(%s, 'a', 'kind', '{\"n\": 1}'), (%s, 'b', 'kind', '{\"n\": 2}'), (%s, 'a', 'kind', '{}')",
        (admin_queue.name,) * 3,
    )
    # SELECT (which Spark's JDBC writer needs): on PostgreSQL the table is already empty again;
    # on MySQL/MariaDB the rows wait there for the flush
    [(waiting,)] = _run(conn, "SELECT count(*) FROM queue_ingest WHERE queue_name = %s", (admin_queue.name,))
    assert waiting == (0 if dialect == "postgresql" else 3)
    flush = (
        "SELECT enqueued, duplicates, rejected FROM queue_ingest_flush(%s)"
        if dialect == "postgresql"
        else "CALL queue_ingest_flush(%s)"
    )
    [row] = _run(conn, flush, (admin_queue.name,))
    expected = (0, 0, 0) if dialect == "postgresql" else (2, 1, 0)  # PostgreSQL: the trigger already did it
    assert tuple(int(v) for v in row) == expected
    assert admin_queue.stats().ready == 2
    assert sorted(m.key for m in admin_queue.pop(5)) == ["a", "b"]
    assert_denied(dialect, conn, "SELECT * FROM pyqueue_message")
    if dialect == "postgresql":
        assert_denied(dialect, conn, f"SELECT queue_push('{admin_queue.name}', 'c', 'kind', '1')")
    else:
        assert_denied(dialect, conn, f"CALL queue_push('{admin_queue.name}', 'c', 'kind', '1', NULL, NULL)")


# -- the worker under least privilege --------------------------------------------------


@pytest.mark.slow
def test_a_worker_runs_with_only_the_consumer_capability(accounts, admin_queue):
    from pyqueue_sql import Worker

    name = accounts.with_capabilities("wrk", "consumer")
    admin_queue.push_many([(f"w{i}", "kind", i) for i in range(5)])
    done = []
    worker = Worker(accounts.dsn_for(name), concurrency=2, poll_fallback=0.2, lease=6.0)
    worker.add_handler(admin_queue.name, lambda job: done.append(job.key))
    failure = []
    thread = threading.Thread(target=lambda: _run_worker(worker, failure), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(done) < 5 and time.monotonic() < deadline and not failure:
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(30)
    assert not failure, failure
    assert sorted(done) == [f"w{i}" for i in range(5)]
    stats = admin_queue.stats()
    assert stats.ready + stats.reserved == 0


def _run_worker(worker, failure) -> None:
    try:
        worker.run(install_signals=False)
    except BaseException as exc:  # noqa: BLE001 - surfaced by the test
        failure.append(exc)


# -- the migrations create and grant nothing; grants and upgrades ---------------------


def _acl_grantees(dialect: str, dsn: str) -> set[str]:
    """Every account that holds a privilege on something of this database (owner excluded)."""
    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        if dialect == "postgresql":
            rows = _run(
                conn,
                """
                SELECT DISTINCT coalesce(r.rolname, 'PUBLIC')
                  FROM (SELECT p.proacl AS acl, p.proowner AS owner FROM pg_proc p
                          JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema()
                        UNION ALL
                        SELECT c.relacl, c.relowner FROM pg_class c
                          JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema()) o
                 CROSS JOIN LATERAL aclexplode(o.acl) a
                  LEFT JOIN pg_roles r ON r.oid = a.grantee
                 WHERE a.grantee <> o.owner""",
            )
        else:
            rows = _run(
                conn,
                """
                SELECT CONCAT(User, '@', Host) FROM mysql.procs_priv WHERE Db = DATABASE()
                UNION SELECT CONCAT(User, '@', Host) FROM mysql.tables_priv WHERE Db = DATABASE()
                UNION SELECT CONCAT(User, '@', Host) FROM mysql.db WHERE Db = DATABASE()""",
            )
        return {r[0] for r in rows}
    finally:
        conn.close()


@pytest.mark.slow
def test_the_migrations_create_no_account_and_grant_nothing(fresh_database, dialect):
    dsn = fresh_database("grants")
    migrate.upgrade(dsn)
    assert _acl_grantees(dialect, dsn) == set()
    # the SQL the migrations and `pyqueue-sql sql` run holds no role or grant statement at all
    folder = migrate.sql_file(dialect, "revisions")  # the table changes after 0.1.0
    texts = [p.read_text() for p in sorted(folder.glob("*.sql"))] + [
        script(dialect, "routines"),
        script(dialect, "schema.sql"),
    ]
    forbidden = re.compile(
        r"^\s*(CREATE|ALTER|DROP)\s+(ROLE|USER)\b|^\s*GRANT\b|\bSET\s+ROLE\b|"
        r"\bSET\s+SESSION\s+AUTHORIZATION\b",
        re.IGNORECASE | re.MULTILINE,
    )
    for text in texts:
        code = "\n".join(line.split("--")[0] for line in text.splitlines())
        assert not forbidden.search(code), forbidden.search(code)
    migrate.downgrade(dsn)
    assert _acl_grantees(dialect, dsn) == set()


@pytest.mark.only_dialect("postgresql")
def test_the_migration_transaction_touches_no_role(fresh_database):
    """Roles are cluster-wide (other sessions may create some meanwhile), so the check is
    exact instead of a before/after list: inside the migrating transaction, no row of
    pg_authid (roles), pg_auth_members (role grants) or pg_default_acl carries its xid."""
    from sqlalchemy import create_engine, pool

    dsn = fresh_database("roles")
    dialect = dialects.for_dsn(dsn)
    engine = create_engine(
        f"{dialect.sqlalchemy_dialect}://",
        poolclass=pool.NullPool,
        creator=lambda: dialect.connect(dsn, autocommit=False),
    )
    try:
        with engine.begin() as connection:
            migrate.upgrade(connection)
            mine = connection.exec_driver_sql("""
                SELECT 'role ' || rolname FROM pg_authid
                 WHERE xmin::text::bigint = txid_current() %% 4294967296
                UNION ALL SELECT 'membership ' || roleid::regrole::text FROM pg_auth_members
                 WHERE xmin::text::bigint = txid_current() %% 4294967296
                UNION ALL SELECT 'default acl ' || defaclrole::regrole::text FROM pg_default_acl
                 WHERE xmin::text::bigint = txid_current() %% 4294967296""").fetchall()
            [(created,)] = connection.exec_driver_sql(
                "SELECT count(*) FROM pg_proc WHERE xmin::text::bigint = txid_current() %% 4294967296"
            ).fetchall()
    finally:
        engine.dispose()
    assert created >= 50  # the check sees what this transaction wrote
    assert mine == []


@pytest.mark.slow
def test_grants_and_routine_reinstalls(fresh_database, dialect):
    """PostgreSQL: re-running routines.sql (CREATE OR REPLACE, as an upgrade does)
    keeps the applications' grants. MySQL: routines.sql drops and re-creates every
    procedure, and DROP PROCEDURE takes its grants along; migrate reads the grants
    first and gives them back, so a re-run keeps them, while routines.sql run by hand
    does not: then run `pyqueue-sql grant ... --apply` again."""
    dsn = fresh_database("regrant")
    migrate.upgrade(dsn)
    made = Accounts(dsn)
    try:
        name = made.with_capabilities("re", "producer")
        with pyqueue_sql.connect(dsn) as db:
            db.queue("regrant").create()

        def push(key: str) -> bool:
            with pyqueue_sql.connect(made.dsn_for(name)) as producer:
                return producer.queue("regrant").push(key, "kind", 1)

        assert push("before")
        migrate.upgrade(dsn)
        assert push("after-migrate-rerun")
        pushed = 2
        if dialect == "mysql":

            def granted() -> set:
                conn = dialects.for_dsn(dsn).connect(dsn)
                try:
                    rows = _run(
                        conn,
                        "SELECT Routine_name, Proc_priv FROM mysql.procs_priv "
                        "WHERE Db = DATABASE() AND User = %s",
                        (name,),
                    )
                finally:
                    conn.close()
                return {tuple(v.decode() if isinstance(v, bytes) else v for v in row) for row in rows}

            assert ("queue_push", "Execute") in granted()
        conn = dialects.for_dsn(dsn).connect(dsn)
        try:
            text = script(dialect, "routines")
            for statement in [text] if dialect == "postgresql" else split_script(text):
                _run(conn, statement)
        finally:
            conn.close()
        if dialect == "postgresql":
            assert push("after-reinstall")
        else:
            # no privilege left in the database at all: the account cannot even connect to it
            with pytest.raises(Exception) as refused:
                push("after-reinstall")
            assert _is_denial(dialect, refused.value) or isinstance(refused.value, PermissionDeniedError)
            made.grant(name, "producer", dsn=dsn)
            assert push("after-regrant")
        with pyqueue_sql.connect(dsn) as db:
            assert db.queue("regrant").stats().ready == pushed + 1
            db.queue("regrant").drop()
    finally:
        made.close()


@pytest.mark.only_dialect("mysql")
def test_grant_never_creates_an_account(accounts, dsn):
    """MariaDB creates a password-less account on a GRANT to a missing one unless
    sql_mode has NO_AUTO_CREATE_USER: `pyqueue-sql grant` adds that mode for its
    own session, so a mistyped account is an error and nothing is created, even
    when the server's (and so the session's) sql_mode lacks it."""
    typo = f"pq_typo_{uuid.uuid4().hex[:10]}"
    admin = accounts.admin
    [(before,)] = _run(admin, "SELECT @@GLOBAL.sql_mode")
    _run(admin, "SET GLOBAL sql_mode = 'STRICT_TRANS_TABLES'")  # new sessions: no NO_AUTO_CREATE_USER
    try:
        assert cli.main(["grant", "--role", typo, "--consumer", "--apply", "--dsn", dsn]) == 1
    finally:
        _run(admin, "SET GLOBAL sql_mode = %s", (before,))
    assert _run(admin, "SELECT User FROM mysql.user WHERE User = %s", (typo,)) == []
    assert _run(admin, "SELECT User FROM mysql.procs_priv WHERE User = %s", (typo,)) == []


@pytest.mark.slow
@pytest.mark.only_dialect("mysql")
def test_mariadb_role_grants_survive_reinstalls_without_creating_accounts(fresh_database):
    """A MariaDB role (Host '' in mysql.procs_priv) granted a capability keeps it
    across a migrate re-run, and no login account of the role's name appears."""
    dsn = fresh_database("role")
    migrate.upgrade(dsn)
    role = f"pq_role_{uuid.uuid4().hex[:10]}"
    admin = dialects.for_dsn(dsn).connect(dsn)
    try:
        _run(admin, f"CREATE ROLE `{role}`")
        assert cli.main(["grant", "--role", f"{role}@", "--producer", "--apply", "--dsn", dsn]) == 0

        def grants() -> set:
            rows = _run(
                admin,
                "SELECT Host, Routine_name FROM mysql.procs_priv WHERE Db = DATABASE() AND User = %s",
                (role,),
            )
            return {tuple(v.decode() if isinstance(v, bytes) else v for v in r) for r in rows}

        before = grants()
        assert before == {("", r) for r in privileges.PRODUCER}
        migrate.upgrade(dsn)  # a re-run keeps them
        assert grants() == before
        assert _run(admin, "SELECT Host FROM mysql.user WHERE User = %s", (role,)) == [("",)]
    finally:
        with contextlib.suppress(Exception):
            _run(admin, f"DROP ROLE `{role}`")
        admin.close()


def test_grant_command_prints_quoted_statements_and_refuses_bad_names(capsys):
    assert (
        cli.main(["grant", "--role", 'we"ird', "--producer", "--dialect", "postgresql", "--schema", "app"])
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0] == 'GRANT USAGE ON SCHEMA "app" TO "we""ird";'
    assert 'GRANT EXECUTE ON FUNCTION "app"."queue_push" TO "we""ird";' in out
    assert not any("queue_reserve" in line for line in out)
    assert cli.main(["grant", "--role", "stage", "--pipeline", "--dialect", "postgresql"]) == 0
    # queue_move takes its token as text or as uuid: one GRANT per signature
    assert capsys.readouterr().out.splitlines() == [
        'GRANT EXECUTE ON FUNCTION "queue_move"(text, text, text, text, text, jsonb) TO "stage";',
        'GRANT EXECUTE ON FUNCTION "queue_move"(text, text, text, uuid, text, jsonb) TO "stage";',
    ]
    assert cli.main(["grant", "--role", "worker", "--consumer", "--dialect", "postgresql"]) == 0
    out = capsys.readouterr().out
    assert '"queue_fail"' in out and '"queue_move"' not in out
    assert cli.main(["grant", "--role", "svc@10.0.0.%", "--ingest", "--dialect", "mysql"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "GRANT INSERT ON TABLE `queue_ingest` TO `svc`@`10.0.0.%`;" in out
    assert "GRANT SELECT ON TABLE `queue_ingest` TO `svc`@`10.0.0.%`;" in out
    assert "GRANT EXECUTE ON PROCEDURE `queue_ingest_flush` TO `svc`@`10.0.0.%`;" in out
    assert cli.main(["grant", "--role", "x`; DROP DATABASE y; --", "--producer", "--dialect", "mysql"]) == 1
    assert "must be 1-80 characters" in capsys.readouterr().err
    assert cli.main(["grant", "--role", "x", "--dialect", "mysql"]) == 2


# -- what a refused account is told, and the CLI with one grant -------------------------------


def test_permission_denied_names_the_capability_of_the_refused_routine(accounts, admin_queue, db):
    """Every capability can be the one named, --pipeline included: a consumer refused queue_move
    is told to grant --pipeline, a producer refused queue_settings --monitor (or --admin)."""
    admin_queue.push("k", "kind", 1)
    consumer = accounts.client(accounts.with_capabilities("cons", "consumer"))
    [held] = consumer.queue(admin_queue.name).reserve()
    other = _other_queue(db).create()
    try:
        with pytest.raises(PermissionDeniedError) as refused:
            consumer.queue(admin_queue.name).move(held, other.name)
        assert "queue_move" in str(refused.value)
        assert "--pipeline --apply" in str(refused.value)
        producer = accounts.client(accounts.with_capabilities("prod", "producer"))
        with pytest.raises(PermissionDeniedError) as refused:
            producer.queue(admin_queue.name).settings()
        assert "--monitor --apply` (or --admin)" in str(refused.value)
    finally:
        assert consumer.queue(admin_queue.name).commit(held)
        other.drop()


def test_permission_denied_without_a_routine_lists_every_capability():
    text = str(PermissionDeniedError("permission denied for table pyqueue_message"))
    assert all(f"--{c}" in text for c in privileges.CAPABILITIES), text
    assert "--pipeline" in text


def test_every_routine_of_a_capability_is_named_with_it():
    for capability, routines in privileges.CAPABILITIES.items():
        for routine in routines:
            text = str(PermissionDeniedError(f"permission denied for function {routine}"))
            assert f"--{capability}" in text, (routine, text)


def _grant_execute(accounts: Accounts, name: str, routine: str) -> None:
    """EXECUTE on one routine, as a DBA would grant it by hand (psql / mysql)."""
    if accounts.dialect == "postgresql":
        _run(accounts.admin, f'GRANT EXECUTE ON FUNCTION {routine} TO "{name}"')
    else:
        database = _database_of(accounts.dsn)
        _run(accounts.admin, f"GRANT EXECUTE ON PROCEDURE `{database}`.`{routine}` TO `{name}`@`%`")


def test_cli_create_needs_only_queue_create(accounts, db, capsys):
    """`pyqueue-sql create` calls queue_create; reading the settings (to say created or updated
    and show them) is only done when the account may: one granted queue_create alone creates
    with the CLI as it can in psql or mysql."""
    name = accounts.create("creator")
    _grant_execute(accounts, name, "queue_create")
    queue = f"priv.{uuid.uuid4().hex[:12]}"
    code = cli.main(["create", queue, "--max-attempts", "3", "--dsn", accounts.dsn_for(name)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.startswith(f"created or updated {queue} (its settings are not shown")
    try:
        settings = db.queue(queue).settings()
        assert settings.max_attempts == 3
        # a second run changes the setting given, the others stay
        code = cli.main(["create", queue, "--max-attempts", "4", "--dsn", accounts.dsn_for(name)])
        assert code == 0, capsys.readouterr().err
        assert db.queue(queue).settings().max_attempts == 4
        # with monitor too, it says which and shows them, as before
        accounts.grant(name, "monitor")
        capsys.readouterr()
        assert cli.main(["create", queue, "--dsn", accounts.dsn_for(name)]) == 0
        assert capsys.readouterr().out.startswith(f"updated {queue}: visibility timeout 30s, max attempts 4")
    finally:
        db.queue(queue).drop()

"""Fault tests: nothing lost, nothing committed twice, when processes
die, the server restarts, a transaction rolls back, or the server kills a
connection. Real OS processes (the `pyqueue-sql worker` CLI), real servers.

Accounting: every queue here keeps history, so each commit writes one
`committed` row into pyqueue_history. "Nothing lost" = every key whose push was
acknowledged has a committed row at the end and no live message is left; "no
double commit" = exactly one committed row per key. The handler appends to a
record file (start/done, key, attempt, pid), which shows the deliveries
(at-least-once) beside the commits (exactly once).

The handlers of handlers.py are what the worker processes run
(`pyqueue-sql worker tests.faults.handlers:fault_handler`): while the file named by
$PYQUEUE_TEST_HOLD exists, it holds its message (so a worker can be killed, or
its connections cut, while it holds a batch); then it sleeps payload["sleep"].
Every test with worker processes runs twice: with that plain function (Worker,
threads) and with its `async def` twin async_fault_handler (AsyncWorker, tasks).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import dialects, migrate

from ..helpers import wait_for
from .handlers import HANDLERS

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- helpers ------------------------------------------------------------------------


class WorkerProcess:
    """A `pyqueue-sql worker` process running fault_handler; its log goes to a file."""

    def __init__(self, dsn: str, queue: str, tmp_path, *extra: str, handler: str = "fault_handler") -> None:
        self.record = tmp_path / "record"
        self.hold = tmp_path / "hold"
        self.log = tmp_path / f"worker-{uuid.uuid4().hex[:8]}.log"
        env = {
            **os.environ,
            "PYQUEUE_TEST_RECORD": str(self.record),
            "PYQUEUE_TEST_HOLD": str(self.hold),
            "PYTHONPATH": ROOT,
        }
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pyqueue_sql.cli",
                    "worker",
                    f"tests.faults.handlers:{handler}",
                    "--queue",
                    queue,
                    "--dsn",
                    dsn,
                    "--log-format",
                    "json",
                    "--no-status",
                    *extra,
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def events(self) -> list[dict]:
        out = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM (a graceful stop) once the worker has logged its start, and wait; the exit code.
        A process still importing has no signal handler yet, and SIGTERM ends it as any process
        (exit -15): a replacement started just before the test ends may not have got that far."""
        wait_for(
            lambda: self.proc.poll() is not None or any(e.get("event") == "start" for e in self.events()),
            timeout,
            "the worker to log its start",
        )
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


@pytest.fixture(params=sorted(HANDLERS))
def workers(request):
    """Starts worker processes (threads: Worker; asyncio: AsyncWorker); whatever is still running
    at the end is killed."""
    started: list[WorkerProcess] = []

    def start(dsn: str, queue: str, tmp_path, *extra: str) -> WorkerProcess:
        w = WorkerProcess(dsn, queue, tmp_path, *extra, handler=HANDLERS[request.param])
        started.append(w)
        return w

    start.runtime = request.param  # type: ignore[attr-defined]
    yield start
    for w in started:
        w.kill()


def records(tmp_path) -> list[tuple[str, str, int, int]]:
    """(event, key, attempt, pid) for every line the handlers wrote."""
    path = tmp_path / "record"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(e, k, int(a), int(p)) for e, k, a, p in (line.split() for line in lines)]


def query(dsn: str, sql: str, params: tuple = ()) -> list[tuple]:
    d = dialects.for_dsn(dsn)
    conn = d.connect(dsn)
    try:
        cur = conn.cursor()
        cur.execute(sql, params)
        rows = list(cur.fetchall()) if cur.description else []
        cur.close()
        return rows
    finally:
        conn.close()


def history(dsn: str, queue: str) -> list[tuple[str, str, int]]:
    """(key, outcome, attempts) of every message that left the queue."""
    return [
        (k, o, int(a))
        for k, o, a in query(
            dsn,
            "SELECT p_key, outcome, attempts FROM pyqueue_history WHERE queue_name = %s ORDER BY id",
            (queue,),
        )
    ]


def commits(dsn: str, queue: str) -> collections.Counter:
    """key -> how many committed history rows it has."""
    return collections.Counter(k for k, o, _ in history(dsn, queue) if o == "committed")


def live(dsn: str, queue: str) -> list[tuple[str, str | None, int]]:
    """(key, reserve_token, attempts) of the messages still in the queue."""
    return [
        (k, None if t is None else str(t), int(a))
        for k, t, a in query(
            dsn, "SELECT p_key, reserve_token, attempts FROM pyqueue_message WHERE queue_name = %s", (queue,)
        )
    ]


def backend_id(db: pyqueue_sql.Database) -> int:
    sql = "SELECT pg_backend_pid()" if db.dialect.name == "postgresql" else "SELECT CONNECTION_ID()"
    cur = db.connection.cursor()
    cur.execute(sql)
    (value,) = cur.fetchone()
    cur.close()
    return int(value)


def kill_from_server(admin: pyqueue_sql.Database, ids: list[int]) -> None:
    """pg_terminate_backend / KILL from another connection, then waits until each session is gone
    (both are asynchronous: the victim rolls back and exits on its own)."""
    cur = admin.connection.cursor()
    try:
        for i in ids:
            if admin.dialect.name == "postgresql":
                cur.execute("SELECT pg_terminate_backend(%s)", (i,))
            else:
                with contextlib.suppress(Exception):  # already gone
                    cur.execute(f"KILL {int(i)}")

        def gone() -> bool:
            if admin.dialect.name == "postgresql":
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (ids,))
            else:
                cur.execute(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN ("
                    + ",".join(str(int(i)) for i in ids)
                    + ")"
                )
            return cur.fetchone()[0] == 0

        wait_for(gone, 30, f"the killed sessions {ids} to end")
    finally:
        cur.close()


def sessions_of_database(admin: pyqueue_sql.Database, database: str) -> list[int]:
    """Every other session connected to `database` (the test's own databases only)."""
    cur = admin.connection.cursor()
    try:
        if admin.dialect.name == "postgresql":
            cur.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (database,)
            )
        else:
            cur.execute(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID()",
                (database,),
            )
        return [int(r[0]) for r in cur.fetchall()]
    finally:
        cur.close()


def database_of(dsn: str) -> str:
    return dsn.rsplit("/", 1)[1].split("?", 1)[0]


# -- 1. SIGKILL of consumer processes mid-batch ------------------------------------


def test_sigkill_of_workers_holding_batches_redelivers_everything(dsn, make_queue, tmp_path, workers):
    """Two worker processes each reserve a batch of 3 and are SIGKILLed while
    their handlers hold it; a fresh worker then gets every message: the 6 held
    ones again once their 2-s leases expire (second delivery), the rest for the
    first time. Each key is committed exactly once and nothing is left."""
    q = make_queue(history_retention=3600)
    keys = [f"m{i:02d}" for i in range(16)]
    q.push_many([(k, "k", {}) for k in keys])
    (tmp_path / "hold").touch()
    first = [workers(dsn, q.name, tmp_path, "--concurrency", "3", "--lease", "2") for _ in range(2)]
    wait_for(
        lambda: len({k for e, k, _, _ in records(tmp_path) if e == "start"}) == 6,
        60,
        "both workers to hold a batch of 3",
    )
    for w in first:
        os.kill(w.pid, signal.SIGKILL)
    for w in first:
        w.proc.wait(timeout=30)
        assert w.proc.returncode == -signal.SIGKILL
    held = {k for e, k, _, _ in records(tmp_path) if e == "start"}
    assert {p for e, _, _, p in records(tmp_path)} == {w.pid for w in first}, "each worker held a batch"
    assert not [r for r in records(tmp_path) if r[0] == "done"], "a handler finished before the kill"
    assert commits(dsn, q.name) == {}
    # the dead workers' reservations are still on the rows (token set, first delivery)
    state = {k: (token, attempts) for k, token, attempts in live(dsn, q.name)}
    assert set(state) == set(keys)
    assert {k for k, (token, _) in state.items() if token is not None} == held
    assert all(attempts == 1 for k, (_, attempts) in state.items() if k in held)

    (tmp_path / "hold").unlink()
    fresh = workers(dsn, q.name, tmp_path, "--concurrency", "4", "--lease", "10")
    wait_for(lambda: sum(commits(dsn, q.name).values()) >= len(keys), 60, "every message to be committed")
    assert fresh.terminate() == 0, fresh.log.read_text()

    assert commits(dsn, q.name) == {k: 1 for k in keys}, "a key was lost or committed twice"
    assert live(dsn, q.name) == []
    hist = history(dsn, q.name)
    assert {o for _, o, _ in hist} == {"committed"}
    assert {k: a for k, _, a in hist} == {k: 2 if k in held else 1 for k in keys}
    rec = records(tmp_path)
    assert {k for e, k, a, p in rec if e == "start" and p == fresh.pid and a == 2} == held, (
        "the held messages were not redelivered to the fresh worker"
    )
    assert sorted(k for e, k, _, _ in rec if e == "done") == keys, "a handler ran to completion twice"


def in_flight(tmp_path, pid: int) -> set[str]:
    """Keys whose handler started in process pid and has not finished there."""
    rec = records(tmp_path)
    return {k for e, k, _, p in rec if e == "start" and p == pid} - {
        k for e, k, _, p in rec if e == "done" and p == pid
    }


def test_workers_sigkilled_at_random_moments_lose_nothing(dsn, make_queue, tmp_path, workers):
    """Busy workers (short handlers, commits in flight) are killed and replaced
    three times, each time at a random moment while the victim runs a handler
    (its other reservations, and maybe a commit, in flight), then drained:
    every message committed exactly once; what a victim was running is
    delivered again (at-least-once) unless it had just finished."""
    import random

    rng = random.Random()
    q = make_queue(history_retention=3600)
    keys = [f"r{i:03d}" for i in range(60)]
    q.push_many([(k, "k", {"sleep": 0.25}) for k in keys])
    args = ("--concurrency", "3", "--lease", "2")
    running = [workers(dsn, q.name, tmp_path, *args) for _ in range(2)]
    caught: dict[str, int] = {}  # key the victim was running -> the victim's pid
    for _ in range(3):
        time.sleep(rng.uniform(0.0, 0.3))
        wait_for(lambda: any(in_flight(tmp_path, w.pid) for w in running), 60, "a worker to run a handler")
        victim = rng.choice([w for w in running if in_flight(tmp_path, w.pid)])
        victim.kill()
        running.remove(victim)
        caught.update(dict.fromkeys(in_flight(tmp_path, victim.pid), victim.pid))
        running.append(workers(dsn, q.name, tmp_path, *args))
    wait_for(lambda: sum(commits(dsn, q.name).values()) >= len(keys), 90, "every message to be committed")
    for w in running:
        assert w.terminate() == 0, w.log.read_text()
    assert commits(dsn, q.name) == {k: 1 for k in keys}, "a key was lost or committed twice"
    assert live(dsn, q.name) == []
    assert {o for _, o, _ in history(dsn, q.name)} == {"committed"}
    rec = records(tmp_path)
    assert caught
    for key, pid in caught.items():
        finished = ("done", key) in {(e, k) for e, k, _, p in rec if p == pid}
        again = [a for e, k, a, p in rec if e == "start" and k == key and p != pid]
        assert finished or (again and min(again) >= 2), f"{key}, killed mid-handler, was not delivered again"


# -- 2. a push rolled back: no message, no wakeup ------------------------------------


class _Rollback(Exception):
    pass


def test_push_rolled_back_leaves_no_message_and_sends_no_wakeup(dialect, dsn, make_queue, connect):
    """A push inside an explicit transaction, rolled back: a waiter that waits
    (queue_wait) all through the transaction wakes for nothing, a LISTENing
    PostgreSQL connection receives no notification, and nothing is left. The
    same push committed (the control) wakes both at once."""
    q = make_queue(history_retention=3600)
    producer, waiter = connect(), connect()
    listener = None
    if dialect == "postgresql":
        import psycopg
        from psycopg import sql

        listener = psycopg.connect(dialects.strip_driver(dsn), autocommit=True)
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(q.channel())))
    try:
        result: dict[str, bool] = {}
        wait_thread = threading.Thread(
            target=lambda: result.update(ready=waiter.queue(q.name).wait(timeout=3, poll=0.01))
        )
        wait_thread.start()
        with pytest.raises(_Rollback):
            with producer.transaction():
                assert producer.queue(q.name).push("ghost", "k", {"n": 1}) is True
                assert [k for k, _, _ in query_in(producer, q.name)] == ["ghost"]  # there inside it
                time.sleep(0.5)  # the waiter checks while the push is uncommitted
                raise _Rollback()
        wait_thread.join(timeout=30)
        assert result == {"ready": False}, "the waiter woke for a rolled-back push"
        if listener is not None:
            notes = list(listener.notifies(timeout=1.0, stop_after=1))
            assert notes == [], f"a rolled-back push sent a wakeup: {notes}"
        assert live(dsn, q.name) == [] and history(dsn, q.name) == []
        assert q.reserve(n=10) == [] and q.pop(10) == []
        s = q.stats()
        assert (s.ready, s.delayed, s.reserved) == (0, 0, 0)

        # control: the same push committed wakes the waiter and notifies the listener
        result.clear()
        wait_thread = threading.Thread(
            target=lambda: result.update(ready=waiter.queue(q.name).wait(timeout=30, poll=0.01))
        )
        wait_thread.start()
        with producer.transaction():
            assert producer.queue(q.name).push("ghost", "k", {"n": 2}) is True
        wait_thread.join(timeout=60)
        assert result == {"ready": True}
        if listener is not None:
            notes = list(listener.notifies(timeout=10, stop_after=1))
            assert [n.payload for n in notes] == [q.name]
        assert [(m.key, m.payload) for m in q.pop(10)] == [("ghost", {"n": 2})]
    finally:
        if listener is not None:
            listener.close()


def query_in(db: pyqueue_sql.Database, queue: str) -> list[tuple]:
    """The live messages as `db`'s own transaction sees them."""
    cur = db.connection.cursor()
    try:
        cur.execute(
            "SELECT p_key, reserve_token, attempts FROM pyqueue_message WHERE queue_name = %s", (queue,)
        )
        return list(cur.fetchall())
    finally:
        cur.close()


# -- 3. a connection killed from the server side --------------------------------------


def test_connection_killed_by_the_server_mid_reserve_gives_the_message_back_at_once(
    dialect, dsn, make_queue, connect
):
    """A consumer reserves inside an open transaction and its session is
    killed (pg_terminate_backend / KILL): its reservation rolls back, so the
    message is reservable again at once (the lease is 10 minutes) with its
    first delivery not counted, and the killed client gets a connection error."""
    q = make_queue(visibility_timeout=600, history_retention=3600)
    q.push_many([("victim", "k", {}), ("bystander", "k", {})])
    victim, admin, other = connect(), connect(), connect()
    # The transaction is the application's own (its driver's BEGIN), so the
    # calls go through a wrapped connection: the client then never runs a
    # call in a transaction of its own (as it may on a connection it owns).
    vq, oq = pyqueue_sql.Database.wrap(victim.connection).queue(q.name), other.queue(q.name)
    victim.dialect.begin(victim.connection)
    got = vq.reserve(n=1, worker="victim")
    assert [r.key for r in got] == ["victim"]
    # held while the transaction is open: another consumer skips it
    assert [r.key for r in oq.reserve(n=2, worker="other")] == ["bystander"]

    kill_from_server(admin, [backend_id(victim)])

    with pytest.raises(victim.dialect.connection_errors()) as info:
        vq.commit(got[0])
    assert str(info.value).strip(), "the killed client got an error without a message"
    with pytest.raises(victim.dialect.connection_errors()):
        vq.stats()  # the connection stays unusable: an error, never a hang or a wrong answer

    again = oq.reserve(n=2, worker="other")
    assert [(r.key, r.attempts) for r in again] == [("victim", 1)], "the killed reservation still holds"
    assert oq.commit(again[0]) is True
    assert commits(dsn, q.name) == {"victim": 1}


def _blocked_on_a_lock(admin: pyqueue_sql.Database, session: int) -> bool:
    cur = admin.connection.cursor()
    try:
        if admin.dialect.name == "postgresql":
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                (session,),
            )
        else:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX "
                "WHERE trx_mysql_thread_id = %s AND trx_state = 'LOCK WAIT'",
                (session,),
            )
        return cur.fetchone()[0] > 0
    finally:
        cur.close()


@pytest.mark.parametrize("how", ["commit", "commit_reserve"])
def test_connection_killed_by_the_server_mid_commit_commits_once(dialect, dsn, make_queue, connect, how):
    """A commit cut off by a server-side kill while it runs, then retried with
    the same token (what the worker does after reconnecting): the message is
    removed once and archived once. The kill is made to land inside the
    commit: another transaction holds a share lock on the message row, so the
    commit waits there until its session is killed."""
    q = make_queue(visibility_timeout=600, history_retention=3600)
    q.push("once", "k", {})
    (r,) = q.reserve(n=1)
    locker, victim, admin = connect(), connect(), connect()
    with locker.transaction():
        cur = locker.connection.cursor()
        lock = "FOR SHARE" if dialect == "postgresql" else "LOCK IN SHARE MODE"
        cur.execute(
            f"SELECT id FROM pyqueue_message WHERE queue_name = %s AND p_key = %s {lock}", (q.name, "once")
        )
        assert len(cur.fetchall()) == 1
        cur.close()
        session = backend_id(victim)
        outcome: dict[str, object] = {}

        def commit():
            try:
                if how == "commit":
                    outcome["result"] = victim.queue(q.name).commit(r)
                else:
                    outcome["result"] = victim.queue(q.name).commit_reserve(r)
            except BaseException as exc:
                outcome["error"] = exc

        t = threading.Thread(target=commit)
        t.start()
        # (InnoDB refreshes INNODB_TRX only when it was not read for 0.1 s: poll slower than that)
        wait_for(
            lambda: _blocked_on_a_lock(admin, session), 30, "the commit to wait for the row lock", poll=0.25
        )
        kill_from_server(admin, [session])
        t.join(timeout=30)
    assert isinstance(outcome.get("error"), victim.dialect.connection_errors()), outcome
    assert commits(dsn, q.name) == {}, "a commit that was cut off left a committed history row"
    assert [(k, a) for k, _, a in live(dsn, q.name)] == [("once", 1)]
    assert q.commit(r) is True  # the retry, on a new connection
    assert q.commit(r) is False
    assert commits(dsn, q.name) == {"once": 1}
    assert live(dsn, q.name) == []


def test_the_same_reservation_committed_at_once_by_two_sessions(dsn, make_queue, connect):
    """A reply lost and the commit sent again on a new connection while the
    first is still running: two sessions commit one reservation at once. One
    answers true, the other false (never an error, e.g. a MySQL deadlock
    between the two), and the history counts the message once."""
    q = make_queue(visibility_timeout=600, history_retention=3600)
    rounds = 60
    q.push_many([(f"d{i:02d}", "k", {}) for i in range(rounds)])
    a, b = connect(), connect()
    for _i in range(rounds):
        (r,) = q.reserve(n=1)
        start = threading.Barrier(2)
        answers: list[object] = []

        def commit(db):
            start.wait()
            try:
                answers.append(db.queue(q.name).commit(r))
            except BaseException as exc:
                answers.append(exc)

        threads = [threading.Thread(target=commit, args=(db,)) for db in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(answers, key=repr) == [False, True], answers
    assert commits(dsn, q.name) == {f"d{i:02d}": 1 for i in range(rounds)}
    assert live(dsn, q.name) == []


def test_worker_connections_killed_by_the_server_mid_message(
    dialect, installed_database, tmp_path, workers, connect
):
    """Every database session of a running worker process is killed from the
    server side while its handler holds a message: the worker reconnects, the
    message is committed exactly once and delivered once (the heartbeat,
    reconnected too, keeps extending the 9-s lease) and the worker goes on
    serving the queue."""
    url = installed_database("faults")
    admin = pyqueue_sql.connect(url)
    try:
        q = admin.queue(f"kill.{uuid.uuid4().hex[:8]}").create(history_retention=3600)
        q.push("warm", "k", {})
        w = workers(url, q.name, tmp_path, "--concurrency", "1", "--lease", "9", "--poll-fallback", "1")
        # after the warm-up, the handler thread has its own connection too
        wait_for(lambda: commits(url, q.name) == {"warm": 1}, 60, "the warm-up message")
        (tmp_path / "hold").touch()
        q.push("held", "k", {})
        wait_for(lambda: ("start", "held", 1, w.pid) in records(tmp_path), 60, "the handler to hold 'held'")
        # dispatcher, handler, the heartbeat's (opened at its first tick, lease/3 = 3 s) and the
        # watcher's, which polls the cancel flag of a handler that has run for half a second (def
        # and async def alike; it may open before the heartbeat's)
        expected = 4
        wait_for(
            lambda: len(sessions_of_database(admin, database_of(url))) >= expected,
            30,
            f"the worker's {expected} sessions",
        )
        # The heartbeat's session appears for its first extend: let that call
        # finish (the next tick is 3 s away), so that the kill lands on idle
        # sessions. A kill that cuts an extend after the server ran it loses the
        # new token with the reply (docs/contract.md, queue_extend): the worker
        # then loses its reservation and the message is delivered a second
        # time after the lease, which this test would report as a double delivery.
        time.sleep(0.5)
        victims = sessions_of_database(admin, database_of(url))
        kill_from_server(admin, victims)

        def reconnected(role):
            return any(e.get("event") == "reconnect" and e.get("role") == role for e in w.events())

        # the handler still holds 'held' while the heartbeat finds its session gone and reconnects
        wait_for(lambda: reconnected("heartbeat"), 30, "the heartbeat to reconnect")
        (tmp_path / "hold").unlink()
        wait_for(lambda: commits(url, q.name)["held"] == 1, 60, "'held' to be committed after the kill")
        q.push("after", "k", {})
        wait_for(lambda: commits(url, q.name)["after"] == 1, 60, "a message pushed after the kill")
        assert w.terminate() == 0, w.log.read_text()
        assert commits(url, q.name) == {"warm": 1, "held": 1, "after": 1}
        assert live(url, q.name) == []
        assert [r for r in records(tmp_path) if r[1] == "held"] == [
            ("start", "held", 1, w.pid),
            ("done", "held", 1, w.pid),
        ], "'held' was delivered twice"
        roles = {e.get("role") for e in w.events() if e.get("event") == "reconnect"}
        assert {"dispatcher", "handler", "heartbeat"} <= roles, roles
    finally:
        admin.close()


# -- 4. the database server stopped and restarted under producers and workers -------


@pytest.fixture
def own_server(dialect):
    """A server of the current dialect that this test owns and may stop (the shared ones never are)."""
    from ..conftest import UNDER_CI
    from ..own_mariadb import OwnMariaDB
    from ..own_postgres import OwnPostgres

    server = None
    try:
        server = OwnPostgres() if dialect == "postgresql" else OwnMariaDB()
        server.start()
        server.wait_ready()
    except Exception as exc:  # no binaries, or no system user to run them as
        if server is not None:
            server.destroy()
        if UNDER_CI:
            pytest.fail(f"CI=true and cannot start a test-owned {dialect} server: {exc}", pytrace=False)
        pytest.skip(f"cannot start a test-owned {dialect} server: {exc}")
    try:
        yield server
    finally:
        server.destroy()


class Producer(threading.Thread):
    """Pushes new keys as fast as it can (a short pause between pushes). On an
    error it records it, drops the connection and goes on with a new key (the
    outcome of the failed push is unknown: retrying the same key could make a
    second message once the first was committed); while the server is down,
    connecting fails and is retried."""

    def __init__(self, dsn: str, queue: str, prefix: str) -> None:
        super().__init__(daemon=True)
        self.dsn, self.queue, self.prefix = dsn, queue, prefix
        self.errs = dialects.for_dsn(dsn).connection_errors()
        self.acked: list[str] = []
        self.uncertain: list[str] = []
        self.errors: list[BaseException] = []  # connection errors: expected during the outage
        self.unexpected: list[BaseException] = []  # anything else: a test failure
        self.halt = threading.Event()

    def run(self) -> None:
        db = None
        i = 0
        try:
            while not self.halt.is_set():
                try:
                    if db is None:
                        db = pyqueue_sql.connect(self.dsn)
                except self.errs as exc:
                    self.errors.append(exc)
                    self.halt.wait(0.05)
                    continue
                key = f"{self.prefix}-{i:05d}"
                i += 1
                try:
                    inserted = db.queue(self.queue).push(key, "k", {"sleep": 0.005})
                except self.errs as exc:
                    self.errors.append(exc)
                    self.uncertain.append(key)
                    with contextlib.suppress(Exception):
                        db.close()
                    db = None
                    continue
                if not inserted:
                    raise AssertionError(f"a new key {key} was refused as a duplicate")
                self.acked.append(key)
                self.halt.wait(0.02)
        except BaseException as exc:
            self.unexpected.append(exc)
        finally:
            if db is not None:
                with contextlib.suppress(Exception):
                    db.close()


def test_server_restart_under_producers_and_workers(dialect, own_server, tmp_path, workers):
    """Two producer threads push continuously and two worker processes consume
    while the server is stopped (clean shutdown: every session is cut) for
    about 2 s and started again. Producers see connection errors, never any
    other error; workers reconnect; every acknowledged push is committed
    exactly once, and no key is committed twice."""
    server = own_server
    url = server.dsn() if dialect == "postgresql" else server.create_database("faults")
    migrate.upgrade(url)
    name = f"restart.{uuid.uuid4().hex[:8]}"
    with pyqueue_sql.connect(url) as admin:
        admin.queue(name).create(history_retention=3600)
    args = ("--concurrency", "3", "--lease", "3", "--poll-fallback", "1")
    consumers = [workers(url, name, tmp_path, *args) for _ in range(2)]
    producers = [Producer(url, name, f"p{i}") for i in range(2)]
    for p in producers:
        p.start()
    try:
        wait_for(lambda: sum(commits(url, name).values()) >= 30, 60, "work to flow before the restart")
        # Each worker must be connected and consuming before the outage, or the check that it
        # reconnected is meaningless (on a loaded machine a worker process can still be starting
        # when the others have done the 30 commits).
        wait_for(
            lambda: {w.pid for w in consumers} <= {pid for *_, pid in records(tmp_path)},
            60,
            "every worker to run a handler before the restart",
        )
        acked_before = sum(len(p.acked) for p in producers)
        if dialect == "postgresql":
            server.stop("fast")
        else:
            server.stop()
        time.sleep(2.0)
        server.start()
        server.wait_ready()
        wait_for(
            lambda: sum(len(p.acked) for p in producers) >= acked_before + 40,
            60,
            "pushes to be acknowledged again after the restart",
        )
    finally:
        for p in producers:
            p.halt.set()
        for p in producers:
            p.join(timeout=30)
    assert not [p for p in producers if p.is_alive()], "a producer hung"
    acked = {k for p in producers for k in p.acked}
    uncertain = {k for p in producers for k in p.uncertain}
    errors = [e for p in producers for e in p.errors]
    assert not [e for p in producers for e in p.unexpected], [e for p in producers for e in p.unexpected]
    assert errors, "the producers never noticed the outage"
    assert all(str(e).strip() for e in errors), "a connection error without a message"

    def drained() -> bool:
        done = commits(url, name)
        return acked <= set(done) and live(url, name) == []

    wait_for(drained, 90, "every acknowledged push to be committed")
    for w in consumers:
        assert w.terminate() == 0, w.log.read_text()[-3000:]
    done = commits(url, name)
    assert acked <= set(done), f"acknowledged pushes lost: {sorted(acked - set(done))[:10]}"
    assert set(done) <= acked | uncertain, "a key nobody pushed was committed"
    twice = {k: n for k, n in done.items() if n != 1}
    assert not twice, f"committed more than once: {twice}"
    assert {o for _, o, _ in history(url, name)} == {"committed"}
    assert live(url, name) == []
    for w in consumers:
        assert any(e.get("event") == "reconnect" for e in w.events()), "a worker never reconnected"
    print(
        f"{dialect}: acked {len(acked)}, uncertain {len(uncertain)} "
        f"({len(set(done) & uncertain)} of them committed), producer errors {len(errors)}, "
        f"handler runs {sum(1 for r in records(tmp_path) if r[0] == 'done')} for {len(done)} commits"
    )

"""The client (sync and asyncio), both workers, the CLI and the dashboard through a real PgBouncer in
transaction pooling (pool_mode = transaction, 2 server connections for more clients than that).

What a pooler in transaction mode takes away is the session: a statement psycopg prepared (it does by
default at the fifth execution of one) and a LISTEN stay in a server session the client's next
transaction may not get. The client never prepares; a worker LISTENs on the direct connection it is
given (listen_dsn), long-polls (listen=False), or refuses to start when it would LISTEN through the
pooler.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import urllib.parse

import pytest

import pyqueue_sql
from pyqueue_sql import aio as pqs_aio
from pyqueue_sql import cli, errors, migrate
from pyqueue_sql.aio.worker import AsyncWorker

from ..dashboard.conftest import Served, http
from ..helpers import queue_name, wait_for
from ..worker.test_worker import running
from .conftest import POOL_SIZE

pytestmark = pytest.mark.only_dialect("postgresql")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENTS = 4  # more client connections than POOL_SIZE server connections
BURST = 30
WORKERS = {"threads": pyqueue_sql.Worker, "asyncio": AsyncWorker}


def _backend_pid(db) -> int:
    with db.connection.cursor() as cur:
        cur.execute("SELECT pg_backend_pid()")
        return cur.fetchone()[0]


def handle_nothing(job) -> None:
    """The CLI worker's handler (loaded by module:function)."""


def test_client_calls_share_server_sessions_without_prepared_statement_errors(direct_and_pooled):
    """Each client repeats every statement well past psycopg's prepare threshold (5), in autocommit
    and in transactions of its own, while 4 clients share 2 server sessions."""
    _, pooled = direct_and_pooled
    name = queue_name("pgb", 10)
    with pyqueue_sql.connect(pooled) as db:
        db.queue(name).create()
    pids: set[int] = set()
    committed: list[int] = []
    failures: list[BaseException] = []
    start = threading.Barrier(CLIENTS)

    def client(c: int) -> None:
        try:
            with pyqueue_sql.connect(pooled) as db:
                queue = db.queue(name)
                start.wait(timeout=30)
                for i in range(BURST):  # one statement back to back from every client at once
                    assert queue.push(f"burst{c}-{i}", "kind", {}) is True
                for i in range(12):
                    assert queue.push(f"c{c}-{i}", "kind", {"i": i}) is True
                    pids.add(_backend_pid(db))
                    with db.transaction():  # several statements on one server session
                        assert queue.push(f"tx{c}-{i}", "kind", {}) is True
                        assert queue.push(f"tx{c}-{i}", "kind", {}) is False  # seen in the same transaction
                    with pytest.raises(RuntimeError), db.transaction():
                        queue.push(f"gone{c}-{i}", "kind", {})
                        raise RuntimeError("roll back")
                    for r in queue.reserve(n=2):
                        assert queue.commit(r) is True
                        committed.append(1)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures, failures
    assert len(pids) <= POOL_SIZE  # the clients really shared the server sessions
    with pyqueue_sql.connect(pooled) as db:
        queue = db.queue(name)
        stats = queue.stats()
        left = [m.key for m in queue.messages(n=1000)]
    # BURST, then two messages kept per client and round (one pushed in a transaction), none rolled back
    assert (stats.ready, stats.reserved) == (CLIENTS * (BURST + 12 * 2) - len(committed), 0)
    assert len(left) == stats.ready and not [key for key in left if key.startswith("gone")]


def test_async_client_through_transaction_pooling(direct_and_pooled):
    _, pooled = direct_and_pooled
    name = queue_name("pgb", 10)

    async def client(c: int) -> int:
        db = await pqs_aio.connect(pooled)
        try:
            queue = db.queue(name)
            done = 0
            for i in range(10):
                assert await queue.push(f"a{c}-{i}", "kind", {"i": i}) is True
                for r in await queue.reserve(n=1):
                    done += await queue.commit(r)
            async with db.transaction():
                await queue.push(f"tx{c}", "kind", {})
                await queue.push(f"tx{c}-2", "kind", {})
            return done
        finally:
            await db.close()

    async def main() -> list[int]:
        db = await pqs_aio.connect(pooled)
        try:
            await db.queue(name).create()
        finally:
            await db.close()
        return await asyncio.gather(*(client(c) for c in range(CLIENTS)))

    committed = sum(asyncio.run(main()))
    with pyqueue_sql.connect(pooled) as db:
        stats = db.queue(name).stats()
    assert committed + stats.ready == CLIENTS * 12
    assert stats.reserved == 0


@pytest.mark.parametrize("runtime", sorted(WORKERS))
def test_worker_long_polls_through_transaction_pooling(direct_and_pooled, runtime):
    """listen=False: the worker's every connection goes through the pooler (a long poll holds a
    server session for one queue_wait at a time); two producers push while it runs."""
    _, pooled = direct_and_pooled
    name = queue_name("pgb", 10)
    seen: list[str] = []
    lock = threading.Lock()
    worker = WORKERS[runtime](pooled, concurrency=4, listen=False, lease=10)

    def handle(job) -> None:
        with lock:
            seen.append(job.key)

    worker.add_handler(name, handle)
    with pyqueue_sql.connect(pooled) as db:
        db.queue(name).create()

    def producer(p: int) -> None:
        with pyqueue_sql.connect(pooled) as db:
            for i in range(15):
                db.queue(name).push(f"p{p}-{i}", "kind", {})

    with running(worker):
        wait_for(worker.registered.is_set, 30, "the worker to register")
        producers = [threading.Thread(target=producer, args=(p,)) for p in range(2)]
        for t in producers:
            t.start()
        for t in producers:
            t.join(timeout=60)
        wait_for(lambda: len(seen) >= 30, 60, "30 messages handled")
    assert sorted(seen) == sorted(f"p{p}-{i}" for p in range(2) for i in range(15))
    with pyqueue_sql.connect(pooled) as db:
        stats = db.queue(name).stats()
    assert (stats.ready, stats.reserved) == (0, 0)


@pytest.mark.parametrize("runtime", sorted(WORKERS))
def test_worker_listens_on_its_direct_connection(direct_and_pooled, runtime):
    """listen_dsn: the dispatcher LISTENs on a direct connection, everything else goes through the
    pooler. The poll fallback is a minute, so only a wakeup can get the messages handled."""
    direct, pooled = direct_and_pooled
    name = queue_name("pgb", 10)
    seen: list[str] = []
    worker = WORKERS[runtime](pooled, listen_dsn=direct, poll_fallback=60.0, concurrency=2)
    worker.add_handler(name, lambda job: seen.append(job.key))
    idle = threading.Event()
    worker.on_idle.append(lambda _w: idle.set())
    with pyqueue_sql.connect(pooled) as db:
        queue = db.queue(name).create()
        with running(worker):
            for i in range(3):
                wait_for(idle.is_set, 30, "the worker to wait")
                idle.clear()
                queue.push(f"m{i}", "kind", {})
                wait_for(lambda i=i: len(seen) == i + 1, 30, f"message {i} handled after its wakeup")
    assert seen == ["m0", "m1", "m2"]
    assert worker.stats.wakeups >= 1  # (a push within the NOTIFY throttle window of the one before
    # is found by the re-check that follows a wakeup)


def _run_until_it_stops(worker) -> list[BaseException]:
    """Runs the worker on a thread; what run() raised. Fails when it is still running after 30 s."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            outcome = worker.run(install_signals=False)
            if asyncio.iscoroutine(outcome):
                asyncio.run(outcome)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout=30)
    if thread.is_alive():
        worker.stop()
        thread.join(timeout=60)
        pytest.fail("the worker ran with its LISTEN through the pooler")
    return failure


@pytest.mark.parametrize("register", [True, False], ids=["registered", "unregistered"])
@pytest.mark.parametrize("runtime", sorted(WORKERS))
def test_worker_refuses_to_listen_through_the_pooler(direct_and_pooled, runtime, register):
    """Registered, run() raises the error; without registration the first connection is the reserve
    loop's, which logs errors and goes on: there the worker stops, and says why."""
    _, pooled = direct_and_pooled
    name = queue_name("pgb", 10)
    with pyqueue_sql.connect(pooled) as db:
        db.queue(name).create()
    worker = WORKERS[runtime](pooled, poll_fallback=60.0, register=register)
    worker.add_handler(name, lambda job: None)
    failure = _run_until_it_stops(worker)
    status = worker.status()
    assert status.stop_reason == "LISTEN through a transaction pooler"
    message = str(failure[0]) if register else status.last_error
    assert "transaction pooler" in message and "listen_dsn" in message and "listen=False" in message
    if register:
        assert isinstance(failure[0], errors.InvalidArgumentError), failure
    assert worker.stats.reserved == 0


@pytest.mark.parametrize("runtime", sorted(WORKERS))
def test_a_listen_dsn_through_the_pooler_is_refused_too(direct_and_pooled, runtime):
    _, pooled = direct_and_pooled
    name = queue_name("pgb", 10)
    with pyqueue_sql.connect(pooled) as db:
        db.queue(name).create()
    worker = WORKERS[runtime](pooled, listen_dsn=pooled, poll_fallback=60.0)
    worker.add_handler(name, lambda job: None)
    [exc] = _run_until_it_stops(worker)
    assert isinstance(exc, errors.InvalidArgumentError) and "listen_dsn too" in str(exc), exc


def test_listen_dsn_of_another_database_kind_is_refused(direct_and_pooled):
    _, pooled = direct_and_pooled
    with pytest.raises(errors.InvalidArgumentError, match="listen_dsn"):
        pyqueue_sql.Worker(pooled, listen_dsn="mysql://root@127.0.0.1:3306/x")


def test_migrate_through_transaction_pooling(pgbouncer, fresh_database, capsys):
    """The install runs in one transaction (its lock and search_path settings are the transaction's),
    so it works through the pooler; so does an upgrade that finds the schema there."""
    pooled = pgbouncer.dsn(fresh_database("pgbouncer_migrate"))
    assert _cli(capsys, "migrate", "--dsn", pooled)[0] == 0
    head = migrate.current(pooled)
    assert head and _cli(capsys, "migrate", "--dsn", pooled)[0] == 0 and migrate.current(pooled) == head
    with pyqueue_sql.connect(pooled) as db:
        assert db.queue(queue_name("pgb", 10)).create().push("k", "kind", {}) is True


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _worker_command(dsn: str, queue: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pyqueue_sql.cli",
        "worker",
        f"{__name__}:handle_nothing",
        "--queue",
        queue,
        "--dsn",
        dsn,
        "--log-level",
        "warning",
        *extra,
    ]


@pytest.mark.slow  # two worker processes
def test_cli_through_transaction_pooling(capsys, direct_and_pooled):
    direct, pooled = direct_and_pooled
    name = queue_name("pgb", 10)
    assert _cli(capsys, "create", name, "--dsn", pooled)[0] == 0
    for i in range(8):
        code, out, _ = _cli(capsys, "push", name, f"k{i}", "kind", "{}", "--dsn", pooled)
        assert code == 0 and "inserted" in out
    code, out, _ = _cli(capsys, "reserve", name, "-n", "2", "--commit", "--dsn", pooled)
    assert code == 0 and out.count('"key"') == 2
    code, out, _ = _cli(capsys, "stats", name, "--dsn", pooled)
    row = next(line for line in out.splitlines() if line.startswith(name)).split()
    assert code == 0 and row[1] == "6"
    env = {**os.environ, "PYTHONPATH": ROOT}

    # the worker verb: LISTEN through the pooler is refused with the way out in the message
    refused = subprocess.run(
        _worker_command(pooled, name), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode != 0 and "--listen-dsn" in refused.stderr, refused.stderr[-2000:]

    # with --listen-dsn it serves the queue until SIGTERM
    proc = subprocess.Popen(
        _worker_command(pooled, name, "--listen-dsn", direct), cwd=ROOT, env=env, stderr=subprocess.PIPE
    )
    try:
        with pyqueue_sql.connect(pooled) as db:
            queue = db.queue(name)
            wait_for(lambda: queue.stats().ready == 0 and queue.stats().reserved == 0, 60, "the 6 messages")
            queue.push("late", "kind", {})
            wait_for(lambda: queue.stats().ready == 0 and queue.stats().reserved == 0, 60, "a later message")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()[-2000:]


def test_dashboard_through_transaction_pooling(direct_and_pooled):
    from pyqueue_sql.dashboard import create_app

    _, pooled = direct_and_pooled
    name = queue_name("pgb", 10)
    with pyqueue_sql.connect(pooled) as db:
        queue = db.queue(name).create()
        queue.push_many([(f"k{i}", "kind", {"i": i}) for i in range(5)])
    served = Served(create_app(pooled))
    pages = ["/", "/queue?" + urllib.parse.urlencode({"name": name}), "/workers", "/dead-letters", "/metrics"]
    results: list[tuple[str, int, str]] = []
    try:

        def browse() -> None:
            for _ in range(3):  # past psycopg's prepare threshold on the dashboard's pooled connections
                for page in pages:
                    status, body, _ = http(served.url + page)
                    results.append((page, status, body))

        readers = [threading.Thread(target=browse) for _ in range(CLIENTS)]
        for t in readers:
            t.start()
        for t in readers:
            t.join(timeout=120)
    finally:
        served.stop()
    assert len(results) == CLIENTS * 3 * len(pages)
    assert all(status == 200 for _, status, _ in results), [(p, s) for p, s, _ in results if s != 200]
    assert all(name in body for page, _, body in results if page in pages[:2])

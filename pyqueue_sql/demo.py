"""`pyqueue-sql demo`: producers and consumers on a real database, in well under a minute.

Without a DSN it starts an embedded PostgreSQL (data in .pyqueue-demo/pgdata).
Two producers push a few thousand orders (batches with push_many plus single
pushes; some delayed by 1-3 s, some with a higher priority) while three
consumers reserve, process and commit them. Some orders fail on their first
delivery or two and are failed with their error text and exponential backoff;
one poison order fails every time and ends in the dead-letter queue after
max_attempts, its last error kept. Every thread has its own connection, as real
producers and consumers would.

``embedded_tcp_dsn`` gives the same embedded server a localhost TCP port (a
small forwarder to its Unix socket), for clients that cannot use a socket:
Spark's JDBC in examples/spark_pipeline.py, the Spark stage of `make demo`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .client import NewMessage, Queue, Reservation, connect
from .display import describe_error, format_stats_table, redact_dsn

QUEUE = "demo.orders"
DEAD_LETTER_QUEUE = "demo.orders.dead"
VISIBILITY_TIMEOUT_S = 5
MAX_ATTEMPTS = 3
KIND = "order"
POISON_KEY = "order-poison"

PRODUCERS = 2
CONSUMERS = 3
BATCH_SIZE = 200
SINGLE_PUSHES_PER_PRODUCER = 50
RESERVE_BATCH = 50
IDLE_POLL_S = 0.05
DELAYED_SHARE = 0.08
PRIORITY_SHARE = 0.05
HIGH_PRIORITY = 5
FAIL_ONCE_SHARE = 0.06
FAIL_TWICE_SHARE = 0.02
BACKOFF_BASE_S = 0.2


def backoff_delay(attempts: int) -> float:
    """Seconds before the next delivery after the attempts-th failed one."""
    return BACKOFF_BASE_S * 2 ** (attempts - 1)


@dataclass
class Counters:
    """What the threads did so far; shared, so every change takes the lock."""

    pushed: int = 0
    committed: int = 0
    retried: int = 0
    dead: int = 0
    lost: int = 0  # commits refused because the reservation had expired (redelivered later)
    producers_done: int = 0
    push_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **deltas: float) -> None:
        with self.lock:
            for name, delta in deltas.items():
                setattr(self, name, getattr(self, name) + delta)

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            return {
                name: getattr(self, name)
                for name in (
                    "pushed",
                    "committed",
                    "retried",
                    "dead",
                    "lost",
                    "producers_done",
                    "push_seconds",
                )
            }


def plan_messages(producer: int, count: int, rng: random.Random) -> list[NewMessage]:
    """The orders one producer pushes; failures to simulate ride in the payload."""
    messages = []
    for i in range(count):
        roll = rng.random()
        fail_first = 2 if roll < FAIL_TWICE_SHARE else 1 if roll < FAIL_TWICE_SHARE + FAIL_ONCE_SHARE else 0
        delayed = rng.random() < DELAYED_SHARE
        messages.append(
            NewMessage(
                key=f"order-{producer}-{i:06d}",
                kind=KIND,
                payload={
                    "order_id": f"{producer}-{i}",
                    "amount_cents": rng.randint(100, 99_999),
                    "fail_first": fail_first,
                },
                run_at=dt.timedelta(seconds=rng.uniform(1.0, 3.0)) if delayed else None,
                priority=HIGH_PRIORITY if rng.random() < PRIORITY_SHARE else None,
            )
        )
    return messages


def failure_text(reservation: Reservation) -> str:
    """The error a failed delivery records as the message's last error."""
    if reservation.payload.get("poison"):
        return "ValueError: order 'poison' has no line items"
    return f"TimeoutError: payment service did not answer (attempt {reservation.attempts})"


def process(reservation: Reservation) -> bool:
    """The consumer's work: True when the order was handled."""
    payload = reservation.payload
    if payload.get("poison"):
        return False
    return reservation.attempts > payload.get("fail_first", 0)


class Demo:
    def __init__(self, dsn: str, messages: int, timeout: float, out: TextIO) -> None:
        self.dsn = dsn
        self.messages = messages
        self.timeout = timeout
        self.out = out
        self.counters = Counters()
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.failures_lock = threading.Lock()

    def say(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    # -- setup -------------------------------------------------------------------
    def setup(self) -> None:
        from . import migrate
        from .errors import UnknownQueueError

        migrate.upgrade(self.dsn)
        self.say(f"schema:   revision {', '.join(migrate.current(self.dsn))}")
        with connect(self.dsn) as db:
            for name in (QUEUE, DEAD_LETTER_QUEUE):  # the user first: a dead-letter queue in use can't go
                try:
                    db.queue(name).drop()
                except UnknownQueueError:
                    pass
            db.queue(DEAD_LETTER_QUEUE).create()
            db.queue(QUEUE).create(
                visibility_timeout=VISIBILITY_TIMEOUT_S,
                max_attempts=MAX_ATTEMPTS,
                dead_letter_queue=DEAD_LETTER_QUEUE,
            )
        self.say(
            f"queues:   {QUEUE} (visibility {VISIBILITY_TIMEOUT_S} s, max_attempts {MAX_ATTEMPTS}, "
            f"dead letters to {DEAD_LETTER_QUEUE}), fresh"
        )

    # -- threads -----------------------------------------------------------------
    def _thread(self, name: str, target: Callable[[], None]) -> threading.Thread:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # reported by the main thread, which then stops everyone
                with self.failures_lock:
                    self.failures.append(f"{name}: {describe_error(exc) or repr(exc)}")
                self.stop.set()

        return threading.Thread(target=run, name=name, daemon=True)

    def producer(self, index: int, count: int) -> None:
        rng = random.Random(1000 + index)
        plan = plan_messages(index, count, rng)
        singles = plan[len(plan) - min(SINGLE_PUSHES_PER_PRODUCER, len(plan)) :]
        batched = plan[: len(plan) - len(singles)]
        started = time.monotonic()
        with connect(self.dsn) as db:
            queue = db.queue(QUEUE)
            if index == 0:
                if queue.push(POISON_KEY, KIND, {"poison": True, "order_id": "poison"}):
                    self.counters.add(pushed=1)
            for start in range(0, len(batched), BATCH_SIZE):
                if self.stop.is_set():
                    return
                self.counters.add(pushed=queue.push_many(batched[start : start + BATCH_SIZE]))
            for m in singles:
                if self.stop.is_set():
                    return
                if queue.push(m.key, m.kind, m.payload, run_at=m.run_at, priority=m.priority):
                    self.counters.add(pushed=1)
        elapsed = time.monotonic() - started
        with self.counters.lock:
            self.counters.producers_done += 1
            self.counters.push_seconds = max(self.counters.push_seconds, elapsed)

    def consumer(self, index: int) -> None:
        worker = f"demo-consumer-{index}@{os.getpid()}"
        with connect(self.dsn) as db:
            queue = db.queue(QUEUE)
            while not self.stop.is_set():
                reservations = queue.reserve(n=RESERVE_BATCH, worker=worker)
                if not reservations:
                    self.stop.wait(IDLE_POLL_S)
                    continue
                for r in reservations:
                    self.handle(queue, r)

    def handle(self, queue: Queue, r: Reservation) -> None:
        if process(r):
            if queue.commit(r):
                self.counters.add(committed=1)
            else:
                self.counters.add(lost=1)
        else:
            outcome = queue.fail(r, error=failure_text(r), delay=backoff_delay(r.attempts))
            if outcome is None:
                self.counters.add(lost=1)
            elif outcome == "retry":
                self.counters.add(retried=1)
            else:  # dead_lettered (or dropped, were there no dead-letter queue)
                self.counters.add(dead=1)

    # -- progress ----------------------------------------------------------------
    def status_line(self, elapsed: float) -> str:
        c = self.counters.snapshot()
        return (
            f"{elapsed:5.1f}s  pushed {c['pushed']:>6}  committed {c['committed']:>6}  "
            f"retried {c['retried']:>4}  dead {c['dead']}"
        )

    def finished(self) -> bool:
        c = self.counters.snapshot()
        return c["producers_done"] == PRODUCERS and c["committed"] + c["dead"] >= c["pushed"]

    # -- the run -----------------------------------------------------------------
    def run(self) -> int:
        self.setup()
        per_producer = [
            self.messages // PRODUCERS + (i < self.messages % PRODUCERS) for i in range(PRODUCERS)
        ]
        total = self.messages + 1  # and the poison order
        self.say(
            f"running:  {PRODUCERS} producers push {total} orders (push_many batches of {BATCH_SIZE} "
            f"+ {SINGLE_PUSHES_PER_PRODUCER} single pushes each; ~{DELAYED_SHARE:.0%} delayed 1-3 s, "
            f"~{PRIORITY_SHARE:.0%} priority {HIGH_PRIORITY})"
        )
        self.say(
            f"          {CONSUMERS} consumers reserve {RESERVE_BATCH} at a time; "
            f"~{FAIL_ONCE_SHARE + FAIL_TWICE_SHARE:.0%} fail at first (backoff "
            f"{BACKOFF_BASE_S} s * 2^(attempts-1)), 1 poison order always fails"
        )

        threads = [
            self._thread(f"producer-{i}", lambda i=i: self.producer(i, per_producer[i]))
            for i in range(PRODUCERS)
        ]
        threads += [self._thread(f"consumer-{i}", lambda i=i: self.consumer(i)) for i in range(CONSUMERS)]
        tty = self.out.isatty()
        interval = 0.25 if tty else 1.0
        started = time.monotonic()
        for t in threads:
            t.start()
        done = False
        try:
            next_report = started + interval
            while not self.stop.is_set():
                now = time.monotonic()
                if self.finished():
                    done = True
                    break
                if now - started > self.timeout:
                    break
                if now >= next_report:
                    self._progress(now - started, tty)
                    next_report += interval
                time.sleep(0.02)
        finally:
            elapsed = time.monotonic() - started
            self.stop.set()
            for t in threads:
                t.join(timeout=10)
            self._progress(elapsed, tty, final=True)
        return self.report(done, elapsed, total)

    def _progress(self, elapsed: float, tty: bool, final: bool = False) -> None:
        line = self.status_line(elapsed)
        if tty:
            self.out.write("\r\x1b[K" + line + ("\n" if final else ""))
            self.out.flush()
        else:
            self.say(line)

    # -- the verdict -------------------------------------------------------------
    def report(self, done: bool, elapsed: float, total: int) -> int:
        c = self.counters.snapshot()
        if self.failures:
            for failure in self.failures:
                self.say(f"FAILED: {failure}")
            return 1
        if not done:
            self.say(
                f"FAILED: not finished after {self.timeout:g} s: {c['committed']} committed + "
                f"{c['dead']} dead of {total} pushed"
            )
            return 1
        problems = []
        if c["pushed"] != total:
            problems.append(f"{c['pushed']} of {total} pushes were inserted")
        if c["dead"] != 1:
            problems.append(f"expected exactly 1 dead message, counted {c['dead']}")

        self.say()
        self.say(f"done in {elapsed:.1f} s")
        self.say(
            f"  pushed     {c['pushed']:>6}  ({c['pushed'] / max(c['push_seconds'], 1e-9):,.0f}/s "
            f"over {c['push_seconds']:.2f} s of pushing)"
        )
        self.say(
            f"  committed  {c['committed']:>6}  ({c['committed'] / elapsed:,.0f}/s over the whole run, "
            f"which waits for the delayed orders)"
        )
        self.say(f"  retries    {c['retried']:>6}  (rolled back with backoff, then committed)")
        if c["lost"]:
            self.say(f"  expired    {c['lost']:>6}  (reservations that timed out before commit; redelivered)")

        with connect(self.dsn) as db:
            dead_letters = db.queue(DEAD_LETTER_QUEUE).dead_letters()  # a look, nothing taken
            keys = [d.key for d in dead_letters]
            if keys == [POISON_KEY]:
                d = dead_letters[0]
                self.say(
                    f"  dead       {c['dead']:>6}  ({POISON_KEY!r} is in {DEAD_LETTER_QUEUE}, from "
                    f"{d.from_queue} after {d.attempts} attempts; last error: {d.last_error})"
                )
            else:
                problems.append(f"expected only {POISON_KEY!r} in {DEAD_LETTER_QUEUE}, found {keys}")
            stats = [s for s in db.stats() if s.queue in (QUEUE, DEAD_LETTER_QUEUE)]
        main = next(s for s in stats if s.queue == QUEUE)
        if main.ready or main.delayed or main.reserved:
            problems.append(f"{QUEUE} is not empty: {main}")
        self.say()
        self.say(format_stats_table(stats))
        if problems:
            self.say()
            for problem in problems:
                self.say(f"FAILED: {problem}")
            return 1
        return 0


def default_data_dir() -> Path | None:
    """.pyqueue-demo/pgdata in the current directory, or None (a temp dir) if that is not writable."""
    cwd = Path.cwd()
    return cwd / ".pyqueue-demo" / "pgdata" if os.access(cwd, os.W_OK) else None


def run_demo(
    dsn: str | None,
    *,
    messages: int = 4000,
    timeout: float = 120.0,
    data_dir: str | os.PathLike[str] | None = None,
    out: TextIO | None = None,
) -> int:
    """Runs the demo against dsn, or an embedded PostgreSQL when dsn is None; returns the exit code."""
    out = out or sys.stdout
    if dsn is not None:
        print(f"database: {redact_dsn(dsn)}", file=out, flush=True)
        return Demo(dsn, messages, timeout, out).run()

    from .embedded import embedded_postgres_dsn

    where = Path(data_dir) if data_dir is not None else default_data_dir()
    shown = "a temporary directory" if where is None else os.path.relpath(where)
    print(
        f"database: embedded PostgreSQL in {shown} (set PYQUEUE_DSN to use your own server)",
        file=out,
        flush=True,
    )
    started = time.monotonic()
    with embedded_postgres_dsn(where) as embedded_dsn:
        print(
            f"          started in {time.monotonic() - started:.1f} s: {embedded_dsn}", file=out, flush=True
        )
        code = Demo(embedded_dsn, messages, timeout, out).run()
        print("stopping the embedded server", file=out, flush=True)
    return code


# -- the embedded server over TCP (for Spark's JDBC) -------------------------------------


def _socket_path(dsn: str) -> str:
    """The Unix socket file of the PostgreSQL server at dsn, as the server reports it."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        directories, port = conn.execute(
            "SELECT current_setting('unix_socket_directories'), current_setting('port')"
        ).fetchone()
    directory = directories.split(",")[0].strip()
    return os.path.join(directory, f".s.PGSQL.{port}")


@contextlib.contextmanager
def tcp_forwarder(unix_path: str, host: str = "127.0.0.1") -> Iterator[int]:
    """Listens on a free TCP port of host and forwards each connection to the Unix
    socket unix_path; yields the port. Everything is closed on exit."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, 0))
    listener.listen(64)
    listener.settimeout(0.2)
    stop = threading.Event()
    open_sockets: set[socket.socket] = set()
    lock = threading.Lock()

    def close(*socks: socket.socket) -> None:
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
            with lock:
                open_sockets.discard(sock)

    def pump(source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            close(source, target)

    def accept() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(unix_path)
            except OSError:
                close(client, upstream)
                continue
            with lock:
                open_sockets.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=pump, args=(a, b), daemon=True, name="pyqueue-tcp-forward").start()

    acceptor = threading.Thread(target=accept, daemon=True, name="pyqueue-tcp-accept")
    acceptor.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        acceptor.join(timeout=2)
        listener.close()
        with lock:
            left = list(open_sockets)
        close(*left)


@contextlib.contextmanager
def embedded_dsns(data_dir: str | os.PathLike[str] | None = None) -> Iterator[tuple[str, str]]:
    """Starts (or reuses) the embedded PostgreSQL of the demo (default .pyqueue-demo/pgdata);
    yields (socket DSN, TCP DSN): the second reaches the same server over a free localhost
    TCP port (for JDBC), the first is quicker for Python clients. Stops both on exit."""
    from .embedded import embedded_postgres_dsn

    where = Path(data_dir) if data_dir is not None else default_data_dir()
    with embedded_postgres_dsn(where) as socket_dsn:
        with tcp_forwarder(_socket_path(socket_dsn)) as port:
            yield socket_dsn, f"postgresql://postgres@127.0.0.1:{port}/postgres"


@contextlib.contextmanager
def embedded_tcp_dsn(data_dir: str | os.PathLike[str] | None = None) -> Iterator[str]:
    """Like embedded_dsns: only the DSN over localhost TCP."""
    with embedded_dsns(data_dir) as (_, tcp_dsn):
        yield tcp_dsn

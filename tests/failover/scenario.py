"""One failover under load, with exact accounting: the test (tests/failover/test_failover.py) runs
it once per dialect; `python -m bench failover` (run from commit 4da0bbf) runs it --runs times.

A primary and a standby of their own on loopback ports (PostgreSQL: a synchronous standby;
MariaDB: a semi-synchronous replica, lossless), the schema installed, one queue that keeps
history (each commit leaves one `committed` row). Producer threads push new keys through a
multi-host DSN and note every push acknowledged to them; two `pyqueue-sql worker` processes on
the same DSN (Worker with threads, AsyncWorker with tasks) run tests/failover/handler.py, which
records each handler run, and log each commit acknowledged to them (debug level, JSON). Once work
flows, the primary is SIGKILLed (every process of it), and after `gap` seconds (what a failover
manager takes to decide) the standby is promoted. Producers and workers are left alone: they
have to find the new primary by themselves.

Afterwards, on the new primary, once the backlog drained:

* lost: every acknowledged push has its committed row (none may be missing);
* undone: every commit acknowledged to a worker is the one that stands (its committed row has
  the same attempt, and no later delivery of that message ran);
* exactly once: one committed row per key, none for a key nobody pushed;
* at-least-once, not more: a message ran more than once only when an earlier run was in flight at
  the kill (started before it, its commit not acknowledged before it); every other run of a key
  is the last one;
* the workers carry on: each commits again after the promotion, without a restart, and exits 0
  on SIGTERM at the end.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyqueue_sql
from pyqueue_sql import dialects, migrate

from ..helpers import wait_for

ROOT = str(Path(__file__).resolve().parents[2])
DIALECTS = ("postgresql", "mysql")


# -- the two servers ------------------------------------------------------------------------


class PostgresPair:
    """A primary and its synchronous standby (tests/own_postgres.py)."""

    dialect = "postgresql"

    def __init__(self, synchronous: bool = True) -> None:
        from ..own_postgres import OwnPostgresPrimary, OwnPostgresStandby

        self.primary = OwnPostgresPrimary(synchronous)
        self.standby = None
        try:
            self.primary.start()
            self.primary.wait_ready()
            self.standby = OwnPostgresStandby(self.primary)
            self.standby.start()
            self.standby.wait_ready()
            self.primary.wait_synchronous()
            with contextlib.closing(dialects.for_name("postgresql").connect(self.primary.dsn())) as conn:
                conn.execute("CREATE DATABASE failover")
        except BaseException:
            self.destroy()
            raise

    @property
    def dsn(self) -> str:
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgresql://postgres@{hosts}/failover?target_session_attrs=read-write&connect_timeout=5"

    def kill_primary(self) -> None:
        self.primary.kill()

    def promote(self) -> None:
        self.standby.promote()

    def destroy(self) -> None:
        for server in (self.standby, self.primary):
            if server is not None:
                server.destroy()


class MariaDBPair:
    """A primary and its semi-synchronous replica (tests/own_mariadb.py)."""

    dialect = "mysql"

    def __init__(self, synchronous: bool = True) -> None:
        from ..own_mariadb import ASYNC_PRIMARY, SEMI_SYNC_PRIMARY, SEMI_SYNC_REPLICA, OwnMariaDB, replicate

        self.primary = self.replica = None
        try:
            self.primary = OwnMariaDB(SEMI_SYNC_PRIMARY if synchronous else ASYNC_PRIMARY)
            self.replica = OwnMariaDB(SEMI_SYNC_REPLICA)
            self.primary.start()
            self.replica.start()
            self.primary.wait_ready()
            self.replica.wait_ready()
            replicate(self.primary, self.replica)
            self.primary.create_database("failover")
        except BaseException:
            self.destroy()
            raise

    @property
    def dsn(self) -> str:
        return f"mysql://root@127.0.0.1:{self.primary.port},127.0.0.1:{self.replica.port}/failover?connect_timeout=5"

    def kill_primary(self) -> None:
        self.primary.kill()

    def promote(self) -> None:
        from ..own_mariadb import promote

        promote(self.replica)

    def destroy(self) -> None:
        for server in (self.replica, self.primary):
            if server is not None:
                server.destroy()


def start_pair(dialect: str, synchronous: bool = True) -> PostgresPair | MariaDBPair:
    """synchronous=False: asynchronous replication, which loses what the standby had not received
    at the kill (`bench failover --replication async`, from commit 4da0bbf, shows it)."""
    return PostgresPair(synchronous) if dialect == "postgresql" else MariaDBPair(synchronous)


# -- producers and workers ------------------------------------------------------------------


class Producer(threading.Thread):
    """Pushes new keys, one at a time, with a short pause. A push that raised a connection error
    has an unknown outcome: its key is noted as uncertain and never pushed again (pushing it again
    could make a second message once the first was committed); the producer reconnects (failing
    while no primary is there) and goes on with a new key."""

    def __init__(self, dsn: str, queue: str, prefix: str, sleep: float) -> None:
        super().__init__(daemon=True)
        self.dsn, self.queue, self.prefix, self.sleep = dsn, queue, prefix, sleep
        self.errs = dialects.for_dsn(dsn).connection_errors()
        self.acked: list[tuple[str, float]] = []  # (key, time the push returned)
        self.uncertain: list[str] = []
        self.errors = 0
        self.unexpected: list[BaseException] = []
        self.halt = threading.Event()

    def run(self) -> None:
        db = None
        i = 0
        try:
            while not self.halt.is_set():
                try:
                    if db is None:
                        db = pyqueue_sql.connect(self.dsn)
                except self.errs:
                    self.errors += 1
                    self.halt.wait(0.05)
                    continue
                key = f"{self.prefix}-{i:06d}"
                i += 1
                try:
                    inserted = db.queue(self.queue).push(key, "k", {"sleep": self.sleep})
                except self.errs:
                    self.errors += 1
                    self.uncertain.append(key)
                    with contextlib.suppress(Exception):
                        db.close()
                    db = None
                    continue
                if not inserted:
                    raise AssertionError(f"a new key {key} was refused as a duplicate")
                self.acked.append((key, time.time()))
                self.halt.wait(0.01)
        except BaseException as exc:
            self.unexpected.append(exc)
        finally:
            if db is not None:
                with contextlib.suppress(Exception):
                    db.close()


class WorkerProcess:
    """A `pyqueue-sql worker` process; its JSON log (debug: one `commit` event per commit
    acknowledged to it) goes to a file."""

    def __init__(self, dsn: str, queue: str, workdir: Path, handler: str) -> None:
        self.log = workdir / f"worker-{handler}-{uuid.uuid4().hex[:6]}.log"
        env = {**os.environ, "PYQUEUE_FAILOVER_RECORD": str(workdir / "record"), "PYTHONPATH": ROOT}
        command = [
            *(sys.executable, "-m", "pyqueue_sql.cli", "worker", f"tests.failover.handler:{handler}"),
            *("--queue", queue, "--dsn", dsn, "--concurrency", "3", "--lease", "3", "--poll-fallback", "0.5"),
            *("--log-format", "json", "--log-level", "debug", "--no-status"),
        ]
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log
            )

    def events(self, name: str) -> list[dict]:
        out = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("event") == name:
                    entry["t"] = dt.datetime.fromisoformat(entry["ts"]).timestamp()
                    out.append(entry)
        return out

    def terminate(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


# -- reading the outcome --------------------------------------------------------------------


def query(dsn: str, sql: str, params: tuple = ()) -> list[tuple]:
    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        cur = conn.cursor()
        cur.execute(sql, params)
        rows = list(cur.fetchall()) if cur.description else []
        cur.close()
        return rows
    finally:
        conn.close()


def committed_rows(dsn: str, queue: str) -> list[tuple[str, int]]:
    """(key, attempts) of every committed history row."""
    rows = query(
        dsn,
        "SELECT p_key, attempts FROM pyqueue_history WHERE queue_name = %s AND outcome = 'committed'",
        (queue,),
    )
    return [(k, int(a)) for k, a in rows]


def live_count(dsn: str, queue: str) -> int:
    return int(query(dsn, "SELECT COUNT(*) FROM pyqueue_message WHERE queue_name = %s", (queue,))[0][0])


def handler_runs(workdir: Path) -> dict[str, list[dict]]:
    """key -> its handler runs, in start order: {attempt, pid, start, done (None if unfinished)}."""
    runs: dict[tuple[str, int, int], dict] = {}
    path = workdir / "record"
    for line in path.read_text().splitlines() if path.exists() else []:
        event, key, attempt, pid, when = line.split()
        slot = (key, int(attempt), int(pid))
        if event == "start":
            runs[slot] = {
                "key": key,
                "attempt": int(attempt),
                "pid": int(pid),
                "start": float(when),
                "done": None,
            }
        else:
            runs[slot]["done"] = float(when)
    by_key: dict[str, list[dict]] = collections.defaultdict(list)
    for run in sorted(runs.values(), key=lambda r: r["start"]):
        by_key[run["key"]].append(run)
    return by_key


# -- the run --------------------------------------------------------------------------------


def run_failover(
    pair: PostgresPair | MariaDBPair,
    workdir: Path,
    *,
    producers: int = 2,
    warmup_commits: int = 40,
    pushes_after: int = 40,
    gap: float = 0.5,
    handler_sleep: float = 0.1,
    drain_timeout: float = 90,
) -> dict[str, Any]:
    """One failover of `pair` (started, used up by the run: the caller destroys it); the figures,
    and `violations` (empty when the accounting is exact)."""
    workdir.mkdir(parents=True, exist_ok=True)
    t_install = time.monotonic()
    workers: list[WorkerProcess] = []
    threads: list[Producer] = []
    try:
        dsn = pair.dsn
        migrate.upgrade(dsn)
        queue = f"failover.{uuid.uuid4().hex[:8]}"
        with pyqueue_sql.connect(dsn) as admin:
            admin.queue(queue).create(history_retention=3600)
        install_s = time.monotonic() - t_install
        workers = [WorkerProcess(dsn, queue, workdir, h) for h in ("handle", "handle_async")]
        threads = [Producer(dsn, queue, f"p{i}", handler_sleep) for i in range(producers)]
        for p in threads:
            p.start()
        wait_for(
            lambda: (
                len(committed_rows(dsn, queue)) >= warmup_commits
                and {w.proc.pid for w in workers}
                <= {r["pid"] for rs in handler_runs(workdir).values() for r in rs}
            ),
            120,
            "both workers to commit before the kill",
        )
        t_kill = time.time()
        pair.kill_primary()
        t_killed = time.time()
        time.sleep(gap)
        t_promote = time.time()
        pair.promote()
        t_promoted = time.time()
        acked_at_promotion = sum(len(p.acked) for p in threads)
        wait_for(
            lambda: sum(len(p.acked) for p in threads) >= acked_at_promotion + pushes_after,
            60,
            "pushes to be acknowledged by the new primary",
        )
        for p in threads:
            p.halt.set()
        for p in threads:
            p.join(timeout=30)
        acked = {k: t for p in threads for k, t in p.acked}
        uncertain = {k for p in threads for k in p.uncertain}

        t_drain = time.time()

        def drained() -> bool:
            return set(acked) <= {k for k, _ in committed_rows(dsn, queue)} and live_count(dsn, queue) == 0

        drain_error = None
        try:
            wait_for(drained, drain_timeout, "the backlog to drain after the promotion")
        except AssertionError as exc:
            drain_error = str(exc)
        t_drained = time.time()
        alive = [w.proc.poll() is None for w in workers]
        exits = [w.terminate() for w in workers]
        return _account(
            dialect=pair.dialect,
            dsn=dsn,
            queue=queue,
            workdir=workdir,
            workers=workers,
            threads=threads,
            acked=acked,
            uncertain=uncertain,
            times={
                "kill": t_kill,
                "killed": t_killed,
                "promote": t_promote,
                "promoted": t_promoted,
                "drain": t_drain,
                "drained": t_drained,
            },
            install_s=install_s,
            drain_error=drain_error,
            alive=alive,
            exits=exits,
        )
    finally:
        for p in threads:
            p.halt.set()
        for w in workers:
            w.kill()


def _account(
    *,
    dialect,
    dsn,
    queue,
    workdir,
    workers,
    threads,
    acked,
    uncertain,
    times,
    install_s,
    drain_error,
    alive,
    exits,
) -> dict[str, Any]:
    violations: list[str] = []
    t_kill, t_promoted = times["kill"], times["promoted"]
    if drain_error:
        violations.append(drain_error)
    unexpected = [repr(e) for p in threads for e in p.unexpected]
    if unexpected:
        violations.append(f"a producer failed with a non-connection error: {unexpected[:3]}")
    rows = committed_rows(dsn, queue)
    committed = collections.Counter(k for k, _ in rows)
    committed_attempt = dict(rows)
    live = live_count(dsn, queue)
    runs = handler_runs(workdir)
    commit_acks = [(e["key"], int(e["attempts"]), e["t"]) for w in workers for e in w.events("commit")]

    lost = sorted(set(acked) - set(committed))
    if lost:
        violations.append(f"{len(lost)} acknowledged pushes lost: {lost[:10]}")
    if live:
        violations.append(f"{live} messages left in the queue after the drain")
    twice = {k: n for k, n in committed.items() if n > 1}
    if twice:
        violations.append(f"committed more than once: {dict(list(twice.items())[:10])}")
    strangers = sorted(set(committed) - set(acked) - uncertain)
    if strangers:
        violations.append(f"committed keys nobody pushed: {strangers[:10]}")

    undone = []
    for key, attempt, _ in commit_acks:
        later = [r["attempt"] for r in runs.get(key, []) if r["attempt"] > attempt]
        if committed_attempt.get(key) != attempt or later:
            undone.append((key, attempt, committed_attempt.get(key), later))
    if undone:
        violations.append(
            f"acknowledged commits undone (key, acked attempt, standing attempt, later runs): {undone[:10]}"
        )

    acked_before_kill = {(k, a) for k, a, t in commit_acks if t < t_kill}
    in_flight = 0
    beyond = []
    same_attempt = []
    for key, key_runs in runs.items():
        attempts = [r["attempt"] for r in key_runs]
        if len(set(attempts)) != len(attempts):
            same_attempt.append((key, attempts))
        for r in key_runs:
            r["in_flight"] = r["start"] < t_kill and (key, r["attempt"]) not in acked_before_kill
        in_flight += sum(r["in_flight"] for r in key_runs)
        # Every run but the last must have been in flight at the kill: only that allows another.
        beyond.extend((key, r["attempt"]) for r in key_runs[:-1] if not r["in_flight"])
    if same_attempt:
        violations.append(
            f"a delivery ran twice under one attempt number (a reservation undone): {same_attempt[:10]}"
        )
    if beyond:
        violations.append(f"messages ran again without a reservation in flight at the kill: {beyond[:10]}")
    not_run = sorted(set(committed) - set(runs))
    if not_run:
        violations.append(f"committed without a handler run: {not_run[:10]}")

    recovered = []
    for w, was_alive, code in zip(workers, alive, exits, strict=True):
        after = [e["t"] for e in w.events("commit") if e["t"] > t_promoted]
        if not was_alive:
            violations.append(f"worker {w.proc.pid} had exited before the end: {w.log.read_text()[-2000:]}")
        if not after:
            violations.append(f"worker {w.proc.pid} committed nothing after the promotion")
        if code != 0:
            violations.append(f"worker {w.proc.pid} exited {code} on SIGTERM: {w.log.read_text()[-2000:]}")
        recovered.append(min(after) if after else None)
    pushes_after = [t for t in acked.values() if t > t_promoted]
    runs_total = sum(len(v) for v in runs.values())
    return {
        "dialect": dialect,
        "violations": violations,
        "pushes_acked": len(acked),
        "pushes_uncertain": len(uncertain),
        "uncertain_committed": len(set(committed) & uncertain),
        "commits": sum(committed.values()),
        "commits_acked": len(commit_acks),
        "handler_runs": runs_total,
        "in_flight_at_kill": in_flight,
        "duplicates": runs_total - len(set(runs)),
        "lost": len(lost),
        "undone": len(undone),
        "producer_errors": sum(p.errors for p in threads),
        "worker_reconnects": [len(w.events("reconnect")) for w in workers],
        "install_s": round(install_s, 3),
        "kill_s": round(times["killed"] - t_kill, 3),
        "gap_s": round(times["promote"] - times["killed"], 3),
        "promote_s": round(t_promoted - times["promote"], 3),
        "first_push_after_kill_s": round(min(pushes_after) - t_kill, 3) if pushes_after else None,
        "workers_recovered_after_kill_s": None if None in recovered else round(max(recovered) - t_kill, 3),
        "drain_s": round(times["drained"] - times["drain"], 3),
    }

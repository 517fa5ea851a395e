"""History: clients run a random mix of the contract's calls, each recorded with the server's clock,
under faults with --faults; a checker then verifies the contract's guarantees over the history and
names the calls of every violation (exit 1). bench/README.md, History; figures: docs/reliability.md."""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import glob
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

import pyqueue_sql
from bench import common
from pyqueue_sql import errors

Q, NEXT, DEAD = "h", "h.next", "h.dead"
MAX_ATTEMPTS, LEASE, CAPACITY, RATE_N, RATE_PER = 3, 2.0, 3, 10, 1.0
TIMEOUTS = (0.3, 1.0, 2.0, 2.0, 4.0)  # seconds a reservation is asked for; 0.3 s ones expire while held
PUSH_KINDS = ("free", "free", "lim", "rate", "poison")
INF = float("inf")
NO_EFFECT = (errors.InvalidArgumentError, errors.UnknownQueueError)  # refused: nothing changed
OTHERS = {  # the other client sessions of the database, busy ones first
    "postgresql": "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend' ORDER BY state = 'active' DESC",
    "mysql": "SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID() "
    "ORDER BY command = 'Query' DESC",
}


# ---- the clients ---------------------------------------------------------------------------------


class Recorder:
    """One process's history: [seq, op, args, t0] before each call, [seq, status, answer, t1] after it
    (status ok, err, or unk: may have changed something); t0 and t1 on the server's clock (README, History)."""

    def __init__(self, dialect: str, dsn: str, path: str, isolation: str | None = None, budget=None):
        self.dialect, self.dsn, self.isolation, self.budget = dialect, dsn, isolation, budget
        self.out = open(path, "a", buffering=1)
        self.seq, self.db, self.t, self.local = 0, None, None, False
        pg = dialect == "postgresql"
        self.clock_sql = f"SELECT {'extract(epoch FROM clock_timestamp())::float8' if pg else 'UNIX_TIMESTAMP(SYSDATE(6))'}"

    def server_clock(self) -> float:
        return float(common.query(self.db.connection, self.clock_sql)[0][0])

    def clock(self) -> float:
        # CLOCK_REALTIME, not time.time: a client with a skewed clock has time.time wrong on purpose
        return time.clock_gettime(time.CLOCK_REALTIME) if self.local else self.server_clock()

    def connect(self) -> None:
        while True:
            try:
                self.db = pyqueue_sql.connect(self.dsn)
                if self.isolation:
                    what = "SESSION CHARACTERISTICS AS" if self.dialect == "postgresql" else "SESSION"
                    cur = self.db.connection.cursor()
                    cur.execute(f"SET {what} TRANSACTION ISOLATION LEVEL {self.isolation}")
                a = time.clock_gettime(time.CLOCK_REALTIME)
                self.t = self.server_clock()
                b = time.clock_gettime(time.CLOCK_REALTIME)
                self.local = a - 1e-6 <= self.t <= b + 1e-6  # (the server's clock in microseconds)
                return
            except Exception:  # noqa: BLE001 (the server restarting, or this connection cut)
                time.sleep(0.2)

    def call(self, op: str, args: list, fn) -> tuple[str, Any]:
        """Runs fn(db) as one recorded operation; (status, answer)."""
        if self.db is None or self.t is None:
            self.connect()
        self.seq += 1
        if self.budget is not None:  # --ops counts the calls recorded, not the clients' steps
            self.budget.value -= 1  # no lock: a client SIGKILLed while holding it would stop every other
        if self.local:
            self.t = self.clock()
        self.out.write(json.dumps([self.seq, op, args, self.t], separators=(",", ":")) + "\n")
        try:
            answer, status = fn(self.db), "ok"
        except NO_EFFECT as exc:
            answer, status = str(exc)[:200], "err"
        except Exception as exc:  # noqa: BLE001 (connection lost, deadlock, server gone: may have happened)
            answer, status = f"{type(exc).__name__}: {str(exc)[:200]}", "unk"
        written = answer[0] if isinstance(answer, KeepAnswer) else answer
        try:
            self.t = self.clock()
        except Exception:  # noqa: BLE001
            self.t, status = None, "unk"
        row = [self.seq, status, written, self.t]
        self.out.write(json.dumps(row, separators=(",", ":"), default=str) + "\n")
        if self.t is None or (status == "unk" and self.local):  # a new connection: this one may be cut
            with contextlib.suppress(Exception):
                self.db.close()
            self.db = None
        return status, answer


def held(rs) -> list:
    return [[r.key, r.kind, str(r.token), r.attempts] for r in rs]


def tok(r) -> list:
    return [r.key, r.kind, str(r.token)]


class KeepAnswer(list):
    """[written answer, kept objects]; written as its first element only (see Recorder.call)."""

    def __init__(self, written, kept):
        super().__init__([written, kept])


def producer(rec: Recorder, rng: random.Random, name: str, skew: float, kinds=PUSH_KINDS, leases=()) -> Any:
    """A push a call, of every shape: fresh keys (must be new), delayed keys again (must be refused)."""
    seq, dedup, groups = [0], [], [f"{name}.g{i}" for i in range(8)]
    for g in groups[::2]:
        rec.call("group_limit", [g, 2], lambda db, g=g: db.queue(Q).set_group_limit(g, 2))

    def key() -> str:
        seq[0] += 1
        return f"{name}.{seq[0]}"

    def push(items: list, payload: Any = 0, run_at=None) -> tuple:
        """One push of [key, kind, group] (a batch push of several, grouped or not)."""
        if len(items) == 1:
            ((k, kind, g),) = items
            fn = lambda db: db.queue(Q).push(k, kind, payload, run_at=run_at, group=g)  # noqa: E731
            return rec.call("push", items, fn)
        batch = [pyqueue_sql.NewMessage(k, kind, payload, group=g) for k, kind, g in items]
        return rec.call("push_batch", items, lambda db: db.queue(Q).push_many(batch))

    def step() -> None:
        x = rng.random()
        if x < 0.5:  # one or a batch, of every kind
            push([[key(), rng.choice(kinds), None] for _ in range(1 if x < 0.3 else rng.randint(2, 10))])
        elif x < 0.8:  # grouped
            n = 1 if x < 0.65 else rng.randint(2, 8)
            push([[key(), "grp", rng.choice(groups)] for _ in range(n)])
        elif x < 0.88 or not dedup:
            # delayed an hour by this client's clock (skewed by minutes at most): live all run long
            k, run_at = key(), dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=skew + 3600)
            if push([[k, "dedup", None]], run_at=run_at) == ("ok", True):
                dedup.append(k)
        elif x < 0.97:  # live keys again: refused
            push([[k, "dedup", None] for k in rng.sample(dedup, min(len(dedup), rng.randint(1, 4)))], 1)
        else:
            k, kind = f"{name}.{rng.randint(max(1, seq[0] - 50), max(1, seq[0]))}", rng.choice(kinds)
            rec.call("cancel", [k, kind], lambda db: db.queue(Q).cancel(k, kind))

    return step


def consumer(rec: Recorder, rng: random.Random, name: str, skew: float, kinds=(), leases=TIMEOUTS) -> Any:
    """A call a step on the reservations it holds (now and then a stale token's, which must not work)."""
    hold: list = []
    stale: list = []  # reservations this client no longer holds

    def pick():
        return hold.pop(rng.randrange(len(hold)))

    def step() -> None:
        x, timeout = rng.random(), rng.choice(leases)
        if not hold or x < 0.3:
            n = 1 if rng.random() < 0.5 else rng.randint(2, 6)
            reserve = lambda db: held_and_keep(db.queue(Q).reserve(n, worker=name, timeout=timeout))  # noqa: E731
            status, got = rec.call("reserve", [n, timeout], reserve)
            if status == "ok":
                hold.extend((r, timeout) for r in got[1])
                if not got[1]:
                    time.sleep(0.05)  # nothing ready: a moment for the producers
            return
        r, t = pick()
        q = lambda db: db.queue(Q)  # noqa: E731
        if r.kind == "poison":
            rec.call("fail", tok(r), lambda db: q(db).fail(r, "poison"))
        elif x < 0.45:
            rec.call("commit", tok(r), lambda db: q(db).commit(r))
        elif x < 0.52:
            more = [r] + [pick()[0] for _ in range(min(len(hold), rng.randint(1, 3)))]
            rec.call("commit_batch", [tok(m) for m in more], lambda db: q(db).commit_many(more))
        elif x < 0.6:
            n = rng.randint(1, 3)

            def commit_reserve(db):
                committed, rs = q(db).commit_reserve(r, n, worker=name, timeout=timeout)
                return KeepAnswer([committed, held(rs)], rs)

            status, got = rec.call("commit_reserve", [*tok(r), n, timeout], commit_reserve)
            if status == "ok":
                hold.extend((g, timeout) for g in got[1])
        elif x < 0.73:
            what = "fail" if x < 0.65 else "rollback" if x < 0.69 else "snooze"
            fn = {"fail": lambda db: q(db).fail(r, "flaky"), "rollback": lambda db: q(db).rollback(r)}
            rec.call(what, tok(r), fn.get(what, lambda db: q(db).snooze(r, 0.2)))
        elif x < 0.85:  # extend or renew: a new token, the old one stale
            what = "extend" if x < 0.8 else "renew"

            def extend(db):
                new = q(db).extend(r, timeout) if what == "extend" else q(db).renew(r, timeout).reservation
                return KeepAnswer(None if new is None else str(new.token), new)

            status, new = rec.call(what, [*tok(r), timeout], extend)
            if status == "ok" and new[1] is not None:
                hold.append((new[1], timeout))
            stale.append(r)
        elif x < 0.89:
            rec.call("move", tok(r), lambda db: q(db).move(r, NEXT))
        elif x < 0.93:
            k = f"{name}.{rec.seq}"

            def commit_push(db):
                with db.transaction():  # a business transaction: the commit and a push stand or fall together
                    return [q(db).commit(r), q(db).push(k, "free", 0)]

            rec.call("commit_push", [*tok(r), [[k, "free", None]]], commit_push)
        elif x < 0.95:
            rec.call("live", ["lim", CAPACITY], lambda db: live_count(db, Q, "lim"))
            hold.append((r, t))
        elif x < 0.97 and stale:
            s = stale.pop(rng.randrange(len(stale)))
            rec.call("commit", tok(s), lambda db: q(db).commit(s))
            hold.append((r, t))
        else:
            stale.append(r)  # abandoned: its lease expires while this client goes on
        del stale[:-20]

    return step


def held_and_keep(rs) -> KeepAnswer:
    """The answer written down (key, kind, token, attempts a reservation) and the objects kept."""
    return KeepAnswer(held(rs), rs)


def live_count(db, queue: str, kind: str) -> int:
    """The live reservations of a kind as a plain SQL reader counts them: one statement, the clock
    read as each row is (clock_timestamp(), SYSDATE), so that every row counted was live at once."""
    pg = db.dialect.name == "postgresql"
    clock = "clock_timestamp()" if pg else "CONVERT_TZ(SYSDATE(6), @@session.time_zone, '+00:00')"
    sql = "SELECT count(*) FROM pyqueue_message WHERE queue_name = %s AND p_kind = %s "
    sql += f"AND reserve_token IS NOT NULL AND scheduled_at > {clock}"
    return int(common.query(db.connection, sql, (queue, kind))[0][0])


def client_main(role, name, dialect, dsn, path, seed, budget, stop, skew, isolation, kinds, leases) -> None:
    if skew:  # this client's clock is wrong by `skew` seconds: nothing the contract times may depend on it
        real = time.time
        time.time = lambda: real() + skew
    signal.signal(signal.SIGTERM, lambda *_: setattr(stop, "value", 1))
    rec = Recorder(dialect, dsn, path, isolation, budget)
    step = (producer if role == "p" else consumer)(rec, random.Random(seed), name, skew, kinds, leases)
    throttle = 0
    while not stop.value and budget.value > 0:
        throttle += 1
        if role == "p" and throttle % 50 == 0 and rec.db is not None:
            try:  # the consumers behind: a pause
                while rec.db.queue(Q).stats().ready > 2000 and not stop.value:
                    time.sleep(0.2)
            except Exception:  # noqa: BLE001
                rec.db = None
        step()


# ---- the run: server, queues, clients, faults, the final drain -----------------------------------


class Server:
    """A database on the shared server, or a server of the suite's own (tests/own_*.py) that it restarts."""

    def __init__(self, dialect: str, own: bool, dsn: str | None = None):
        self.dialect, self.own, self.server, self.lent = dialect, own, None, dsn is not None
        self.pg = dialect == "postgresql"
        if dsn:  # a database with the schema installed, lent by the caller (a test) and kept
            self.dsn = dsn
        elif own:
            from tests import own_mariadb, own_postgres

            pg_conf, my_args = (
                "max_connections = 100\nshared_buffers = 128MB\n",
                ("--innodb-buffer-pool-size=256M",),
            )
            self.server = own_postgres.OwnPostgres(pg_conf) if self.pg else own_mariadb.OwnMariaDB(my_args)
            self.server.start()
            self.server.wait_ready()
            create = 'CREATE DATABASE "history"' if self.pg else "CREATE DATABASE history COLLATE utf8mb4_bin"
            common.execute(dialect, self.server.dsn("postgres" if self.pg else ""), create)
            self.dsn = self.server.dsn("history")
        else:
            self.dsn = common.create(dialect, "history")

    def restart(self) -> None:  # a crash: what the WAL (InnoDB's redo log) holds comes back
        self.server.stop("immediate") if self.pg else self.server.kill()
        self.server.start()
        self.server.wait_ready()

    def cut(self, conn, rng: random.Random) -> bool:
        """Ends the session of one of the clients in the database (of the first three, busy ones first)."""
        sessions = common.query(conn, OTHERS[self.dialect])[:3]
        if sessions:
            session = int(rng.choice(sessions)[0])
            kill = f"SELECT pg_terminate_backend({session})" if self.pg else f"KILL CONNECTION {session}"
            common.query(conn, kill)
        return bool(sessions)

    def close(self) -> None:
        if self.server is not None:
            self.server.destroy()
        elif not self.lent:
            common.drop(self.dialect, self.dsn)


def install(dialect: str, dsn: str, schema: bool = True) -> None:
    """The schema (unless there), then the three queues, new: dropped first, their history rows gone."""
    if schema:
        common.install_pyqueue(dsn)
    with pyqueue_sql.connect(dsn) as db:
        for name in (Q, NEXT, DEAD):
            if any(s.queue == name for s in db.stats()):
                db.queue(name).drop()
        history = f"DELETE FROM pyqueue_history WHERE queue_name IN ('{Q}', '{NEXT}', '{DEAD}')"
        common.execute(dialect, dsn, history)
        db.queue(DEAD).create()
        db.queue(NEXT).create()
        db.queue(Q).create(LEASE, MAX_ATTEMPTS, DEAD, dt.timedelta(days=1))
        db.queue(Q).set_limit("lim", CAPACITY)
        db.queue(Q).set_rate("rate", RATE_N, RATE_PER)


class Fleet:
    def __init__(self, args, dialect: str, dsn: str, workdir: str):
        self.args, self.dialect, self.dsn, self.workdir = args, dialect, dsn, workdir
        # each client forked from one clean process: fast, no inherited connection
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(["bench.history"])
        # shared without a lock (RawValue): a client SIGKILLed holding the lock left the others and
        # this process waiting for it for ever; a decrement lost to a race costs one more call
        self.budget = self.ctx.RawValue("q", args.ops)
        self.stop = self.ctx.RawValue("b", 0)  # (the same: an Event takes a lock to be read)
        self.procs: dict[str, Any] = {}
        self.started, self.skewed, self.rng = collections.Counter(), 0, random.Random(args.seed)
        self.leases = tuple(float(t) for t in args.leases.split(","))

    def start(self, slot: str) -> None:
        self.started[slot] += 1
        name = f"{slot}-{self.started[slot]}"
        skew = 0.0
        if self.args.faults and slot.startswith("c") and int(slot[1:]) % 2 == 1:
            skew = self.rng.choice((-1, 1)) * self.rng.uniform(30, 600)
            self.skewed += 1
        path, isolation = os.path.join(self.workdir, f"{name}.jsonl"), self.args.isolation
        seed = self.rng.randrange(2**32)
        args = (slot[0], name, self.dialect, self.dsn, path, seed, self.budget, self.stop)
        args += (skew, isolation if slot[0] == "c" else None, tuple(self.args.kinds.split(",")), self.leases)
        self.procs[slot] = self.ctx.Process(target=client_main, args=args, daemon=True)
        self.procs[slot].start()

    def kill(self, slot: str) -> None:
        """SIGKILL, and a new client in its place."""
        self.procs[slot].kill()
        self.procs[slot].join(10)
        self.start(slot)

    def running(self) -> bool:
        return self.budget.value > 0 and any(p.is_alive() for p in self.procs.values())

    def end(self) -> None:
        self.stop.value = 1
        for p in self.procs.values():
            send(p, signal.SIGCONT)
        for p in self.procs.values():
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)


def send(p, sig) -> None:
    """A signal to a client process, unless it has ended (meanwhile, too: the race is lost quietly)."""
    if p.pid and p.is_alive():
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, sig)


def run_faults(fleet: Fleet, server: Server, rng: random.Random, admin) -> collections.Counter:
    """Faults till the budget is spent (one a 0.5-2 s and 10-30 calls; a restart every --restart-every s)."""
    faults: collections.Counter = collections.Counter()
    paused: dict[str, float] = {}
    next_restart = time.monotonic() + fleet.args.restart_every
    kinds, cycle = ["kill", "cut", "cut", "pause"], []
    if fleet.args.faults:  # the first at once, before a short run can end without one
        fleet.kill(rng.choice(sorted(fleet.procs)))
        faults["clients SIGKILLed"] += 1
    stop_at = time.monotonic() + 60 * fleet.args.minutes if fleet.args.minutes else INF
    while fleet.running():
        pause_until = time.monotonic() + rng.uniform(0.5, 2.0)
        ops_at = fleet.budget.value - rng.randint(10, 30)
        while fleet.running() and (time.monotonic() < pause_until or fleet.budget.value > ops_at):
            time.sleep(0.05)
            if time.monotonic() >= stop_at:  # the time is up: the operations done so far are the history
                fleet.budget.value = 0
            for slot, until in list(paused.items()):
                if time.monotonic() >= until:
                    send(fleet.procs[slot], signal.SIGCONT)
                    del paused[slot]
        if not fleet.args.faults:
            continue
        if server.own and time.monotonic() >= next_restart:
            server.restart()
            admin = None
            faults["server restarts"] += 1
            next_restart = time.monotonic() + fleet.args.restart_every
            continue
        if not cycle:  # every kind once in each round of four, in a random order, a pause last
            cycle = ["pause", *rng.sample(kinds[:3], 3)]
        kind = cycle.pop()
        live = [s for s, p in fleet.procs.items() if p.is_alive() and s not in paused]
        if not live:
            continue
        if kind == "kill":
            fleet.kill(rng.choice(live))
            faults["clients SIGKILLed"] += 1
        elif kind == "pause":
            slot = rng.choice([s for s in live if s.startswith("c")] or live)
            send(fleet.procs[slot], signal.SIGSTOP)
            paused[slot] = time.monotonic() + max(fleet.leases) + rng.uniform(0.5, 2)  # past every lease
            faults["consumers paused past their leases"] += 1
        else:
            try:
                admin = admin or common.raw_connect(server.dialect, server.dsn)
                if server.cut(admin, rng):
                    faults["connections cut"] += 1
            except Exception:  # noqa: BLE001 (the session ended meanwhile, or the server restarts)
                admin = None
    for slot in paused:
        send(fleet.procs[slot], signal.SIGCONT)
    faults["clients with a skewed clock"] = fleet.skewed
    return faults


def drain(dialect: str, dsn: str, workdir: str, limit_s: float = 1800) -> None:
    """Reserves and commits everything left but the delayed dedup messages, recorded as one more
    consumer (killed clients' leases expire, exhausted messages are dead-lettered meanwhile)."""
    rec = Recorder(dialect, dsn, os.path.join(workdir, "drain.jsonl"))
    left = f"SELECT count(*) FROM pyqueue_message WHERE queue_name = '{Q}' AND p_kind <> 'dedup'"
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        reserve = lambda db: held_and_keep(db.queue(Q).reserve(100, "drain", 30.0))  # noqa: E731
        status, got = rec.call("reserve", [100, 30.0], reserve)
        if status == "ok" and got[1]:
            rec.call("commit_batch", [tok(r) for r in got[1]], lambda db: db.queue(Q).commit_many(got[1]))
        elif not common.execute(dialect, dsn, left)[0][0]:
            return
        else:
            time.sleep(0.3)
    raise RuntimeError("the final drain did not empty the queue")


def inventory(dialect: str, dsn: str) -> dict:
    """The end state: the three queues' live messages and the main queue's history rows."""
    live = common.execute(dialect, dsn, "SELECT queue_name, p_key, p_kind FROM pyqueue_message")
    pg = dialect == "postgresql"
    at = "extract(epoch FROM processed_at)::float8" if pg else "UNIX_TIMESTAMP(processed_at)"
    utc = () if pg else ("SET time_zone = '+00:00'",)
    sql = f"SELECT p_key, p_kind, outcome, {at} FROM pyqueue_history WHERE queue_name = '{Q}'"
    hist = common.execute(dialect, dsn, *utc, sql)
    hist = [[k, kind, o, None if t is None else float(t)] for k, kind, o, t in hist]
    return {"live": [list(r) for r in live], "history": hist}


# ---- the checker ---------------------------------------------------------------------------------


class Op:
    __slots__ = ("proc", "seq", "op", "args", "st", "ans", "t0", "t1")

    def __init__(self, *values):  # proc, seq, op, args, st, ans, t0, t1
        for name, value in zip(self.__slots__, values):
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"{self.proc}#{self.seq} {self.op}{json.dumps(self.args)} -> {self.st} {json.dumps(self.ans)} [{self.t0:.6f}, {self.t1:.6f}]"


def load(workdir: str) -> list[Op]:
    """Every recorded call: an answer-less call (its client killed) is unknown, to the end of time."""
    ops = []
    for path in sorted(glob.glob(os.path.join(workdir, "*.jsonl"))):
        proc, calls = os.path.basename(path)[:-6], {}
        with open(path) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:  # the last line of a client killed while writing it
                    continue
                if len(row) == 4 and isinstance(row[1], str) and row[1] in ("ok", "err", "unk"):
                    o = calls.get(row[0])
                    if o is not None:
                        o.st, o.ans, o.t1 = row[1], row[2], INF if row[3] is None else row[3]
                else:
                    calls[row[0]] = Op(proc, row[0], row[1], row[2], "unk", None, row[3], INF)
        ops.extend(calls.values())
    return ops


class Chain:
    """One lease: granted by a reserve, carried on by the extends and renewals of its tokens."""

    __slots__ = ("m", "grant", "T", "attempts", "exts", "clips", "end0", "acts")

    def __init__(self, m, grant: Op, T: float, attempts: int):
        self.m, self.grant, self.T, self.attempts = m, grant, T, attempts
        self.exts: list[tuple[Op, float]] = []  # extends and renewals that answered a new token
        self.clips: list[float] = []  # the starts of every extend or renewal that may have moved its end
        self.end0 = INF  # the earliest start of a call that may have ended it
        self.acts: list[Op] = []  # calls that answered as its holder

    def segments(self) -> list[tuple[float, float]]:
        """When it certainly held: from the answer of its grant (or of an extend) to the earliest its
        lease can end: that call's start + the timeout asked, the start of the next extend (which
        may shorten it), or of a call that may have ended it."""
        out = []
        for o, T in [(self.grant, self.T), *self.exts]:
            nxt = min((t for t in self.clips if t > o.t0), default=INF)
            out.append((o.t1, min(o.t0 + T, nxt, self.end0)))
        return [(a, b) for a, b in out if a < b]


class Msg:
    __slots__ = ("key", "kind", "group", "new", "refused", "maybe", "chains", "terminal", "depart", "ops")

    def __init__(self, key, kind):
        self.key, self.kind, self.group = key, kind, None
        self.new: list[Op] = []  # pushes answered "new"
        self.refused: list[Op] = []  # pushes answered "duplicate"
        self.maybe: list[Op] = []  # pushes without an answer
        self.chains: list[Chain] = []
        self.terminal: list[Op] = []  # calls that answered that it left the queue
        self.depart = INF  # the earliest time it may have left the queue
        self.ops: list[Op] = []


def check(ops: list[Op], end: dict, group_k: int = 2) -> dict:
    msgs: dict[tuple, Msg] = {}
    tokens: dict[str, Chain] = {}
    violations: list[dict] = []

    def msg(key, kind) -> Msg:
        return msgs.get((key, kind)) or msgs.setdefault((key, kind), Msg(key, kind))

    def bad(what: str, text: str, evidence) -> None:
        violations.append({"guarantee": what, "text": text, "ops": [repr(o) for o in evidence][:12]})

    def grant(o: Op, rows, T) -> None:
        for key, kind, tok, attempts in rows:
            m = msg(key, kind)
            c = Chain(m, o, T, attempts)
            m.chains.append(c)
            m.ops.append(o)
            tokens[tok] = c
            if attempts > MAX_ATTEMPTS:
                bad("dead letter", f"{key} delivered for the {attempts}th time, max_attempts {MAX_ATTEMPTS}", [o])  # fmt: skip

    def ended(o: Op, tok: str, ok: bool | None, leaves: bool | None) -> None:
        """A call with this token that answered ok (True), that it no longer held (False, nothing
        happened), or nothing (None: may have happened); leaves: it takes the message out of the
        queue (None: only on a last delivery)."""
        c = tokens.get(tok)
        expired_holder(c, o, ok)
        if c is None or ok is False:
            return
        c.end0 = min(c.end0, o.t0)
        c.m.ops.append(o)
        if leaves or (leaves is None and c.attempts >= MAX_ATTEMPTS):  # None: it leaves on a last delivery
            c.m.depart = min(c.m.depart, o.t0)
        if ok:
            c.acts.append(o)
            if leaves:
                c.m.terminal.append(o)

    def expired_holder(c: Chain | None, o: Op, ok: bool | None) -> None:
        """Counts the calls of a holder whose lease had certainly ended (it started after the latest end
        its grant and extends allow), as won (answered as holder) or lost (answered it no longer held)."""
        if c is not None and ok is not None and o.t0 > max(a.t1 + T for a, T in [(c.grant, c.T), *c.exts]):
            races["won" if ok else "lost"] += 1

    races: collections.Counter = collections.Counter()
    group_limits = {o.args[0] for o in ops if o.op == "group_limit" and o.st != "err"}
    by_op = collections.defaultdict(list)
    for o in ops:
        by_op[o.op].append(o)
    for o in by_op["push"] + by_op["push_batch"] + by_op["commit_push"]:
        items = o.args[3] if o.op == "commit_push" else o.args
        if o.op == "commit_push":
            ans = None if o.st != "ok" else (o.ans[1] if o.ans[0] is not None else None)
        elif o.op == "push":
            ans = o.ans if o.st == "ok" else None
        else:
            ans = None if o.st != "ok" else (True if o.ans == len(items) else False if o.ans == 0 else "some")
        for key, kind, group in items:
            m = msg(key, kind)
            m.group = group
            m.ops.append(o)
            if ans == "some":
                bad("dedup", f"a batch of {len(items)} answered {o.ans} new: all fresh or all live keys", [o])
            elif ans is None:
                m.maybe.append(o)
            else:
                (m.new if ans else m.refused).append(o)
    for o in by_op["reserve"] + by_op["commit_reserve"]:
        if o.st == "ok":
            grant(o, *((o.ans, o.args[1]) if o.op == "reserve" else (o.ans[1], o.args[4])))
    for o in sorted(by_op["extend"] + by_op["renew"], key=lambda o: o.t0):
        c = tokens.get(o.args[2])
        expired_holder(c, o, None if o.st != "ok" else o.ans is not None)
        if c is not None and o.st != "err":
            c.clips.append(o.t0)
        if c is not None and o.st == "ok" and o.ans is not None:
            c.exts.append((o, o.args[3]))
            c.acts.append(o)
            tokens[o.ans] = c
    for o in by_op["commit"] + by_op["commit_push"] + by_op["commit_reserve"]:
        committed = (o.ans[0] if o.op != "commit" else o.ans) if o.st == "ok" else None
        if o.st != "err" and not (o.op == "commit_reserve" and o.st == "ok" and committed is None):
            ended(o, o.args[2], committed, True)
    for o in by_op["commit_batch"]:
        if o.st != "err" and o.ans != 0:
            for _key, _kind, tok in o.args:
                ended(o, tok, True if o.st == "ok" and o.ans == len(o.args) else None, True)
    for o in by_op["fail"] + by_op["rollback"] + by_op["snooze"] + by_op["move"]:
        if o.st == "err":
            continue
        ok = None if o.st == "unk" else (o.ans is not None and o.ans is not False)
        leaves = {"move": True, "snooze": False}.get(o.op)
        if o.op == "fail" and o.st == "ok" and o.ans is not None:
            leaves = o.ans != "retry"
        ended(o, o.args[2], ok, leaves)
    for o in by_op["cancel"]:
        m = msgs.get(tuple(o.args))
        if m is not None and o.st != "err" and o.ans not in ("requested", "unknown"):
            m.depart = min(m.depart, o.t0)
            m.ops.append(o)
            if o.ans == "cancelled":
                m.terminal.append(o)

    # the end state: where each message is, and when the server says it left
    live = {(k, kind): q for q, k, kind in end["live"]}
    outcomes = collections.defaultdict(list)
    for key, kind, outcome, at in end["history"]:
        outcomes[(key, kind)].append(outcome)
        m = msgs.get((key, kind))
        if m is not None and at is not None:
            m.depart = min(m.depart, at)
    for m in msgs.values():
        for c in m.chains:
            if c.attempts >= MAX_ATTEMPTS:  # its lease's end, the earliest its expiry can dead-letter it
                m.depart = min(m.depart, c.grant.t0 + c.T)

    lost = 0
    for (key, kind), m in msgs.items():
        where, outs = live.get((key, kind)), outcomes.get((key, kind), [])
        # nothing acknowledged lost, and a fresh key is never refused
        if m.new and where is None and not outs:
            lost += 1
            bad("nothing lost", f"{key} ({kind}) pushed, never in the queue's history nor live at the end", m.new + m.ops)  # fmt: skip
        if m.refused and not m.new and not m.maybe and kind != "dedup":
            lost += 1
            bad("nothing lost", f"{key} ({kind}): a fresh key refused as a duplicate", m.refused)
        for o in outs:
            if o == "moved" and live.get((key, kind)) not in (NEXT,):
                bad("nothing lost", f"{key} moved, not in {NEXT} at the end", m.ops)
            if o == "dead_lettered" and live.get((key, kind)) != DEAD:
                bad("dead letter", f"{key} dead-lettered, not in {DEAD} at the end", m.ops)
        # dedup: no second "new" while the first is certainly live
        pushes = sorted(m.new, key=lambda o: o.t0)
        for a, b in zip(pushes, pushes[1:]):
            if a.t1 < b.t0 and b.t1 < m.depart:
                bad("dedup", f"{key} pushed as new twice while live (it left at the earliest at {m.depart:.6f})", [a, b])  # fmt: skip
        if len(m.terminal) > 1:
            bad("one holder", f"{key} left the queue {len(m.terminal)} times", m.terminal)
        # exhausted: a dead letter
        if any(c.attempts >= MAX_ATTEMPTS for c in m.chains) and not m.terminal:
            if not any(o in ("committed", "moved", "cancelled", "dead_lettered") for o in outs):
                bad("dead letter", f"{key}: its last allowed delivery ended without a dead letter: {outs}, live in {where}", m.ops)  # fmt: skip
        # one holder at a time
        segs = [(c, c.segments()) for c in m.chains]
        for i, (a, sa) in enumerate(segs):
            for b, sb in segs[i + 1 :]:
                if any(x0 < y1 and y0 < x1 for x0, x1 in sa for y0, y1 in sb):
                    bad("one holder", f"{key}: two leases held at once", [a.grant, b.grant, *a.acts, *b.acts])
        for a in m.chains:
            for act in a.acts:
                for b in m.chains:
                    if b is not a and b.grant.t0 > a.grant.t1 and b.grant.t1 < act.t0:
                        bad("one holder", f"{key}: a token answered as holder after a later lease was granted", [a.grant, b.grant, act])  # fmt: skip

    # concurrency limit, rate, groups
    for o in by_op["live"]:
        if o.st == "ok" and o.ans > o.args[1]:
            bad("concurrency limit", f"a reader counted {o.ans} live reservations of {o.args[0]}, capacity {o.args[1]}", [o])  # fmt: skip
    lim = [(s, c) for m in msgs.values() if m.kind == "lim" for c in m.chains for s in c.segments()]
    over = most_at_once(lim, CAPACITY)
    if over:
        bad("concurrency limit", f"{len(over)} leases of kind lim certainly held at once, capacity {CAPACITY}", [c.grant for c in over])  # fmt: skip
    grants = sorted(
        ((c.grant.t0, c.grant.t1, c) for m in msgs.values() if m.kind == "rate" for c in m.chains),
        key=lambda g: g[:2],
    )
    for i, (t0, _t1, _c) in enumerate(grants):
        inside = [g for g in grants[i : i + 4 * RATE_N] if g[0] >= t0 and g[1] < t0 + RATE_PER]
        if len(inside) > RATE_N:
            bad("rate", f"{len(inside)} deliveries of kind rate within {RATE_PER} s, rate {RATE_N}", [g[2].grant for g in inside])  # fmt: skip
            break
    groups = collections.defaultdict(list)
    for m in msgs.values():
        if m.group and (m.new or m.chains or (m.key, m.kind) in live or (m.key, m.kind) in outcomes):
            first = min(m.new + m.maybe, key=lambda o: (o.proc, o.seq))
            pos = [a[0] for a in (first.args[3] if first.op == "commit_push" else first.args)].index(m.key)
            groups[m.group].append(((first.proc, first.seq, pos), m))
    for g, members in groups.items():
        members = [m for _, m in sorted(members, key=lambda x: x[0])]
        k = group_k if g in group_limits else 1
        segs = [(s, c) for m in members for c in m.chains for s in c.segments()]
        over = most_at_once(segs, k)
        if over:
            bad("FIFO groups", f"group {g}: {len(over)} leases held at once, k = {k}", [c.grant for c in over])  # fmt: skip
        for j, m in enumerate(members):
            if not m.chains:
                continue
            first = min(c.grant.t1 for c in m.chains)
            before = [p for p in members[:j] if p.depart > first]
            if len(before) >= k:
                first_grant = min(m.chains, key=lambda c: c.grant.t1).grant
                evidence = [first_grant, *(p.new[0] for p in before if p.new)]
                bad("FIFO groups", f"group {g}: {m.key} delivered while {len(before)} before it had not left, k = {k}", evidence)  # fmt: skip
    out = {"operations": collections.Counter(o.op for o in ops if o.op != "group_limit")}
    out |= {"unknown outcomes": sum(o.st == "unk" for o in ops), "messages": len(msgs)}
    out["leases"] = sum(len(m.chains) for m in msgs.values())
    out |= {"lost": lost, "expired holders' calls": dict(races)}
    return out | {"violations": violations}


def most_at_once(segments, limit: int) -> list:
    """The leases of the first moment more than `limit` of these (start, end) segments overlap, or []."""
    starts = [(a, 1, i) for i, ((a, _b), _c) in enumerate(segments)]
    events = sorted(starts + [(b, -1, i) for i, ((_a, b), _c) in enumerate(segments)])
    now: set = set()
    for _t, d, i in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at the same time
        if d < 0:
            now.discard(i)
        else:
            now.add(i)
            if len({id(segments[j][1]) for j in now}) > limit:
                return list({id(segments[j][1]): segments[j][1] for j in now}.values())
    return []


# ---- the suite -----------------------------------------------------------------------------------


def run(dialect: str, args, sabotage=None, dsn: str | None = None) -> dict:
    """One history on one dialect: the run, the drain, the check. sabotage(dsn) runs after the install (a
    test's broken routine); dsn: a database with the schema to run in (h, h.next, h.dead made anew)."""
    server = Server(dialect, own=args.server == "own", dsn=dsn)
    workdir = tempfile.mkdtemp(prefix="pyqueue-history-")
    started = time.monotonic()
    try:
        install(dialect, server.dsn, schema=dsn is None)
        if sabotage is not None:
            sabotage(server.dsn)
        fleet, began = Fleet(args, dialect, server.dsn, workdir), time.monotonic()
        for slot in [f"p{i}" for i in range(args.producers)] + [f"c{i}" for i in range(args.consumers)]:
            fleet.start(slot)
        try:
            faults = run_faults(fleet, server, random.Random(args.seed + 1), None)
        finally:
            fleet.end()
        ran_s = time.monotonic() - began  # the clients' time (the install's and the drain's not counted)
        drain(dialect, server.dsn, workdir)
        end = inventory(dialect, server.dsn)
        with open(os.path.join(workdir, "end.json"), "w") as f:
            json.dump(end, f)
        result = check(load(workdir), end)
    finally:
        server.close()
    if not args.keep:
        shutil.rmtree(workdir)
    where = "own (restarted)" if server.own and args.faults else "own" if server.own else "shared"
    result.update(dialect=dialect, server=where, faults=dict(faults), run_s=round(ran_s, 1))
    result.update(total_s=round(time.monotonic() - started, 1), history=workdir if args.keep else None)
    return result


def markdown(results: list[dict], args) -> str:
    head = (
        f"{common.now_utc()}, seed {args.seed}, {args.producers} producers and {args.consumers} consumers, "
    )
    head += f"isolation {args.isolation or 'the default'}, kinds {args.kinds}, leases {args.leases}\n"
    lines = [f"# History: {common.command()}", "", head]
    rows = [
        (r["dialect"], r["server"], n := sum(r["operations"].values()), ", ".join(f"{k} {v}" for k, v in r["faults"].items()) or "none",
         r["unknown outcomes"], r["leases"], len(r["violations"]), r["lost"], f"{r['run_s']:.0f} s", f"{n / max(r['run_s'], 1):.0f}")
        for r in results
    ]  # fmt: skip
    header = "dialect|server|operations|faults|unknown outcomes|leases|violations|lost|run|operations/s"
    lines += common.table(header.split("|"), rows, "rrrrrrrrrr")
    for r in results:
        lines += ["", f"## {r['dialect']}: operations", ""]
        lines += [", ".join(f"{k} {v}" for k, v in sorted(r["operations"].items()))]
        races = r["expired holders' calls"]
        lines[-1] += f"; calls of a holder whose lease had ended: {races.get('won', 0)} answered as holder, "
        lines[-1] += f"{races.get('lost', 0)} that it no longer held"
        for v in r["violations"][:50]:
            lines += ["", f"- **{v['guarantee']}**: {v['text']}", *(f"  - `{o}`" for o in v["ops"])]
    return "\n".join(lines) + "\n"


def parse(argv=None):
    ap = common.parser(
        __doc__,
        ("--ops", 20000, "operations in all (every client's calls together, the final drain not counted)"),
        ("--dialect", "postgresql,mysql", "dialects, comma-separated"),
        ("--producers", 2, "producer processes"),
        ("--consumers", 4, "consumer processes"),
        ("--faults", False, "kill clients, cut sessions, pause consumers, skew clocks, restart the server"),
        ("--server", None, "own (its own server; --faults restarts it) or shared; default: own if --faults"),
        ("--restart-every", 60.0, "seconds between server restarts (own server, --faults)"),
        ("--minutes", 0.0, "stop starting operations after this long (0: when --ops are done)"),
        ("--kinds", ",".join(PUSH_KINDS), "kinds pushed (free, lim, rate, poison), as likely as often named"),
        ("--leases", ",".join(map(str, TIMEOUTS)), "reservations' timeouts (s), as likely as often named"),
        ("--isolation", None, "the consumers' session isolation level, e.g. 'REPEATABLE READ'"),
        ("--seed", -1, "the run's seed (-1: a random one, printed)"),
        ("--keep", False, "keep the recorded history (its folder is in the report)"),
        ("--out", "bench/results", "the report's folder"),
        ("--name", "history", "the report's file name"),
    )
    args = ap.parse_args(argv)
    args.seed = args.seed if args.seed >= 0 else random.randrange(2**31)
    args.server = args.server or ("own" if args.faults else "shared")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    common.exit_on_sigterm()
    print(f"seed {args.seed}", flush=True)
    results = [run(d, args) for d in args.dialect.split(",")]
    for r in results:
        r["operations"] = dict(r["operations"])
    data = {"command": common.command(), "seed": args.seed, "results": results}
    common.write(args.out, args.name, markdown(results, args), data, tag="")
    return 1 if any(r["violations"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Soak: minutes of mixed load while `pyqueue-sql worker` processes are killed and restarted at
random, then an exact accounting by key (`make soak`). Exits 1 when the accounting fails (2 for a bad
command line). What it checks and how to read its report: bench/README.md, Soak."""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime as dt
import functools
import math
import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import pyqueue_sql
from bench import common

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("ok", "batch", "delayed", "slow", "flaky", "poison")
MAX_ATTEMPTS, LEASE, CONCURRENCY, RELEASE_DEAD_AFTER, SHUTDOWN_TIMEOUT = 5, 6.0, 4, 30.0, 10.0
KILL_EVERY, SAMPLE_EVERY, DRAIN_TIMEOUT = (2.0, 6.0), 10.0, 180.0  # s: between kills, samples; the drain
TABLES = ("pyqueue_message", "pyqueue_history", "pyqueue_worker", "pyqueue_notify", "pyqueue_queue")
now = time.monotonic


def rate_factor(t: float, seed: int) -> float:
    """0.4x..1.6x of the base rate (a 90 s swing), 3x during a 5 s burst every 45 s."""
    return 3.0 if (t + 7 * seed) % 45.0 < 5.0 else 1.0 + 0.6 * math.sin(2 * math.pi * t / 90.0 + seed)


class FlakyError(Exception):
    """A transient failure: the message succeeds on a later attempt."""


class PoisonError(Exception):
    """A permanent failure: the message is dead-lettered."""


@functools.cache
def _runlog(pid: int) -> int:
    path = os.path.join(os.environ["SOAK_RUNLOG_DIR"], f"runs-{pid}.log")
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def _log(line: str) -> None:
    os.write(_runlog(os.getpid()), (line + "\n").encode())


def handle(job) -> None:
    """The workers' handler, by kind; every run logged to $SOAK_RUNLOG_DIR/runs-<pid>.log on O_APPEND (a
    SIGKILL loses no line written): "S key kind attempts" first, "E key kind attempts ok|Error" last."""
    _log(f"S {job.key} {job.kind} {job.attempts}")
    outcome = "ok"
    try:
        payload = job.payload or {}
        if job.kind == "slow":
            time.sleep(float(payload.get("sleep", 0.5)))
        elif job.kind == "flaky" and job.attempts <= int(payload.get("fail", 1)):
            raise FlakyError(f"{job.key}: transient failure on attempt {job.attempts}")
        elif job.kind == "poison":
            raise PoisonError(f"{job.key}: always fails (attempt {job.attempts})")
        time.sleep(random.uniform(0.0, 0.004))
    except Exception as exc:
        outcome = type(exc).__name__
        raise
    finally:
        _log(f"E {job.key} {job.kind} {job.attempts} {outcome}")


class Dedup(Exception):
    """A push reported fewer new rows than it was given (the keys are unique)."""


def producer_main(index, dsn, queue, rate, seconds, keys_path, acked, errs, seed) -> None:
    """Pushes for `seconds`; every acknowledged key and kind to keys_path, a push that raised to .uncertain."""
    rng, seq, db = random.Random(seed), 0, None
    start = next_at = now()

    def key() -> str:
        nonlocal seq
        seq += 1
        return f"p{index}-{seq:07d}"

    with (
        open(keys_path, "w", buffering=1) as out,
        open(keys_path + ".uncertain", "w", buffering=1) as uncertain,
    ):
        while (t := now() - start) < seconds:
            r = rng.random()
            items: list[tuple] = []  # (key, kind, payload, run_at, priority)
            if r < 0.45:
                items.append((key(), "ok", {"n": seq}, None, rng.randint(0, 3)))
            elif r < 0.53:
                for _ in range(rng.randint(5, 20)):
                    delay = dt.timedelta(seconds=rng.uniform(1, 15)) if rng.random() < 0.3 else None
                    items.append((key(), "batch", {"n": seq}, delay, None))
            elif r < 0.68:
                items.append((key(), "delayed", {"n": seq}, dt.timedelta(seconds=rng.uniform(1, 20)), None))
            elif r < 0.74:
                items.append((key(), "slow", {"sleep": round(rng.uniform(0.2, 1.5), 3)}, None, None))
            elif r < 0.98:
                items.append((key(), "flaky", {"fail": rng.randint(1, 2)}, None, None))
            else:
                items.append((key(), "poison", {"n": seq}, None, None))
            try:
                db = db or pyqueue_sql.connect(dsn)
                q = db.queue(queue)
                if len(items) == 1:
                    k, kind, payload, run_at, prio = items[0]
                    new = 1 if q.push(k, kind, payload, run_at=run_at, priority=prio) else 0
                else:
                    new = q.push_many(items)
                if new != len(items):  # keys are unique: fewer new rows is an error
                    raise Dedup
                out.writelines(f"{it[0]} {it[1]}\n" for it in items)
                with acked.get_lock():
                    acked.value += len(items)
            except Exception as exc:  # counted; the outcome of the call is unknown
                with errs.get_lock():
                    errs.value += 1
                why = "dedup" if isinstance(exc, Dedup) else type(exc).__name__
                uncertain.writelines(f"{it[0]} {it[1]} {why}\n" for it in items)
                if why != "dedup":
                    with contextlib.suppress(Exception):
                        db and db.close()
                    db = None
                    time.sleep(0.2)
            next_at += len(items) / max(rate * rate_factor(t, index), 0.1)
            lag = next_at - now()
            if lag > 0:
                time.sleep(lag)
            elif lag < -2.0:
                next_at = now()  # do not catch up more than 2 s of backlog
    if db is not None:
        db.close()


class WorkerProc(subprocess.Popen):  # a `pyqueue-sql worker`: its slot, generation, log, the signal sent
    slot, gen, log_path, signal_sent = 0, 0, "", None


class Fleet:
    """The worker processes, one per slot; slot 0 is never killed."""

    def __init__(self, dsn: str, queue: str, n: int, workdir: str):
        self.dsn, self.queue, self.n, self.workdir = dsn, queue, n, workdir
        self.slots: dict[int, WorkerProc] = {}  # stopping: got SIGTERM, not reaped yet
        self.stopping, self.done, self.unexpected_exits, self.gen = [], [], [], 0
        self.kills = collections.Counter()

    def start(self, slot: int) -> WorkerProc:
        self.gen += 1
        name = f"soak-w{slot}-g{self.gen}"
        log_path = os.path.join(self.workdir, f"{name}.log")
        script = os.path.join(os.path.dirname(sys.executable), "pyqueue-sql")
        cmd = [script] if os.path.exists(script) else [sys.executable, "-m", "pyqueue_sql.cli"]
        cmd += ["worker", "bench.soak:handle", "--dsn", self.dsn, "--queue", self.queue]
        cmd += f"--concurrency {CONCURRENCY} --name {name} --lease {LEASE} --retry-base 0.2 --retry-max 2".split()
        cmd += f"--shutdown-timeout {SHUTDOWN_TIMEOUT} --release-dead-after {RELEASE_DEAD_AFTER}".split()
        cmd += "--log-format json --log-level info --no-status".split()
        env = dict(os.environ, SOAK_RUNLOG_DIR=self.workdir, PYTHONUNBUFFERED="1")
        with open(log_path, "w") as log:
            io = dict(stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            w = WorkerProc(cmd, cwd=ROOT, env=env, **io)
        w.slot, w.gen, w.log_path = slot, self.gen, log_path
        self.slots[slot] = w
        return w

    def start_all(self) -> None:
        for slot in set(range(self.n)) - set(self.slots):
            self.start(slot)

    def reap(self) -> None:
        """Collects exited processes; restarts a slot whose worker died on its own."""
        for w in [w for w in self.stopping if w.poll() is not None]:
            self.done.append(w)
            self.stopping.remove(w)
        for slot, w in list(self.slots.items()):
            if w.poll() is not None:
                self.done.append(w)
                died = {"slot": slot, "gen": w.gen, "returncode": w.returncode, "log": w.log_path}
                self.unexpected_exits.append(died)
                self.start(slot)

    def chaos_once(self, rng: random.Random) -> None:
        """SIGKILL (80 %) or SIGTERM to a worker of a slot but 0, and a new one in its place."""
        if not (killable := [s for s in self.slots if s != 0]):
            return
        slot = rng.choice(killable)
        w = self.slots.pop(slot)
        sig = signal.SIGKILL if rng.random() < 0.8 else signal.SIGTERM
        w.send_signal(sig)
        w.signal_sent = sig.name
        self.kills[sig.name] += 1
        if sig == signal.SIGKILL:
            w.wait()
            self.done.append(w)
        else:
            self.stopping.append(w)
        self.start(slot)

    def stop_all(self, timeout: float) -> None:
        procs = list(self.slots.values())
        for w in procs:
            w.signal_sent = w.signal_sent or "SIGTERM(final)"
            w.terminate()
        deadline = now() + timeout
        for w in procs + self.stopping:
            try:
                w.wait(timeout=max(deadline - now(), 0.1))
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
                w.signal_sent = "SIGKILL(final, did not stop)"
            self.done.append(w)
        self.slots.clear()
        self.stopping.clear()


class Probe:
    """Plain SQL on the soak database (autocommit) for the samples and the final accounting."""

    def __init__(self, dialect: str, dsn: str, queue: str, dlq: str):
        self.queue, self.dlq = queue, dlq
        self.conn = common.raw_connect(dialect, dsn)
        self.db = pyqueue_sql.client.Database.wrap(self.conn)

    def rows(self, sql: str, params: tuple = ()) -> list:
        return common.query(self.conn, sql, params)

    def outcomes(self) -> dict[str, int]:
        sql = "SELECT outcome, count(*) FROM pyqueue_history WHERE queue_name = %s GROUP BY outcome"
        return {o: int(c) for o, c in self.rows(sql, (self.queue,))}

    def stats(self) -> dict[str, Any]:
        s, d = self.db.queue(self.queue).stats(), self.db.queue(self.dlq).stats()
        out = dict(ready=s.ready, delayed=s.delayed, reserved=s.reserved, dead=s.dead)
        return out | {"dlq_ready": d.ready + d.delayed + d.reserved}

    def vacuum(self) -> float:
        started = now()
        for name in TABLES:
            self.rows(f"VACUUM (ANALYZE) {name}")
        return now() - started


def read_runlogs(workdir: str) -> dict[str, Any]:
    """The run logs of handle(): starts and ends by key, results by kind."""
    starts, ends, results, runs_by_kind = (collections.Counter() for _ in range(4))
    ok_keys: set[str] = set()
    for name in (n for n in os.listdir(workdir) if n.startswith("runs-")):
        with open(os.path.join(workdir, name)) as f:
            for parts in map(str.split, f):
                if len(parts) >= 4 and parts[0] == "S":
                    starts[parts[1]] += 1
                    runs_by_kind[parts[2]] += 1
                elif len(parts) >= 5 and parts[0] == "E":
                    ends[parts[1]] += 1
                    results[(parts[2], parts[4])] += 1
                    if parts[4] == "ok":
                        ok_keys.add(parts[1])
    return dict(starts=starts, ends=ends, results=results, ok_keys=ok_keys, runs_by_kind=runs_by_kind)


def run_dialect(dialect: str, args: argparse.Namespace) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    queue, dlq = f"soak_{run_id}", f"soak_{run_id}.dead"
    workdir = tempfile.mkdtemp(prefix=f"pyqueue-soak-{dialect}-")
    dsn = common.create(dialect, "soak")
    print(f"[{dialect}] database {dsn.rsplit('/', 1)[1]}, queue {queue}, work files {workdir}", flush=True)
    settings = {**vars(args), "concurrency": CONCURRENCY, "lease_s": LEASE, "max_attempts": MAX_ATTEMPTS}
    result: dict[str, Any] = {"dialect": dialect, "started_utc": common.now_utc(), "settings": settings}
    ok, fleet, probe, producers = False, None, None, []
    try:
        common.install_pyqueue(dsn)
        with pyqueue_sql.connect(dsn) as db:
            db.queue(dlq).create()
            options = dict(visibility_timeout=LEASE, max_attempts=MAX_ATTEMPTS, dead_letter_queue=dlq)
            db.queue(queue).create(**options, history_retention=dt.timedelta(days=7))
        probe = Probe(dialect, dsn, queue, dlq)
        result["server_version"] = str(probe.rows("SELECT version()")[0][0])
        t0, rng, load_s, ctx = now(), random.Random(args.seed), args.minutes * 60.0, mp.get_context("spawn")
        fleet = Fleet(dsn, queue, args.workers, workdir)
        fleet.start_all()
        time.sleep(1.0)
        acked, perrs = ([ctx.Value("q", 0) for _ in range(args.producers)] for _ in range(2))
        key_files = [os.path.join(workdir, f"keys-p{i}.txt") for i in range(args.producers)]
        rate = args.rate / args.producers
        for i in range(args.producers):
            how = (i, dsn, queue, rate, load_s, key_files[i], acked[i], perrs[i], args.seed * 100 + i)
            producers.append(ctx.Process(target=producer_main, args=how))
            producers[-1].start()
        load_start = last_vacuum = now()
        samples, vacuums = [], []
        next_kill = now() + rng.uniform(*KILL_EVERY)
        last_sample, last_check, prev = -1e9, 0.0, (0, None)
        phase, drain_started, drained_at = "load", None, None

        def sample() -> dict:
            nonlocal prev
            t = now() - t0
            outc = probe.outcomes()
            done = sum(outc.values())
            thr = None if prev[1] is None else round((done - prev[0]) / max(t - prev[1], 1e-6), 1)
            prev = (done, t)
            s = dict(t=round(t, 1), phase=phase, acked=sum(a.value for a in acked))
            s |= dict(producer_errors=sum(e.value for e in perrs), outcomes=outc, processed_per_s=thr)
            s |= dict(queue=probe.stats(), kills=dict(fleet.kills), loadavg=common.loadavg())
            samples.append(s)
            q = s["queue"]
            print(
                f"[{dialect}] t={s['t']:6.1f}s {phase:5} in={s['acked']} committed={outc.get('committed', 0)} "
                f"dead={outc.get('dead_lettered', 0)} ready={q['ready']} delayed={q['delayed']} "
                f"reserved={q['reserved']} {thr}/s kills={dict(fleet.kills)} load={s['loadavg'][0]}",
                flush=True,
            )
            return s

        while True:
            fleet.reap()
            tnow = now()
            if phase == "load" and tnow - load_start >= load_s and not any(p.is_alive() for p in producers):
                phase, drain_started = "drain", tnow
                fleet.start_all()
                print(f"[{dialect}] load phase over; draining", flush=True)
            if phase == "load" and tnow >= next_kill:
                fleet.chaos_once(rng)
                next_kill = tnow + rng.uniform(*KILL_EVERY)
            every = args.pg_vacuum_every if dialect == "postgresql" else 0
            if every > 0 and tnow - last_vacuum >= every:
                vacuums.append(round(probe.vacuum(), 3))
                last_vacuum = now()
            if tnow - last_sample >= SAMPLE_EVERY:
                last_sample = tnow
                sample()
            if phase == "drain" and tnow - last_check >= 1.0:
                last_check = tnow
                q = probe.stats()
                if q["ready"] + q["delayed"] + q["reserved"] == 0:
                    drained_at = now()
                    break
                if tnow - drain_started > DRAIN_TIMEOUT:
                    print(f"[{dialect}] drain timed out after {DRAIN_TIMEOUT:g}s", flush=True)
                    break
            time.sleep(0.1)
        for p in producers:
            p.join()
        fleet.stop_all(SHUTDOWN_TIMEOUT + 5)
        phase = "final"
        sample()
        drain = None if drained_at is None else round(drained_at - drain_started, 1)
        result["duration_s"] = {"load": round(load_s, 1), "drain": drain, "total": round(now() - t0, 1)}
        result |= dict(samples=samples, pg_vacuum_s=vacuums)
        result["unexpected_exits"] = fleet.unexpected_exits
        result["accounting"] = account(probe, fleet, key_files, workdir)
        exits = collections.Counter(f"{w.signal_sent or '-'} -> {w.returncode}" for w in fleet.done)
        result["workers"] = {"processes_started": fleet.gen, "returncodes": dict(exits)}
        checks = result["accounting"]["checks"]
        checks["producers exited 0"] = all(p.exitcode == 0 for p in producers)
        checks["no worker died on its own"] = not fleet.unexpected_exits
        sigtermed = [w for w in fleet.done if (w.signal_sent or "").startswith("SIGTERM")]
        checks["every SIGTERMed worker exited 0"] = all(w.returncode == 0 for w in sigtermed)
        checks["queue drained"] = drained_at is not None
        result["ok"] = ok = all(checks.values())
        return result
    finally:
        for p in producers:
            if p.is_alive():
                p.terminate()
        if fleet is not None:
            with contextlib.suppress(Exception):
                fleet.stop_all(SHUTDOWN_TIMEOUT + 5)
        if probe is not None:
            probe.conn.close()
        if args.keep:
            print(f"[{dialect}] kept database {dsn} and work files {workdir}", flush=True)
        else:
            common.drop(dialect, dsn)
            if ok:
                shutil.rmtree(workdir, ignore_errors=True)
            else:
                print(f"[{dialect}] FAILED: work files kept in {workdir}", flush=True)
        result["workdir"] = workdir if (args.keep or not ok) else None


def account(probe: Probe, fleet: Fleet, key_files: list[str], workdir: str) -> dict[str, Any]:
    """The acknowledged keys against the history, the queue, the dead-letter queue and the run logs."""
    acked: dict[str, str] = {}  # key: kind of each push acknowledged (uncertain: of those that raised)
    uncertain: dict[str, str] = {}
    for p in key_files:
        for path, into in ((p, acked), (p + ".uncertain", uncertain)):
            if os.path.exists(path):
                with open(path) as f:
                    into.update(line.split()[:2] for line in f)
    committed_rows, dead_rows, other_rows, committed_attempts = (collections.Counter() for _ in range(4))
    attempts_at_dead: dict[str, int] = {}
    history = "SELECT p_key, outcome, attempts FROM pyqueue_history WHERE queue_name = %s"
    for key, outcome, attempts in probe.rows(history, (probe.queue,)):
        if outcome == "committed":
            committed_rows[key] += 1
            committed_attempts[int(attempts)] += 1
        elif outcome == "dead_lettered":
            dead_rows[key] += 1
            attempts_at_dead[key] = int(attempts)
        else:
            other_rows[(key, outcome)] += 1
    keys_of = lambda sql, value: {k for (k,) in probe.rows(sql, (value,))}  # noqa: E731
    dlq_keys = keys_of("SELECT p_key FROM pyqueue_dead_letters WHERE dead_letter_queue = %s", probe.dlq)
    live = keys_of("SELECT p_key FROM pyqueue_message WHERE queue_name = %s", probe.queue)
    committed, dead, acked_keys = set(committed_rows), set(dead_rows), set(acked)
    missing = acked_keys - committed - dead - live
    runs = read_runlogs(workdir)
    per_kind = {}
    for kind in KINDS:
        keys = {k for k, v in acked.items() if v == kind}
        counts = (len(keys), len(keys & committed), len(keys & dead), len(keys & live))
        per_kind[kind] = dict(zip(("in", "committed", "dead_lettered", "left"), counts))
        per_kind[kind]["handler_runs"] = runs["runs_by_kind"].get(kind, 0)
    dead_nonpoison = sorted(k for k in dead if acked.get(k) not in ("poison", None))
    total_runs, ran = sum(runs["starts"].values()), set(runs["starts"])
    committed_without_ok_run = sorted(committed - runs["ok_keys"])
    poison_keys = {k for k, v in acked.items() if v == "poison"}
    a = {
        "in_acknowledged": len(acked_keys),
        "uncertain_pushes": len(uncertain),
        "uncertain_found_in_history_or_queue": len(set(uncertain) & (committed | dead | live)),
        "committed_keys": len(committed),
        "dead_lettered_keys": len(dead),
        "left_in_queue": len(live),
        "committed_twice": sorted(k for k, c in committed_rows.items() if c > 1)[:20],
        "dead_lettered_twice": sorted(k for k, c in dead_rows.items() if c > 1)[:20],
        "committed_and_dead": sorted(committed & dead)[:20],
        "missing": sorted(missing)[:20],
        "unknown_keys": sorted((committed | dead | live) - acked_keys - set(uncertain))[:20],
        "dead_lettered_not_poison_count": len(dead_nonpoison),
        "dead_lettered_not_poison_attempts": sorted(
            collections.Counter(attempts_at_dead[k] for k in dead_nonpoison).items()
        ),
        "committed_attempts_histogram": sorted(committed_attempts.items()),
        "per_kind": per_kind,
        "handler_runs": total_runs,
        "handler_runs_cut_by_kill": total_runs - sum(runs["ends"].values()),
        "keys_run_more_than_once": sum(1 for c in runs["starts"].values() if c > 1),
        "handler_runs_failed": sum(c for (_, res), c in runs["results"].items() if res != "ok"),
        "kills": dict(fleet.kills),
    }
    # runs neither failed nor committed: cut by a kill, or their worker died before the commit
    a["redeliveries_after_kills"] = total_runs - a["handler_runs_failed"] - len(committed & ran)
    a["balance"] = f"{len(acked_keys)} in = {len(committed)} committed + {len(dead)} dead-lettered + "
    a["balance"] += f"{len(live)} left"
    a["checks"] = {
        "in = committed + dead-lettered + left": len(acked_keys)
        == len(committed & acked_keys) + len(dead & acked_keys) + len(live & acked_keys)
        and not missing,
        "nothing lost (every acknowledged key accounted for)": not missing,
        "no key committed twice": not a["committed_twice"],
        "no key dead-lettered twice": not a["dead_lettered_twice"],
        "no key both committed and dead-lettered": not a["committed_and_dead"],
        "no key that no producer pushed": not a["unknown_keys"],
        "dead-letter queue = dead-lettered history": dlq_keys == dead,
        "no poison message committed": not (poison_keys & committed),
        "every poison message dead-lettered": poison_keys <= dead,
        "nothing left in the queue": not live,
        "every commit follows a successful handler run": not committed_without_ok_run,
        "no unexplained history rows": not other_rows,
    }
    return a


def markdown(r: dict[str, Any], command: str) -> str:
    a, st = r["accounting"], r["settings"]
    cut, redone = a["handler_runs_cut_by_kill"], a["redeliveries_after_kills"]
    kinds = [(k, *v.values()) for k, v in a["per_kind"].items()]
    return "\n".join([
        f"# Soak, {r['dialect']} ({'PASS' if r['ok'] else 'FAIL'})",
        "",
        f"Command: `{command}`  ",
        f"Started {r['started_utc']}, server {r.get('server_version', '?')[:60]}  ",
        f"Load {r['duration_s']['load']:.0f} s, drain {r['duration_s']['drain']} s, total {r['duration_s']['total']} s; "
        f"{st['workers']} workers x {CONCURRENCY} threads, {st['producers']} producers at ~{st['rate']:g} msg/s "
        "(0.4x-1.6x swings, 3x bursts)  ",
        f"Load average seen: max 1-min {max(s['loadavg'][0] for s in r['samples']):.2f}",
        "",
        "## Accounting",
        "",
        f"**{a['balance']}**",
        "",
        *common.table(["check", ""], [(n, "ok" if p else "**FAILED**") for n, p in a["checks"].items()]),
        "",
        *common.table(["kind", "in", "committed", "dead-lettered", "left", "handler runs"], kinds, "lrrrrr"),
        "",
        f"Handler runs {a['handler_runs']} for {a['committed_keys']} commits + {a['dead_lettered_keys']} dead letters: "
        f"{a['handler_runs_failed']} runs failed (flaky and poison: retried with backoff), {redone} runs redone after "
        f"kills ({cut} cut mid-run by a kill, {redone - cut} finished but their worker died before the commit); "
        f"{a['keys_run_more_than_once']} keys ran more than once. Commits by attempt number (attempt, commits): "
        f"{a['committed_attempts_histogram']}.  ",
        "Dead-lettered although not poison (attempts used up by kills + flaky failures): "
        f"{a['dead_lettered_not_poison_count']} {a['dead_lettered_not_poison_attempts']}.  ",
        f"Pushes that raised (outcome unknown): {a['uncertain_pushes']}; kills: {a['kills']}; workers started: "
        f"{r['workers']['processes_started']}; exits: {r['workers']['returncodes']}; died on their own: "
        f"{len(r['unexpected_exits'])}; producer errors: {r['samples'][-1]['producer_errors']}",
    ]) + "\n"  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = common.parser(
        __doc__,
        ("--minutes", 10.0, "load phase length (default 10)"),
        ("--workers", 4, "worker processes (default 4; slot 0 is never killed)"),
        ("--producers", 2, "producer processes (default 2)"),
        ("--rate", 60.0, "average msg/s pushed, all producers (default 60)"),
        ("--pg-vacuum-every", 60.0, "PostgreSQL: VACUUM (ANALYZE) every S s, not autovacuum; 0 = never"),
        ("--seed", 7, "the producers' and the kills' random seed"),
        ("--out", os.path.join(ROOT, "bench", "results"), "where soak_<dialect>.json and .md go"),
        ("--keep", False, "keep the database and the work files (worker logs, keys)"),
        ("--dialect", ("both", "postgresql", "mysql"), ""),
    )
    args = p.parse_args(argv)
    if args.workers < 2 or args.minutes <= 0 or args.rate <= 0 or args.producers < 1:
        p.error("--workers >= 2 (slot 0 is never killed), --minutes and --rate > 0, --producers >= 1")
    command = common.command()
    all_ok = True
    for d in ["postgresql", "mysql"] if args.dialect == "both" else [args.dialect]:
        r = run_dialect(d, args)
        r["command"] = command
        common.write(args.out, f"soak_{d}", markdown(r, command), r)
        a = r["accounting"]
        print(f"[{d}] {'PASS' if r['ok'] else 'FAIL'}: {a['balance']}; committed twice {len(a['committed_twice'])}; "
              f"handler runs {a['handler_runs']}; kills {a['kills']}", flush=True)  # fmt: skip
        for name in (n for n, passed in a["checks"].items() if not passed):
            print(f"[{d}]   FAILED check: {name}", flush=True)
        all_ok &= bool(r["ok"])
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())

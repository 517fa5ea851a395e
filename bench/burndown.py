"""Burn-down: a backlog drained by each system's own worker runtime, as its users run it, rounds
interleaved, ratios to the best peer within each round. Commands and method: bench/README.md, Burn-down."""

from __future__ import annotations

import bisect
import compileall
import contextlib
import importlib.util
import itertools
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import pyqueue_sql
from bench import common

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PEERS = os.path.join(HERE, "peers")
PY_WORKERS, NODE_WORKERS, OBAN_WORKER = (
    os.path.join(PEERS, f) for f in ("py_workers.py", "node_workers.mjs", "oban_worker.py")
)
OBAN_PYTHON, OBAN_CLI = (os.path.join(PEERS, ".venv-oban", "bin", f) for f in ("python", "oban"))
PROCESSES, CONCURRENCY, POLL = 2, 16, 0.02  # worker processes, handlers each, the count's poll (s)
STATES = ("fresh", "churned")
COLUMNS = "cpu_us_per_job server_cpu_us_per_job spawn_rate life_cpu_us_per_job spawn_first_job_s".split()
CLI_TARGETS = {"pyqueue-tasks": "app", "pyqueue-batch": "batch_app"}  # `pyqueue-sql worker`'s; else plain
WINDOWS = {"rate500": (500, 1.0)}  # a rate's (n, per): the most deliveries and job starts in a window of per
WORKLOADS = {"noop": (50_000, 0.0, 5_000), "sleep10": (20_000, 10.0, 2_000)}  # (jobs, sleep ms, --quick's)


@dataclass
class System:
    name: str
    dialect: str
    label: str
    kind: str  # py, node, oban
    remaining_sql: str
    peer: bool = True
    note: str = ""
    needs: str = ""  # the Python package it needs
    extra: bool = False  # run only when named (--batch, --systems)
    feature: str = ""  # a --features entry: what install and enqueue set up (common.FEATURES)

    def unavailable(self) -> str | None:
        """Why this system cannot run here, or None."""
        if self.kind == "node":
            if shutil.which("node") is None:
                return "node is not installed"
            package = self.name.removesuffix("-batched")
            if not os.path.exists(os.path.join(PEERS, "node_modules", package, "package.json")):
                return f"{package} is not installed (npm ci in bench/peers, or make bench)"
        elif self.kind == "oban" and not os.path.exists(OBAN_PYTHON):
            return "bench/peers/.venv-oban is missing (oban needs Python >= 3.12; make bench makes it)"
        if self.needs and importlib.util.find_spec(self.needs) is None:
            return f"the Python package {self.needs} is not installed (the bench extra: make bench)"
        return None

    def run(self, *args: str) -> None:
        """install DSN or enqueue DSN JOBS, through the system's own API."""
        env = os.environ | {"BENCH_FEATURE": self.feature or "plain"}
        done = subprocess.run(self._command(*args), cwd=ROOT, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{self.name} {args[0]} failed: {(done.stderr or done.stdout)[-2000:]}")

    def _command(self, action: str, dsn: str, *args: str) -> list[str]:
        if self.kind == "py" or (self.kind == "cli" and action != "work"):
            return [sys.executable, PY_WORKERS, action, self.name.split(":")[0], dsn, *args]
        if self.kind == "node":
            return ["node", NODE_WORKERS, action, self.name, dsn, *args]
        if action == "install":
            return [OBAN_CLI, "install", "--dsn", dsn]
        return [OBAN_PYTHON, OBAN_WORKER, action, dsn, *args]

    def worker(self, dsn: str, sleep_ms: float) -> tuple[list[str], dict | None]:
        """A worker process's command and environment (None: this one's)."""
        if self.kind == "cli":  # as users start it; the DSN from $PYQUEUE_DSN
            target = CLI_TARGETS.get(self.name, "plain --queue burndown")
            cli = os.path.join(os.path.dirname(sys.executable), "pyqueue-sql")
            env = os.environ | {"PYQUEUE_DSN": dsn, "BENCH_GO": "1", "BENCH_SLEEP_MS": str(sleep_ms)}
            return [cli, *f"worker bench.peers.py_workers:{target} --concurrency {CONCURRENCY}".split()], env
        if self.kind == "py":
            return self._command("work", dsn, f"--concurrency={CONCURRENCY}", f"--sleep-ms={sleep_ms}"), None
        return self._command("work", dsn, str(CONCURRENCY), str(sleep_ms)), None


def feature(name: str, dialect: str) -> System:
    """A --features entry: `pyqueue-sql worker` (a plain def handler) on a queue with that feature on."""
    label = f"`pyqueue-sql worker`, {name}" + ("" if name == "plain" else f" ({common.FEATURES_SAID[name]})")
    return System(f"pyqueue-cli:{name}", dialect, label, "cli", LIVE, peer=False, feature=name)


LIVE = "SELECT count(*) FROM pyqueue_message"
DRIVERS = {"postgresql": ("psycopg", "psycopg"), "mysql": ("aiomysql", "pymysql")}  # (AsyncWorker, Worker)
# pyqueue-sql's two workers (not peers), `pyqueue-sql worker` (--systems, --batch), then the peers
SYSTEMS = [
    *(system for d in ("postgresql", "mysql") for system in (
        System("pyqueue-async", d, "**pyqueue-sql `AsyncWorker`** (async def handler)", "py", LIVE, peer=False, needs=DRIVERS[d][0]),
        System("pyqueue-threads", d, "**pyqueue-sql `Worker`** (def handler, threads; what `pyqueue-sql worker` runs)", "py", LIVE, peer=False, needs=DRIVERS[d][1]),
        System("pyqueue-cli", d, "`pyqueue-sql worker MODULE:handler --queue burndown` (a plain def handler)", "cli", LIVE, peer=False, extra=True),
        System("pyqueue-tasks", d, "`pyqueue-sql worker MODULE:app` (the same no-op as an `@app.task`)", "cli", LIVE, peer=False, extra=True),
        System("pyqueue-batch", d, "`pyqueue-sql worker MODULE:batch_app` (the same no-op as an `@app.task(batch=N)`, N from --batch)", "cli", LIVE, peer=False, extra=True),
    )),
    System("graphile-worker", "postgresql", "graphile-worker (npm)", "node", "SELECT count(*) FROM graphile_worker._private_jobs"),
    System("graphile-worker-batched", "postgresql", "graphile-worker (npm), its performance page's settings", "node", "SELECT count(*) FROM graphile_worker._private_jobs",
           note="as its performance page runs it (off by default): localQueue.size 500, completeJobBatchDelay 0, concurrency 16 per process"),
    System("pg-boss", "postgresql", "pg-boss (npm)", "node", "SELECT count(*) FROM pgboss.job WHERE state IN ('created', 'retry', 'active')",
           note="work(localConcurrency 16, batchSize 10, burstWhenBatchFull): 16 loops per process, each running its batch one job at a time"),
    System("pgmq", "postgresql", "pgmq: read-batch/delete loop in threads (pgmq ships no runtime)", "py", "SELECT count(*) FROM pgmq.q_burndown",
           needs="pgmq", note="16 threads x pgmq.read(10) + pgmq.delete(ids)"),
    System("oban", "postgresql", "oban (its Python port)", "oban", "SELECT count(*) FROM oban_jobs WHERE state IN ('available', 'scheduled', 'executing', 'retryable')"),
    System("pgqueuer", "postgresql", "PGQueuer", "py", "SELECT count(*) FROM pgqueuer", needs="pgqueuer",
           note="max_concurrent_tasks 16 forces batch_size <= 8 (default 10)"),
    System("awa", "postgresql", "awa-pg", "py", "SELECT count(*) FROM awa.jobs WHERE state NOT IN ('completed', 'failed', 'cancelled')", needs="awa"),
    System("procrastinate", "postgresql", "procrastinate", "py", "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')", needs="procrastinate"),
    System("handrolled", "mysql", "hand-rolled threaded SKIP LOCKED worker", "py", "SELECT count(*) FROM job", needs="pymysql",
           note="16 threads x (SELECT 100 FOR UPDATE SKIP LOCKED + UPDATE, COMMIT; DELETE ids), READ COMMITTED"),
]  # fmt: skip


def most_in_window(times, per: float) -> int:
    """The most of the times (seconds) in any window [x, x + per)."""
    t = sorted(times)
    return max((bisect.bisect_left(t, x + per) - i for i, x in enumerate(t)), default=0)


def _kill(procs: list[subprocess.Popen]) -> None:
    """Ends the worker processes (each leads its process group) at once: a graceful stop adds waiting."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    for p in procs:
        p.wait()


def drain(system: System, dsn: str, jobs: int, sleep_ms: float, cap: float) -> dict:
    """Starts the worker processes on the full backlog; returns jobs done, seconds, jobs/s."""
    counter = common.raw_connect(system.dialect, dsn)
    procs: list[subprocess.Popen] = []
    # the workers' logs go to files (a pipe nobody reads would block a chatty worker)
    logs = [tempfile.TemporaryFile(mode="w+") for _ in range(PROCESSES)]
    starts, units = tempfile.NamedTemporaryFile(), set()  # WINDOWS: job starts; (unit, delivery) of the rate

    def log_tail(p: subprocess.Popen) -> str:
        (log := logs[procs.index(p)]).seek(0)
        return log.read()[-2000:]

    try:
        cur = counter.cursor()
        command, env = system.worker(dsn, sleep_ms)
        env = env | {"BENCH_STARTS": starts.name} if system.feature in WINDOWS else env
        pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
        spawned = time.perf_counter()  # the clock from spawn: imports and start-up counted
        procs += [subprocess.Popen(command, cwd=ROOT, env=env, stderr=log, **pipes) for log in logs]
        for p in procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                _kill(procs)
                raise RuntimeError(f"{system.name} worker did not start: {line}{log_tail(p)}")
            threading.Thread(target=p.stdout.read, daemon=True).start()  # what it prints later: dropped
        cpu0 = [common.process_cpu(p.pid) for p in procs]  # start-up and imports: not counted
        pg = system.dialect == "postgresql"  # PostgreSQL: its backends but the counter's (None: elsewhere)
        server0 = common.sessions_cpu(cur, strict=True) if pg else None  # backends opened later start from 0
        mysqld = None if pg else common.server_pid(system.dialect, dsn)  # MariaDB: the whole server process
        mysqld0 = common.server_cpu(system.dialect, mysqld)
        ready = (started := time.perf_counter()) - spawned  # spawn to the slower process's `ready`
        for p in procs:
            print("go", file=p.stdin, flush=True)
        first = None  # seconds until the first job was done: the runtime's own start-up
        for i in itertools.count():
            time.sleep(POLL)
            remaining = int(common.query(counter, system.remaining_sql)[0][0])
            elapsed = time.perf_counter() - started
            if first is None and remaining < jobs:
                first = round(elapsed, 3)
            last = remaining == 0 or elapsed >= cap  # WINDOWS: a unit's time changes once a per at most
            if system.feature in WINDOWS and (i % 10 == 0 or last):
                units.update(common.query(counter, "SELECT slot_no, used_at FROM pyqueue_rate_slot"))
            if last:
                break
            if dead := [p for p in procs if p.poll() is not None]:
                _kill(procs)
                raise RuntimeError(f"{system.name} worker exited early: {log_tail(dead[0])}")
        done = jobs - remaining
        cpu = [common.process_cpu(p.pid) for p in procs]  # the worker processes' own CPU, all threads
        server = common.sessions_cpu(cur, strict=True) if pg else None  # the workers' sessions, still open
        known = done and None not in cpu + cpu0
        spent = None  # the server's CPU from the go
        if server is not None and server0 is not None:
            spent = sum(v - server0.get(pid, 0.0) for pid, v in server.items())
        elif mysqld0 is not None and (mysqld1 := common.server_cpu(system.dialect, mysqld)) is not None:
            spent = mysqld1 - mysqld0
        server_us = round(spent / done * 1e6, 1) if done and spent is not None else None
        worker_us = round((sum(cpu) - sum(cpu0)) / done * 1e6, 1) if known else None
        life = dict(spawn_rate=done / (elapsed + ready), ready_s=round(ready, 3))
        life |= dict(life_cpu_us_per_job=round(sum(cpu) / done * 1e6, 1) if known else None)
        life["spawn_first_job_s"] = round(first + ready, 3) if first is not None else None
        out = life | dict(cpu_us_per_job=worker_us, server_cpu_us_per_job=server_us, first_job_s=first)
        out["backends"] = len(server) if server is not None else None
        if per := WINDOWS.get(system.feature, (0, 0))[1]:
            out["most_delivered"] = most_in_window([u.timestamp() for _, u in units if u], per)
            out["most_started"] = most_in_window(map(float, starts.read().split()), per)
        return out | dict(jobs=jobs, done=done, seconds=elapsed, rate=done / elapsed, capped=remaining > 0)
    finally:
        _kill(procs)
        for c in (counter, *logs, starts):
            c.close()


def measure(system: System, workload: str, jobs: int, cap: float, state: str = "fresh") -> dict:
    """One drain of a fresh queue (VACUUM ANALYZE) or a churned one (drained once uncounted, enqueued again)."""
    sleep_ms = WORKLOADS[workload][1]
    tag = "bd_" + "".join(c if c.isalnum() else "_" for c in system.name)[:20]
    with common.database(system.dialect, tag, install=False) as dsn:
        t0 = time.perf_counter()
        system.run("install", dsn)
        t1 = time.perf_counter()
        system.run("enqueue", dsn, str(jobs))
        extra = {}
        if state == "churned":
            first = drain(system, dsn, jobs, sleep_ms, max(cap, 120.0))
            extra["churn_pass"] = {k: first[k] for k in ("done", "seconds", "rate", "cpu_us_per_job")}
            if first["capped"]:
                raise RuntimeError(f"the churn pass left {jobs - first['done']} jobs")
            system.run("enqueue", dsn, str(jobs))
        elif system.dialect == "postgresql":
            common.execute(system.dialect, dsn, "VACUUM ANALYZE")
        t2 = time.perf_counter()
        churned = " + churned" if extra else ""
        print(f"installed {t1 - t0:.1f} s, enqueued{churned} {t2 - t1:.1f} s, ", end="", flush=True)
        result = drain(system, dsn, jobs, sleep_ms, cap)
        return result | extra | {"install_s": round(t1 - t0, 2), "enqueue_s": round(t2 - t1, 2)}


def summarize(results: list[dict], systems: list[System], workloads: list[str], meta: dict) -> str:
    states = meta.get("states") or ["fresh"]
    key = lambda r: (r["system"], r["dialect"], r["workload"], r.get("state", "fresh"))  # noqa: E731
    lines = [
        "# Burn-down: each system's own worker draining a backlog",
        "",
        f"Command: `{meta['command']}`; {meta['rounds_done']} of {meta['rounds']} round(s) done, {PROCESSES} worker processes x {CONCURRENCY} handlers, "
        f"cap {meta['cap']:g} s; {meta['started']} on {meta['host']} ({meta['cpus']} CPUs), load average {meta['load_before']} before, {meta['load_after']} after. "
        "Jobs/s from the workers' go to the last job done; worker CPU from the go (+ its PostgreSQL server sessions', or the whole MariaDB server process's, "
        "whatever else it served meanwhile); from spawn: imports and start-up included; ratio to the dialect's best peer (none: its first system) within "
        f"each round; medians over rounds (min-max). Method: bench/README.md, Burn-down; autovacuum as configured ({meta.get('autovacuum') or 'not read'}).",
        "",
    ]
    for state, dialect in itertools.product(states, ("postgresql", "mysql")):
        if not (ds := [s for s in systems if s.dialect == dialect]):
            continue
        lines += [f"## {'PostgreSQL' if dialect == 'postgresql' else 'MySQL/MariaDB'}, {state} queue", ""]
        header = ["worker"]
        for w in workloads:
            ms = WORKLOADS[w][1]
            limit = ms and f"{ms:g} ms each (limit {PROCESSES * CONCURRENCY * 1000 / ms:,.0f})"
            header += [f"{limit or 'no-op'}: jobs/s", f"vs {meta['baseline'].get(dialect) or 'best peer'}"]
            header += ["worker CPU µs/job", "+ its server sessions' CPU µs/job"]
            header += ["from spawn: jobs/s", "worker CPU µs/job, whole life", "spawn to first job done, s"]
        rows, notes = [], [f"- {s.label}: {s.note}" for s in ds if s.note]
        for s in ds:
            row = [s.label]
            for w in workloads:
                rs = [r for r in results if key(r) == (s.name, dialect, w, state)]
                ok = [r for r in rs if "rate" in r]
                if s.name in meta["unavailable"].get(dialect, {}) or not ok:
                    row += ["not run" if not rs else f"failed: {rs[0]['error'][:80]}", *[""] * 6]
                    continue
                rates = [r["rate"] for r in ok]
                capped = " (capped)" if any(r["capped"] for r in ok) else ""
                rng = f" ({min(rates):,.0f}-{max(rates):,.0f})" if len(rates) > 1 else ""
                ratios = [r["vs_best_peer"] for r in ok if r.get("vs_best_peer") is not None]
                row.append(f"{statistics.median(rates):,.0f}{rng}{capped}")
                row.append(f"{statistics.median(ratios):.2f}x" if ratios else "")
                for field in COLUMNS:
                    got = [r[field] for r in ok if r.get(field) is not None]
                    f = ".2f" if field.endswith("_s") else ",.0f"
                    wide = len(got) > 1 and field in COLUMNS[3:]
                    spread = f" ({min(got):{f}}-{max(got):{f}})" if wide else ""
                    row.append(f"{statistics.median(got):{f}}{spread}" if got else "")
            rows.append(row)
        lines += [*common.table(header, rows), ""]
        notes += [f"- {n}: NOT RUN here: {why}" for n, why in meta["unavailable"].get(dialect, {}).items()]
        for s, w in itertools.product([s for s in ds if s.feature in WINDOWS], workloads):
            got = [r for r in results if key(r) == (s.name, dialect, w, state) and "most_started" in r]
            most = ", ".join(f"{r['most_delivered']:,} / {r['most_started']:,}" for r in got)
            notes.append(f"- {s.feature}, {w}: the most deliveries / job starts in a window of per: {most}")
        if notes:
            lines += notes + [""]
    return "\n".join(lines)


def _vacuum_settings(dialects: list[str]) -> str:
    """What cleans up after a churn on each server, as configured there (nothing is changed)."""
    said = []
    for dialect in dialects:
        name = "autovacuum" if dialect == "postgresql" else "innodb_purge_threads"
        try:
            value = common.settings(dialect, common.ADMIN[dialect], name).get(name, "?")
        except Exception as exc:  # the server is not there: the run reports it anyway
            value = type(exc).__name__
        said.append(f"{'PostgreSQL' if dialect == 'postgresql' else 'InnoDB purge,'} {name} = {value}")
    return "; ".join(said)


def _bytecode() -> None:
    """The workers start from bytecode caches as installed (pip writes them), also under PYTHONDONTWRITEBYTECODE."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for folder in {os.path.dirname(os.path.abspath(pyqueue_sql.__file__)), HERE}:
        compileall.compile_dir(folder, quiet=2)


def main() -> None:
    ap = common.parser(
        __doc__,
        ("--rounds", 3, "rounds, the systems' order rotating"),
        ("--cap", 30.0, "seconds a drain may take (then jobs done / elapsed)"),
        ("--quick", False, "5,000 / 2,000 jobs, 1 round, 20 s cap; writes to bench/results/"),
        ("--jobs", 0, "jobs per drain (default: 50,000 no-op, 20,000 sleep10)"),
        ("--systems", None, "comma-separated: " + ", ".join(sorted({s.name for s in SYSTEMS}))),
        ("--dialects", "postgresql,mysql", "comma-separated"),
        ("--workloads", ",".join(WORKLOADS), "comma-separated"),
        ("--states", ",".join(STATES), "comma-separated: fresh, churned (bench/README.md, Burn-down)"),
        ("--out", None, "directory of burndown.md/.json (default bench/latest, --quick bench/results)"),
        ("--name", None, "the results' file name (default burndown, burndown-batch, burndown-features)"),
        ("--batch", 0, "`pyqueue-sql worker`: an @app.task against the same job as a batch task of N"),
        ("--features", None, "`pyqueue-sql worker` with each on, to plain: " + ",".join(common.FEATURES)),
    )
    args = ap.parse_args()
    os.environ["BENCH_BATCH"] = str(args.batch or 100)  # the batch task's size, read by py_workers
    if args.batch:
        args.systems = args.systems or "pyqueue-tasks,pyqueue-batch"
        args.workloads = args.workloads if "--workloads" in sys.argv else "noop"
    common.exit_on_sigterm()
    _bytecode()
    if args.quick:
        args.rounds, args.cap = 1, min(args.cap, 20.0)
    dialects = common.names(args.dialects)
    workloads = common.names(args.workloads, WORKLOADS, ap, "workloads")
    states = common.names(args.states, STATES, ap, "states")
    wanted = set(common.names(args.systems, sorted({s.name for s in SYSTEMS}), ap, "systems"))
    global PROCESSES
    features = common.names(args.features, list(common.FEATURES), ap, "features") if args.features else []
    PROCESSES = 1 if features else PROCESSES  # one `pyqueue-sql worker`, as a user starts it
    features = ["plain", *(f for f in features if f != "plain")] if features else []  # the reference first
    chosen = lambda s: s.name in wanted if wanted else not s.extra and not features  # noqa: E731
    systems = [s for s in SYSTEMS if s.dialect in dialects and chosen(s)]
    systems += [feature(f, d) for d in dialects for f in features]
    unavailable: dict[str, dict[str, str]] = {}
    for s in systems:
        if why := s.unavailable():
            unavailable.setdefault(s.dialect, {})[s.name] = why
            print(f"burndown: {s.name} ({s.dialect}) NOT RUN: {why}", flush=True)
    runnable = [s for s in systems if s.name not in unavailable.get(s.dialect, {})]
    meta = dict(command=common.command(), started=common.now_utc("%Y-%m-%d %H:%M UTC"), rounds=args.rounds)
    meta |= dict(cap=args.cap, host=platform.node(), cpus=os.cpu_count(), load_before=common.loadavg())
    meta |= dict(unavailable=unavailable, states=states, autovacuum=_vacuum_settings(dialects))
    # the ratio's reference when no peer runs: the dialect's first system
    firsts = {d: next((s.name for s in systems if s.dialect == d), None) for d in dialects}
    peerless = [d for d in dialects if not any(s.peer for s in systems if s.dialect == d)]
    meta["baseline"] = {d: firsts[d] if d in peerless else None for d in dialects}
    results: list[dict] = []
    mode = "-features" if features else "-batch" if args.batch else ""
    out = args.out or os.path.join(HERE, "results" if args.quick or mode else "latest")
    name = args.name or "burndown" + mode

    def write(rounds_done: int, tag: str | None = None) -> None:
        """Rewrites the summary after each round: a run cut short keeps what it measured."""
        meta.update(rounds_done=rounds_done, load_after=common.loadavg())
        md = summarize(results, systems, workloads, meta)
        common.write(out, name, md, {"meta": meta, "results": results}, tag)

    total, n, t0 = args.rounds * len(runnable) * len(workloads) * len(states), 0, time.perf_counter()
    for round_ in range(args.rounds):
        for state, w, dialect in itertools.product(states, workloads, dialects):
            jobs = args.jobs or (WORKLOADS[w][2] if args.quick else WORKLOADS[w][0])
            ds, round_results = [s for s in runnable if s.dialect == dialect], []
            order = common.rotated(ds, round_)
            for s in order:
                n += 1
                at = f"[{n}/{total} {time.perf_counter() - t0:5.0f}s] round {round_ + 1}"
                print(f"{at} {dialect} {state} {w} {s.name}: ", end="", flush=True)
                r = dict(round=round_ + 1, dialect=dialect, workload=w, state=state, system=s.name, jobs=jobs)
                try:
                    r.update(measure(s, w, jobs, args.cap, state))
                    rate = f"{r['done']:,}/{jobs:,} in {r['seconds']:.2f} s = {r['rate']:,.0f} jobs/s"
                    print(rate + (" (capped)" if r["capped"] else ""), flush=True)
                except Exception as exc:  # reported in the summary, the run goes on
                    r["error"] = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
                    print(f"FAILED: {exc}", flush=True)
                r["load"] = common.loadavg()
                round_results.append(r)
            # the ratio: to the best peer of the round, or with none, to the dialect's first system
            peers = [r["rate"] for r, s in zip(round_results, order) if "rate" in r and s.peer]
            first = [r["rate"] for r in round_results if r["system"] == ds[0].name and "rate" in r]
            best = max(peers) if peers else (first[0] if first else None)
            for r in round_results:
                r["vs_best_peer"] = r["rate"] / best if best and "rate" in r else None
            results.extend(round_results)
        write(round_ + 1)
    write(args.rounds, "burndown: ")


if __name__ == "__main__":
    main()

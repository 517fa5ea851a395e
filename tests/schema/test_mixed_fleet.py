"""A rolling upgrade from the newest release (RELEASES) to head, under load, on both dialects.

The released version is built from its commit (``git archive`` of it, run from that tree with
PYTHONPATH: the layout a source checkout has, no network). With it: the schema installed into a
fresh database (its `pyqueue-sql migrate`), the queues set up, its producers and its
`pyqueue-sql worker` running (delayed, retried, dead-lettered, grouped, limited, scheduled and
dependent messages, results kept; tests/schema/fleet_app.py). In the middle: head's `pyqueue-sql
migrate`, then head's worker and producer beside the old ones, then the old worker stopped with
SIGTERM. Checked: every message pushed by either version handled exactly once, or failed and
dead-lettered as its policy says; no call of either version failed; the schedule lost no
occurrence; no child was stranded; both workers stopped cleanly without an error in their logs.
"""

from __future__ import annotations

import collections
import datetime as dt
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import dialects, migrate

from .releases import ROOT, export, latest, require_history

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
# What a worker logs above info during the upgrade: only the failures the application asks for
# (a flaky message retried, a doomed one dead-lettered). Anything else (a call that failed, a
# reserve loop restarted, a reservation lost or abandoned) fails the test; a stopping worker
# hands back what it prefetched and did not start (info), for the other worker to take.
PLANNED_FAILURE = re.compile(r"/(flaky|doomed) attempt \d")
TROUBLE = {"dispatch_error", "error", "lost", "lease_low", "abandon"}


@pytest.fixture(scope="session")
def released_tree(tmp_path_factory) -> Path:
    """The newest release's tree (``git archive`` of its commit), made once for every test process."""
    release = latest()
    require_history(release.commit)
    base = tmp_path_factory.getbasetemp()
    base = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    tree = base / f"release-{release.version}-{release.commit[:12]}"
    with open(f"{tree}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (tree / "pyqueue_sql" / "__init__.py").is_file():
            shutil.rmtree(tree, ignore_errors=True)
            export(release.commit, tree)
    return tree


class Fleet:
    def __init__(self, dsn: str, released: Path, tmp_path: Path) -> None:
        self.app = tmp_path / "app"
        self.app.mkdir()
        shutil.copy(HERE / "fleet_app.py", self.app / "fleet_app.py")
        self.log = tmp_path / "fleet.log"
        self.log.touch()
        self.trees = {"old": released, "new": ROOT}
        self.dsn = dsn
        self.processes: list[subprocess.Popen] = []

    def env(self, version: str, name: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYQUEUE_", "PYTEST_"))}
        env.update(
            PYTHONPATH=f"{self.trees[version]}{os.pathsep}{self.app}",
            PYQUEUE_DSN=self.dsn,
            FLEET_LOG=str(self.log),
            FLEET_NAME=name,
        )
        return env

    def run(self, version: str, *argv: str) -> str:
        done = subprocess.run(
            [sys.executable, *argv],
            env=self.env(version, version),
            cwd=self.app,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, (version, argv, done.stdout, done.stderr)
        return done.stdout

    def start(self, version: str, name: str, *argv: str) -> subprocess.Popen:
        process = subprocess.Popen(
            [sys.executable, *argv],
            env=self.env(version, name),
            cwd=self.app,  # `python -m` puts the working directory first on sys.path
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def worker(self, version: str) -> subprocess.Popen:
        cli = ["-m", "pyqueue_sql.cli", "worker", "fleet_app:worker", "--log-format", "json"]
        return self.start(version, f"{version}-worker", *cli)

    def producer(self, version: str, seconds: float) -> subprocess.Popen:
        return self.start(
            version, f"{version}-producer", str(self.app / "fleet_app.py"), "produce", str(seconds), version
        )

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _stopped(process: subprocess.Popen, timeout: float = 40) -> tuple[int, list[dict]]:
    """Waits for a worker to end; its exit code and its JSON log lines."""
    _out, err = process.communicate(timeout=timeout)
    lines = []
    for line in err.splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            lines.append({"level": "error", "msg": line, "event": "not json"})
    return process.returncode, lines


def _settled(pushed: dict, records: list[dict]) -> bool:
    done = collections.Counter(
        (r["kind"], r["key"])
        for r in records
        if r["event"] == "handled" or (r["event"] == "failed" and r["kind"] == "doomed")
    )
    return all(
        done[(kind, key)] >= (fleet_app_max_attempts() if kind == "doomed" else 1) for (kind, key) in pushed
    )


def fleet_app_max_attempts() -> int:
    return 3


def _sql(dsn: str, statement: str) -> list[tuple]:
    connection = dialects.for_dsn(dsn).connect(dsn)
    try:
        cursor = connection.cursor()
        cursor.execute(statement)
        return list(cursor.fetchall())
    finally:
        connection.close()


# What a call of the old fleet may take while head's migrate runs (generous: the machine is shared;
# the figures are printed, and measured on a quiet machine by scripts/measure_upgrade_lock.py).
LATENCY_BOUND = 15.0


def _latency_during(records: list[dict], started: float, ended: float, leased: int, dsn: str) -> None:
    """The longest push and reserve of the old fleet that overlapped the migrate (printed), each
    under LATENCY_BOUND; the probe's lease, taken before the migrate, still held after it."""
    calls = collections.defaultdict(list)
    for r in records:
        if (
            r["event"] in ("pushed", "probe_call")
            and r["started"] <= ended
            and r["started"] + r["took"] >= started
        ):
            calls[r.get("call", "push")].append(r["took"])
    assert calls["push"] and calls["reserve"], "the fleet pushed and reserved while migrate ran"
    flavor = dialects.for_dsn(dsn).name
    print(
        f"\n{flavor}: migrate took {ended - started:.2f} s with {leased} lease(s) live when it started; "
        f"longest push meanwhile {max(calls['push']) * 1000:.0f} ms ({len(calls['push'])} pushes), "
        f"longest reserve {max(calls['reserve']) * 1000:.0f} ms ({len(calls['reserve'])} reserves), "
        f"longest commit {max(calls['commit'] or [0]) * 1000:.0f} ms"
    )
    slow = {call: max(took) for call, took in calls.items() if max(took) >= LATENCY_BOUND}
    assert slow == {}, slow
    [committed] = [r for r in records if r["event"] == "lease_committed"]
    assert committed["held"], "the lease held across the migrate was lost"


def test_a_rolling_upgrade_from_the_release_under_load(fresh_database, released_tree, tmp_path):
    dsn = fresh_database("fleet")
    fleet = Fleet(dsn, released_tree, tmp_path)
    try:
        _upgrade_under_load(fleet)
    finally:
        fleet.kill_all()


def _upgrade_under_load(fleet: Fleet) -> None:
    release = latest()
    installed = fleet.run("old", "-m", "pyqueue_sql.cli", "migrate")
    assert "(none) -> 0001_baseline" in installed, installed
    fleet.run("old", str(fleet.app / "fleet_app.py"), "setup")
    old_worker = fleet.worker("old")
    old_producer = fleet.producer("old", 9)
    release_probe = fleet.app / "release-probe"
    probe = fleet.start("old", "old-probe", str(fleet.app / "fleet_app.py"), "probe", str(release_probe))
    time.sleep(3)

    # leases are live when migrate starts: the probe's, held across it, and the old worker's
    assert any(r["event"] == "lease_taken" for r in fleet.records()), probe.poll()
    leased = _sql(fleet.dsn, "SELECT COUNT(*) FROM pyqueue_message WHERE reserve_token IS NOT NULL")
    assert leased[0][0] > 0, leased
    started = time.time()
    upgraded = fleet.run("new", "-m", "pyqueue_sql.cli", "migrate")
    ended = time.time()
    assert f"0001_baseline -> {migrate.head()}" in upgraded, upgraded
    assert "0003_ready_order" in {r.revision for r in migrate._script().walk_revisions()}
    if dialects.for_dsn(fleet.dsn).name == "mysql":
        # what the old producer pushed while migrate ran has its place in the reserve order (the
        # statements after the routines set it; every routine now writes it)
        at_default = "SELECT COUNT(*) FROM pyqueue_message WHERE ready_at = '1970-01-01 00:00:01'"
        assert _sql(fleet.dsn, at_default) == [(0,)]
    release_probe.touch()
    assert probe.wait(timeout=60) == 0, probe.communicate()
    _latency_during(fleet.records(), started, ended, leased[0][0], fleet.dsn)
    new_worker = fleet.worker("new")
    new_producer = fleet.producer("new", 3)
    time.sleep(2)
    old_worker.send_signal(signal.SIGTERM)
    old_code, old_log = _stopped(old_worker)
    assert old_producer.wait(timeout=60) == 0, old_producer.communicate()
    assert new_producer.wait(timeout=60) == 0, new_producer.communicate()

    pushed = {(r["kind"], r["key"]): r["by"] for r in fleet.records() if r["event"] == "pushed"}
    deadline = time.monotonic() + 40
    while not _settled(pushed, fleet.records()) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(1.5)  # one more tick of the schedule, and any duplicate a bug would make
    new_worker.send_signal(signal.SIGTERM)
    new_code, new_log = _stopped(new_worker)
    records = fleet.records()

    # no call of either version failed, and both workers stopped cleanly
    assert [r for r in records if r["event"] == "call_failed"] == []
    for name, code, log in (("old", old_code, old_log), ("new", new_code, new_log)):
        odd = [
            e
            for e in log
            if (e.get("level") not in ("debug", "info") or e.get("event") in TROUBLE)
            and not (e.get("event") == "fail" and PLANNED_FAILURE.search(e.get("msg", "")))
        ]
        assert odd == [], (name, odd[:5])
        assert code == 0, (name, code, log[-5:])
    by = collections.Counter(r["by"] for r in records if r["event"] == "handled")
    assert by["old-worker"] > 0 and by["new-worker"] > 0, by
    assert {"old-producer", "new-producer"} <= set(pushed.values())

    # every message exactly once, or dead-lettered after its attempts
    handled = collections.Counter((r["kind"], r["key"]) for r in records if r["event"] == "handled")
    failed = collections.Counter((r["kind"], r["key"]) for r in records if r["event"] == "failed")
    wrong = []
    for (kind, key), producer in sorted(pushed.items()):
        want = (0, 3) if kind == "doomed" else (1, 2) if kind == "flaky" else (1, 0)
        if (handled[(kind, key)], failed[(kind, key)]) != want:
            wrong.append((kind, key, producer, handled[(kind, key)], failed[(kind, key)]))
    assert wrong == [], wrong[:10]
    strays = [k for k in handled if k not in pushed and k[0] != "tick"]
    assert strays == []
    with pyqueue_sql.connect(fleet.dsn) as db:
        doomed = sum(kind == "doomed" for kind, _ in pushed)
        assert db.queue("fleet_dead").stats().ready == doomed
        stats = db.queue("fleet").stats()
        # nothing left but the schedule's next occurrence (due after the worker stopped)
        assert stats.ready <= 1 and stats.reserved == 0 and stats.dead == doomed, stats
        # results kept, also of what the old worker handled
        for kind, key in sorted(pushed):
            if kind in ("plain", "parent"):
                assert db.queue("fleet").result(key, kind).result == {"done": key}, (kind, key)

    # children ran after their parents, none stranded (each was handled: checked above)
    order = {(r["kind"], r["key"]): i for i, r in enumerate(records) if r["event"] == "handled"}
    late = [k for k in pushed if k[0] == "child" and order[k] < order[("parent", k[1][: -len("-child")])]]
    assert late == []

    # the schedule: each occurrence handled once, and each commit pushed the next one (the first
    # boundary after it: an occurrence committed late skips the ones it missed, docs/contract.md,
    # queue_schedule_every), through the upgrade and up to the end
    assert [n for (kind, _), n in handled.items() if kind == "tick" and n != 1] == []
    ticks = sorted(
        (
            dt.datetime.strptime(r["key"].split("@", 1)[1], "%Y-%m-%dT%H:%M:%SZ").replace(
                tzinfo=dt.timezone.utc
            ),
            r["at"],
        )
        for r in records
        if r["event"] == "handled" and r["kind"] == "tick"
    )
    lost = [(a, b) for (a, handled_at), (b, _) in zip(ticks, ticks[1:]) if b.timestamp() > handled_at + 3]
    assert len(ticks) >= 8 and lost == [], (len(ticks), lost)
    assert ticks[-1][1] > max(r["at"] for r in records) - 3, "the schedule went on to the end"
    assert release.version  # the release the fleet started from (RELEASES)

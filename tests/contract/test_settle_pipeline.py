"""The example ETL pipeline (examples/pipeline) survives its stage processes being
SIGKILLed over and over, mid-flight: the sink receives every message exactly once."""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pyqueue_sql

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipeline" / "pipeline.py"
MESSAGES = 300
# A safety limit, not a speed target: the loop ends as soon as the sink has every message
# (seconds on a quiet machine); a loaded machine needs the leases of killed stages to expire.
DEADLINE_S = 240
MAX_KILLS = 25
# The kills stop once this many landed while the stage held reservations, what the test asks for:
# each kill is a stage process started again, about half a second of CPU (1.5 s a kill at a load
# of 12, when the stages got almost no work done until the kills stopped), and more of them prove
# no more. On a quiet machine every kill lands so (10 kills); a loaded one goes on to MAX_KILLS.
ENOUGH_HELD_KILLS = 10


def _example():
    spec = importlib.util.spec_from_file_location("pipeline_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _start(dsn: str, stage: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), "stage", stage, "--dsn", dsn, "--work-seconds", "0.02"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _sql(db, sql, params=None):
    cur = db.connection.cursor()
    try:
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        cur.close()


def _wait_until_holding(db, worker: str, proc: subprocess.Popen, patience: float = 10.0) -> int:
    """Waits until the stage process holds reservations, so that the kill lands mid-flight;
    returns how many it holds (0: it held none within the patience, as a stage with nothing
    upstream, or one a loaded machine has not started yet)."""
    until = time.monotonic() + patience
    while True:
        held = _sql(
            db,
            "SELECT count(*) FROM pyqueue_message WHERE reserved_by = %s AND reserve_token IS NOT NULL",
            (worker,),
        )[0][0]
        if held or time.monotonic() > until or proc.poll() is not None:
            return int(held)
        time.sleep(0.01)


def test_example_rewrites_payloads_stage_by_stage():
    pipeline = _example()
    parsed = pipeline.extract({"line": "rec-1, item 1, 3.25"})
    assert parsed == {"id": "rec-1", "name": "item 1", "amount": "3.25"}
    assert pipeline.transform(parsed) == {"id": "rec-1", "name": "ITEM 1", "amount_cents": 325}


@pytest.mark.slow
def test_sigkilled_stages_lose_and_duplicate_nothing(installed_database, dialect):
    dsn = installed_database("pipe")
    pipeline = _example()
    pipeline.setup(dsn)
    assert pipeline.feed(dsn, MESSAGES) == MESSAGES

    rng = random.Random(4)
    procs = {stage: _start(dsn, stage) for stage in pipeline.STAGES}
    kills = in_flight_kills = 0
    errors = []
    deadline = time.monotonic() + DEADLINE_S
    with pyqueue_sql.connect(dsn) as db:
        try:
            while time.monotonic() < deadline:
                loaded = _sql(db, "SELECT count(DISTINCT p_key) FROM pipeline_sink")[0][0]
                if loaded >= MESSAGES:
                    break
                time.sleep(rng.uniform(0.1, 0.3))  # the next kill waits for its stage to hold, too
                if kills >= MAX_KILLS or in_flight_kills >= ENOUGH_HELD_KILLS:  # enough: let it drain
                    continue
                stage = rng.choice(tuple(pipeline.STAGES))
                proc = procs[stage]
                held = _wait_until_holding(db, f"{stage}:{proc.pid}", proc)
                if proc.poll() is not None:  # it died on its own: that is a failure
                    errors.append((stage, proc.returncode, proc.stderr.read().decode()[-2000:]))
                elif not held:  # not holding yet (a loaded machine starts it slowly): a kill proves nothing
                    continue
                else:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    in_flight_kills += held > 0
                procs[stage] = _start(dsn, stage)
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                proc.wait()

        assert errors == []
        assert kills >= 10, kills  # ~6 s of work per stage at 0.1-0.3 s between kills
        print(f"{dialect}: {kills} SIGKILLs, {in_flight_kills} with reservations held")
        assert in_flight_kills >= ENOUGH_HELD_KILLS, (kills, in_flight_kills)
        rows = _sql(
            db,
            "SELECT p_key, count(*), min(name), min(amount_cents), max(attempts) "
            "FROM pipeline_sink GROUP BY p_key",
        )
        per_key = {key: int(n) for key, n, _, _, _ in rows}
        expected = {f"rec-{i:06d}" for i in range(MESSAGES)}
        missing = expected - set(per_key)
        doubled = {k: n for k, n in per_key.items() if n != 1}
        assert not missing, f"lost {len(missing)} after {kills} kills: {sorted(missing)[:5]}"
        assert not doubled, f"delivered more than once: {doubled}"
        assert set(per_key) == expected
        for key, _, name, cents, _ in rows:  # every payload went through both rewrites
            i = int(key.split("-")[1])
            assert (name, int(cents)) == (f"ITEM {i}", round(float(f"{i % 97}.{i % 100:02d}") * 100))
        for name in pipeline.QUEUES:
            s = db.queue(name).stats()
            assert (s.ready, s.delayed, s.reserved, s.dead) == (0, 0, 0, 0), s
        # the history shows each record leaving each stage; redeliveries happened
        outcomes = _sql(
            db,
            "SELECT queue_name, outcome, count(*), count(DISTINCT p_key), max(attempts) "
            "FROM pyqueue_history GROUP BY queue_name, outcome ORDER BY queue_name",
        )
        by_queue = {q: (o, int(n), int(d), int(a)) for q, o, n, d, a in outcomes}
        assert by_queue["etl.raw"][:1] == ("moved",) and by_queue["etl.raw"][2] == MESSAGES
        assert by_queue["etl.parsed"][:1] == ("moved",) and by_queue["etl.parsed"][2] == MESSAGES
        assert by_queue["etl.clean"] == ("committed", MESSAGES, MESSAGES, by_queue["etl.clean"][3])
        if dialect == "postgresql":  # archive and move are one transaction there
            assert by_queue["etl.raw"][1] == MESSAGES and by_queue["etl.parsed"][1] == MESSAGES
        assert max(a for _, _, _, a in by_queue.values()) > 1, "no message was ever redelivered"

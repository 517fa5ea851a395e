"""Periodic tasks (@app.periodic over a task, every= or cron=) on the contract's schedules, both
dialects: the schedules app.create_queues() creates (and leaves alone when unchanged), the
occurrence's time given to the function that asks for it, each occurrence run once by two
workers racing for it, and the declarations refused at import."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from pyqueue_sql import App, InvalidArgumentError, current_job

from ..helpers import queue_name


@pytest.fixture
def app(dsn):
    a = App(dsn, queue=queue_name("p"))
    yield a
    a.close()


def _schedules(db, queue):
    return {(s.key, s.kind): s for s in db.queue(queue).schedules()}


def test_create_queues_creates_the_schedules_and_leaves_unchanged_ones_as_they_are(app, db, dsn):
    @app.periodic(every=60)
    @app.task
    def beat() -> None: ...

    @app.periodic(cron="*/5 * * * *", key="five")
    @app.periodic(every=dt.timedelta(hours=1), key="hourly", kwargs={"n": 2})
    @app.task
    def report(at: dt.datetime, n: int = 1) -> None: ...

    app.create_queues()
    s = _schedules(db, app.default_queue)
    assert set(s) == {("beat", "beat"), ("five", "report"), ("hourly", "report")}
    assert (s["beat", "beat"].every_s, s["beat", "beat"].cron, s["beat", "beat"].payload) == (60, None, {})
    assert (s["hourly", "report"].every_s, s["hourly", "report"].payload) == (3600, {"n": 2})
    five = s["five", "report"]
    assert five.cron == "*/5 * * * *" and five.every_s is None and five.payload == {}
    assert five.next_at.minute % 5 == 0 and five.next_at.second == 0
    # the pending occurrence is an ordinary delayed message, keyed by its time
    occurrence = f"five@{five.next_at:%Y-%m-%dT%H:%M:%SZ}"
    assert db.queue(app.default_queue).message(occurrence, "report") is not None

    # a second setup (another deploy) changes nothing: the same pending occurrences
    assert app.schedule_periodic() == []
    app.create_queues()
    assert _schedules(db, app.default_queue) == s

    # a changed cadence replaces that schedule only
    other = App(dsn, queue=app.default_queue)
    try:
        other.periodic(every=120)(other.task(beat.fn))
        changed = other.schedule_periodic()
        assert [(p.key, p.every) for p in changed] == [("beat", 120)]
        assert _schedules(db, app.default_queue)["beat", "beat"].every_s == 120
    finally:
        other.close()


def test_the_function_gets_the_occurrence_time_as_a_datetime_or_a_unix_timestamp(app, db):
    seen: list[tuple[str, object, str]] = []

    @app.periodic(every=1)
    @app.task
    def tick(at: dt.datetime) -> None:
        seen.append(("tick", at, current_job().key))

    @app.periodic(every=1, queue=app.default_queue)  # a plain function: made a task
    def tock(timestamp: int, label: str = "x") -> None:
        seen.append(("tock", timestamp, current_job().key))

    app.create_queues()
    due = max(s.next_at for s in _schedules(db, app.default_queue).values())
    time.sleep(max(0.0, (due - dt.datetime.now(dt.timezone.utc)).total_seconds()) + 0.2)
    report = app.run_pending()
    assert report.succeeded >= 2, report
    ticks = [(at, key) for name, at, key in seen if name == "tick"]
    tocks = [(ts, key) for name, ts, key in seen if name == "tock"]
    assert ticks and tocks, seen
    for at, key in ticks:
        assert isinstance(at, dt.datetime) and at.tzinfo is not None and at.microsecond == 0
        assert key == f"tick@{at.astimezone(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
    for ts, key in tocks:
        assert type(ts) is int
        assert key == f"tock@{dt.datetime.fromtimestamp(ts, dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
    # deferred by hand, the time is an argument like any other
    tick.defer(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc))
    seen.clear()
    app.run_pending()
    assert ("tick", dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)) in [(n, a) for n, a, _ in seen]


def test_an_async_periodic_task_gets_its_time_too(app, db):
    seen: list[tuple[dt.datetime, str]] = []

    @app.periodic(every=1)
    @app.task
    async def atick(when: dt.datetime | None = None) -> None:
        assert when is not None
        seen.append((when, current_job().key))

    app.create_queues()
    due = _schedules(db, app.default_queue)["atick", "atick"].next_at
    time.sleep(max(0.0, (due - dt.datetime.now(dt.timezone.utc)).total_seconds()) + 0.2)
    assert app.run_pending().succeeded >= 1
    assert seen and all(key == f"atick@{at:%Y-%m-%dT%H:%M:%SZ}" for at, key in seen), seen


def test_each_occurrence_runs_once_across_two_workers(app, db):
    runs: list[tuple[str, dt.datetime]] = []
    lock = threading.Lock()

    @app.periodic(every=1)
    @app.task
    def beat(at: dt.datetime) -> None:
        with lock:
            runs.append((current_job().key, at))

    app.create_queues()
    # two workers, each on its own connections, polling often so that both race for every occurrence
    workers = [app.worker(concurrency=2, register=False, poll_fallback=0.05, name=f"w{i}") for i in range(2)]
    by_worker: dict[str, int] = {}
    for w in workers:
        w.on_outcome.append(
            lambda job, outcome, error, w=w: by_worker.__setitem__(w.name, by_worker.get(w.name, 0) + 1)
        )
    threads = [
        threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True) for w in workers
    ]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(runs) < 5:
            time.sleep(0.1)
    finally:
        for w in workers:
            w.stop(reason="test over")
        for t in threads:
            t.join(timeout=30)
    keys = [k for k, _ in runs]
    assert len(runs) >= 5, runs
    assert len(keys) == len(set(keys)), f"an occurrence ran twice: {sorted(keys)}"
    times = sorted(at for _, at in runs)
    assert all(b > a for a, b in zip(times, times[1:]))
    assert all(k == f"beat@{at:%Y-%m-%dT%H:%M:%SZ}" for k, at in runs)
    assert sum(by_worker.values()) == len(runs)


def test_declarations_that_cannot_run_are_refused_at_once(app):
    @app.task
    def needs(n: int) -> None: ...

    with pytest.raises(InvalidArgumentError, match="argument 'n' has no value"):
        app.periodic(every=60)(needs)
    with pytest.raises(InvalidArgumentError, match="one of every= .* or cron="):
        app.periodic()
    with pytest.raises(InvalidArgumentError, match="one of every="):
        app.periodic(every=60, cron="* * * * *")
    with pytest.raises(InvalidArgumentError, match="every must be whole seconds"):
        app.periodic(every=1.5)
    with pytest.raises(InvalidArgumentError, match="runs on queue"):
        app.periodic(every=60, queue="elsewhere", kwargs={"n": 1})(needs)
    app.periodic(every=60, kwargs={"n": 1})(needs)
    with pytest.raises(InvalidArgumentError, match="already has a periodic schedule 'needs'"):
        app.periodic(every=30, kwargs={"n": 2})(needs)
    app.periodic(every=30, key="often", kwargs={"n": 2})(needs)
    assert [(p.key, p.every, p.payload) for p in app.periodic_tasks] == [
        ("needs", 60, {"n": 1}),
        ("often", 30, {"n": 2}),
    ]


def test_a_malformed_cron_is_refused_by_the_contract_at_setup(app):
    @app.periodic(cron="0 24 * * *")
    @app.task
    def nightly() -> None: ...

    with pytest.raises(InvalidArgumentError, match='cron hour field "24"'):
        app.create_queues()


@pytest.mark.slow  # 12 s per dialect: six runs of a 2 s cadence
def test_a_periodic_task_runs_on_its_cadence_under_a_worker_on_default_settings(app):
    """Gaps read from the handler's own clock: a worker on its default settings (LISTEN on
    PostgreSQL, its 5 s poll fallback) wakes for each occurrence at its time; a worker that slept
    to its fallback instead would show gaps of up to 5 s."""
    seen: list[tuple[float, dt.datetime]] = []

    @app.periodic(every=2)
    @app.task
    def beat(at: dt.datetime) -> None:
        seen.append((time.time(), at))

    app.create_queues()
    worker = app.worker(concurrency=1, register=False)
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and len(seen) < 6:
            time.sleep(0.05)
    finally:
        worker.stop(reason="test over")
        thread.join(timeout=30)
    assert len(seen) >= 6, seen
    # from the second run on (the first may start late: it waits for the worker to start)
    gaps = [round(b[0] - a[0], 2) for a, b in zip(seen[1:], seen[2:])]
    assert all(abs(g - 2.0) <= 0.3 for g in gaps), gaps
    # each run starts within 0.3 s of its occurrence's time, one occurrence after the other
    assert all(0 <= ran - at.timestamp() <= 0.3 for ran, at in seen[1:]), seen
    assert all((b[1] - a[1]).total_seconds() == 2 for a, b in zip(seen, seen[1:]))


def test_pyqueue_sql_setup_creates_an_apps_queues_and_schedules(dsn, db, capsys, monkeypatch):
    import importlib

    from pyqueue_sql import cli

    from . import periodic_app

    queue = queue_name("p")
    monkeypatch.setenv("PYQUEUE_TEST_QUEUE", queue)
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    importlib.reload(periodic_app)
    assert cli.main(["setup", "tests.tasks.periodic_app:app", "--dsn", dsn]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"queues: {queue}",
        f"schedule {queue} hourly hourly: every 3600 s (created or replaced)",
        f"schedule {queue} five report: cron */5 * * * * (created or replaced)",
    ]
    s = _schedules(db, queue)
    assert (s["hourly", "hourly"].every_s, s["five", "report"].cron) == (3600, "*/5 * * * *")
    assert db.queue(queue).settings().result_retention is not None  # report stores its results
    # at the next deploy: nothing changes
    assert cli.main(["setup", "tests.tasks.periodic_app:app", "--dsn", dsn]) == 0
    assert [line.rsplit("(", 1)[1] for line in capsys.readouterr().out.splitlines()[1:]] == ["unchanged)"] * 2
    assert _schedules(db, queue) == s
    # not an App: one line, exit 2
    assert cli.main(["setup", "tests.tasks.periodic_app:queue_of_nothing", "--dsn", dsn]) == 2
    assert "has no attribute" in capsys.readouterr().err


FAILING_PERIODIC_APP = """
    import datetime as dt, os
    from pyqueue_sql import App

    app = App({dsn!r})

    def record(line):
        with open(os.environ["PYQUEUE_TEST_RECORD"], "a") as f:
            f.write(line + "\\n")

    @app.periodic(every=1)
    @app.task(queue={doomed!r})
    def doomed(at: dt.datetime) -> None:
        record(f"doomed {{at.timestamp():.0f}}")
        raise RuntimeError("this occurrence fails")

    @app.periodic(every=1)
    @app.task(queue={retried!r})
    def retried(at: dt.datetime) -> None:
        record(f"retried {{at.timestamp():.0f}}")
        raise RuntimeError("this occurrence fails, and is retried in 30 s")
"""


@pytest.mark.slow  # about 7 s per dialect: four occurrences of a 1 s cadence, then setup
def test_a_periodic_task_keeps_its_cadence_when_occurrences_fail_and_setup_repairs_a_lost_one(
    tmp_path, dsn, db, raw
):
    """As a user meets it, under a real `pyqueue-sql worker`: a periodic task that raises on a
    queue with max_attempts=1 (each occurrence given up at once) runs at each of its times, and so
    does one whose failed occurrences wait 30 s for their retry (they hold back nothing: the next
    occurrence runs at its own time beside them). Then a schedule whose pending occurrence is gone
    (deleted in plain SQL, as a schedule of an older release that a give-up ended) is repaired by
    the next `pyqueue-sql setup`, which says so."""
    from tests.worker.test_worker_cli_app import run_cli, serving, write_module

    doomed, retried = queue_name("p"), queue_name("p")
    module = write_module(tmp_path, FAILING_PERIODIC_APP.format(dsn=dsn, doomed=doomed, retried=retried))
    done = run_cli(tmp_path, "setup", f"{module}:app", "--dsn", dsn)
    assert done.returncode == 0, done.stderr
    db.queue(doomed).create(max_attempts=1)
    db.queue(retried).create(max_attempts=10)
    with serving(tmp_path, f"{module}:app", "--retry-base", "30") as served:
        deadline = time.monotonic() + 15
        while (
            time.monotonic() < deadline
            and min(sum(r[0] == name for r in served.records()) for name in ("doomed", "retried")) < 4
        ):
            time.sleep(0.05)
        records = served.records()
    for name in ("doomed", "retried"):
        times = sorted(int(r[1]) for r in records if r[0] == name)
        assert len(times) >= 4, (name, records, served.lines)
        # the first ran when the worker had started (the ones missed before were skipped); from
        # there on, each second's occurrence ran: a give-up or a retry skipped none
        assert times[1:4] == [times[1], times[1] + 1, times[1] + 2], (name, times)
    # the retried occurrences wait for their retry, each its own message, beside the pending one
    keys = [m.key for m in db.queue(retried).messages()]
    pending = db.queue(retried).schedules()[0]
    assert f"retried@{pending.next_at:%Y-%m-%dT%H:%M:%SZ}" in keys and len(keys) >= 3, keys

    # setup repairs a schedule without a pending occurrence, and says so
    (sched,) = db.queue(doomed).schedules()
    raw("DELETE FROM pyqueue_message WHERE queue_name = %s", (doomed,))
    done = run_cli(tmp_path, "setup", f"{module}:app", "--dsn", dsn)
    assert done.returncode == 0, done.stderr
    assert f"schedule {doomed} doomed doomed: every 1 s (repaired: it had no pending occurrence)" in (
        done.stdout.splitlines()
    ), done.stdout
    assert f"schedule {retried} retried retried: every 1 s (unchanged)" in done.stdout.splitlines()
    (after,) = db.queue(doomed).schedules()
    # the next occurrence after now: the lost one's own time when that is still ahead (every 1 s)
    assert after.next_at >= sched.next_at
    assert db.queue(doomed).message(f"doomed@{after.next_at:%Y-%m-%dT%H:%M:%SZ}", "doomed") is not None


def test_pyqueue_sql_setup_repairs_a_schedule_left_without_a_pending_occurrence(
    dsn, db, raw, capsys, monkeypatch
):
    """A schedule whose pending occurrence is gone (as an older release left one whose occurrence
    was given up) gets its next occurrence from the next deploy's setup, which says so; the other
    schedule, whole, is left as it is."""
    import importlib

    from pyqueue_sql import cli

    from . import periodic_app

    queue = queue_name("p")
    monkeypatch.setenv("PYQUEUE_TEST_QUEUE", queue)
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    importlib.reload(periodic_app)
    assert cli.main(["setup", "tests.tasks.periodic_app:app", "--dsn", dsn]) == 0
    capsys.readouterr()
    before = _schedules(db, queue)
    hourly = f"hourly@{before['hourly', 'hourly'].next_at:%Y-%m-%dT%H:%M:%SZ}"
    raw("DELETE FROM pyqueue_message WHERE queue_name = %s AND p_key = %s", (queue, hourly))
    assert cli.main(["setup", "tests.tasks.periodic_app:app", "--dsn", dsn]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"schedule {queue} hourly hourly: every 3600 s (repaired: it had no pending occurrence)",
        f"schedule {queue} five report: cron */5 * * * * (unchanged)",
    ]
    after = _schedules(db, queue)
    assert after["five", "report"] == before["five", "report"]
    pending = after["hourly", "hourly"].next_at
    assert db.queue(queue).message(f"hourly@{pending:%Y-%m-%dT%H:%M:%SZ}", "hourly") is not None

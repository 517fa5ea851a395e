"""Celery's canvas (task.s(...), pyqueue_sql.chain / group / chord, on_error, set) on both dialects,
run by real workers: a chained step gets the value of the step before as its first argument, a
chord's callback the list of its group's values in the group's order, a failure callback runs once
when a step fails for good and never when all succeed, set() routes and delays a step, a chain
crosses queues, and mistakes are refused in one line with nothing enqueued. (Typing:
tests/tasks/test_typing.py.)"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import App, InvalidArgumentError, InvalidPayloadError, TaskCancelled, TaskGroup, TaskHandle

from ..helpers import wait_for
from .test_workflows import running

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def app(dsn):
    a = App(dsn, queue=f"cv.{uuid.uuid4().hex[:12]}")
    yield a
    a.close()


@dataclasses.dataclass(frozen=True)
class Page:
    url: str
    words: int


def test_a_chain_passes_each_value_to_the_next_step_as_its_first_argument(app):
    """Four workers, three steps and an async def one: each step runs after the one before, with
    its value first and the arguments of its signature after it; a dataclass comes back one."""

    @app.task(store_result=True)
    def fetch(url: str) -> Page:
        return Page(url, len(url))

    @app.task(store_result=True)
    def add(page: Page, extra: int, *, times: int = 1) -> int:
        assert isinstance(page, Page)
        return (page.words + extra) * times

    @app.task(store_result=True)
    def describe(total: int, label: str) -> str:
        return f"{label}: {total}"

    app.create_queues()
    handle = pyqueue_sql.chain(fetch.s("abcd"), add.s(6, times=3), describe.s("total")).defer()
    assert isinstance(handle, TaskHandle) and handle.kind == "describe"
    assert handle.status().state == "waiting"
    with running(app):
        assert handle.result(timeout=60) == "total: 30"


def test_a_chord_callback_gets_the_group_values_in_order_and_a_group_gives_a_task_group(app):
    @app.task(store_result=True)
    def square(n: int) -> int:
        return n * n

    @app.task(store_result=True)
    def total(values: list[int], label: str) -> str:
        return f"{label} {values}"

    app.create_queues()
    # pushed at decreasing priority: the squares run in the opposite order of the group
    squares = [square.s(n).set(priority=n) for n in (1, 2, 3, 4)]
    callback = pyqueue_sql.chord(squares, total.s("squares")).defer()
    members = pyqueue_sql.group(square.s(5), square.s(6)).defer()
    assert isinstance(members, TaskGroup) and len(members) == 2
    assert callback.status().state == "waiting"
    assert app.run_pending().succeeded == 7
    assert callback.result(timeout=5) == "squares [1, 4, 9, 16]"
    assert members.results(timeout=5) == [25, 36]


def test_a_group_in_a_chain_fans_out_and_in_and_si_takes_no_value(app):
    @app.task(store_result=True)
    def start(n: int) -> int:
        return n

    @app.task(store_result=True)
    def times(value: int, factor: int) -> int:
        return value * factor

    @app.task(store_result=True)
    def summed(values: list[int]) -> int:
        return sum(values)

    @app.task(store_result=True)
    def done(label: str) -> str:
        return label

    app.create_queues()
    fanned = pyqueue_sql.chain(start.s(10), pyqueue_sql.group(times.s(2), times.s(3)), summed.s()).defer()
    ignoring = pyqueue_sql.chain(start.s(10), done.si("finished")).defer()
    ending_in_a_group = pyqueue_sql.chain(start.s(1), pyqueue_sql.group(times.s(4), times.s(5))).defer()
    assert app.run_pending().succeeded == 9
    assert fanned.result(timeout=5) == 50
    assert ignoring.result(timeout=5) == "finished"
    assert ending_in_a_group.results(timeout=5) == [4, 5]


def test_a_failure_callback_runs_once_when_a_step_fails_and_never_when_all_succeed(app):
    reports: list[tuple[str, list[tuple[str, str]]]] = []

    @app.task(store_result=True)
    def step(n: int) -> int:
        if n < 0:
            raise ValueError(f"step {n} is broken")
        return n

    @app.task(store_result=True)
    def after(value: int) -> int:
        return value + 1

    @app.task(store_result=True)
    def gather(values: list[int]) -> int:
        return sum(values)

    @app.task
    def on_error(label: str) -> None:
        reports.append((label, [(p.kind, p.state) for p in app.failed_parents()]))

    app.create_queues(max_attempts=1)
    broken = pyqueue_sql.chain(step.s(-1), after.s(), after.s()).on_error(on_error.si("chain")).defer()
    chord = pyqueue_sql.chord([step.s(1), step.s(-2)], gather.s()).on_error(on_error.si("chord")).defer()
    one = step.s(-3).on_error(on_error.si("one")).defer()
    fine = pyqueue_sql.chain(step.s(1), after.s()).on_error(on_error.si("never")).defer()
    with running(app):
        with pytest.raises(TaskCancelled):
            broken.result(timeout=60)
        with pytest.raises(TaskCancelled):
            chord.result(timeout=60)
        with pytest.raises(pyqueue_sql.TaskFailed):
            one.result(timeout=60)
        assert fine.result(timeout=60) == 2
        wait_for(lambda: len(reports) == 3, 30, "the three failure callbacks")
    assert sorted(label for label, _ in reports) == ["chain", "chord", "one"]
    for label, failed in reports:
        assert ("step", "failed") in failed, (label, failed)


def test_set_delays_keys_and_routes_a_step_and_a_chain_crosses_queues(dsn):
    home = f"cv.{uuid.uuid4().hex[:12]}"
    other_queue, route = f"{home}.other", f"{home}.route"
    app = App(dsn, queue=home, routes=[route])
    ran: list[tuple[str, str]] = []

    @app.task(store_result=True)
    def here(n: int) -> int:
        ran.append(("here", pyqueue_sql.current_job().queue))
        return n + 1

    @app.task(queue=other_queue, store_result=True)
    def there(n: int) -> int:
        return n * 10

    try:
        app.create_queues()
        db = app.database()
        later = here.s(1).set(run_at=dt.timedelta(hours=1), key="later-1", priority=7).defer()
        assert (later.key, later.status().state) == ("later-1", "delayed")
        assert db.queue(home).message("later-1", "here").priority == 7
        assert later.cancel()
        # here -> there -> here -> there: each step waits in the other queue for the one before
        last = pyqueue_sql.chain(here.s(1), there.s(), here.s(), there.s()).defer()
        assert app.run_pending().succeeded == 4
        assert last.result(timeout=5) == 210
        # a step set() on the app's route: pushed there, and run there by a worker of the app
        ran.clear()
        routed = pyqueue_sql.chain(here.s(1), here.s().set(queue=route), there.s()).defer()
        assert [db.queue(q).messages()[0].kind for q in (home, route, other_queue)] == ["here"] * 2 + [
            "there"
        ]
        with running(app):
            assert routed.result(timeout=30) == 30
        assert ran == [("here", home), ("here", route)]
    finally:
        app.close()


def test_set_refuses_a_queue_no_worker_of_the_app_serves_in_one_line(app):
    @app.task(store_result=True)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(queue=f"{app.default_queue}.other", store_result=True)
    def other(x: int) -> int:
        return x

    app.create_queues()
    db = app.database()
    refused = f"task 'add' cannot be routed to queue '{app.default_queue}.other': no worker of the app"
    for make in (
        lambda: add.s(1, 2).set(queue=f"{app.default_queue}.other"),  # another task's queue: not a route
        lambda: pyqueue_sql.signature(add, (1, 2), queue=f"{app.default_queue}.other"),
    ):
        with pytest.raises(InvalidArgumentError, match=refused) as caught:
            make()
        assert "\n" not in str(caught.value)
    with pytest.raises(InvalidArgumentError, match="task 'add' cannot be routed to queue 'elsewhere'"):
        pyqueue_sql.chain(add.s(1, 2), add.s(3).set(queue="elsewhere")).defer()
    with pytest.raises(InvalidArgumentError, match="queue must be a queue's name"):
        add.s(1, 2).set(queue="")
    assert add.s(1, 2).set(queue=app.default_queue).defer().queue == app.default_queue  # its own queue
    assert [m.kind for m in db.queue(app.default_queue).messages()] == ["add"]
    assert db.queue(f"{app.default_queue}.other").messages() == []


def test_mistakes_are_refused_in_one_line_and_nothing_is_enqueued(app):
    @app.task(store_result=True)
    def add(x: int, y: int) -> int:
        return x + y

    @app.task  # stores no result
    def forget(x: int) -> int:
        return x

    @app.task(store_result=True)
    def nothing() -> int:
        return 0

    app.create_queues()
    queue = app.database().queue(app.default_queue)
    with pytest.raises(TypeError, match="task 'add': too many positional arguments"):
        add.s(1, 2, 3)
    with pytest.raises(InvalidArgumentError, match="task 'forget' does not store its result"):
        pyqueue_sql.chain(add.s(1, 2), forget.s(), add.s(5)).defer()
    with pytest.raises(InvalidArgumentError, match="task 'nothing' has no first argument.*use nothing.si"):
        pyqueue_sql.chain(add.s(1, 2), nothing.s()).defer()
    with pytest.raises(InvalidArgumentError, match=r"add.s\(1, 2\) after another step"):
        pyqueue_sql.chain(add.s(1, 2), add.s(1, 2)).defer()
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        pyqueue_sql.chain(add.s(1), add.s(2)).defer()
    with pytest.raises(InvalidPayloadError, match="argument 'y'"):
        pyqueue_sql.chain(add.s(1, 2), add.s(float("nan"))).defer()  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="a chain needs at least one signature"):
        pyqueue_sql.chain()
    with pytest.raises(InvalidArgumentError, match="a group takes signatures"):
        pyqueue_sql.group(add.s(1, 2), "add")  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match="on_error takes a signature"):
        add.s(1, 2).on_error(add)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="expires is in the past"):
        add.s(1, 2).set(expires=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))
    assert queue.messages() == []
    # refused by the database at the second push of a chain (its route keeps no results): the
    # first push is rolled back with it
    bare = f"{app.default_queue}.bare"
    routed = App(app.dsn, queue=app.default_queue, routes=[bare])
    try:

        @routed.task(store_result=True)
        def plus(x: int, y: int) -> int:
            return x + y

        routed.database().queue(bare).create()  # keeps no results
        with pytest.raises(InvalidArgumentError):
            pyqueue_sql.chain(plus.s(1, 2), plus.s(3).set(queue=bare)).defer()
        assert queue.messages() == []
    finally:
        routed.close()


@pytest.mark.slow  # worker processes, an order whose step runs into its 2 s timeout and 2 s kill grace: 8-12 s
def test_the_celery_example_application_runs_under_the_cli_worker(installed_database, dialect, tmp_path):
    """examples/celery_app.py as its docstring runs it: `setup`, then `pyqueue-sql worker
    --processes 2 --kill-grace 2` serving its two queues while orders are placed: a chain and a
    chord whose values flow step to step (across the routed queue), a chain stopped by an unknown
    product and one by its step's time limit (blocked in C: its process replaced, the hard limit),
    each reported once by its failure callback, routed to the emails queue; the rate of
    rate_limit= in SQL; then the hourly beat task, run by the time machine."""
    dsn = installed_database("celery")
    env = {**os.environ, "PYTHONPATH": ROOT, "PYQUEUE_DSN": dsn}
    setup = subprocess.run(
        [sys.executable, "-m", "examples.celery_app", "setup"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert setup.returncode == 0, setup.stderr
    from examples import celery_app as example

    example.app.dsn = dsn
    log_path = tmp_path / "worker.log"
    log_file = log_path.open("wb")
    worker = subprocess.Popen(
        [
            *(sys.executable, "-m", "pyqueue_sql.cli", "worker", "examples.celery_app:app", "--no-status"),
            *("--processes", "2", "--kill-grace", "2"),
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log_file,
    )
    try:
        receipt, invoice = example.place_order(1, ["book", "pen"])
        unknown = example.place_order(2, ["book", "unicorn"])
        late = example.place_order(3, ["lamp"], carrier_delay=10)
        assert receipt.queue == example.EMAILS
        assert receipt.result(timeout=60) == "receipt for order 1: 2300 cents"
        assert invoice.result(timeout=60) == "invoice for order 1: 1500 + 300 = 1800 cents"
        for handle in unknown:
            with pytest.raises((TaskCancelled, pyqueue_sql.TaskFailed)):
                handle.result(timeout=60)
        with pytest.raises(TaskCancelled):
            late[0].result(timeout=60)
        assert late[1].result(timeout=60) == "invoice for order 3: 4200 = 4200 cents"
        failed = {
            key: example.app.handle(example.EMAILS, key, "order_failed").result(timeout=60)
            for key in ("order-2-checkout-failed", "order-2-invoice-failed", "order-3-checkout-failed")
        }
        # the hard limit: the process of the quote still blocked 2 s past its timeout is replaced
        wait_for(lambda: b"event=process_replaced" in log_path.read_bytes(), 30, "the process replaced")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log_file.close()
    log = log_path.read_text()
    assert worker.returncode == 0, log
    assert "/quote_shipping still runs 2 s after its timeout (a blocking call): terminated" in log, log
    assert failed["order-2-checkout-failed"].startswith("order 2 checkout failed: reserve_stock: KeyError:")
    assert failed["order-2-invoice-failed"].startswith("order 2 invoice failed: price: KeyError:")
    assert failed["order-3-checkout-failed"].startswith(
        "order 3 checkout failed: quote_shipping: TimeoutError"
    )
    assert example.app.handle(example.EMAILS, "order-1-checkout-failed", "order_failed").status().state in (
        "cancelled",
        "unknown",
    )
    [rate] = example.app.database().queue(example.EMAILS).rates()
    assert (rate.kind, rate.n, rate.per) == ("send_receipt", 10, dt.timedelta(seconds=1))
    report = example.app.run_pending(advance=dt.timedelta(hours=1))
    assert [j.outcome for j in report.jobs if j.kind == "purge_carts"][:1] == ["succeeded"], report.jobs
    example.app.close()

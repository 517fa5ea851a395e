"""The worker's sans-IO steps driven without a server: each test answers the operations the
steps yield (pyqueue_sql.worker.steps) as a database, a handler or a clock would, and checks what
the steps ask for next and what they decide. No connection is opened: a Worker is built on a DSN
nothing listens on, and its clock is a counter the test advances."""

from __future__ import annotations

import datetime as dt
import logging
import random
import re

import pytest

from pyqueue_sql import InvalidArgumentError
from pyqueue_sql.client import Renewal, Reservation
from pyqueue_sql.worker import Job, RetryPolicy, Worker, idle_timeout, wait_left
from pyqueue_sql.worker.dispatch import (
    DRAINED_RECHECK,
    HELD_MAX,
    HELD_MIN,
    WAIT_SLICE,
    RetryDue,
    earliest_due,
)
from pyqueue_sql.worker.steps import (
    HARD_STOP,
    RECONNECT,
    WAIT_SLOTS,
    WATCH,
    Acquire,
    Handle,
    Hooks,
    Listen,
    Notifications,
    RetriedCall,
    Sleep,
    StoppedError,
    Wait,
    dispatcher,
)

PG = "postgresql://nobody@127.0.0.1:1/none"
MY = "mysql://nobody@127.0.0.1:1/none"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


class Clock:
    """The worker's clock (worker.state.clock): moves only when the test says so."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def reservation(queue: str = "q", key: str = "k1", kind: str = "welcome", attempts: int = 1) -> Reservation:
    return Reservation(queue, key, kind, {}, f"token-{key}", 0, attempts, T0, T0)


def make_worker(dsn: str = PG, *queues: str, handler=lambda job: None, **settings) -> tuple[Worker, Clock]:
    worker = Worker(dsn, register=False, **settings)
    for q in queues or ("q",):
        worker.add_handler(q, handler)
    clock = Clock()
    worker.state.clock = clock
    return worker, clock


class Steps:
    """Drives steps by hand: the next operation, then its answer."""

    def __init__(self, steps) -> None:
        self.steps = steps
        self.op = next(steps)
        self.done = False
        self.result = None

    def answer(self, value=None):
        """The operation's result (for a Handle: None, or what the handler raised; for a call
        that also hands out the expiries the server told of: the call's result, no expiry)."""
        if isinstance(self.op, RetriedCall) and self.op.expired:
            value = (value, [])
        return self._next(self.steps.send, value)

    def throw(self, error: BaseException):
        """The operation raised error (a database call that failed)."""
        return self._next(self.steps.throw, error)

    def _next(self, how, arg):
        try:
            self.op = how(arg)
        except StopIteration as stop:
            self.done, self.op, self.result = True, None, stop.value
        return self.op


# -- the failure policy ------------------------------------------------------------


def test_retry_delays_grow_by_factor_to_the_cap_and_jitter_stays_in_its_band():
    p = RetryPolicy(base=0.5, factor=3, max_delay=10, jitter=0)
    assert [p.delay(a) for a in (0, 1, 2, 3, 4, 1000)] == [0.5, 0.5, 1.5, 4.5, 10, 10]
    j = RetryPolicy(base=2, factor=2, max_delay=100, jitter=0.5)
    rng = random.Random(7)
    delays = [j.delay(3, rng) for _ in range(500)]
    assert min(delays) >= 4 and max(delays) <= 12 and len(set(delays)) > 400
    for bad in (dict(base=-1), dict(factor=0.5), dict(max_delay=-1), dict(jitter=1.5)):
        with pytest.raises(InvalidArgumentError):
            RetryPolicy(**bad)


def fail_steps(worker: Worker, job: Job, error: BaseException) -> tuple[Steps, RetriedCall]:
    """A job's steps up to its queue_fail call (the handler raised `error`)."""
    steps = Steps(worker.dispatch.job_steps(job))
    assert isinstance(steps.op, Handle) and steps.op.job is job
    lock = steps.answer(error)
    assert lock == Acquire(job.lock)
    job.lock.acquire()
    call = steps.answer(True)
    assert isinstance(call, RetriedCall) and (call.method, call.queue, call.args) == (
        "fail",
        "q",
        (job.reservation,),
    )
    assert call.hard  # a fail is retried until the hard stop, not given up at the graceful one
    return steps, call


def test_a_failure_fails_with_its_policy_delay_and_the_error_text_and_notes_when_the_retry_is_due():
    worker, clock = make_worker()
    worker.set_retry("q", RetryPolicy(base=1.0, factor=2.0, jitter=0))
    job = Job(reservation(attempts=3))
    steps, call = fail_steps(worker, job, ValueError("no such address"))
    assert call.kwargs == {"error": "ValueError: no such address", "delay": 4.0}
    assert worker.state.retry_due.at is None
    clock.now += 0.01  # the round trip
    steps.answer("retry")
    assert steps.done and steps.result is None  # a failure reserves no successor
    assert worker.state.retry_due.at == pytest.approx(clock.now + 4.0)
    assert (worker.stats.failed, worker.stats.lost) == (1, 0)
    assert job.done and not job.lock.locked()


@pytest.mark.parametrize(
    "outcome, level, says",
    [
        ("dead_lettered", logging.ERROR, "moved to the dead-letter queue"),
        ("dropped", logging.ERROR, "dropped (the queue has no dead-letter queue)"),
        (None, logging.WARNING, "its reservation no longer held"),
    ],
)
def test_a_failure_the_server_did_not_retry_waits_for_nothing_and_says_what_happened(
    caplog, outcome, level, says
):
    """Whether it was the last allowed delivery is queue_fail's answer: dead letter, drop, or
    None when the reservation had lapsed (counted lost). None of them is a retry to wait for."""
    worker, _ = make_worker()
    steps, _ = fail_steps(worker, Job(reservation()), RuntimeError("boom"))
    with caplog.at_level(logging.WARNING, logger="pyqueue_sql.worker"):
        steps.answer(outcome)
    assert worker.state.retry_due.at is None
    [record] = [r for r in caplog.records if says in r.getMessage()]
    assert record.levelno == level and record.outcome == outcome
    assert worker.stats.failed == 1 and worker.stats.lost == (1 if outcome is None else 0)


def test_a_keyboard_interrupt_hands_the_message_back_at_once_and_stops_the_worker():
    worker, _ = make_worker()
    worker.set_retry("q", RetryPolicy(base=30, jitter=0))
    steps, call = fail_steps(worker, Job(reservation()), KeyboardInterrupt())
    assert call.kwargs["delay"] == 0.0 and call.kwargs["error"] == "KeyboardInterrupt"
    assert worker.stopping and worker.stats.interrupted == 1
    steps.answer("retry")
    assert worker.stats.failed == 0  # an interruption is not the message's failure


def test_a_kind_without_a_handler_is_the_message_s_failure_without_running_anything():
    worker = Worker(PG, register=False)
    worker.add_handler("q", lambda job: None, "welcome")
    steps = Steps(worker.dispatch.job_steps(Job(reservation(kind="other"))))
    assert isinstance(steps.op, Acquire)  # no Handle: straight to the failure
    steps.op.lock.acquire()
    call = steps.answer(True)
    assert call.method == "fail" and call.kwargs["error"] == "QueueError: no handler for kind 'other'"


# -- the idle wait -------------------------------------------------------------------


def test_the_idle_timeout_is_the_earliest_of_fallback_due_recheck_and_retry():
    common = dict(poll_fallback=30.0, long_poll_wait=1.0, poll=0.05, poll_max=1.0)
    listen = dict(listen=True, long_poll=False, **common)
    none = dict(due=None, recheck_in=None, retry_in=None)
    assert idle_timeout(**listen, **none) == (30.0, 0.05)
    assert idle_timeout(**listen, **{**none, "due": 4.0}) == (4.0, 0.05)
    assert idle_timeout(**listen, **{**none, "recheck_in": 0.1, "due": 4.0}) == (0.1, 0.05)
    assert idle_timeout(**listen, **{**none, "retry_in": 1.0, "due": 4.0}) == (1.0, 0.05)
    assert idle_timeout(**listen, **{**none, "retry_in": -2.0}) == (0.0, 0.05)  # overdue: no wait
    long_poll = dict(listen=False, long_poll=True, **common)
    assert idle_timeout(**long_poll, **none) == (1.0, 0.05)
    polling = dict(listen=False, long_poll=False, **common)
    assert idle_timeout(**polling, **none) == (0.05, 0.1)  # the client-side poll backs off...
    assert idle_timeout(**{**polling, "poll": 0.8}, **none) == (0.8, 1.0)  # ...up to poll_max
    assert earliest_due(None, 0) is None and earliest_due(3.0, 0) == 3.0  # 0: let the poll decide
    assert earliest_due(None, 2.5) == 2.5 and earliest_due(3.0, 2.5) == 2.5
    assert wait_left(10.0, 40.0, None) == 30.0 and wait_left(10.0, 40.0, 11.0) == 1.0


def dispatcher_until_listening(
    worker: Worker, clock: Clock, reserved: list[Reservation]
) -> tuple[Steps, Listen]:
    """The reserve loop of a LISTEN worker: a first round reserves `reserved`, the next finds
    nothing and (no message scheduled) waits; returns the steps at that Listen."""
    steps = Steps(worker.reserve_loop.reserve_loop_steps())
    assert steps.op == WAIT_SLOTS
    call = steps.answer()
    # As many as it has handlers (no handler has finished yet: no prefetch).
    assert (call.method, call.kwargs["n"]) == ("reserve", worker.concurrency)
    assert steps.answer(reserved) == WAIT_SLOTS
    call = steps.answer()
    assert (call.method, call.kwargs["n"]) == ("reserve", worker.concurrency - len(reserved))
    assert steps.answer([]) == Hooks(worker.on_idle, None)
    call = steps.answer()
    assert (call.method, call.args) == ("next_scheduled_at", (None,))
    listen = steps.answer((None, None))
    assert isinstance(listen, Listen)
    return steps, listen


def listen_until_it_ends(worker: Worker, clock: Clock, deadline: float, notes_at: float | None = None):
    """Runs the LISTEN wait (the steps inside Listen) on the fake clock: each Notifications slice
    passes its seconds with nothing received (or a wakeup once the clock reaches notes_at)."""
    steps = Steps(worker.reserve_loop.listen_steps(None, deadline))
    while not steps.done:
        assert isinstance(steps.op, Notifications) and 0 < steps.op.seconds <= WAIT_SLICE
        clock.now += steps.op.seconds
        got = notes_at is not None and clock.now >= notes_at
        steps.answer([("pyqueue_x", "q")] if got else [])
    return steps.result


def test_a_retry_scheduled_while_the_dispatcher_waits_ends_the_wait_when_it_is_due():
    """The late retry on PostgreSQL: with more than one handler slot the dispatcher reserves
    again while the handler runs, finds nothing (the message is reserved, not delayed) and
    waits up to the poll fallback. The handler then fails the message with a 1 s delay, which
    sends no wakeup. The wait must end 1 s after the failure, not at the fallback (30 s)."""
    worker, clock = make_worker(PG, concurrency=4, poll_fallback=30.0)
    worker.set_retry("q", RetryPolicy(base=1.0, jitter=0))
    steps, listen = dispatcher_until_listening(worker, clock, [reservation()])
    assert listen.deadline == clock.now + 30.0
    job = worker._pending.get_nowait()  # the reserved job, handed to a handler thread

    clock.now += 0.2  # the handler runs, then fails
    handler, call = fail_steps(worker, job, RuntimeError("boom"))
    assert call.kwargs["delay"] == 1.0
    failed_at = clock.now
    handler.answer("retry")
    # Its own settle ends the wait at once (a settle may free what held a reserve back, a limit's
    # slot): one more round, which finds nothing, then the wait until the retry is due.
    with pytest.raises(StopIteration) as ended:
        next(worker.reserve_loop.listen_steps(None, listen.deadline))
    assert ended.value.value is True and clock.now == failed_at
    assert steps.answer(True) == WAIT_SLOTS
    assert steps.answer().method == "reserve"
    assert steps.answer([]) == Hooks(worker.on_idle, None)
    assert steps.answer().method == "next_scheduled_at"
    listen = steps.answer((None, None))
    # until the retry is due (not a linger re-check: a settle is no wakeup)
    assert isinstance(listen, Listen) and listen.deadline == pytest.approx(failed_at + 1.0)

    woke = listen_until_it_ends(worker, clock, listen.deadline)
    assert woke is False
    assert clock.now == pytest.approx(failed_at + 1.0, abs=1e-9)
    # ...and the loop reserves again at once, finding the retried message.
    assert steps.answer(woke) == WAIT_SLOTS
    assert steps.answer().method == "reserve"
    assert worker.state.retry_due.at is None  # reached: forgotten


def test_after_a_wakeup_an_empty_round_re_checks_soon_then_a_linger_after_it():
    """A wakeup whose round finds nothing (its message taken by an earlier round, or the push
    skipped its NOTIFY for another transaction's of the same window and commits after this
    round's snapshot): the next round comes DRAINED_RECHECK after the wakeup, the one after a
    linger after it, then the wait lasts to the fallback."""
    worker, clock = make_worker(PG, concurrency=4, poll_fallback=60.0, linger=0.1)
    steps, listen = dispatcher_until_listening(worker, clock, [reservation()])
    worker._release(worker._pending.get_nowait())  # its handler ended: nothing of its own to settle

    def empty_round() -> Listen:
        assert steps.op == WAIT_SLOTS
        assert steps.answer().method == "reserve"
        assert steps.answer([]) == Hooks(worker.on_idle, None)
        assert steps.answer().method == "next_scheduled_at"
        listen = steps.answer((None, None))
        assert isinstance(listen, Listen)
        return listen

    woke_at = clock.now = clock.now + 1.0
    steps.answer(True)  # a wakeup
    for deadline in (woke_at + DRAINED_RECHECK, woke_at + 0.1, woke_at + 0.1 + 60.0):
        listen = empty_round()
        assert listen.deadline == pytest.approx(deadline)
        clock.now = listen.deadline
        steps.answer(False)  # the wait ran its time out


def test_a_stream_s_round_that_got_fewer_than_it_asked_waits_for_the_next_wakeup():
    """A round after a wakeup gets fewer messages than it asked for (a steady stream: the queue
    was drained at its snapshot): instead of an empty round at once it waits for the next wakeup,
    at most DRAINED_RECHECK (a round that did not follow a wait, above, reserves again at once:
    a backlog whose rows other reservers hold)."""
    worker, clock = make_worker(PG, concurrency=4, poll_fallback=60.0)
    steps, listen = dispatcher_until_listening(worker, clock, [reservation()])
    clock.now += 1.0
    assert steps.answer(True) == WAIT_SLOTS  # a wakeup
    call = steps.answer()
    assert call.method == "reserve" and call.kwargs["n"] == 3
    drained = steps.answer([reservation(key="k2")])
    assert isinstance(drained, Listen) and drained.deadline == pytest.approx(clock.now + DRAINED_RECHECK)
    clock.now = drained.deadline
    assert steps.answer(False) == WAIT_SLOTS  # its time out: the re-check
    call = steps.answer()
    assert call.method == "reserve" and call.kwargs["n"] == 2
    # fewer twice in a row: one read of the next scheduled_at (a limit?), nothing due: waits again
    assert steps.answer([reservation(key="k3")]).method == "next_scheduled_at"
    drained = steps.answer((None, None))
    assert isinstance(drained, Listen) and drained.deadline == pytest.approx(clock.now + DRAINED_RECHECK)


def test_every_retry_s_due_time_is_kept_not_only_the_earliest():
    """A snooze and a retry noted 50 ms apart: once the snooze's time has come, the wait still
    ends at the retry's, without the server's next scheduled_at."""
    due = RetryDue()
    due.note(101.55)
    due.note(101.5)
    due.note(101.55)
    assert due.at == 101.5
    due.reached(101.49)
    assert due.at == 101.5
    due.reached(101.5)
    assert due.at == 101.55
    due.reached(102.0)
    assert due.at is None


def test_a_retry_due_just_after_a_snooze_is_reserved_without_waiting_for_the_fallback():
    """A snooze and a retry of this worker come due 49 ms apart. The wait ends at the snooze's
    time and the next round takes it; the round after finds nothing, and by the time the server
    answers queue_next_scheduled_at the retry is due: a wait of 0. The next round must start at
    once, not at the 60 s fallback."""
    worker, clock = make_worker(PG, concurrency=4, poll_fallback=60.0)
    snoozed, retried = reservation(key="s"), reservation(key="r")
    steps, listen = dispatcher_until_listening(worker, clock, [snoozed, retried])
    worker.state.retry_due.note(clock.now + 1.5)  # the snooze's handler
    worker.state.retry_due.note(clock.now + 1.549)  # the retry's handler
    retry_at = clock.now + 1.549
    assert listen_until_it_ends(worker, clock, listen.deadline) is False
    assert steps.answer(False) == WAIT_SLOTS
    assert steps.answer().method == "reserve"
    assert isinstance(steps.answer([snoozed]), Listen)  # the snooze's message, taken; a drained wait
    assert steps.answer(False) == WAIT_SLOTS
    assert steps.answer().method == "reserve"
    clock.now = retry_at + 0.01  # a loaded machine: the retry came due during this round
    assert steps.answer([]) == Hooks(worker.on_idle, None)
    assert steps.answer().method == "next_scheduled_at"
    assert steps.answer((T0, 0.0)) == WAIT_SLOTS  # not a Listen until the fallback
    assert steps.answer().method == "reserve"


def test_a_message_due_between_an_empty_reserve_and_the_next_scheduled_at_is_reserved_at_once():
    """Another process's delayed message comes due after this worker's reserve found nothing and
    before its queue_next_scheduled_at: a wait of 0, and no wakeup is sent (a delayed push sends
    none). The loop reserves again at once instead of waiting for the 60 s fallback. A second 0
    in a row is a message held back (a concurrency limit's slots all taken, a row another
    reserver holds): then a short wait, twice as long each time, each followed by a probe of 1
    (never the fallback, and no busy loop while it stays so); a probe that reserves something
    asks for twice as many next, and a round that gets all it may take ends that."""
    worker, clock = make_worker(PG, concurrency=4, poll_fallback=60.0)
    steps, listen = dispatcher_until_listening(worker, clock, [reservation(key="a")])
    assert listen.deadline == clock.now + 60.0
    worker._release(worker._pending.get_nowait())  # its handler ended: nothing of its own to settle
    assert listen_until_it_ends(worker, clock, listen.deadline) is False

    def empty_round(wait_s: float) -> object:
        assert steps.op == WAIT_SLOTS
        assert steps.answer().method == "reserve"  # (held back: a probe of 1)
        assert steps.answer([]) == Hooks(worker.on_idle, None)
        assert steps.answer().method == "next_scheduled_at"
        return steps.answer((T0, wait_s))

    assert steps.answer(False) == WAIT_SLOTS
    assert empty_round(0.0) == WAIT_SLOTS  # came due meanwhile: at once
    held = empty_round(0.0)  # again 0: held back
    assert isinstance(held, Listen) and held.deadline == pytest.approx(clock.now + HELD_MIN)
    clock.now = held.deadline
    assert steps.answer(False) == WAIT_SLOTS
    assert steps.answer().kwargs["n"] == 1  # a probe
    assert steps.answer([]) == Hooks(worker.on_idle, None)
    assert steps.answer().method == "next_scheduled_at"
    held = steps.answer((T0, 0.0))  # still held: no round at once, a longer wait
    assert isinstance(held, Listen) and held.deadline == pytest.approx(clock.now + 2 * HELD_MIN)
    clock.now = held.deadline
    assert steps.answer(False) == WAIT_SLOTS
    call = steps.answer()
    assert (call.method, call.kwargs["n"]) == ("reserve", 1)
    assert steps.answer([reservation(key="b")]) == WAIT_SLOTS  # the probe got all: twice as many
    call = steps.answer()
    assert (call.method, call.kwargs["n"]) == ("reserve", 2)
    # it got all it may take (its 4 handlers' slots): held back no more
    assert steps.answer([reservation(key="c"), reservation(key="d")]) == WAIT_SLOTS
    for job in worker._jobs():  # their handlers ended
        worker._release(job)
    call = steps.answer()
    assert (call.method, call.kwargs["n"]) == ("reserve", worker.concurrency)
    assert steps.answer([]) == Hooks(worker.on_idle, None)
    assert steps.answer().method == "next_scheduled_at"
    held = steps.answer((T0, 0.0))  # nothing, and one still ready: held back, a short wait
    assert isinstance(held, Listen) and clock.now < held.deadline <= clock.now + HELD_MAX
    clock.now = held.deadline
    assert steps.answer(False) == WAIT_SLOTS
    later = empty_round(2.0)  # a message due in 2 s (held back no more): waited for, not polled
    assert isinstance(later, Listen) and later.deadline == pytest.approx(clock.now + 2.0)


def test_a_client_side_poll_also_ends_when_a_retry_is_due():
    """Without LISTEN and with several queues the dispatcher sleeps in slices: a retry noted
    meanwhile ends the sleep when due."""
    worker, clock = make_worker(MY, "q", "r", poll_min=5.0, poll_max=5.0)
    assert not worker.use_listen and not worker.reserve_loop.long_poll()
    steps = Steps(worker.reserve_loop.wait_steps(5.0))
    worker.state.retry_due.note(clock.now + 0.6)
    slept = 0.0
    while not steps.done:
        assert isinstance(steps.op, Sleep) and steps.op.seconds <= WAIT_SLICE
        clock.now += steps.op.seconds
        slept += steps.op.seconds
        steps.answer(False)
    assert steps.result is False and slept == pytest.approx(0.6)


def test_without_a_retry_the_wait_lasts_to_its_deadline_and_a_wakeup_ends_it_early():
    worker, clock = make_worker(PG)
    start = clock.now
    assert listen_until_it_ends(worker, clock, start + 3.0) is False
    assert clock.now == pytest.approx(start + 3.0)
    start = clock.now
    assert listen_until_it_ends(worker, clock, start + 3.0, notes_at=start + 1.0) is True
    assert clock.now < start + 1.0 + WAIT_SLICE and worker.state.wake_queues == {"q"}
    assert worker.stats.wakeups == 1


def test_a_stop_ends_the_wait_at_the_next_slice():
    worker, clock = make_worker(PG)
    steps = Steps(worker.reserve_loop.listen_steps(None, clock.now + 30.0))
    worker.stop()
    steps.answer([])
    assert steps.done and steps.result is False


# -- the dispatch step sequence --------------------------------------------------------


def handle_success(worker: Worker, job: Job) -> tuple[Steps, RetriedCall]:
    steps = Steps(worker.dispatch.job_steps(job))
    assert isinstance(steps.op, Handle)
    assert steps.answer(None) == Acquire(job.lock)
    job.lock.acquire()
    return steps, steps.answer(True)


def test_a_success_of_a_one_queue_postgresql_worker_commits_and_reserves_its_successor():
    worker, _ = make_worker(PG, lease=12.0, commit_reserve=True)
    job = Job(reservation())
    worker.inflight[("q", "k1", "welcome")] = job
    steps, call = handle_success(worker, job)
    assert (call.method, call.args) == ("commit_reserve", (job.reservation,))
    assert call.kwargs == {"n": 1, "worker": worker.name, "timeout": 12.0, "kinds": None}
    steps.answer((True, [reservation(key="k2")]))
    assert steps.done and steps.result.key == "k2"  # the handler runs it next
    assert list(worker.inflight) == [("q", "k2", "welcome")]  # the successor took the slot
    assert (worker.stats.succeeded, worker.stats.commit_reserves, worker.stats.reserved) == (1, 1, 1)


@pytest.mark.parametrize(
    "dsn, queues, settings",
    [(MY, ("q",), {}), (PG, ("q", "r"), {"commit_reserve": True}), (PG, ("q",), {})],
    ids=["mysql", "several-queues", "commit_reserve-off"],
)
def test_otherwise_a_success_goes_to_the_completer_without_a_call_of_the_handler(dsn, queues, settings):
    """Without chaining (queue_commit_reserve: a worker of one queue that asks for it) the
    handler thread makes no database call for a success: the job, done (the heartbeat leaves
    it alone), goes to the completer with its reservation as it is, and frees its slot."""
    worker, _ = make_worker(dsn, *queues, **settings)
    job = Job(reservation())
    worker.inflight[("q", "k1", "welcome")] = job
    steps = Steps(worker.dispatch.job_steps(job))
    assert steps.answer(None) == Acquire(job.lock)
    job.lock.acquire()
    steps.answer(True)
    assert steps.done and steps.result is None and job.done and not worker.inflight
    assert worker.completer.acks.get_nowait()[0] is job
    assert worker.stats.succeeded == 0  # counted once the completer committed it


def test_a_batch_acknowledgement_counts_what_held_and_logs_what_did_not(caplog):
    worker, _ = make_worker(PG)
    jobs = [(Job(reservation(key=f"k{i}")), 1.0) for i in range(3)]
    worker.dispatch.acknowledged("q", jobs, 3)
    assert (worker.stats.succeeded, worker.stats.lost) == (3, 0)
    with caplog.at_level(logging.WARNING, logger="pyqueue_sql.worker"):
        worker.dispatch.acknowledged("q", jobs, 2)  # one token was stale: the call does not say which
    assert (worker.stats.succeeded, worker.stats.lost) == (5, 1)
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "lost"]
    assert record.n == 1 and "q/k0/welcome" in record.getMessage()


def test_the_prefetch_holds_a_bounded_time_of_the_handlers_work():
    """None before a handler finished; then up to `prefetch` messages, but no more than about
    PREFETCH_HORIZON seconds of work at the handlers' average time: slow handlers get none."""
    worker, _ = make_worker(PG, concurrency=4, prefetch=20)
    assert (
        worker.reserve_loop.prefetch_now(),
        worker.reserve_loop.free(),
        worker.reserve_loop.refill_at(),
    ) == (0, 4, 4)
    worker.dispatch.note_handler_time(0.001)  # quick handlers: the whole prefetch
    assert (
        worker.reserve_loop.prefetch_now(),
        worker.reserve_loop.free(),
        worker.reserve_loop.refill_at(),
    ) == (20, 24, 14)
    worker.state.handler_avg = 0.05  # 4 handlers x 0.1 s / 0.05 s
    assert worker.reserve_loop.prefetch_now() == 8
    worker.state.handler_avg = 2.0  # slow handlers: nothing beyond the free handlers
    assert (worker.reserve_loop.prefetch_now(), worker.reserve_loop.free()) == (0, 4)
    assert make_worker(PG, prefetch=0)[0].reserve_loop.prefetch_now() == 0


def test_a_prefetched_message_whose_lease_ran_low_is_handed_back_unstarted():
    """A message that waited for a handler until less than a third of its lease is left (the
    heartbeat did not extend it meanwhile) is given back, never run on a lapsing reservation;
    one with more left runs."""
    ran = []
    worker, clock = make_worker(PG, handler=ran.append, lease=30.0)
    job = Job(reservation(), lease_until=clock.now + 9.0)
    worker.inflight[("q", "k1", "welcome")] = job
    steps = Steps(worker.dispatch.serve_steps(job))
    assert steps.op == Acquire(job.lock)
    job.lock.acquire()
    call = steps.answer(True)
    assert (call.method, call.kwargs) == ("snooze", {"delay": 0})  # its delivery not counted
    steps.answer(True)
    assert steps.done and not ran and worker.stats.lease_low == 1 and worker.stats.handed_back == 1
    fresh = Job(reservation(key="k2"), lease_until=clock.now + 11.0)
    steps = Steps(worker.dispatch.serve_steps(fresh))
    assert isinstance(steps.op, Handle) and steps.op.job is fresh


def test_after_a_stop_an_unstarted_message_is_handed_back_without_running_its_handler():
    ran = []
    worker, _ = make_worker(PG, handler=ran.append)
    job = Job(reservation())
    worker.inflight[("q", "k1", "welcome")] = job
    worker.stop()
    steps = Steps(worker.dispatch.serve_steps(job))
    assert steps.op == Acquire(job.lock)
    job.lock.acquire()
    call = steps.answer(True)
    assert (call.method, call.kwargs) == ("snooze", {"delay": 0})  # its delivery not counted
    steps.answer(True)
    assert steps.done and not ran and worker.stats.handed_back == 1 and not worker.inflight


def test_the_status_tells_the_messages_waiting_for_a_handler_from_the_running_ones():
    """status().waiting: what a stop would hand back unstarted (a --batch stop waits for none)."""
    worker, _ = make_worker(PG)
    started, waiting, done = (
        Job(reservation(key="k1")),
        Job(reservation(key="k2")),
        Job(reservation(key="k3")),
    )
    started.started_at = 1.0
    done.done = True
    worker.inflight = {("q", j.key, "welcome"): j for j in (started, waiting, done)}
    status = worker.status()
    assert (status.running, status.waiting) == (("q/k1/welcome",), ("q/k2/welcome",))


def test_a_wakeup_s_queue_is_reserved_first():
    worker, _ = make_worker(PG, "a", "b", "c")
    worker.state.wake_queues.update({"c"})
    assert worker.reserve_loop.reserve_order() == ["c", "a", "b"]
    assert worker.reserve_loop.reserve_order() == ["a", "b", "c"]


def test_a_dispatch_error_reconnects_then_backs_off_doubling():
    worker, _ = make_worker(PG)
    steps = Steps(worker.reserve_loop.dispatch_steps())
    assert steps.op == WAIT_SLOTS
    assert steps.answer().method == "reserve"
    assert steps.throw(PermissionError("revoked")) == RECONNECT
    assert steps.answer() == Sleep(0.5)
    assert steps.answer(False) == WAIT_SLOTS
    steps.answer()
    assert steps.throw(PermissionError("revoked")) == RECONNECT
    assert steps.answer() == Sleep(1.0)
    assert worker.stats.dispatch_errors == 2 and "revoked" in worker.status().last_error
    steps.answer(True)  # the stop came during the back-off
    assert steps.done


def test_a_stopped_call_ends_the_reserve_loop_quietly():
    worker, _ = make_worker(PG)
    steps = Steps(worker.reserve_loop.dispatch_steps())
    steps.answer()
    steps.throw(StoppedError())
    assert steps.done and worker.stats.dispatch_errors == 0


def test_an_operation_no_runner_knows_is_an_error():
    execute = dispatcher({Sleep: lambda self, op: op.seconds})
    assert execute(None, Sleep(2.0)) == 2.0
    with pytest.raises(AssertionError, match="unknown operation"):
        execute(None, WAIT_SLOTS)


def test_the_heartbeat_extends_only_what_was_not_reserved_or_extended_lately():
    """A message reserved or extended within the last quarter lease is left alone (a busy worker
    holds many such); an older one is extended, and its lease is counted from before the call."""
    worker, clock = make_worker(PG, lease=12.0)
    fresh = Job(reservation(key="fresh"), lease_until=clock.now + 10.0)
    with pytest.raises(StopIteration):
        next(worker.registry.extend_steps(fresh))
    older = Job(reservation(key="older"), lease_until=clock.now + 8.0)
    steps = Steps(worker.registry.extend_steps(older))
    assert steps.op == Acquire(older.lock)
    older.lock.acquire()
    call = steps.answer(True)
    assert (call.method, call.args, call.kwargs) == ("renew", (older.reservation,), {"timeout": 12.0})
    clock.now += 0.5  # the call's round trip
    steps.answer(Renewal(reservation(key="older"), False))
    assert steps.done and older.lease_until == 1000.0 + 12.0
    assert not older.cancel_requested.is_set()


def test_the_heartbeat_passes_a_requested_cancel_to_the_job():
    """queue_renew says a cancel was requested: the job's event is set and its coroutine's
    cancel hook called (once)."""
    worker, clock = make_worker(PG, lease=12.0)
    job = Job(reservation(key="running"), lease_until=clock.now + 1.0)
    hooked = []
    job.on_cancel = lambda: hooked.append(True)
    steps = Steps(worker.registry.extend_steps(job))
    job.lock.acquire()
    steps.answer(True)
    steps.answer(Renewal(reservation(key="running"), True))
    assert steps.done and job.cancel_requested.is_set() and hooked == [True]


def test_the_heartbeat_ticks_every_third_of_the_lease_until_the_hard_stop():
    """The heartbeat's loop (both runners drive it): a wait of lease/3 for the hard stop, a tick
    (the on_heartbeat hooks last), again; a stopped call or the hard stop ends it."""
    worker, _ = make_worker(PG, lease=12.0)
    steps = Steps(worker.registry.heartbeat_loop_steps())
    assert steps.op == Wait(HARD_STOP, 4.0)
    assert steps.answer(False) == Hooks(worker.on_heartbeat, "on_heartbeat")
    assert steps.answer(None) == Wait(HARD_STOP, 4.0)
    assert steps.answer(False) == Hooks(worker.on_heartbeat, "on_heartbeat")
    steps.throw(StoppedError())
    assert steps.done
    steps = Steps(worker.registry.heartbeat_loop_steps())
    steps.answer(True)
    assert steps.done


def test_a_long_lease_still_heartbeats_at_least_every_ten_seconds():
    """queue_release_dead_workers accepts a silence of 30 s as death: a worker with a lease of
    300 s heartbeats every 10 s, not every 100 s, so no consumer can release it while it lives."""
    worker, _ = make_worker(PG, lease=300.0)
    steps = Steps(worker.registry.heartbeat_loop_steps())
    assert steps.op == Wait(HARD_STOP, 10.0)


def test_the_watcher_waits_for_a_progress_or_its_poll_and_survives_a_round_s_error(caplog):
    """The watcher's loop (both runners drive it): a wait for a progress to write, as long as
    Watch.timeout allows, then a round; a round's unexpected error is logged and the loop goes
    on; a stopped call or the hard stop ends it."""
    from pyqueue_sql.worker.watch import WATCH_IDLE

    worker, _ = make_worker(PG)
    job = Job(reservation(key="slow"))
    worker.inflight = {("q", "slow", "welcome"): job}
    steps = Steps(worker.watch.loop_steps())
    assert steps.op == Wait(WATCH, WATCH_IDLE)
    job.set_progress({"rows": 1})
    assert steps.answer(True) == Acquire(job.lock)
    with caplog.at_level(logging.ERROR, logger="pyqueue_sql.worker"):
        assert steps.throw(ValueError("boom")) == Wait(WATCH, WATCH_IDLE)
    assert "watch: unexpected error" in caplog.text
    assert steps.answer(True) == Acquire(job.lock)
    job.lock.acquire()
    call = steps.answer(True)
    assert (call.method, call.args) == ("set_progress", (job.reservation, {"rows": 1}))
    steps.throw(StoppedError())
    assert steps.done
    steps = Steps(worker.watch.loop_steps())
    worker.state.hard_stop.set()
    steps.answer(False)
    assert steps.done


@pytest.mark.parametrize(
    "bad",
    [dict(prefetch=-1), dict(prefetch=1.5), dict(ack_batch=0), dict(ack_batch=True), dict(ack_interval=-0.1)],
)
def test_prefetch_and_acknowledgement_settings_are_checked(bad):
    with pytest.raises(InvalidArgumentError):
        Worker(PG, **bad)


# -- results, cancellation and progress ------------------------------------------------------


def test_the_watch_writes_pending_progress_under_the_lock_and_polls_only_running_jobs():
    """A progress set and not written is written once (the job's lock held: its token does not
    change meanwhile); the cancel flag is read only for started jobs (def or async def) not
    already flagged, and a flag found set cancels the job."""
    from pyqueue_sql import Result
    from pyqueue_sql.worker.watch import CANCEL_POLL, WATCH_IDLE

    worker, clock = make_worker(PG)
    plain = Job(reservation(key="plain"), started_at=1.0)
    waiting = Job(reservation(key="waiting"))  # reserved, not started
    running = Job(reservation(key="running"), started_at=1.0, runs_async=True)
    hooked = []
    running.on_cancel = lambda: hooked.append(True)
    worker.inflight = {("q", j.key, "welcome"): j for j in (plain, waiting, running)}
    assert worker.watch.timeout() == CANCEL_POLL
    plain.set_progress({"rows": 3})
    steps = Steps(worker.watch.round_steps())
    assert steps.op == Acquire(plain.lock)
    plain.lock.acquire()
    call = steps.answer(True)
    assert (call.method, call.args) == ("set_progress", (plain.reservation, {"rows": 3}))
    call = steps.answer(True)
    assert not plain.progress_pending and not plain.lock.locked()
    assert (call.method, call.args) == ("result", ("plain", "welcome"))
    call = steps.answer(Result("q", "plain", "welcome", "reserved", cancel_requested=False))
    assert (call.method, call.args) == ("result", ("running", "welcome"))
    steps.answer(Result("q", "running", "welcome", "reserved", cancel_requested=True))
    assert steps.done and running.cancel_requested.is_set() and hooked == [True]
    running.done = plain.done = True
    assert worker.watch.timeout() == WATCH_IDLE


def test_a_handler_that_stops_for_a_cancel_ends_its_message_with_cancel_held():
    import asyncio

    from pyqueue_sql import Cancelled

    worker, _ = make_worker(PG)
    for error in (Cancelled("asked"), asyncio.CancelledError()):
        job = Job(reservation())
        job.cancel_requested.set()
        steps = Steps(worker.dispatch.job_steps(job))
        assert steps.answer(error) == Acquire(job.lock)
        job.lock.acquire()
        call = steps.answer(True)
        assert (call.method, call.args) == ("cancel_held", (job.reservation,))
        steps.answer(True)
        assert steps.done and job.done
    assert worker.stats.cancelled == 2 and worker.stats.failed == 0
    # a CancelledError without a cancel request is a failure, as before
    job = Job(reservation())
    steps, call = fail_steps(worker, job, asyncio.CancelledError())
    assert call.method == "fail"


# -- the worker's parts ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "module, part",
    [("dispatch", "Dispatch"), ("dispatch", "ReserveLoop"), ("batches", "BatchLanes")],
)
def test_each_part_of_the_worker_is_an_object_given_what_it_uses(module, part):
    """A part of the worker is an object the worker holds, not a base class of it: every attribute
    of self it reads or calls is one of its methods or set by itself (in __init__, or attach()
    for the parts made after it), so that what it takes from the others is passed explicitly."""
    import ast
    from pathlib import Path

    import pyqueue_sql.worker
    from pyqueue_sql.worker.base import WorkerBase

    assert part not in {c.__name__ for c in WorkerBase.__mro__}
    source = (Path(pyqueue_sql.worker.__file__).parent / f"{module}.py").read_text()
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == part)
    declared = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    setters = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in ("__init__", "attach")]
    for fn in setters:
        for n in ast.walk(fn):
            targets = (
                n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
            )
            for t in targets:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if (
                        isinstance(e, ast.Attribute)
                        and isinstance(e.value, ast.Name)
                        and e.value.id == "self"
                    ):
                        declared.add(e.attr)
    used = {
        n.attr
        for n in ast.walk(cls)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    }
    assert setters and sorted(used - declared) == []


# -- the settings ----------------------------------------------------------------------------

BAD_SETTINGS = [
    (dict(concurrency=0), "concurrency must be at least 1"),
    (dict(prefetch=-1), "prefetch must be an integer >= 0 (or None: the default)"),
    (dict(prefetch=True), "prefetch must be an integer >= 0 (or None: the default)"),
    (dict(ack_batch=0), "ack_batch must be an integer >= 1"),
    (dict(ack_batch=2.0), "ack_batch must be an integer >= 1"),
    (dict(ack_interval=-0.001), "ack_interval must be >= 0 seconds"),
    (dict(ack_interval=float("nan")), "ack_interval must be >= 0 seconds"),
    (dict(lease=0), "lease, poll_min, long_poll_wait and long_poll_check must be > 0, poll_max >= poll_min"),
    (dict(poll_min=0.5, poll_max=0.1), "lease, poll_min, long_poll_wait and long_poll_check must be > 0"),
    (dict(long_poll_wait=0), "lease, poll_min, long_poll_wait and long_poll_check must be > 0"),
    (dict(long_poll_check=-1), "lease, poll_min, long_poll_wait and long_poll_check must be > 0"),
    (dict(start_timeout=0), "start_timeout must be seconds > 0 (or None: no limit), not 0"),
    (dict(start_timeout="30"), "start_timeout must be seconds > 0 (or None: no limit), not '30'"),
    (dict(start_timeout=True), "start_timeout must be seconds > 0 (or None: no limit), not True"),
    (dict(lease=60, release_dead_after=59), "release_dead_after must be at least the lease"),
    (dict(max_stuck=-1), "max_stuck must be an integer >= 0 (or None), not -1"),
    (dict(max_stuck=1.5), "max_stuck must be an integer >= 0 (or None), not 1.5"),
    (dict(max_jobs=0), "max_jobs must be an integer >= 1 (or None), not 0"),
    (dict(max_jobs=True), "max_jobs must be an integer >= 1 (or None), not True"),
]


@pytest.mark.parametrize("bad, message", BAD_SETTINGS)
def test_a_setting_out_of_its_range_is_refused_saying_which(bad, message):
    """WorkerSettings checks each setting once, for Worker, AsyncWorker, App.worker and the CLI,
    with the message the worker's constructor has always given."""
    from pyqueue_sql.aio.worker import AsyncWorker
    from pyqueue_sql.worker.settings import WorkerSettings

    for make in (WorkerSettings, lambda **kw: Worker(PG, **kw), lambda **kw: AsyncWorker(PG, **kw)):
        with pytest.raises(InvalidArgumentError, match=f"^{re.escape(message)}"):
            make(**bad)


def test_the_settings_in_range_are_taken_and_the_defaults_are_one_list():
    """The edge values are accepted; WorkerBase's keywords, WorkerSettings' fields and the CLI's
    defaults are the same settings with the same defaults."""
    import inspect

    from pyqueue_sql.cli import build_parser
    from pyqueue_sql.cli.workers import worker_settings
    from pyqueue_sql.worker import WorkerBase
    from pyqueue_sql.worker.settings import WorkerSettings

    edge = dict(
        concurrency=1,
        prefetch=0,
        ack_batch=1,
        ack_interval=0,
        lease=30,
        release_dead_after=30,
        start_timeout=None,
    )
    assert WorkerSettings(**edge).keywords() == {**WorkerSettings().keywords(), **edge}
    worker = Worker(PG, **edge)
    assert (
        worker.settings == WorkerSettings(**edge, commit_reserve=False)
        and worker.prefetch == 0
        and worker.start_timeout is None
    )
    keywords = {
        name: p.default
        for name, p in inspect.signature(WorkerBase.__init__).parameters.items()
        if name not in ("self", "dsn")
    }
    assert keywords == WorkerSettings().keywords()
    args = build_parser().parse_args(["worker", "m:f", "--queue", "q"])
    given = worker_settings(args)
    assert given == {name: WorkerSettings().keywords()[name] for name in given}


# The settings `pyqueue-sql worker` has no option for (a worker object in a module sets them)
NOT_ON_THE_COMMAND_LINE = {
    "poll_min",
    "poll_max",
    "linger",
    "long_poll_wait",
    "long_poll_check",
    "commit_reserve",
}


def test_each_setting_option_of_the_command_is_named_and_defaults_as_its_setting():
    """`pyqueue-sql worker`'s options are WorkerSettings' fields by name (settings_from_options
    maps them, in one place), each defaulting to None (the worker's default) or to the field's
    own default; a setting it does not offer is listed above, so that a new one is a decision."""
    import argparse
    import dataclasses

    from pyqueue_sql.cli import build_parser
    from pyqueue_sql.worker.settings import WorkerSettings

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    options = {a.dest: a.default for a in sub.choices["worker"]._actions}
    fields = {f.name: f.default for f in dataclasses.fields(WorkerSettings)}
    assert {name for name in fields if name not in options} == NOT_ON_THE_COMMAND_LINE
    for name, default in fields.items():
        if name in options:
            assert options[name] in (None, default), name


def test_a_misspelt_setting_is_a_type_error_and_the_typed_keywords_are_the_settings(monkeypatch):
    """Worker and AsyncWorker take WorkerSettings' fields as keywords, typed by WorkerOptions for
    a type checker (tests/unit/test_worker_typing.py) and checked against them when the module
    is imported: a field typed otherwise, or missing there, is an ImportError."""
    import dataclasses

    from pyqueue_sql.aio import AsyncWorker
    from pyqueue_sql.worker import settings as settings_module

    for make in (Worker, AsyncWorker):
        with pytest.raises(TypeError, match="concurrancy"):
            make(PG, concurrancy=2)
    assert AsyncWorker(PG, connections=2, concurrency=8).connections == 2
    fields = {f.name: f.type for f in dataclasses.fields(settings_module.WorkerSettings)}
    assert {k: t.__forward_arg__ for k, t in settings_module.WorkerOptions.__annotations__.items()} == fields
    settings_module._check_options()
    monkeypatch.setitem(settings_module.WorkerOptions.__annotations__, "lease", "int")
    with pytest.raises(ImportError, match="lease"):
        settings_module._check_options()
    monkeypatch.delitem(settings_module.WorkerOptions.__annotations__, "lease")
    with pytest.raises(ImportError, match="lease"):
        settings_module._check_options()


# -- the run ---------------------------------------------------------------------------------


def test_a_run_starts_serves_and_stops_in_one_order_for_both_runners():
    """WorkerBase._run_steps, which Worker.run and AsyncWorker.run drive: the checks before the
    start on a connection of their own, the runners, the dispatcher until the stop, then the stop,
    the deregistration and the on_stop hooks; a crash of the dispatcher still stops it all."""
    from pyqueue_sql.worker.steps import BEGIN, FINISH, START_RUNNERS, STOP_RUNNERS, On, Open, Shut

    for crash in (None, RuntimeError("dispatcher broke")):
        worker, _ = make_worker(PG)
        steps = Steps(worker._run_steps(install_signals=False))
        assert steps.op == BEGIN and worker._state == "starting"
        assert steps.answer() == Open("dispatcher")
        preflight = steps.answer("conn-1")
        assert isinstance(preflight, On) and preflight.conn == "conn-1"
        assert steps.answer() == Shut("conn-1")
        assert steps.answer() == START_RUNNERS
        assert steps.answer() == Open("dispatcher", dispatcher=True)
        serving = steps.answer("dispatcher-conn")
        assert isinstance(serving, On) and serving.conn == "dispatcher-conn"
        assert not worker.state.stopping.is_set()
        if crash is None:
            worker.stop()
            assert steps.answer() == Shut("dispatcher-conn")
        else:
            assert steps.throw(crash) == Shut("dispatcher-conn")
        assert worker.state.stopping.is_set() and worker._state == "stopping"
        assert steps.answer() == STOP_RUNNERS
        assert steps.answer() == Open("deregister")
        assert isinstance(steps.answer("conn-3"), On)
        assert steps.answer() == Shut("conn-3")
        assert steps.answer() == FINISH
        assert steps.answer() == Hooks(worker.on_stop, "on_stop")
        if crash is None:
            assert steps.answer() is None and steps.done and steps.result is True
        else:
            with pytest.raises(RuntimeError, match="dispatcher broke"):
                steps.answer()
        assert worker._state == "stopped" and worker.stopped.is_set()
        assert worker.state.stop_reason == ("stop()" if crash is None else "RuntimeError: dispatcher broke")


def test_a_run_refused_at_the_start_closes_its_connection_and_starts_nothing():
    from pyqueue_sql.worker.steps import BEGIN, On, Shut

    worker, _ = make_worker(PG)
    steps = Steps(worker._run_steps(install_signals=False))
    assert steps.op == BEGIN
    steps.answer()
    assert isinstance(steps.answer("conn-1"), On)
    assert steps.throw(InvalidArgumentError("queue 'q' keeps no results")) == Shut("conn-1")
    with pytest.raises(InvalidArgumentError, match="keeps no results"):
        steps.answer()
    assert worker._state == "stopped" and worker.stopped.is_set()


def test_a_reserved_job_is_the_job_its_init_would_make():
    # Job.reserved fills the new Job's __dict__ itself: every field as __init__ sets it, its own lock
    r = reservation()
    made, other = Job.reserved(r, 12.5), Job.reserved(r, 12.5)
    init = Job(r, lease_until=12.5)
    fields = {k: v for k, v in vars(init).items() if k != "lock"}
    assert {k: v for k, v in vars(made).items() if k != "lock"} == fields and vars(made).keys() == vars(
        init
    ).keys()
    assert type(made.lock) is type(init.lock) and made.lock is not other.lock

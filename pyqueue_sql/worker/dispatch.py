"""Dispatch: the reserve loop (reserve as many messages as there are free handler slots, wait
when nothing is ready) and each message's way through its handler to its commit or failure.

When nothing is ready the dispatcher waits until the earliest of: a wakeup (LISTEN, or the
long poll's ready message), the next scheduled_at the server reports (queue_next_scheduled_at),
the poll fallback, two re-checks after a wakeup (DRAINED_RECHECK, then one `linger` after it),
and the time a message this worker failed with a retry delay since becomes ready again
(RetryDue). The last one matters because a failure with a delay sends no wakeup: without it a
dispatcher already waiting when a handler failed (any worker of more than one handler slot)
would sleep to the poll fallback. The re-checks cover the pushes whose NOTIFY the throttle left
out (pyqueue__notify): another transaction's wakeup of the same window may have come first.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from .. import errors
from ..client import QueueCalls
from ..dialects import UnreadableJSON, encode_json
from .interrupt import CancelStopped
from .model import Job, Plan, Route, Settles, log, log_expired, where_of
from .model import RetryDue as RetryDue  # its former home, kept importable
from .policy import Snooze, describe_error
from .runners import STUCK_RETRY_DELAY, RunnerPool
from .steps import (
    RECONNECT,
    WAIT_SLOTS,
    Acquire,
    Commit,
    Handle,
    Hooks,
    Listen,
    Notifications,
    RetriedCall,
    Sleep,
    StoppedError,
    refused_at_start,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .model import RunState
    from .policy import FailurePolicy
    from .registry import Registry
    from .settings import WorkerSettings
    from .watch import Watch

# How often a wait looks at the stop and at a newly scheduled retry (seconds).
WAIT_SLICE = 0.25

# Held back (ready messages that the reserve did not get: a concurrency limit's slots all taken, or
# rows another reserver has locked), or holding messages whose settle may free one (a limit's slot,
# a FIFO group's next message): the idle wait looks this often whether one of this worker's settles
# ended (Settles), and reserves again at once when one did, instead of waiting for a wakeup that
# no settle sends. Held back with none of its own to settle, it tries again after HELD_MIN
# seconds, twice as long each time up to HELD_MAX (slots that other workers hold), never after
# the poll fallback.
HELD_SLICE = 0.002
HELD_MIN = 0.01
HELD_MAX = 0.5
# Held back while its own messages run or await their acknowledgement, the wait for their settles
# reads its LISTEN connection only this often (a wakeup frees no slot of the full kind; one for
# another kind waits this long at most): read every HELD_SLICE, it took about half the worker's
# CPU under a limit its own messages fill (PostgreSQL, limit 64: 53-59 µs a job against 28-34).
HELD_LISTEN = 0.025

# After a LISTEN round that got fewer messages than it asked for, the reserve loop waits for the next
# wakeup rather than reserving again at once, up to this many seconds: the default notify
# window of the PostgreSQL push routines (pyqueue__notify), within which a push may skip its NOTIFY
# for another transaction's that the round's snapshot may already have passed.
DRAINED_RECHECK = 0.005

# The prefetch holds at most about this many seconds of the handlers' work (by their average
# time so far), so that slow handlers do not sit on messages other workers could run.
PREFETCH_HORIZON = 0.1

# Held back, the completer's flush reserves again for the slots its commits freed (refill_steps)
# until this many refills in a row got nothing (held back by a rate, or by slots other workers
# hold: a commit frees none of those), then no more until the reserve loop is held back anew.
REFILL_MISSES = 2
# ... and only while the handlers take at least this long on average (seconds): a refill saves each
# slot the reserve loop's notice and a round trip, and costs the completer's next commit its
# reserve's round trip, which the reserve loop's reserve overlaps with it. No-op jobs under a limit
# of 64 ran at about half the rate with it (2,175 against 4,620 jobs/s, PostgreSQL, in process).
REFILL_HANDLER_MIN = 0.002

# The reserve loop keeps what it holds of a limited kind (its messages in hand and those awaiting their
# acknowledgement) within the limit (RunState.limits, read at the start and at each heartbeat): a reserve for no more than the room its own holdings leave finds that many
# slots free (unless other workers hold some), so it is not held back by a limit its own messages
# fill, and does not read past every ready message of the kind. Once the room falls below
# LIMIT_ROOM_PART of the capacity (1 at least) it waits for its own settles instead, the completer
# acknowledging at once (Settles.hurry). A limit of 64, 16 handlers, no-op jobs: see
# bench/latest/NOTES-limit.md.
LIMIT_ROOM_PART = 8

# What commit_steps gives a success that the completer acknowledges later, in a batch.
DEFERRED = object()

# The ok of a job whose group commit lost reservations without saying which (AsyncWorker's
# committers): the batch was logged and counted, the job is not counted again.
COUNTED_BY_BATCH = object()


def stopped_for_cancel(job: Job, error: BaseException | None) -> bool:
    """Whether a handler stopped for a cancel: it raised pyqueue_sql.Cancelled (asked or not), or
    its coroutine ended in CancelledError after a cancel was requested (the worker cancelled it).
    Its message then ends as cancelled (queue_cancel_held)."""
    if error is None:
        return False
    if isinstance(error, (errors.Cancelled, CancelStopped)):  # CancelStopped: raised by watch.py
        return True
    return isinstance(error, asyncio.CancelledError) and job.cancel_requested.is_set()


def wait_left(now: float, deadline: float, retry_at: float | None) -> float:
    """Seconds a wait that ends at `deadline` has left at `now`, ended early by a retry due at
    `retry_at` (negative or zero: the wait is over)."""
    end = deadline if retry_at is None else min(deadline, retry_at)
    return end - now


def idle_timeout(
    *,
    listen: bool,
    long_poll: bool,
    poll_fallback: float,
    long_poll_wait: float,
    poll: float,
    poll_max: float,
    due: float | None,
    recheck_in: float | None,
    retry_in: float | None,
) -> tuple[float, float]:
    """(how long to wait after an empty round, the next client-side poll interval): the earliest
    of the wakeup's fallback (LISTEN: poll_fallback; a one-queue long poll: long_poll_wait;
    else the client-side poll, which backs off up to poll_max), the next scheduled_at (`due`
    seconds away), a pending re-check and a retry this worker scheduled (seconds away)."""
    if listen:
        timeout = poll_fallback
    elif long_poll:
        timeout = long_poll_wait
    else:
        timeout = poll
        poll = min(poll * 2, poll_max)
    for sooner in (due, recheck_in, retry_in):
        if sooner is not None:
            timeout = min(timeout, max(sooner, 0.0))
    return max(timeout, 0.0), poll


def earliest_due(due: float | None, wait_s: float | None) -> float | None:
    """The earlier of two next-scheduled_at waits (seconds). A wait_s of 0 right after an empty
    reserve is a message that came due since (the reserve loop runs one more round at once), or
    a row another reserver holds the lock of: ignored here, the poll decides."""
    if wait_s is not None and wait_s > 0:
        return wait_s if due is None else min(due, wait_s)
    return due


class HeldBack:
    """The reserve loop's state while held back: ready messages that its reserves do not get (a
    concurrency limit's slots all taken). A reserve that asks for more than the limit's free slots
    reads past every ready message of the full kind (for messages of other kinds): held back, each
    round asks only for as many as this worker settled since the last one (its settles free as many
    slots), so that it takes what is free without that read, and waits for its next settle in
    between (HELD_SLICE). After a wait that none of its own settles ended (slots that others
    freed, a wakeup), it probes with 1, twice as many each time all came; held back no more once
    a round got all it may take, or nothing is ready."""

    def __init__(self, settles: Settles) -> None:
        self.settles = settles
        self.on = False
        self.mark = 0  # settles.count at the last round's reserve
        self.probe = 0  # to ask for beyond what settled (after a wait no settle ended)
        self.last_probe = 0
        self.wait = HELD_MIN
        self.most = 0  # the most a round got while held back: about the slots free to this worker
        self.deferred = False  # the last budget() waited for more settles

    def start(self) -> None:
        if not self.on:
            self.on = self.settles.held = True
            self.settles.refill_misses = 0
            self.probe = 0
            self.wait = HELD_MIN

    def budget(self, busy: bool) -> int | None:
        """How many to ask each queue for in this round (None: not held back). While its own
        messages run or await their acknowledgement (busy), it waits until a quarter of the most a
        round got has settled (0 now): each reserve under a limit reads the limit's slots once,
        and a round of one message each would read them once a message."""
        count = self.settles.count
        budget = count - self.mark + self.probe
        self.deferred = self.on and busy and not self.probe and 0 < budget < self.most // 4
        if self.deferred:
            return 0
        self.mark = count
        self.last_probe, self.probe = self.probe, 0
        return budget if self.on else None

    def took(self, got: int, *, all_asked: bool, capped: bool) -> None:
        """A round got messages: all it asked for (all_asked), fewer than it may take (capped)."""
        if self.on and all_asked:
            self.most = max(self.most, got)
            if not capped:
                self.on = self.settles.held = False  # it got all it may take: held back no more
            elif self.last_probe:
                self.probe = self.last_probe * 2

    def waited(self, *, settled: bool) -> None:
        if settled:
            self.wait = HELD_MIN
        else:
            self.probe = max(self.probe, 1)
            self.wait = min(self.wait * 2, HELD_MAX)


class Runner(Protocol):
    """What the reserve loop takes from the worker that runs it: the settings resolved against the
    database, the name it reserves as, the messages it holds, and where reserved jobs go."""

    _job_type: type[Job]

    @property
    def use_listen(self) -> bool: ...
    @property
    def poll_fallback(self) -> float: ...
    @property
    def prefetch(self) -> int: ...
    @property
    def reserve_as(self) -> str: ...
    def _jobs(self) -> list[Job]: ...
    def _start_jobs(self, jobs: list[Job]) -> None: ...
    def stop(self, force: bool = False, *, reason: str | None = None) -> None: ...


class ReserveLoop:
    """The dispatcher's reserve loop (steps: see steps.py): it reserves as many messages as the
    worker has free handler slots (plus its prefetch) and hands them to the runner, and waits
    when nothing is ready (see the module docstring)."""

    def __init__(
        self,
        settings: WorkerSettings,
        state: RunState,
        routes: dict[str, Route],
        on_idle: list[Callable[[Any], Any]],
        worker: Runner,
    ) -> None:
        self.settings = settings
        self.state = state
        self.routes = routes  # the worker's, shared
        self.on_idle = on_idle  # the worker's hooks, shared
        self.worker = worker
        # while an idle wait also ends when one of this worker's settles ends: Settles.done at its
        # start (read by listen_steps, which runs inside the runner's Listen), else None
        self.settled_since: int | None = None
        # queues whose reserves have returned a kind that has no limit since the limits were last
        # read (RunState.limits, replaced at each read): a room kept for the limited kinds would
        # hold those back too
        self.unlimited_seen: set[str] = set()
        self.unlimited_of: dict[str, dict[str, int]] = self.state.limits
        # messages asked for by reserves under way, by queue: the reserve loop's and the completer's
        # refill (refill_steps) run at once on two threads, and what one is taking is in neither's
        # holdings until it returns; each counts the other's ask as held (free, limit_room), so
        # that together they never ask for more than the handlers and a limit's slots leave
        self.asking: dict[str, int] = {}
        # all of them: one int, read at once (the dict may change while another thread sums it)
        self.asked = 0
        self._asking_lock = threading.Lock()

    def dispatch_failed(self, exc: BaseException, backoff: float) -> float:
        """Logs a non-connection error of the reserve loop; returns the back-off after this one."""
        if self.state.round_ok:
            backoff = 0.5
        self.state.stats.dispatch_errors += 1
        self.state.last_error = describe_error(exc)[:500]
        log.error(
            "error in the reserve loop (%s); starting it again in %.1f s",
            self.state.last_error,
            backoff,
            exc_info=exc,
            extra={"event": "dispatch_error", "error": self.state.last_error, "retry_in_s": backoff},
        )
        return backoff

    def round_done(self) -> None:
        self.state.round_ok = True
        self.state.last_error = None

    def reserve_order(self) -> list[str]:
        """The queues to reserve from this round: those a wakeup named first."""
        order = sorted(self.state.wake_queues) + [q for q in self.routes if q not in self.state.wake_queues]
        self.state.wake_queues.clear()
        return order

    def prefetch_now(self) -> int:
        """How many messages to hold beyond the handlers now: up to `prefetch`, but no more than
        PREFETCH_HORIZON seconds of the handlers' work at their average time so far (none until
        a handler has finished: a worker whose handlers are slow, or have not run yet, does not
        hold messages that another worker could start)."""
        avg = self.state.handler_avg
        if avg is None or not self.worker.prefetch:
            return 0
        return min(self.worker.prefetch, int(self.settings.concurrency * PREFETCH_HORIZON / max(avg, 1e-6)))

    def free(self) -> int:
        """How many more messages the worker may hold: its handlers and its prefetch (and, with
        max_jobs, no more than it has left to take)."""
        free = self.settings.concurrency + self.prefetch_now() - len(self.worker._jobs()) - self.asked
        if self.settings.max_jobs is not None:
            free = min(free, self.settings.max_jobs - self.state.stats.reserved)
        return free

    def handler_free(self) -> bool:
        """Whether a handler has no message in hand (none prefetched waits for it)."""
        return len(self.worker._jobs()) < self.settings.concurrency

    def refill_at(self) -> int:
        """The dispatcher reserves again once the worker holds fewer messages than this: a free
        handler when there is no prefetch, else half the prefetch used up (so that it reserves
        in batches, not one message each time a handler finishes)."""
        return self.settings.concurrency + (self.prefetch_now() + 1) // 2

    def long_poll(self) -> bool:
        """Whether the idle wait is the server's long poll (queue_wait): one queue, no LISTEN."""
        return not self.worker.use_listen and len(self.routes) == 1

    def idle_timeout(self, poll: float, due: float | None, recheck_at: float | None) -> tuple[float, float]:
        now = self.state.clock()
        retry_at = self.state.retry_due.at
        return idle_timeout(
            listen=self.worker.use_listen,
            long_poll=self.long_poll(),
            poll_fallback=self.worker.poll_fallback,
            long_poll_wait=self.settings.long_poll_wait,
            poll=poll,
            poll_max=self.settings.poll_max,
            due=due,
            recheck_in=None if recheck_at is None else recheck_at - now,
            retry_in=None if retry_at is None else retry_at - now,
        )

    def reserved(self, route: Route, jobs: list[Job]) -> None:
        self.state.stats.reserved += len(jobs)
        if jobs:
            log.debug("reserved", extra={"event": "reserve", "queue": route.queue, "n": len(jobs)})

    def woken(self, channel: str, payload: str) -> None:
        self.state.stats.wakeups += 1
        self.state.wake_queues.add(self.state.channels.get(channel, payload))

    def limits_of(self, queue: str) -> dict[str, int] | None:
        """The queue's concurrency limits, {kind: capacity}, as last read (None: none)."""
        limits = self.state.limits
        if limits is not self.unlimited_of:  # read again since: what the reserves returned is forgotten
            self.unlimited_of = limits
            self.unlimited_seen.clear()
        return limits.get(queue)

    def limit_room(self, route: Route, acked: Sequence[Job] = ()) -> tuple[int, int] | None:
        """(how many more messages of the route's limited kinds this worker may hold, the room below
        which it waits for its own settles instead of reserving), or None: no limit bounds what
        the route reserves. The room is each limited kind's capacity less what this worker holds of
        it: its messages in hand and the successes awaiting their acknowledgement (a slot frees
        only when its commit lands). It bounds a route that reserves limited kinds only (its
        handlers' kinds, or what its reserves have returned since the limits were read): a room
        kept for them would hold back the others. A capacity of 0 bounds nothing here (the
        reserve of the others then reads past the held-back kind, as before). `acked`: successes
        whose commit has landed, still counted as owed (the completer's flush, refill_steps)."""
        limits = self.limits_of(route.queue)
        if not limits:
            return None
        kinds = route.kinds()
        if kinds is None:
            if route.queue in self.unlimited_seen:
                return None
            kinds = list(limits)
        elif any(k not in limits for k in kinds):
            return None
        caps = [limits[k] for k in kinds if k in limits]
        if not all(caps):
            return None
        held: dict[str, int] = {}
        for job in self.worker._jobs():
            if job.queue == route.queue:
                held[job.kind] = held.get(job.kind, 0) + 1
        for job in acked:
            held[job.kind] = held.get(job.kind, 0) - 1
        settles = self.state.settles
        room = sum(
            max(0, limits[k] - held.get(k, 0) - settles.owed_of(route.queue, k)) for k in kinds if k in limits
        )
        return max(0, room - self.asking.get(route.queue, 0)), max(1, sum(caps) // LIMIT_ROOM_PART)

    def reserve_args(self, route: Route, n: int) -> dict[str, Any]:
        return dict(n=n, worker=self.worker.reserve_as, timeout=self.settings.lease, kinds=route.kinds())

    def dispatch_steps(self):
        """The reserve loop; a non-connection error in it is logged and the loop
        starts again on a fresh connection after a back-off, until stop()."""
        backoff = 0.5
        while not self.state.stopping.is_set():
            self.state.round_ok = False
            try:
                yield from self.reserve_loop_steps()
                return
            except StoppedError:
                return
            except Exception as exc:
                if refused_at_start(self.worker, exc):
                    raise
                backoff = self.dispatch_failed(exc, backoff)
                yield RECONNECT  # start again from a clean connection (LISTEN registered again)
                if (yield Sleep(backoff)):
                    return
                backoff = min(backoff * 2, 30.0)

    def reserve_loop_steps(self):
        poll = self.settings.poll_min
        recheck_at: float | None = None
        late_recheck: float | None = None  # the re-check one linger after a wakeup, after its early one
        long_poll = self.long_poll()
        nothing_ready = False  # the last long poll timed out: no reserve needed
        probe = False  # the last client-side poll timed out: read the next scheduled_at first
        rechecked_due_now = False  # the last empty round was already followed by one at once
        held = HeldBack(self.state.settles)
        settles = self.state.settles
        short = False  # the last round that got messages got fewer than it asked for
        took = False  # the last round got messages
        took_at = float("-inf")  # when a round last got messages (clock)
        # the last wait before this round ended by a wakeup (LISTEN) or its time, not by one of its
        # own settles (which may free a limit's slot: its empty round tells whether one is held back)
        woken = False
        due_at: float | None = None  # the next scheduled_at the last read of it reported (clock)
        read_at = float("-inf")  # when it was read (clock)
        waited = False  # the last wait was an idle or drained one, not cut short by work in hand
        while not self.state.stopping.is_set():
            if self.settings.max_jobs is not None and self.state.stats.reserved >= self.settings.max_jobs:
                yield from self.max_jobs_steps()
                return
            if nothing_ready:
                nothing_ready = not (yield from self.wait_steps(self.settings.long_poll_wait))
                continue
            if probe:
                # A client-side poll whose wait ran out without a wakeup: the next scheduled_at
                # of each queue (one call a queue) tells whether anything is ready, and only then
                # do the reserves run, so an idle worker makes one call a queue a poll.
                probe = False
                seen = settles.done
                yield Hooks(self.on_idle, None)
                due, due_now = yield from self.next_due_steps()
                if not due_now:
                    timeout, poll = self.idle_timeout(poll, due, recheck_at)
                    watch = settles.owed > 0 or bool(self.worker._jobs())
                    if not (watch and settles.done != seen):
                        woke = yield from self.wait_steps(timeout, seen if watch else None)
                        probe = not woke and not self.state.wake_queues
                    continue
            yield WAIT_SLOTS
            if self.state.stopping.is_set():
                break
            self.state.retry_due.reached(self.state.clock())
            after_wait, waited = waited, False  # this round follows an idle wait (a stream's wakeup)
            # None: not held back, each queue is asked for all it may take
            budget = held.budget(busy=settles.owed > 0 or bool(self.worker._jobs()))
            got = asked = 0
            capped = False
            roomless = False  # a route waits for room under a limit its own messages fill
            round_seen = settles.done
            if budget != 0:
                for name in self.reserve_order():
                    free = self.free()
                    if free <= 0 or self.state.stopping.is_set():
                        break
                    n = free if budget is None else min(free, budget)
                    room = self.limit_room(self.routes[name])
                    if room is not None:
                        if room[0] < min(n, room[1]):
                            roomless = True
                            continue
                        n = min(n, room[0])
                    capped = capped or n < free
                    asked += n
                    got += yield from self.reserve_steps(self.routes[name], n)
                self.round_done()
            settles.hurry = roomless
            if roomless and not got:
                # what it holds of a limited kind leaves too little room: the next round when one of
                # its own settles ends (it holds some, so one will), or HELD_MAX
                yield from self.settles_wait_steps(HELD_MAX, round_seen)
                continue
            if held.on and (budget == 0 or 0 < got < asked):
                # still held back (nothing of its own settled, or the limit filled again): no
                # reserve and no next scheduled_at until one of its settles ends, or a while
                yield from self.held_wait_steps(held)
                continue
            seen = settles.done  # before the reads below: a settle that ends meanwhile counts
            if got:
                poll = self.settings.poll_min
                rechecked_due_now = False
                held.took(got, all_asked=got == asked, capped=capped)
                if (
                    got < asked
                    and short
                    and not held.on
                    and self.state.clock() >= read_at + self.settings.linger
                ):
                    # Fewer than it asked for twice in a row: a limit may hold the rest back (each
                    # such reserve reads every message it holds back). One ready now says so. Read
                    # at most once a linger while none is (a steady stream: each round gets fewer).
                    due, due_now = yield from self.next_due_steps()
                    read_at = self.state.clock()
                    due_at = None if due is None else read_at + due
                    if due_now:
                        read_at = float("-inf")
                        held.start()
                        yield from self.held_wait_steps(held)
                short = got < asked
                took, took_at, woken = True, self.state.clock(), False
                if short and after_wait and self.worker.use_listen and not held.on and budget is None:
                    waited = True
                    woken = yield from self.drained_wait_steps(seen)
                    if not woken:
                        recheck_at, late_recheck = late_recheck, None  # the next round re-checks
                    woken = settles.done == seen
                continue
            yield Hooks(self.on_idle, None)
            # Nothing ready: wait for the earliest of a wakeup, the next scheduled_at, the
            # poll fallback, a retry this worker scheduled (and one re-check after a wakeup).
            now = self.state.clock()
            # a stream: the last round took messages, or it followed a wakeup or a re-check's time
            # (not a settle of its own) within a linger of a round that did (a wakeup for a message
            # an earlier round took ends in an empty round too, and so does a re-check that finds
            # no push the throttle left out); a settle's empty round reads (a limit that holds the
            # rest back shows there)
            stream = took or (woken and now < took_at + self.settings.linger)
            if stream and now < read_at + self.settings.linger and self.worker.use_listen and not held.on:
                # Messages taken, the next ones not pushed yet (a steady stream): the next
                # scheduled_at read less than a linger ago stands, and the wait ends a linger after
                # that read at the latest (the next empty round reads it again).
                due, due_now = None if due_at is None else due_at - now, False
                recheck_at = read_at + self.settings.linger if recheck_at is None else recheck_at
            else:
                due, due_now = yield from self.next_due_steps()
                # one due now after a wakeup (a push between a round and this read, which the next
                # round takes) still counts as a read; after a round or a settle of its own it may
                # be a message held back: the next empty round reads again to tell
                read_at = float("-inf") if due_now and not woken else self.state.clock()
                due_at = None if due is None or due_now else self.state.clock() + due
            took = woken = False
            if due_now and not rechecked_due_now and not held.on:
                # A message came due between the empty reserve and this read (its time was
                # reached while the round ran, and no wakeup comes for that): one more round at
                # once. A second 0 in a row is a message held back (below).
                rechecked_due_now = True
                continue
            short = False
            rechecked_due_now = due_now
            if due_now:
                # A message is ready and the reserve did not get it: held back (a concurrency
                # limit's slots all taken, rows another reserver has locked). It reserves again
                # when one of its own settles ends, else after a while: never at its poll fallback.
                held.start()
                yield from self.held_wait_steps(held)
                continue
            held.on = settles.held = False
            timeout, poll = self.idle_timeout(poll, due, recheck_at)
            recheck_at, late_recheck = late_recheck, None
            # A message this worker holds may free one when it settles (a FIFO group's next one):
            # the wait ends when one of its settles ends (see HELD_SLICE).
            watch = settles.owed > 0 or bool(self.worker._jobs())
            if watch and settles.done != seen:
                continue  # one ended since the reserve: reserve again now
            woke = yield from self.wait_steps(timeout, seen if watch else None)
            waited = True
            woken = self.worker.use_listen and settles.done == seen
            if woke and woken:  # a wakeup, not a settle
                # re-checks: DRAINED_RECHECK after it (a push of the same window that skipped its
                # NOTIFY, committed after this round's snapshot), then one linger after it
                now = self.state.clock()
                recheck_at = now + min(DRAINED_RECHECK, self.settings.linger)
                late_recheck = now + self.settings.linger
            # queue_wait watches the next scheduled_at itself, so a timed-out
            # long poll goes straight into the next one (one query per wait).
            nothing_ready = long_poll and not woke and not self.state.wake_queues
            probe = not long_poll and not self.worker.use_listen and not woke and not self.state.wake_queues

    def drained_wait_steps(self, seen: int):
        """A LISTEN round got fewer than it asked for (a steady stream: the queue was drained at its
        snapshot): no empty round at once, a wait for the next push's wakeup instead (a push that
        committed while the round ran has its notification buffered: the wait ends at once), at
        most DRAINED_RECHECK (a push that skipped its NOTIFY for another transaction's of the same
        window, which was delivered before this round's snapshot), and when one of this worker's
        settles ends (one may free a FIFO group's next message). False: it waited its time out."""
        if self.state.wake_queues:
            return True
        watch = self.state.settles.owed > 0 or bool(self.worker._jobs())
        if watch and self.state.settles.done != seen:
            return True
        return (yield from self.wait_steps(DRAINED_RECHECK, seen if watch else None))

    def held_wait_steps(self, held: HeldBack):
        """Held back: waits until one of this worker's settles ends (at once if one ended since the
        last reserve), a wakeup, or held.wait (twice as long each time up to HELD_MAX, never past
        the poll fallback); then the next round reserves as many as settled meanwhile (a probe of
        1, doubling, after a wait that no settle of its own ended: slots other workers freed).
        While messages of its own run or await their acknowledgement, it waits for their settles
        up to HELD_MAX before a probe (a probe the limit holds back reads every message it holds
        back)."""
        seen = held.settles.done
        busy = held.settles.owed > 0 or bool(self.worker._jobs())
        wait = held.settles.count == held.mark or held.deferred
        if wait:
            timeout = min(
                HELD_MAX if busy else held.wait, self.idle_timeout(self.settings.poll_min, None, None)[0]
            )
            if busy:
                yield from self.settles_wait_steps(timeout, seen)
            else:
                yield from self.wait_steps(timeout, seen, True)
        # no wait (its own settles since the last reserve) is no wait that none of them ended: no probe
        held.waited(settled=not wait or held.settles.done != seen)

    def settles_wait_steps(self, timeout: float, seen: int):
        """held_wait_steps's wait while its own messages run or await their acknowledgement: until
        one of its settles ends (looked at every HELD_SLICE), a wakeup (its LISTEN connection read
        every HELD_LISTEN), a retry it scheduled, the stop or `timeout`."""
        clock = self.state.clock
        deadline = clock() + timeout
        listen_at = clock() + HELD_LISTEN
        while self.state.settles.done == seen:
            now = clock()
            left = wait_left(now, deadline, self.state.retry_due.at)
            if left <= 0:
                return
            if self.worker.use_listen and now >= listen_at:
                listen_at = now + HELD_LISTEN
                if (yield from self.wait_steps(min(left, HELD_SLICE), seen, True)):
                    return
            elif (yield Sleep(min(left, HELD_SLICE), settled=True)):
                return

    def max_jobs_steps(self):
        """The worker took its max_jobs messages: it takes no more, waits for them to end, then
        stops (a clean stop: `pyqueue-sql worker --max-jobs` exits 0 and --processes starts the
        process again)."""
        log.info(
            "took its %d jobs (max_jobs): taking no more, stopping once they have ended",
            self.settings.max_jobs,
            extra={"event": "max_jobs", "max_jobs": self.settings.max_jobs},
        )
        while self.worker._jobs():
            if (yield Sleep(0.05)):
                return
        self.worker.stop(reason=f"max_jobs {self.settings.max_jobs} reached")

    def next_due_steps(self):
        """(seconds to the earliest next scheduled_at, whether one is due already)."""
        due: float | None = None
        due_now = False
        for route in self.routes.values():
            _, wait_s = yield RetriedCall("next_scheduled_at", route.queue, (route.kinds(),))
            due = earliest_due(due, wait_s)
            due_now = due_now or (wait_s is not None and wait_s <= 0)
        return due, due_now

    def settled(self) -> bool:
        """Whether one of this worker's settles ended since the idle wait began (when it watches)."""
        return self.settled_since is not None and self.state.settles.done != self.settled_since

    def wait_steps(self, timeout: float, settled_since: int | None = None, held: bool = False):
        """Waits up to timeout; True if woken by a notification (LISTEN) or a ready message (long
        poll). A LISTEN wait or a client-side poll also ends when a retry this worker scheduled
        is due (a long poll needs not: the server watches the next scheduled_at itself). With
        settled_since (Settles.done when it began), it also ends, True, when one of this worker's
        settles ends; held back (held), the wait is a client-side one: the server's long poll
        would answer at once that a message is ready."""
        if timeout <= 0:
            return False
        deadline = self.state.clock() + timeout
        self.settled_since = settled_since
        try:
            return (yield from self.wait_until_steps(timeout, deadline, held))
        finally:
            self.settled_since = None

    def wait_until_steps(self, timeout: float, deadline: float, held: bool):
        if self.worker.use_listen:
            return (yield Listen(deadline))
        if self.long_poll() and not held:
            route = next(iter(self.routes.values()))
            if self.state.stopping.is_set():
                return False
            if self.state.wake_queues:
                return True
            woke = yield RetriedCall(
                "wait",
                route.queue,
                kwargs=dict(
                    timeout=round(timeout, 6) or 0.000001,
                    poll=self.settings.long_poll_check,
                    kinds=route.kinds(),
                ),
            )
            if woke:
                self.state.stats.wakeups += 1
            return bool(woke)
        step = WAIT_SLICE if self.settled_since is None else HELD_SLICE
        while True:
            if self.settled():
                return True
            left = wait_left(self.state.clock(), deadline, self.state.retry_due.at)
            if left <= 0 or (yield Sleep(min(left, step))):
                return False

    def listen_steps(self, db: Any, deadline: float):
        if self.state.wake_queues:
            return True  # (re)connected: wakeups may have been missed meanwhile
        left = wait_left(self.state.clock(), deadline, self.state.retry_due.at)
        # Short slices so that stop() and a newly scheduled retry are noticed within WAIT_SLICE
        # (a settle of this worker within HELD_SLICE, when the wait watches them).
        step = WAIT_SLICE if self.settled_since is None else HELD_SLICE
        while left > 0 and not self.state.stopping.is_set():
            if self.settled():
                return True
            notes = yield Notifications(db, min(left, step))
            for channel, payload in notes:
                self.woken(channel, payload)
            if notes:
                return True  # later notifications stay buffered for the next wait
            left = wait_left(self.state.clock(), deadline, self.state.retry_due.at)
        return False

    def reserve_steps(self, route: Route, n: int):
        queue = route.queue
        self._ask(queue, n)
        try:
            lease_until = self.state.clock() + self.settings.lease
            rows, expired = yield RetriedCall(
                "reserve", queue, kwargs=self.reserve_args(route, n), expired=True
            )
            log_expired(self.state.stats, expired)
            made = self.worker._job_type.reserved
            jobs = [made(r, lease_until) for r in rows]
            limits = self.limits_of(queue)
            if limits and queue not in self.unlimited_seen and any(j.kind not in limits for j in jobs):
                self.unlimited_seen.add(queue)
            self.worker._start_jobs(jobs)  # held from here on: no longer an ask
        finally:
            self._ask(queue, -n)
        self.reserved(route, jobs)
        return len(jobs)

    def _ask(self, queue: str, n: int) -> None:
        with self._asking_lock:
            self.asked += n
            left = self.asking.get(queue, 0) + n
            if left:
                self.asking[queue] = left
            else:
                del self.asking[queue]


class Dispatch:
    """Each message's way through its handler to its commit or failure (steps: see steps.py); the
    reserve loop that starts them is ReserveLoop. The worker makes one and hands it what it works
    with: the settings, the run state, the routes, the failure policy, the watcher, the registry
    (the name it reserves as), the runner pool (the stuck threads), and from the runner the job
    type, how a job's slot is freed (release) and how a success is acknowledged later (defer_ack:
    the completer). group_commit: a chained success goes to the runner's committers (Commit)."""

    def __init__(
        self,
        settings: WorkerSettings,
        state: RunState,
        routes: dict[str, Route],
        policy: FailurePolicy,
        watch: Watch,
        registry: Registry,
        runners: RunnerPool,
        *,
        commit_reserve: bool,
        job_type: type[Job],
        release: Callable[..., None],
        defer_ack: Callable[[Job, float], None],
        group_commit: bool = False,
        reserve_loop: ReserveLoop | None = None,
    ) -> None:
        self.settings = settings
        self.reserve_loop = reserve_loop  # the completer's flush reserves with it (refill_steps)
        self.state = state
        self.stats = state.stats
        self.routes = routes  # the worker's, shared (handlers are added after this is made)
        self.policy = policy
        self.watch = watch
        self.registry = registry
        self.runners = runners
        self.commit_reserve = commit_reserve
        self.job_type = job_type
        self.release = release  # (job, successors=()): frees the job's slot, a successor takes it
        owe = state.settles.deferred

        def defer(job: Job, elapsed_ms: float) -> None:
            owe(job.queue, job.kind)  # owed until the completer's flush (ack_steps) ends it: see Settles
            defer_ack(job, elapsed_ms)

        self.defer_ack = defer  # (job, elapsed_ms): the completer acknowledges it, in a batch
        self.group_commit = group_commit

    # -- bookkeeping ----------------------------------------------------------------

    def note_handler_time(self, seconds: float) -> None:
        """Keeps the handlers' average time (moving: recent handlers weigh most)."""
        avg = self.state.handler_avg
        self.state.handler_avg = seconds if avg is None else avg + 0.1 * (seconds - avg)

    def chains(self, interrupted: bool) -> bool:
        """Whether a success commits with queue_commit_reserve, taking the queue's next message
        in the same call (see commit_reserve). Only for a worker of one queue: with several, the
        dispatcher decides which queue a free thread serves, so that a busy queue cannot starve
        the others."""
        return (
            self.commit_reserve
            and len(self.routes) == 1
            and not interrupted
            and not self.state.stopping.is_set()
        )

    def commit_reserve_args(self, route: Route) -> dict[str, Any]:
        return dict(n=1, worker=self.registry.reserve_as, timeout=self.settings.lease, kinds=route.kinds())

    def plan_of(self, job: Job) -> Plan:
        """The job's handler, its timeout, whether its result is stored and whether the handler is
        a coroutine function (a QueueError, the message's failure, when its kind has no handler)."""
        plan = self.routes[job.queue].plan(job.kind)
        if plan[0] is None:
            raise errors.QueueError(f"no handler for kind {job.kind!r}")
        for what, value in (("payload", job.payload), ("headers", job.headers)):
            if type(value) is UnreadableJSON:  # fails alone; the messages reserved with it run
                raise errors.UnreadablePayloadError(f"{what} unreadable: {value.reason}")
        return plan

    # -- a message's way ----------------------------------------------------------------
    def serve_steps(self, job: Job | None):
        """Runs a reserved job, then the ones its commits reserve; hands it back after a stop."""
        stopping, clock, low = self.state.stopping, self.state.clock, self.settings.lease / 3
        holds = self.runners.holds
        while job is not None:
            if stopping.is_set():
                yield from self.hand_back_steps(job)
                return
            if holds(job):
                yield from self.stuck_retry_steps(job)
                return
            lease_until = job.lease_until
            if lease_until is not None and lease_until - clock() < low and self.lease_low(job):
                yield from self.hand_back_steps(job)
                return
            try:
                job = yield from self.job_steps(job)
            except Exception:  # never lose the handler (its job was released in job_steps)
                log.exception(
                    "handler: unexpected error", extra={"event": "error", "queue": job.queue, "key": job.key}
                )
                return

    def stuck_retry_steps(self, job: Job):
        """A job whose earlier attempt still runs in a thread of this worker stuck past its time
        limit (runners.py, a plain handler's or a batch's): never two at once; given back for
        STUCK_RETRY_DELAY seconds, the attempt not counted."""
        log.info(
            "%s: its earlier attempt still runs in a stuck thread of this worker; given back for %g s",
            where_of(job),
            STUCK_RETRY_DELAY,
            extra={"event": "stuck_retry", "queue": job.queue, "key": job.key, "kind": job.kind},
        )
        yield from self.hand_back_steps(job, STUCK_RETRY_DELAY)

    def lease_low(self, job: Job) -> bool:
        """Whether a message about to start (a prefetched one waited for a handler, or for its
        batch's turn) has less than a third of its lease left: the heartbeat, which extends every
        held message each lease/3, has not reached it, so it may expire while its handler runs.
        Counted and logged: the caller hands it back instead, never runs it on a lapsing
        reservation."""
        lease_until = job.lease_until
        if lease_until is None or lease_until - self.state.clock() >= self.settings.lease / 3:
            return False
        self.stats.lease_low += 1
        log.warning(
            "%s waited for a handler until its lease ran low; handed back unstarted",
            where_of(job),
            extra={"event": "lease_low", "queue": job.queue, "key": job.key, "kind": job.kind},
        )
        return True

    def committed(self, job: Job, ok: Any, elapsed_ms: float) -> None:
        if ok is COUNTED_BY_BATCH:  # a group commit lost reservations: counted and logged there
            return
        if ok is DEFERRED:
            # Called with the job's lock held, just before job.done is set: the heartbeat no
            # longer extends it, so the token the completer sends is the one it has now.
            self.defer_ack(job, elapsed_ms)
        else:
            self.policy.committed(job, ok, elapsed_ms)

    def commit_steps(self, job: Job, chain: bool):
        """Commits a handled message: (committed, the next jobs reserved in the same call). A
        success that does not chain (queue_commit_reserve) goes to the completer: DEFERRED."""
        if self.group_commit and chain:
            return (yield Commit(job, chain))  # the runner's committers (AsyncWorker's group commit)
        return (yield from self.commit_reserve_steps(job, chain))

    def commit_reserve_steps(self, job: Job, chain: bool):
        """commit_steps on the job's own: queue_commit_reserve when it chains, else DEFERRED."""
        q = job.queue
        if not chain:
            return DEFERRED, []
        route = self.routes[q]
        lease_until = self.state.clock() + self.settings.lease
        (ok, rows), expired = yield RetriedCall(
            "commit_reserve", q, (job.reservation,), self.commit_reserve_args(route), hard=True, expired=True
        )
        log_expired(self.stats, expired)
        self.stats.commit_reserves += 1
        self.stats.reserved += len(rows)
        return bool(ok), [self.job_type(r, lease_until=lease_until) for r in rows]

    def ack_steps(self, batch: list[tuple[Job, float]]):
        """The completer's flush: commits the successes of each queue in one call (one alone:
        queue_commit, whose answer names it). Run by one completer at a time, on its connection."""
        by_queue: dict[str, list[tuple[Job, float]]] = {}
        for job, elapsed_ms in batch:
            by_queue.setdefault(job.queue, []).append((job, elapsed_ms))
        taken = 0
        try:
            yield from self.ack_queues_steps(by_queue)
            if self.refills(by_queue):
                taken = yield from self.refill_steps(by_queue)
        finally:
            # slots and group places freed, but those the refill took again: see Settles
            self.state.settles.ended(
                acked=len(batch), taken=taken, kinds=[(j.queue, j.kind) for j, _ in batch]
            )

    def refills(self, by_queue: dict[str, list[tuple[Job, float]]]) -> bool:
        """Whether the completer's flush reserves again for the slots its commits freed (see
        refill_steps): the reserve loop is held back (Settles.held: a limit's slots all taken, its
        own messages among their holders) and the handlers are not quick (REFILL_HANDLER_MIN), a
        worker of one queue (with several, the reserve loop's order keeps them fair) without
        max_jobs, not AsyncWorker's group commit."""
        settles = self.state.settles
        return (
            (settles.held or settles.hurry)
            and (self.state.handler_avg or 0.0) >= REFILL_HANDLER_MIN
            and settles.refill_misses < REFILL_MISSES
            and self.reserve_loop is not None
            and not self.group_commit
            and self.settings.max_jobs is None
            and len(self.routes) == 1
            and len(by_queue) == 1
            and not self.state.stopping.is_set()
        )

    def refill_steps(self, by_queue: dict[str, list[tuple[Job, float]]]):
        """The completer's flush, held back: right after its commit, on its connection, a reserve of
        as many messages as it committed (no more than the worker may hold), which takes the
        slots they freed before another worker's reserve does. Without it the slot stays empty
        for the time the reserve loop takes to notice the settle and for its reserve's round
        trip (a limit of 8, 10 ms jobs: 46-57 % of the bound). Returns how many it got."""
        loop = self.reserve_loop
        assert loop is not None
        ((q, entries),) = by_queue.items()
        if not loop.handler_free():
            return 0  # each handler has a message in hand: the reserve loop's rounds keep up
        n = min(len(entries), loop.free())
        room = loop.limit_room(self.routes[q], [j for j, _ in entries])
        if room is not None:
            n = min(n, room[0])
        if n <= 0:
            return 0
        try:
            got = yield from loop.reserve_steps(self.routes[q], n)
        except StoppedError:
            raise
        except Exception:  # e.g. the queue was dropped meanwhile: the reserve loop's round says so
            log.debug("refill failed", exc_info=True, extra={"event": "refill_error", "queue": q})
            got = 0
        settles = self.state.settles
        settles.refill_misses = 0 if got else settles.refill_misses + 1
        return got

    def ack_queues_steps(self, by_queue: dict[str, list[tuple[Job, float]]]):
        for q, all_entries in by_queue.items():
            # the successes whose result is stored commit with it (queue_commit_result_batch)
            plain = [e for e in all_entries if not e[0].store_result]
            stored = [e for e in all_entries if e[0].store_result]
            for entries, with_result in ((plain, False), (stored, True)):
                if not entries:
                    continue
                try:
                    if len(entries) == 1:
                        job, elapsed_ms = entries[0]
                        self.committed(job, (yield from self.commit_one_steps(job, with_result)), elapsed_ms)
                        continue
                    if with_result:
                        items = [(j.reservation, j.result) for j, _ in entries]
                        held = yield RetriedCall("commit_result_many", q, (items,), hard=True)
                    else:
                        held = yield RetriedCall(
                            "commit_many", q, ([j.reservation for j, _ in entries],), hard=True
                        )
                    self.stats.ack_batches += 1
                    self.acknowledged(q, entries, held)
                except StoppedError:
                    for job, _ in entries:
                        self.policy.abandoned(job)
                except errors.InvalidArgumentError as exc:
                    if with_result:
                        # a result the queue refuses (larger than its max_payload, or the queue
                        # keeps no results now): each alone, so that only the refused ones fail
                        yield from self.commit_each_steps(entries)
                    else:
                        for job, _ in entries:
                            self.policy.unfinishable(job, exc)
                except Exception as exc:  # e.g. the queue was dropped meanwhile
                    for job, _ in entries:
                        self.policy.unfinishable(job, exc)

    def commit_one_steps(self, job: Job, with_result: bool):
        if with_result:
            return (yield RetriedCall("commit_result", job.queue, (job.reservation, job.result), hard=True))
        return (yield RetriedCall("commit", job.queue, (job.reservation,), hard=True))

    def commit_each_steps(self, entries: list[tuple[Job, float]]):
        """Commits successes with results one by one; a result the queue refuses fails its message
        (as if its handler had raised the error), the others commit."""
        for job, elapsed_ms in entries:
            try:
                self.committed(job, (yield from self.commit_one_steps(job, True)), elapsed_ms)
            except StoppedError:
                self.policy.abandoned(job)
            except errors.InvalidArgumentError as exc:
                try:
                    yield from self.fail_steps(job, exc, False, elapsed_ms)
                except StoppedError:
                    self.policy.abandoned(job)
                except Exception as again:
                    self.policy.unfinishable(job, again)
            except Exception as exc:
                self.policy.unfinishable(job, exc)

    def acknowledged(self, q: str, entries: list[tuple[Job, float]], held: int) -> None:
        """Counts and logs a batch whose queue_commit_batch said `held` of its reservations still
        held (and are now gone); the others had expired or been released (the call does not say
        which: the batch is logged), and their messages are or were redelivered."""
        if held == len(entries):
            if log.isEnabledFor(logging.DEBUG) or self.policy.on_outcome:  # one "commit" event per message
                for job, elapsed_ms in entries:
                    self.committed(job, True, elapsed_ms)
            else:
                self.stats.succeeded += held
            return
        self.stats.succeeded += held
        self.stats.lost += len(entries) - held
        log.warning(
            "%d of the %d reservations of %s committed together were no longer held (expired or "
            "released; their messages are or were redelivered), among: %s",
            len(entries) - held,
            len(entries),
            q,
            ", ".join(where_of(j) for j, _ in entries[:50]),
            extra={"event": "lost", "queue": q, "n": len(entries) - held},
        )

    def fail_steps(self, job: Job, error: BaseException, interrupted: bool, elapsed_ms: float):
        """Fails a handled message with its policy's delay (queue_fail) and, when it is to be
        retried, tells the dispatcher's wait when it is due (a delayed retry sends no wakeup).
        Snooze gives it back without using an attempt (queue_snooze); GiveUp, or an error its
        kind's policy does not retry, ends it now."""
        text = describe_error(error)
        if isinstance(error, Snooze) and not interrupted:
            yield from self.snooze_steps(job, error)
            return
        if self.policy.gives_up(job, error, interrupted):
            outcome = yield from self.give_up_steps(job, text)
            self.policy.given_up(job, error, text, outcome, elapsed_ms)
            return
        delay = self.policy.failure_delay(job, interrupted, error)
        outcome = yield RetriedCall(
            "fail", job.queue, (job.reservation,), {"error": text, "delay": delay}, hard=True
        )
        if outcome == "retry":
            self.state.retry_due.note(self.state.clock() + delay)
        self.policy.failed(job, error, text, outcome, delay, elapsed_ms, interrupted)

    def snooze_steps(self, job: Job, snooze: Snooze):
        # queue_snooze gives the attempt back; a client without it (an older one) hands the
        # message back with queue_rollback, where the delivery counts
        method = "snooze" if hasattr(QueueCalls, "snooze") else "rollback"
        if method == "rollback":
            log.warning(
                "%s snoozed with a client without queue_snooze: handed back with queue_rollback, "
                "the delivery counts as an attempt",
                where_of(job),
                extra={"event": "snooze", "queue": job.queue, "key": job.key, "kind": job.kind},
            )
        held = yield RetriedCall(method, job.queue, (job.reservation,), {"delay": snooze.after}, hard=True)
        if held:
            self.state.retry_due.note(self.state.clock() + snooze.after)
        self.policy.snoozed(job, snooze.after, bool(held))

    def give_up_steps(self, job: Job, text: str):
        """Ends a reserved message now with queue_give_up: into its queue's dead-letter queue
        ('dead_lettered', the error kept as the dead letter's last_error), or removed when it has
        none ('dropped'); None when the reservation no longer held."""
        return (yield RetriedCall("give_up", job.queue, (job.reservation,), {"error": text}, hard=True))

    def job_steps(self, job: Job):
        """Runs one job to its commit or failure; returns the next job when the commit reserved one.
        Its common way (a handler that succeeds, its success acknowledged in a batch) makes few
        calls: it runs once a message (docs/performance.md, the worker's CPU per job)."""
        job.started_at = started_at = time.monotonic()
        plan = self.routes[job.queue].plans.get(job.kind)
        if plan is None or plan[0] is None or UnreadableJSON in (type(job.payload), type(job.headers)):
            try:
                plan = self.plan_of(job)
            except errors.QueueError as exc:
                plan = None
                error: BaseException | None = exc
        if plan is not None:
            fn, timeout, job.store_result, job.runs_async = plan
            # The handler's failure is the message's, not the worker's: it comes back as the
            # result (thrown in, a GeneratorExit would end these steps).
            error = yield Handle(fn, job, timeout)
            self.note_handler_time(time.monotonic() - started_at)
        if error is None:
            cancelled = interrupted = False
            if job.store_result:
                try:  # a result JSON cannot hold fails its message here, not the batch it commits in
                    encode_json(job.result)
                except errors.InvalidPayloadError as exc:
                    error = exc
        if error is not None:
            if isinstance(error, asyncio.CancelledError) and self.state.hard_stop.is_set():
                self.release(job)  # abandoned: the message comes back after its lease
                raise error
            cancelled = stopped_for_cancel(job, error)
            interrupted = False if cancelled else self.policy.handled(job, error)
        elapsed_ms = round((time.monotonic() - started_at) * 1000, 3)
        successors: list[Job] = []
        lock = job.lock
        deferred = False
        try:
            yield Acquire(lock)
            try:
                if job.progress_pending:  # the last progress goes with the result
                    yield from self.watch.write_progress_steps(job)
                if error is None:
                    if self.commit_reserve and self.chains(interrupted) and not job.store_result:
                        ok, successors = yield from self.commit_steps(job, True)
                        self.committed(job, ok, elapsed_ms)
                    else:
                        # acknowledged by the completer, in a batch (ack_steps). Called with the
                        # job's lock held, just before job.done is set: the heartbeat no longer
                        # extends it, so the token the completer sends is the one it has now.
                        self.defer_ack(job, elapsed_ms)
                        deferred = True
                elif cancelled:
                    self.policy.cancelled(
                        job, (yield RetriedCall("cancel_held", job.queue, (job.reservation,), hard=True))
                    )
                else:
                    yield from self.fail_steps(job, error, interrupted, elapsed_ms)
                job.done = True
            finally:
                lock.release()
        except StoppedError:
            self.policy.abandoned(job)
        except Exception as exc:  # e.g. the queue was dropped meanwhile: keep the handler alive
            self.policy.unfinishable(job, exc)
        finally:
            if not deferred:
                self.state.settles.ended()
            self.release(job, successors)
        return successors[0] if successors else None

    def overdue_cancel_steps(self, job: Job):
        """A cancelled job whose plain handler is blocked past kill_grace, before its process is
        replaced: recorded as cancelled (queue_cancel_held) and marked done, so that nothing
        settles it again (and the heartbeat no longer extends it). True once recorded."""
        yield Acquire(job.lock)
        try:
            if job.done:
                return False
            held = yield RetriedCall("cancel_held", job.queue, (job.reservation,), hard=True)
            job.done = True
        finally:
            job.lock.release()
        self.policy.cancelled(job, held)
        return True

    def hand_back_steps(self, job: Job, delay: float = 0.0):
        """Gives back a message reserved and not started (a stop, a lease run low, its earlier
        attempt stuck) with queue_snooze: ready again at once (or after `delay` seconds), its
        delivery not counted. (queue_rollback counts it: a message on its last attempt was
        dead-lettered or dropped, its result 'failed' with no reason, without having run.)"""
        try:
            yield Acquire(job.lock)
            try:
                yield RetriedCall("snooze", job.queue, (job.reservation,), {"delay": delay}, hard=True)
                job.done = True
            finally:
                job.lock.release()
            if delay:
                self.state.retry_due.note(self.state.clock() + delay)
            self.policy.handed_back(job)
        except StoppedError:
            pass
        except Exception:
            log.exception(
                "could not hand back; the message comes back after its lease",
                extra={"event": "error", "queue": job.queue, "key": job.key},
            )
        finally:
            self.state.settles.ended()
            self.release(job)

"""Recurring messages: queue_schedule_every / queue_schedule_cron / queue_unschedule / queue_schedules."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time

import pytest

from pyqueue_sql import errors

UTC = dt.timezone.utc


def occurrence_key(key: str, at: dt.datetime) -> str:
    return f"{key}@{at.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def pending(raw, queue, key, kind):
    """The occurrence messages of a schedule that are in the queue, as a plain SQL client sees them."""
    rows = raw(
        "SELECT p_key FROM pyqueue_message WHERE queue_name = %s AND p_kind = %s ORDER BY p_key",
        (queue.name, kind),
    )
    return [r[0] for r in rows if r[0].startswith(key + "@")]


# -- a reference cron matcher, day by day (for checking the SQL) -------------------


def _field(text, lo, hi):
    out = set()
    for part in text.split(","):
        rng, _, step = part.partition("/")
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            a, b = map(int, rng.split("-"))
        else:
            a = int(rng)
            b = hi if step else a
        out.update(range(a, b + 1, int(step or 1)))
    return out


def reference_next(expr: str, after: dt.datetime) -> dt.datetime:
    mi, hr, dom, mon, dow = expr.split()
    minutes, hours = _field(mi, 0, 59), _field(hr, 0, 23)
    doms, mons = _field(dom, 1, 31), _field(mon, 1, 12)
    dows = {d % 7 for d in _field(dow, 0, 7)}
    either = not dom.startswith("*") and not dow.startswith("*")
    t = after.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    day = t.replace(hour=0, minute=0)
    times = sorted(h * 60 + m for h in hours for m in minutes)
    for _ in range(366 * 8 + 1):
        wd = (day.weekday() + 1) % 7  # Sunday = 0
        ok_dom, ok_dow = day.day in doms, wd in dows
        if day.month in mons and ((ok_dom or ok_dow) if either else (ok_dom and ok_dow)):
            for x in times:
                cand = day + dt.timedelta(minutes=x)
                if cand >= t:
                    return cand
        day += dt.timedelta(days=1)
    raise AssertionError("no match")


def sql_cron_next(raw, dialect, expr, after):
    if dialect == "postgresql":
        return raw("SELECT pyqueue__cron_next(%s, %s)", (expr, after))[0][0].astimezone(UTC)
    raw("CALL pyqueue__cron_next(%s, %s, @pyq_next)", (expr, after.replace(tzinfo=None)))
    return raw("SELECT CAST(@pyq_next AS DATETIME(6))")[0][0].replace(tzinfo=UTC)


FIXED = [
    ("*/15 * * * *", "2026-11-22 04:29:10", "2026-11-22 04:30:00"),
    ("0 0 29 2 *", "2026-11-22 04:29:10", "2028-02-29 00:00:00"),
    ("30 9 * * 1-5", "2026-11-21 10:00:00", "2026-11-23 09:30:00"),
    ("0 12 1 * 0", "2026-11-22 13:00:00", "2026-11-29 12:00:00"),  # day 1 OR Sunday
    ("0 12 1 * 7", "2026-11-22 13:00:00", "2026-11-29 12:00:00"),  # 7 = Sunday too
    ("59 23 31 12 *", "2026-12-31 23:59:00", "2027-12-31 23:59:00"),
    ("5,10-12,50-59/3 3 * * *", "2026-01-01 03:11:59", "2026-01-01 03:12:00"),
    ("5,10-12,50-59/3 3 * * *", "2026-01-01 03:12:00", "2026-01-01 03:50:00"),
    ("0 0 * * *", "2026-12-31 23:59:59.999", "2027-01-01 00:00:00"),
    ("0 0 31 * *", "2026-04-01 00:00:00", "2026-05-31 00:00:00"),
]


@pytest.mark.parametrize("expr,after,expected", FIXED)
def test_cron_next_known_cases(raw, dialect, expr, after, expected):
    at = dt.datetime.fromisoformat(after).replace(tzinfo=UTC)
    assert sql_cron_next(raw, dialect, expr, at) == dt.datetime.fromisoformat(expected).replace(tzinfo=UTC)


def test_cron_next_agrees_with_a_reference_on_random_expressions(raw, dialect):
    rng = random.Random(4)

    def field(lo, hi):
        kind = rng.random()
        if kind < 0.3:
            return "*"
        if kind < 0.45:
            return f"*/{rng.randint(1, hi - lo + 1)}"
        parts = []
        for _ in range(rng.randint(1, 3)):
            a = rng.randint(lo, hi)
            if rng.random() < 0.5:
                b = rng.randint(a, hi)
                parts.append(f"{a}-{b}" + (f"/{rng.randint(1, 9)}" if rng.random() < 0.3 else ""))
            else:
                parts.append(str(a))
        return ",".join(parts)

    checked = 0
    while checked < 60:
        expr = " ".join([field(0, 59), field(0, 23), field(1, 31), field(1, 12), field(0, 7)])
        after = dt.datetime(2026, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=rng.randint(0, 4 * 365 * 86400))
        try:
            want = reference_next(expr, after)
        except AssertionError:
            continue  # never matches (e.g. 31 February): the SQL refuses it, tested elsewhere
        assert sql_cron_next(raw, dialect, expr, after) == want, (expr, after)
        checked += 1


@pytest.mark.parametrize(
    "expr,message",
    [
        ("* * * *", "5 fields"),
        ("* * * * * *", "5 fields"),
        ("60 * * * *", "minute"),
        ("* 24 * * *", "hour"),
        ("* * 0 * *", "day-of-month"),
        ("* * * 13 *", "month"),
        ("* * * * 8", "day-of-week"),
        ("5-1 * * * *", "minute"),
        ("*/0 * * * *", "minute"),
        ("a * * * *", "minute"),
        ("1,,2 * * * *", "minute"),
        ("* * * JAN *", "month"),
        ("0 0 31 2 *", "matches no day"),
    ],
)
def test_bad_cron_expressions_are_refused_clearly(queue, expr, message):
    with pytest.raises(errors.InvalidArgumentError, match=message):
        queue.schedule_cron("job", "tick", {}, expr)
    assert queue.schedules() == [] and queue.stats().delayed == 0


def test_schedule_every_pushes_one_occurrence_and_commit_pushes_the_next(queue, raw):
    before = dt.datetime.now(UTC)
    first = queue.schedule_every("report", "tick", {"n": 1}, 1)
    after = dt.datetime.now(UTC)  # the database read its clock between before and after
    assert first.microsecond == 0 and before < first <= after + dt.timedelta(seconds=1)
    (sched,) = queue.schedules()
    assert (sched.key, sched.kind, sched.payload, sched.every_s, sched.cron, sched.next_at) == (
        "report",
        "tick",
        {"n": 1},
        1,
        None,
        first,
    )
    assert pending(raw, queue, "report", "tick") == [occurrence_key("report", first)]
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    (occ,) = queue.reserve(timeout=60)
    assert occ.key == occurrence_key("report", first) and occ.payload == {"n": 1}
    assert pending(raw, queue, "report", "tick") == [occ.key]  # nothing new before the commit
    before_commit = dt.datetime.now(UTC)
    assert queue.commit(occ)
    (sched,) = queue.schedules()
    assert sched.next_at > first and sched.next_at > before_commit
    assert pending(raw, queue, "report", "tick") == [occurrence_key("report", sched.next_at)]


def test_a_commit_batch_holding_an_occurrence_pushes_the_next_one(queue, raw):
    """An occurrence committed among plain messages, in one batch, still schedules its next one."""
    first = queue.schedule_every("report", "tick", {}, 1)
    queue.push_many([(f"plain-{i}", "tick", {}) for i in range(3)])
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    held = queue.reserve(10, timeout=60)
    assert occurrence_key("report", first) in [r.key for r in held] and len(held) == 4
    assert queue.commit_many(held) == 4
    (sched,) = queue.schedules()
    assert sched.next_at > first
    assert pending(raw, queue, "report", "tick") == [occurrence_key("report", sched.next_at)]


@pytest.mark.parametrize("into", ["another queue", "its own queue"])
def test_a_moved_occurrence_pushes_the_next_one(queue, make_queue, raw, into):
    """Moving a schedule's pending occurrence hands it on and the schedule goes on, as after a
    commit: one next occurrence, and the moved one arrives where it was sent."""
    target = make_queue() if into == "another queue" else queue
    first = queue.schedule_every("report", "tick", {"n": 1}, 1)
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    (occ,) = queue.reserve(timeout=60)
    assert occ.key == occurrence_key("report", first)
    assert queue.move(occ, target, payload={"n": 2})
    (sched,) = queue.schedules()
    assert sched.next_at > first
    nxt = occurrence_key("report", sched.next_at)
    if target is queue:
        assert pending(raw, queue, "report", "tick") == sorted([occ.key, nxt])
        # the moved one runs again; its commit pushes nothing more (it is no longer the pending one)
        (again,) = queue.reserve(timeout=60)
        assert again.key == occ.key and again.payload == {"n": 2}
        assert queue.commit(again)
        assert [s.next_at for s in queue.schedules()] == [sched.next_at]
    else:
        assert pending(raw, target, "report", "tick") == [occ.key]
    assert pending(raw, queue, "report", "tick") == [nxt]


@pytest.mark.parametrize(
    "ending",
    [
        "fail, last attempt (dropped)",
        "fail, last attempt (dead-lettered)",
        "give up",
        "lease expired on the last attempt",
        "removed by an admin",
        "cancelled by its holder",
        "popped",
    ],
)
def test_whatever_ends_the_pending_occurrence_the_next_one_is_pushed(queue, make_queue, raw, ending):
    """A consumer's give-up (or a lease that ran out on the last attempt) ends that occurrence, not
    the schedule: its next occurrence is pushed at once, at its time; so do an admin's remove, its
    holder's cancel_held, and a pop (at-most-once consumers too). Only queue_unschedule ends a
    schedule's chain (queue_cancel refuses an occurrence: tests/security/test_schedule_occurrences.py)."""
    dead = make_queue() if "dead-lettered" in ending else None
    queue.create(max_attempts=1, dead_letter_queue=dead.name if dead else None)
    first = queue.schedule_every("r", "tick", {}, 1)
    if ending == "removed by an admin":
        assert queue.remove(occurrence_key("r", first), "tick")
    else:
        time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
        if ending == "popped":
            (popped,) = queue.pop()
            assert popped.key == occurrence_key("r", first)
        else:
            (occ,) = queue.reserve(timeout=0.2 if "expired" in ending else 60)
        if ending == "popped":
            pass
        elif ending == "cancelled by its holder":
            assert queue.cancel_held(occ)
        elif ending == "give up":
            assert queue.give_up(occ, "no") in ("dropped", "dead_lettered")
        elif "expired" in ending:
            time.sleep(0.3)
            assert queue.reserve() == []  # this reserve gives up the expired last delivery
        else:
            assert queue.fail(occ, "boom") in ("dropped", "dead_lettered")
    (sched,) = queue.schedules()
    assert sched.next_at > first
    assert pending(raw, queue, "r", "tick") == [occurrence_key("r", sched.next_at)]
    if dead is not None:
        assert pending(raw, dead, "r", "tick") == [occurrence_key("r", first)]


def test_a_retried_occurrence_holds_back_nothing(queue, raw):
    """An occurrence that failed and waits for its retry is no longer the pending one: the next
    occurrence is pushed at once with its own key and time, and both run; the retried one's
    commit pushes nothing more. A rollback (a delivery handed back, not failed) retries the same
    occurrence and pushes nothing (test_rollback_and_stale_commit_push_nothing)."""
    queue.create(max_attempts=5)
    first = queue.schedule_every("r", "tick", {}, 1)
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    (occ,) = queue.reserve(timeout=60)
    assert queue.fail(occ, "boom", delay=3600) == "retry"
    (sched,) = queue.schedules()
    assert sched.next_at > first
    nxt = occurrence_key("r", sched.next_at)
    assert pending(raw, queue, "r", "tick") == sorted([occ.key, nxt])
    time.sleep(max(0.0, (sched.next_at - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    (second,) = queue.reserve(timeout=60)
    assert second.key == nxt  # on time, while the first waits for its retry
    assert queue.commit(second)
    (later,) = queue.schedules()
    assert later.next_at > sched.next_at
    assert pending(raw, queue, "r", "tick") == sorted([occ.key, occurrence_key("r", later.next_at)])


def test_scheduling_again_the_same_way_keeps_a_live_occurrence_and_repairs_a_lost_one(queue, raw):
    """queue_schedule_every called again with the same definition (a deploy's setup) leaves a
    live pending occurrence as it is, even one past its time that no worker ran yet (it is not
    skipped), and pushes the next one when the pending one is gone."""
    first = queue.schedule_every("r", "tick", {"a": 1, "b": [2]}, 1)
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    assert queue.schedule_every("r", "tick", {"a": 1, "b": [2]}, 1) == first
    assert pending(raw, queue, "r", "tick") == [occurrence_key("r", first)]
    raw("DELETE FROM pyqueue_message WHERE queue_name = %s", (queue.name,))
    again = queue.schedule_every("r", "tick", {"a": 1, "b": [2]}, 1)
    assert again > first
    assert pending(raw, queue, "r", "tick") == [occurrence_key("r", again)]
    other = queue.schedule_every("r", "tick", {"a": 2}, 3600)  # another definition replaces it
    assert pending(raw, queue, "r", "tick") == [occurrence_key("r", other)]
    assert queue.schedules()[0].payload == {"a": 2}


@pytest.mark.slow
def test_a_late_commit_skips_missed_occurrences(queue, raw):
    first = queue.schedule_every("r", "tick", {}, 1)
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 2.2)
    (occ,) = queue.reserve()
    assert queue.commit(occ)
    (sched,) = queue.schedules()
    assert sched.next_at > dt.datetime.now(UTC) - dt.timedelta(seconds=0.1)
    assert sched.next_at - first >= dt.timedelta(seconds=2)
    assert len(pending(raw, queue, "r", "tick")) == 1


@pytest.mark.slow
def test_rollback_and_stale_commit_push_nothing(queue, raw):
    first = queue.schedule_every("r", "tick", {}, 1)
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    (a,) = queue.reserve(timeout=0.2)
    assert queue.rollback(a)
    assert pending(raw, queue, "r", "tick") == [a.key]
    (a,) = queue.reserve(timeout=0.2)
    time.sleep(0.3)  # expires; another worker takes it
    (b,) = queue.reserve(timeout=60)
    assert b.key == a.key
    assert not queue.commit(a)  # stale: no next occurrence
    assert pending(raw, queue, "r", "tick") == [a.key]
    assert queue.commit(b)
    assert len(pending(raw, queue, "r", "tick")) == 1 and pending(raw, queue, "r", "tick") != [a.key]


def test_commit_in_a_rolled_back_transaction_pushes_nothing(queue, raw, connect):
    first = queue.schedule_every("r", "tick", {}, 1)
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    db = connect()
    q = db.queue(queue.name)
    with pytest.raises(RuntimeError):
        with db.transaction():
            (occ,) = q.reserve(timeout=60)
            assert q.commit(occ)
            raise RuntimeError("business logic failed")
    assert pending(raw, queue, "r", "tick") == [occurrence_key("r", first)]
    assert queue.schedules()[0].next_at == first


@pytest.mark.slow
def test_racing_workers_leave_exactly_one_next_occurrence(queue, raw, connect):
    """Eight connections reserve and commit a 1-second schedule's occurrences until three are
    committed. Half of them hold a 50 ms lease and sleep past it before committing, so their
    occurrences expire and are re-reserved while they still commit; the other half hold a long
    lease and commit at once, so occurrences get committed however slow the machine is. Every
    committed occurrence is a different time and exactly one occurrence is pending at the end.
    Deliveries are not limited here: with the default 10, a run of stale reservations could
    dead-letter an occurrence (its schedule then goes on, but that occurrence is never committed),
    and the race under test would be another one."""
    queue.create(max_attempts=1_000_000)
    queue.schedule_every("tick", "t", {}, 1)
    deadline = time.monotonic() + 60.0
    committed: list[str] = []
    lock = threading.Lock()
    done = threading.Event()

    def work(i):
        q = connect().queue(queue.name)
        stale = i % 2 == 0
        while not done.is_set() and time.monotonic() < deadline:
            for r in q.reserve(timeout=0.05 if stale else 60):
                if stale:
                    time.sleep(0.05 + random.random() * 0.1)
                if q.commit(r):
                    with lock:
                        committed.append(r.key)
                        if len(committed) >= 3:
                            done.set()
            time.sleep(0.01)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(committed) >= 3, committed
    assert len(committed) == len(set(committed)), committed
    assert queue.stats().dead == 0
    left = pending(raw, queue, "tick", "t")
    assert len(left) == 1
    assert left == [occurrence_key("tick", queue.schedules()[0].next_at)]


def test_replace_and_unschedule(queue, raw):
    queue.schedule_every("job", "tick", {"v": 1}, 3600)
    at = queue.schedule_cron("job", "tick", {"v": 2}, "*/5 * * * *")  # may fall on the same hour
    assert at.minute % 5 == 0 and at.second == 0
    (sched,) = queue.schedules()
    assert (sched.payload, sched.every_s, sched.cron) == ({"v": 2}, None, "*/5 * * * *")
    assert pending(raw, queue, "job", "tick") == [occurrence_key("job", at)]
    assert queue.db.dialect.codec.read_payload(
        raw("SELECT payload FROM pyqueue_message WHERE queue_name = %s AND p_kind = 'tick'", (queue.name,))[
            0
        ][0]
    ) == {"v": 2}
    assert queue.unschedule("job", "tick")
    assert not queue.unschedule("job", "tick")
    assert queue.schedules() == [] and pending(raw, queue, "job", "tick") == []


def test_unschedule_leaves_a_reserved_occurrence_which_then_pushes_nothing(queue, raw):
    first = queue.schedule_every("r", "tick", {}, 1)
    time.sleep(max(0.0, (first - dt.datetime.now(UTC)).total_seconds()) + 0.05)
    (occ,) = queue.reserve(timeout=60)
    assert queue.unschedule("r", "tick")
    assert queue.commit(occ)
    assert pending(raw, queue, "r", "tick") == []


def test_schedule_arguments_are_validated(queue, db):
    with pytest.raises(errors.InvalidArgumentError):
        queue.schedule_every("r", "tick", {}, 0)
    with pytest.raises(errors.InvalidArgumentError):
        queue.schedule_every("r", "tick", {}, 1.5)
    with pytest.raises(errors.InvalidArgumentError):
        queue.schedule_every("r", "tick", {}, -1)
    with pytest.raises(errors.InvalidArgumentError):
        queue.schedule_every("x" * 235, "tick", {}, 60)
    with pytest.raises(errors.InvalidArgumentError):
        queue.schedule_every("", "tick", {}, 60)
    with pytest.raises(errors.UnknownQueueError):
        db.queue("no-such-queue").schedule_every("r", "tick", {}, 60)
    with pytest.raises(errors.InvalidArgumentError):
        queue.unschedule("", "tick")
    assert queue.schedules() == [] and queue.stats().delayed == 0
    assert queue.schedule_every("x" * 234, "tick", {}, 60) is not None


def test_schedules_from_plain_sql(queue, raw, dialect):
    q = queue.name
    if dialect == "postgresql":
        (at,) = raw("SELECT queue_schedule_every(%s, 'rep', 'tick', '{\"a\": 1}', interval '1 hour')", (q,))[
            0
        ]
        raw("SELECT queue_schedule_cron(%s, 'cr', 'tick', '{}', '0 9 * * 1-5')", (q,))
        rows = raw("SELECT p_key, every_s, cron FROM queue_schedules(%s)", (q,))
        assert raw("SELECT queue_unschedule(%s, 'cr', 'tick')", (q,)) == [(True,)]
    else:
        (at,) = raw("CALL queue_schedule_every(%s, 'rep', 'tick', '{\"a\": 1}', 3600)", (q,))[0]
        raw("CALL queue_schedule_cron(%s, 'cr', 'tick', '{}', '0 9 * * 1-5')", (q,))
        rows = [(r[1], r[4], r[5]) for r in raw("CALL queue_schedules(%s)", (q,))]
        assert [tuple(r) for r in raw("CALL queue_unschedule(%s, 'cr', 'tick')", (q,))] == [(1,)]
    assert [tuple(r) for r in rows] == [("cr", None, "0 9 * * 1-5"), ("rep", 3600, None)]
    assert at.minute == 0 and at.second == 0
    assert [s.key for s in queue.schedules()] == ["rep"]


def test_scheduling_again_the_same_way_leaves_a_chain_ahead_of_the_clock(queue, raw):
    """Occurrences an admin removed before their time each pushed the one after it: the chain lies
    hours ahead of the server's clock, as it does under a test clock (which moves stored times, not
    the server's). The same definition scheduled again (a deploy's setup) leaves it as it is."""
    first = queue.schedule_every("billing", "bill", {"n": 1}, 3600)
    for hour in range(3):
        assert queue.remove(occurrence_key("billing", first + dt.timedelta(hours=hour)), "bill")
    ahead = first + dt.timedelta(hours=3)
    assert [s.next_at for s in queue.schedules()] == [ahead]
    assert queue.schedule_every("billing", "bill", {"n": 1}, 3600) == ahead
    assert pending(raw, queue, "billing", "bill") == [occurrence_key("billing", ahead)]

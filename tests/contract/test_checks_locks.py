"""What the routines' row locks are for, each shown with real connections: a reserver never waits
for a row another transaction holds (SKIP LOCKED: the call returns at once, with what nobody
holds; it would fail with a lock wait timeout if it waited), and where the contract has a call
wait for another's transaction, it does (seen waiting from a third session), with the outcome
that waiting gives. Each test kills mutants of bench/mutants.jsonl that drop a SKIP LOCKED or a
lock (docs/reliability.md, "The whole contract's model and its mutants")."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest

from .lock_sessions import Call, Session, call_that_waits, unique


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


# ---- reservers skip what another transaction holds ----------------------------------------------


@pytest.mark.parametrize("priority", [0, 1])
def test_a_reserve_skips_the_messages_a_transaction_holds(sessions, priority):
    """A consumer's reserve inside its own transaction holds its messages until it ends; another
    consumer's reserve takes the next ones at once (priority 0 only, and a queue with priorities
    above it, which MySQL/MariaDB reserve by another way)."""
    holder, other = sessions(2)
    q = unique("skip")
    holder.create(q)
    for i in range(4):
        holder.push(q, f"m{i}", priority=priority)
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(q, 2)] == ["m0", "m1"]
    assert [r[0] for r in other.reserve(q, 2)] == ["m2", "m3"]
    holder.rollback()


def test_a_reserve_past_many_priorities_with_nothing_ready_skips_what_a_transaction_holds(sessions):
    """Past eight priorities with nothing ready (their messages are delayed) a reserve reads the
    ready rows of the lower ones in one sorted read; it skips a row another transaction holds
    there too."""
    holder, other = sessions(2)
    q = unique("skipdeep")
    holder.create(q)
    later = now() + dt.timedelta(hours=1)
    for p in range(10, 1, -1):
        holder.push(q, f"later{p}", run_at=later, priority=p)
    holder.push(q, "a", priority=1)
    holder.push(q, "b", priority=1)
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(q)] == ["a"]
    assert [r[0] for r in other.reserve(q)] == ["b"]
    holder.rollback()


def test_a_message_a_batch_reserve_skipped_as_held_is_the_sessions_next_reserves_first(sessions):
    """A consumer's reserve in its own transaction holds m0; another session's batch reserve skips
    it and takes m1, m2. The transaction rolls back: that session's next batch reserve takes m0
    first, in reserve order. The first batch reserve's first candidate, m0 (read without locks: a
    held message is one), is the session's mark, where its next read starts
    (docs/contract/05_reserve.md); the mark is kept alive here for 5 s (what a read from the start
    of 0.25 s gives), so the next reserve reads from it, and must read m0 itself. (A mark at the
    first message the reserve locked, m1, would leave m0 behind.)"""
    holder, other = sessions(2)
    q = unique("skipmark")
    holder.create(q)
    for i in range(6):
        holder.push(q, f"m{i}")
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(q, 1)] == ["m0"]
    assert [r[0] for r in other.reserve(q, 2)] == ["m1", "m2"]
    holder.rollback()
    other.keep_mark(q)
    assert [r[0] for r in other.reserve(q, 2)] == ["m0", "m3"]


@pytest.mark.parametrize("history", [False, True])
def test_a_redrive_skips_the_dead_letters_a_transaction_holds(sessions, history):
    """A consumer of the dead-letter queue holds one dead letter in its transaction; a redrive
    moves the next one at once (from a queue that keeps history too, which archives each move)."""
    holder, other = sessions(2)
    dead, to = unique("dead"), unique("to")
    holder.create(dead, history=86400 if history else None)
    holder.create(to)
    holder.push(dead, "d0")
    holder.push(dead, "d1")
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(dead)] == ["d0"]
    assert other.one("queue_redrive", dead, to, 1) == 1
    assert other.keys(to) == {"d1": "ready"}
    holder.rollback()


def test_a_reserve_of_a_rate_limited_kind_skips_the_unit_a_transaction_is_taking(sessions):
    """Two units of a rate per hour: a reserve inside a transaction takes one (its slot locked
    until it ends); another consumer's reserve takes the other at once."""
    holder, other = sessions(2)
    q = unique("skiprate")
    holder.create(q)
    holder.call("queue_set_rate", q, "k", 2, holder.dur(3600))
    holder.push(q, "m0")
    holder.push(q, "m1")
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(q)] == ["m0"]
    assert [r[0] for r in other.reserve(q)] == ["m1"]
    holder.rollback()


def test_a_push_into_a_full_group_waits_for_no_head_a_transaction_is_reserving(sessions):
    """A group of limit 1 whose head, never delivered, is being reserved by an open transaction:
    a push with an earlier run time into that group would take the head's place, but the head is
    locked, so the push leaves it (it is being delivered) and returns at once, its message
    blocked behind it."""
    holder, other = sessions(2)
    q = unique("skipgroup")
    holder.create(q)
    holder.call("queue_set_group_limit", q, "g", 1)
    holder.push_grouped(q, "g", "head", run_at=now() - dt.timedelta(minutes=1))
    other.lock_timeout()
    holder.begin()
    assert [r[0] for r in holder.reserve(q)] == ["head"]
    assert other.push_grouped(q, "g", "earlier", run_at=now() - dt.timedelta(hours=1))
    holder.sql("COMMIT")
    assert holder.keys(q) == {"head": "reserved", "earlier": "delayed"}


def test_a_pop_of_a_group_head_waits_for_no_push_into_its_group(sessions):
    """A producer's transaction pushed into a group (it holds the group's row until it ends): a
    pop returns at once, leaving the group's head for later (it cannot hand the head's place on
    now) or taking it."""
    holder, other = sessions(2)
    q = unique("popgroup")
    holder.create(q)
    holder.push_grouped(q, "g", "head")
    other.lock_timeout()
    holder.begin()
    assert holder.push_grouped(q, "g", "next")
    popped = other.pop(q)
    holder.sql("COMMIT")
    assert popped in ([], ["head"])


def test_a_pop_of_a_group_head_waits_for_no_other_pop_of_that_group(sessions):
    """A group of limit 2, both heads ready: a consumer pops one inside its transaction (its place
    is handed on under the group's row, held until the transaction ends); another consumer's pop
    returns at once, with the other head or nothing."""
    holder, other = sessions(2)
    q = unique("popgroup2")
    holder.create(q)
    holder.call("queue_set_group_limit", q, "g", 2)
    holder.push_grouped(q, "g", "h1")
    holder.push_grouped(q, "g", "h2")
    holder.push_grouped(q, "g", "h3")
    other.lock_timeout()
    holder.begin()
    assert holder.pop(q) == ["h1"]
    assert other.pop(q) in ([], ["h2"])
    holder.sql("COMMIT")


def test_a_pop_of_a_second_head_waits_for_no_push_into_its_group(sessions):
    """A group of limit 2, both heads ready; a producer's transaction pushes a third message
    into it (the group's row held until it ends): a pop returns at once, with the second head
    or nothing."""
    holder, other = sessions(2)
    q = unique("popgroup3")
    holder.create(q)
    holder.call("queue_set_group_limit", q, "g", 2)
    holder.push_grouped(q, "g", "h1")
    holder.push_grouped(q, "g", "h2")
    other.lock_timeout()
    holder.begin()
    assert holder.push_grouped(q, "g", "h3")
    assert other.pop(q) in ([], ["h2"])
    holder.sql("COMMIT")


# ---- calls that wait for another transaction, and what that waiting gives -----------------------


def test_a_visibility_timeout_set_while_max_reservation_is_lowered_is_refused_as_invalid(sessions):
    """queue_create with a visibility_timeout checks it against the queue's max_reservation under
    the queue row's lock: while another transaction lowers max_reservation below it, the call
    waits for that transaction and then refuses it as the contract says (invalid_argument), not
    by the table's CHECK constraint that an unlocked read would run into (MySQL/MariaDB: 4025)."""
    holder, other, watcher = sessions(3)
    q = unique("maxres")
    holder.create(q)
    holder.begin()
    holder.call("queue_set_max_reservation", q, holder.dur(60))
    call = call_that_waits(watcher, other, other.create, q, 600)
    holder.sql("COMMIT")
    with pytest.raises(Exception, match="pyqueue:invalid_argument: visibility_timeout"):
        call.join()
    ((vis, most),) = [(r[1], r[7]) for r in holder.call("queue_settings", q)]  # (visibility, max_reservation)
    assert (vis, most) == (holder.dur(30), holder.dur(60))


def test_schedules_replaced_at_once_leave_one_pending_occurrence(sessions):
    """Two sessions replace one schedule at once: the second waits for the first (the schedule
    row's lock), then replaces what the first wrote, its pending occurrence included: one
    occurrence stays, of the schedule that won. (Read without a lock, the second removed the
    occurrence it read before the first committed, and the first's stayed beside its own.)"""
    holder, other, watcher = sessions(3)
    q = unique("sched")
    holder.create(q)

    def every(s: Session, payload: dict, seconds: int):
        return s.call("queue_schedule_every", q, "tick", "k", json.dumps(payload), s.dur(seconds),
                      casts=("", "", "", "::jsonb", ""))  # fmt: skip

    every(holder, {"v": 1}, 3600)
    holder.begin()
    every(holder, {"v": 2}, 3599)
    call = call_that_waits(watcher, other, every, other, {"v": 3}, 3601)
    holder.sql("COMMIT")
    call.join()
    pending = [k for k in holder.keys(q) if k.startswith("tick@")]
    assert len(pending) == 1, pending
    ((payload,),) = [(r[3],) for r in holder.call("queue_schedules", q)]
    assert holder.json_out(payload) == {"v": 3}


def test_a_push_whose_snapshot_predates_a_drop_leaves_no_message_behind(sessions):
    """A push inside a REPEATABLE READ transaction whose snapshot still sees a queue another session
    dropped since: refused (PostgreSQL: a serialization failure from the queue row's share lock;
    MySQL/MariaDB: unknown_queue from their locking read of it), and no message outlives its queue.
    A wakeup window of an hour, and a push before, keep the push from writing the queue's wakeup
    row (its foreign key would refuse it too)."""
    pusher, admin = sessions(2)
    q = unique("rrdrop")
    admin.create(q)
    admin.call("queue_set_notify_window", q, admin.dur(3600))
    admin.push(q, "first")
    if pusher.pg:
        pusher.sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
    else:
        pusher.sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        pusher.sql("START TRANSACTION")
    pusher.sql("SELECT 1 FROM pyqueue_queue WHERE queue_name = %s", q)  # the snapshot
    admin.call("queue_drop", q)
    with pytest.raises(Exception, match="serialize|unknown_queue"):
        pusher.push(q, "m")
    pusher.rollback()
    assert admin.sql("SELECT count(*) FROM pyqueue_message WHERE queue_name = %s", q) == [(0,)]


def test_a_drop_waits_for_an_open_ingest_into_its_queue(sessions):
    """Rows written into queue_ingest by a transaction still open (enqueued by the trigger on
    PostgreSQL, by queue_ingest_flush in that transaction on MySQL/MariaDB) hold the queue row's
    shared lock: a queue_drop waits for that transaction, then deletes what it enqueued; no
    message outlives its queue. (A wakeup window of an hour and a push before keep the enqueue
    from writing the queue's wakeup row, whose foreign key would hold the lock too.)"""
    loader, admin, watcher = sessions(3)
    q = unique("ingdrop")
    admin.create(q)
    admin.call("queue_set_notify_window", q, admin.dur(3600))
    admin.push(q, "first")
    loader.begin()
    loader.sql("INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, 'm', 'k', '{}')", q)
    if not loader.pg:
        loader.call("queue_ingest_flush", q)
    drop = call_that_waits(watcher, admin, admin.call, "queue_drop", q)
    loader.sql("COMMIT")
    drop.join()
    assert admin.sql("SELECT count(*) FROM pyqueue_message WHERE queue_name = %s", q) == [(0,)]


@pytest.mark.only_dialect("mysql")  # PostgreSQL enqueues in the INSERT's trigger: its flush only reports
def test_a_flush_of_every_queue_blocks_every_other_flush(sessions):
    """docs/contract/18_ingest.md: "a flush of all queues waits for and blocks every other flush of
    that database". A queue_ingest_flush(NULL) inside an open transaction holds the row '' of
    pyqueue_ingest_lock until it ends: a flush of one queue, of a row appended after it, waits
    for it, then enqueues that row."""
    first, second, watcher = sessions(3)
    q = unique("flushser")
    first.create(q)
    first.call("queue_ingest_flush", None)  # the lock rows exist (a first flush inserts them)
    first.begin()
    first.call("queue_ingest_flush", None)
    second.sql("INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, 'm', 'k', '{}')", q)
    flush = call_that_waits(watcher, second, second.call, "queue_ingest_flush", q)
    first.sql("COMMIT")
    assert flush.join() == [(1, 0, 0)]
    assert first.keys(q) == {"m": "ready"}


@pytest.mark.parametrize("grouped", [False, True])
def test_a_commit_in_the_consumers_transaction_records_the_progress_reported_meanwhile(sessions, grouped):
    """A consumer holds a transaction open (at the server's default isolation; it read the queue
    first) while its progress is reported from another connection; then it commits the message
    inside that transaction. The outcome records the progress as it is at the commit (read under
    the message's lock), not as the transaction's first read saw it."""
    consumer, reporter = sessions(2)
    q = unique("progress")
    consumer.create(q)
    consumer.call("queue_set_result_retention", q, consumer.dur(86400))
    if grouped:
        consumer.push_grouped(q, "g", "m")
    else:
        consumer.push(q, "m")
    ((key, kind, token),) = consumer.reserve(q)
    assert reporter.one("queue_set_progress", q, key, kind, token, json.dumps({"done": 1}),
                        casts=("", "", "", "", "::jsonb"))  # fmt: skip
    consumer.begin()
    assert consumer.keys(q) == {"m": "reserved"}  # the transaction's first read
    assert reporter.one("queue_set_progress", q, key, kind, token, json.dumps({"done": 2}),
                        casts=("", "", "", "", "::jsonb"))  # fmt: skip
    assert consumer.one("queue_commit", q, key, kind, token)
    consumer.sql("COMMIT")
    ((state, _result, _error, _attempts, progress, *_),) = consumer.call("queue_result", q, key, kind)
    assert (state, consumer.json_out(progress)) == ("succeeded", {"done": 2})


def test_a_batch_commit_holds_its_messages_before_it_records_their_outcomes(sessions):
    """queue_commit_batch on a queue that keeps results, in a READ COMMITTED transaction of the
    caller: it locks the messages it still holds before it records their outcomes, so a
    queue_remove of one of them racing it waits and finds it gone: the batch committed it and its
    outcome is 'succeeded'. (Here the batch's outcome row waits for a purge of the key's earlier
    outcome, a transaction left open, while the remove runs: without that lock the remove took
    the message away between the outcome's read and the delete, and the batch answered 0 with
    an outcome 'succeeded' recorded.)"""
    committer, purger, remover, watcher = sessions(4)
    q = unique("batchlock")
    committer.create(q)
    committer.call("queue_set_result_retention", q, committer.dur(86400))
    committer.push(q, "m")
    assert committer.pop(q) == ["m"]  # an earlier outcome of the key
    committer.push(q, "m")
    ((key, kind, token),) = committer.reserve(q)
    purger.begin()
    assert purger.one("queue_purge_results", q, None, None, None) == 1
    if committer.pg:
        committer.sql("BEGIN ISOLATION LEVEL READ COMMITTED")
    else:
        committer.sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        committer.sql("START TRANSACTION")
    batch = call_that_waits(
        watcher, committer, committer.one, "queue_commit_batch", q,
        committer.array([key]), committer.array([kind]), committer.array([token]),
    )  # fmt: skip
    remove = Call(remover.one, "queue_remove", q, key, kind)
    stop = time.monotonic() + 60
    while not (remove.done() or watcher.waits(remover.backend)):  # it waits for the batch, or is done
        assert time.monotonic() < stop, "the remove neither waited nor returned"
        time.sleep(0.02 if watcher.pg else 0.2)
    purger.sql("COMMIT")
    assert batch.join() == 1
    committer.sql("COMMIT")
    assert not remove.join()
    ((state, *_),) = committer.call("queue_result", q, key, kind)
    assert state == "succeeded"


def test_a_parent_removed_in_a_transaction_older_than_its_child_cancels_the_child(sessions, dialect):
    """A caller's REPEATABLE READ transaction read the queue before a child was pushed after a
    parent; then it removes the parent. The children a removed parent leaves are read with a
    locking read (the latest rows, whatever the snapshot): the child pushed meanwhile is
    cancelled, never left waiting for a parent that is gone. (PostgreSQL refuses a removal with
    children at REPEATABLE READ: then nothing changes and the child waits for its live parent.)"""
    caller, producer = sessions(2)
    q = unique("rrdeps")
    caller.create(q)
    caller.call("queue_set_result_retention", q, caller.dur(86400))
    caller.push(q, "parent", kind="job")
    if caller.pg:
        caller.sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
    else:
        caller.sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        caller.sql("START TRANSACTION")
    assert caller.keys(q) == {"parent": "ready"}  # the snapshot
    parents = json.dumps([{"queue": q, "p_key": "parent", "p_kind": "job"}])
    assert producer.one(
        "queue_push_after", q, "child", "job", "{}", parents, casts=("", "", "", "::jsonb", "::jsonb")
    )
    try:
        assert caller.one("queue_remove", q, "parent", "job")
        caller.sql("COMMIT")
    except Exception as exc:  # noqa: BLE001 - PostgreSQL: READ COMMITTED only
        caller.rollback()
        assert dialect == "postgresql", exc
        assert producer.keys(q) == {"parent": "ready", "child": "delayed"}
        return
    assert producer.keys(q) == {}
    ((state, *_),) = producer.call("queue_result", q, "child", "job")
    assert state == "cancelled"


def test_a_last_failure_racing_a_drop_in_a_transaction_dead_letters_and_never_deadlocks(sessions):
    """queue_fail of a message's last allowed delivery takes the queue row before the message
    row, the order queue_drop takes them in (MySQL/MariaDB; PostgreSQL's drop takes the messages
    first, in the order a failure takes them): a drop inside a caller's transaction racing it
    waits and then drops the queue; the failure dead-letters the message; neither is a deadlock
    victim. (The failure is held at its dead-letter copy, whose key a producer's open
    transaction is pushing into the dead-letter queue, while the drop starts.)"""
    failer, producer, dropper, watcher = sessions(4)
    q, dlq = unique("lastfail"), unique("lastfail.dlq")
    failer.create(dlq)
    failer.create(q, max_attempts=1, dlq=dlq)
    failer.push(q, "m")
    ((key, kind, token),) = failer.reserve(q)
    failer.lock_timeout(30)  # (taking them the other way, it waited this long for the drop, and failed)
    producer.begin()
    assert producer.push(dlq, "m")
    fail = call_that_waits(watcher, failer, failer.one, "queue_fail", q, key, kind, token, None, "boom")
    dropper.begin()
    drop = call_that_waits(watcher, dropper, dropper.call, "queue_drop", q)
    producer.sql("COMMIT")
    assert fail.join() == "dead_lettered"
    drop.join()
    dropper.sql("COMMIT")
    assert failer.keys(dlq) == {"m": "ready"}

"""History (archive, purge, replay), dead letters (view, redrive) and
replace-on-push, on every dialect, through the client and as plain SQL."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from pyqueue_sql import InvalidArgumentError, UnknownQueueError

UTC = dt.timezone.utc

HISTORY_COLUMNS = (
    "queue_name, p_key, p_kind, payload, priority, attempts, outcome, to_queue, "
    "reserved_by, created_at, processed_at"
)


def history(raw, queue_name):
    rows = raw(
        f"SELECT {HISTORY_COLUMNS} FROM pyqueue_history WHERE queue_name = %s ORDER BY id", (queue_name,)
    )
    return [dict(zip([c.strip() for c in HISTORY_COLUMNS.split(",")], row)) for row in rows]


def payload_of(db, value):
    return db.dialect.codec.read_payload(value)


def backdate(raw, dialect, queue_name, seconds):
    """Pretends the queue's history was processed `seconds` earlier."""
    if dialect == "postgresql":
        raw(
            "UPDATE pyqueue_history SET processed_at = processed_at - make_interval(secs => %s) "
            "WHERE queue_name = %s",
            (seconds, queue_name),
        )
    else:
        raw(
            "UPDATE pyqueue_history SET processed_at = processed_at - INTERVAL %s SECOND "
            "WHERE queue_name = %s",
            (seconds, queue_name),
        )


def live_count(raw, queue_name):
    return raw("SELECT count(*) FROM pyqueue_message WHERE queue_name = %s", (queue_name,))[0][0]


# -- history ---------------------------------------------------------------------


def test_every_way_out_is_archived_with_its_outcome(db, raw, make_queue):
    dead = make_queue()
    nxt = make_queue()
    q = make_queue(max_attempts=1, dead_letter_queue=dead.name, history_retention=dt.timedelta(days=7))
    for key in ("c", "m", "d", "p"):
        assert q.push(key, "job", {"k": key}, priority=3)
    reserved = {r.key: r for r in q.reserve(n=3, worker="w-1")}
    assert set(reserved) == {"c", "m", "d"}
    before = dt.datetime.now(UTC)
    assert q.commit(reserved["c"])
    assert q.move(reserved["m"], nxt, payload={"rewritten": True})
    assert q.rollback(reserved["d"])  # last attempt: dead-lettered
    assert [m.key for m in q.pop(5)] == ["p"]
    after = dt.datetime.now(UTC)

    assert live_count(raw, q.name) == 0  # the live table keeps nothing
    rows = history(raw, q.name)
    got = {r["p_key"]: (r["outcome"], r["to_queue"], r["reserved_by"]) for r in rows}
    assert got == {
        "c": ("committed", None, "w-1"),
        "m": ("moved", nxt.name, "w-1"),
        "d": ("dead_lettered", dead.name, "w-1"),
        "p": ("popped", None, None),
    }
    for r in rows:
        assert payload_of(db, r["payload"]) == {"k": r["p_key"]}  # what the queue held
        assert r["priority"] == 3 and r["p_kind"] == "job"
        processed = db.dialect.codec.read_time(r["processed_at"])
        assert before - dt.timedelta(seconds=1) <= processed <= after + dt.timedelta(seconds=1)
    assert {r["p_key"]: r["attempts"] for r in rows} == {"c": 1, "m": 1, "d": 1, "p": 0}


def test_queues_without_retention_keep_no_history(raw, make_queue):
    q = make_queue()
    q.push("a", "k", 1)
    [r] = q.reserve()
    assert q.commit(r)
    q.push("b", "k", 1)
    q.pop()
    assert history(raw, q.name) == []


def test_a_failed_commit_or_move_archives_nothing(raw, make_queue):
    q = make_queue(history_retention=3600)
    other = make_queue()
    q.push("a", "k", 1)
    [stale] = q.reserve(timeout=0.2)
    time.sleep(0.3)
    [fresh] = q.reserve()
    assert q.commit(stale) is False
    assert q.move(stale, other) is False
    assert history(raw, q.name) == []
    assert q.commit(fresh) is True
    assert [r["outcome"] for r in history(raw, q.name)] == ["committed"]


def test_archiving_is_part_of_the_callers_transaction(connect, raw, make_queue):
    q = make_queue(history_retention=3600)
    q.push("a", "k", 1)
    db2 = connect()
    q2 = db2.queue(q.name)
    [r] = q2.reserve()
    with pytest.raises(RuntimeError):
        with db2.transaction():
            assert q2.commit(r)
            raise RuntimeError("business write failed")
    assert history(raw, q.name) == []
    assert live_count(raw, q.name) == 1
    assert q2.commit(r)
    assert len(history(raw, q.name)) == 1


def test_purge_removes_only_what_is_past_retention_in_bounded_batches(raw, dialect, make_queue):
    q = make_queue(history_retention=dt.timedelta(hours=1))
    keep = make_queue(history_retention=dt.timedelta(days=30))
    for queue in (q, keep):
        queue.push_many([(f"m{i}", "k", i) for i in range(25)])
        assert len(queue.pop(25)) == 25
    backdate(raw, dialect, q.name, 7200)
    backdate(raw, dialect, keep.name, 7200)
    q.push_many([(f"new{i}", "k", i) for i in range(5)])
    q.pop(5)
    assert q.purge_history(n=10) == 10
    assert q.purge_history(n=10) == 10
    assert q.purge_history(n=10) == 5
    assert q.purge_history(n=10) == 0
    remaining = history(raw, q.name)
    assert sorted(r["p_key"] for r in remaining) == [f"new{i}" for i in range(5)]
    assert len(history(raw, keep.name)) == 25  # its retention is 30 days


def test_purge_of_all_queues_as_plain_sql(raw, dialect, make_queue):
    a = make_queue(history_retention=60)
    b = make_queue(history_retention=60)
    for queue in (a, b):
        queue.push("x", "k", 1)
        queue.pop()
        backdate(raw, dialect, queue.name, 120)
    sql = (
        "SELECT queue_purge_history(NULL, 100000)"
        if dialect == "postgresql"
        else "CALL queue_purge_history(NULL, 100000)"
    )
    assert raw(sql)[0][0] >= 2
    assert history(raw, a.name) == [] and history(raw, b.name) == []


def test_replay_re_enqueues_a_time_range_through_dedup(raw, db, dialect, make_queue):
    q = make_queue(history_retention=dt.timedelta(days=1))
    q.push_many([("old", "k", {"v": "old"}), ("mid", "k", {"v": "mid-1"})])
    q.pop(2)
    backdate(raw, dialect, q.name, 600)  # processed 10 minutes ago
    q.push_many([("mid", "k", {"v": "mid-2"}), ("new", "k", {"v": "new"}), ("busy", "k", {"v": "b"})])
    q.pop(3)
    q.push("busy", "k", {"v": "live"})  # live again: replay must skip it
    now = dt.datetime.now(UTC)
    assert q.replay(now - dt.timedelta(minutes=5), now + dt.timedelta(seconds=5)) == 2  # mid, new
    taken = q.reserve(n=10)
    assert {m.key: m.payload for m in taken} == {
        "mid": {"v": "mid-2"},
        "new": {"v": "new"},
        "busy": {"v": "live"},
    }
    for r in taken:
        assert q.remove(r.key, r.kind)  # gone without a history row
    # the whole history: old, mid (its latest version), new, busy
    assert q.replay() == 4
    payloads = {m.key: m.payload for m in q.pop(10)}
    assert payloads == {"old": {"v": "old"}, "mid": {"v": "mid-2"}, "new": {"v": "new"}, "busy": {"v": "b"}}


def test_replay_skips_what_lives_on_in_another_queue(raw, make_queue):
    """Dead-lettered and moved messages still live elsewhere: replaying them would duplicate them."""
    dead, nxt = make_queue(), make_queue()
    q = make_queue(max_attempts=1, dead_letter_queue=dead.name, history_retention=dt.timedelta(days=7))
    for key in ("c", "m", "d"):
        assert q.push(key, "job", {"k": key})
    held = {r.key: r for r in q.reserve(n=3)}
    assert q.commit(held["c"])
    assert q.move(held["m"], nxt)
    assert q.rollback(held["d"])  # last attempt: dead-lettered
    assert q.replay() == 1
    assert [m.key for m in q.pop(5)] == ["c"]
    assert live_count(raw, dead.name) == 1 and live_count(raw, nxt.name) == 1


def test_replay_and_purge_refuse_bad_arguments(make_queue, db):
    q = make_queue(history_retention=60)
    now = dt.datetime.now(UTC)
    with pytest.raises(InvalidArgumentError):
        q.replay(now, now - dt.timedelta(seconds=1))
    with pytest.raises(InvalidArgumentError):
        q.purge_history(n=0)
    with pytest.raises(UnknownQueueError):
        db.queue("no-such-queue-4a").replay()
    with pytest.raises(UnknownQueueError):
        db.queue("no-such-queue-4a").purge_history()


# -- dead letters ----------------------------------------------------------------


def dead_letter(q, key):
    q.push(key, "job", {"key": key})
    [r] = q.reserve()
    assert q.rollback(r)


def test_dead_letter_view_lists_them_with_their_origin(make_queue, raw):
    dlq = make_queue()
    src = make_queue(max_attempts=1, dead_letter_queue=dlq.name)
    dead_letter(src, "a")
    dead_letter(src, "b")
    listed = dlq.dead_letters()
    assert [(d.key, d.from_queue, d.payload, d.reserved) for d in listed] == [
        ("a", src.name, {"key": "a"}, False),
        ("b", src.name, {"key": "b"}, False),
    ]
    assert src.dead_letters() == []  # src is nobody's dead-letter queue
    # plain SQL
    rows = raw(
        "SELECT p_key, from_queue FROM pyqueue_dead_letters WHERE dead_letter_queue = %s ORDER BY p_key",
        (dlq.name,),
    )
    assert [tuple(r) for r in rows] == [("a", src.name), ("b", src.name)]
    # a second source sharing the dead-letter queue: each dead letter still names its own origin,
    # with the deliveries it had there
    other = make_queue(max_attempts=2, dead_letter_queue=dlq.name)
    other.push("c", "job", {"key": "c"})
    for _ in range(2):
        [r] = other.reserve()
        assert other.rollback(r)
    assert [(d.key, d.from_queue, d.attempts) for d in dlq.dead_letters()] == [
        ("a", src.name, 1),
        ("b", src.name, 1),
        ("c", other.name, 2),
    ]
    dlq.reserve()
    assert [d.reserved for d in dlq.dead_letters()] == [True, False, False]
    # a message pushed into the dead-letter queue directly came from nowhere
    dlq.push("direct", "job", 1)
    [direct] = [d for d in dlq.dead_letters() if d.key == "direct"]
    assert (direct.from_queue, direct.attempts, direct.last_error) == (None, None, None)


def test_redrive_moves_them_back_with_attempts_reset(make_queue):
    dlq = make_queue()
    src = make_queue(max_attempts=2, dead_letter_queue=dlq.name)
    for key in ("a", "b", "c"):
        src.push(key, "job", {"key": key})
        for _ in range(2):
            [r] = src.reserve()
            assert src.rollback(r)
    assert dlq.stats().ready == 3
    assert dlq.redrive(src, n=2) == 2
    assert dlq.redrive(src) == 1  # n NULL = 1
    assert dlq.redrive(src, n=10) == 0
    got = src.reserve(n=10)
    assert sorted(r.key for r in got) == ["a", "b", "c"]
    assert {r.attempts for r in got} == {1}  # a fresh start: this is the first delivery
    assert {r.payload["key"] for r in got} == {"a", "b", "c"}


def test_redrive_leaves_a_dead_letter_whose_key_is_live_in_the_target(make_queue):
    dlq = make_queue()
    src = make_queue(max_attempts=1, dead_letter_queue=dlq.name)
    dead_letter(src, "dup")
    dead_letter(src, "free")
    src.push("dup", "job", {"fresh": True})  # a new message with the same key
    assert dlq.redrive(src, n=10) == 1  # "free" moves, "dup" stays
    assert [d.key for d in dlq.dead_letters()] == ["dup"]
    assert {m.key: m.payload for m in src.pop(10)} == {"dup": {"fresh": True}, "free": {"key": "free"}}
    assert dlq.redrive(src, n=10) == 1  # the key is free again


@pytest.mark.parametrize("history", [False, True])
def test_a_redrive_of_n_whose_first_n_dead_letters_stay_reads_on_for_n_that_move(make_queue, history):
    """The first n dead letters in order have keys live in the target: they stay, and the redrive
    reads on (MySQL/MariaDB: another page of candidates) until n have moved."""
    dlq = make_queue(history_retention=dt.timedelta(days=1) if history else None)
    src = make_queue(max_attempts=1, dead_letter_queue=dlq.name)
    for key in ("dup0", "dup1", "free0", "free1", "free2"):
        dead_letter(src, key)
    src.push("dup0", "job", {"fresh": True})
    src.push("dup1", "job", {"fresh": True})
    assert dlq.redrive(src, n=2) == 2
    assert [d.key for d in dlq.dead_letters()] == ["dup0", "dup1", "free2"]


def test_redrive_skips_reserved_dead_letters_and_archives_as_moved(make_queue, raw):
    dlq = make_queue(history_retention=3600)
    src = make_queue(max_attempts=1, dead_letter_queue=dlq.name)
    dead_letter(src, "held")
    dead_letter(src, "free")
    [held] = dlq.reserve()
    assert held.key == "held"
    assert dlq.redrive(src, n=10) == 1
    assert [(r["p_key"], r["outcome"], r["to_queue"]) for r in history(raw, dlq.name)] == [
        ("free", "moved", src.name)
    ]
    assert dlq.commit(held)


def test_redrive_as_plain_sql_and_its_refusals(make_queue, raw, dialect, db):
    dlq = make_queue()
    src = make_queue(max_attempts=1, dead_letter_queue=dlq.name)
    dead_letter(src, "a")
    sql = "SELECT queue_redrive(%s, %s, %s)" if dialect == "postgresql" else "CALL queue_redrive(%s, %s, %s)"
    assert raw(sql, (dlq.name, src.name, 5))[0][0] == 1
    with pytest.raises(InvalidArgumentError):
        dlq.redrive(dlq)
    with pytest.raises(InvalidArgumentError):
        dlq.redrive(src, n=0)
    with pytest.raises(UnknownQueueError):
        dlq.redrive("no-such-queue-4a")


@pytest.mark.parametrize("retention", [None, dt.timedelta(days=7)], ids=["no history", "history"])
def test_concurrent_redrives_move_and_archive_each_dead_letter_once(make_queue, connect, raw, retention):
    dlq = make_queue(history_retention=retention)
    src = make_queue()
    dlq.push_many([(f"m{i}", "job", i) for i in range(60)])
    moved = []

    def run():
        db = connect()
        total = 0
        while (got := db.queue(dlq.name).redrive(src.name, n=7)) > 0:
            total += got
        moved.append(total)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(moved) == 60
    assert sorted(m.key for m in src.pop(100)) == sorted(f"m{i}" for i in range(60))
    assert len([h for h in history(raw, dlq.name) if h["outcome"] == "moved"]) == (60 if retention else 0)


def test_a_commit_racing_a_batch_commit_of_the_same_reservation_archives_it_once(make_queue, connect, raw):
    q = make_queue(history_retention=dt.timedelta(days=7))
    races = 40
    q.push_many([(f"m{i}", "job", i) for i in range(races)])
    held = q.reserve(races)
    one, other = connect().queue(q.name), connect().queue(q.name)
    results = []
    for r in held:
        start = threading.Barrier(2)
        got = {}

        def single(r=r, start=start, got=got):
            start.wait()
            got["single"] = one.commit(r)

        def batch(r=r, start=start, got=got):
            start.wait()
            got["batch"] = other.commit_many([r])

        threads = [threading.Thread(target=single), threading.Thread(target=batch)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results.append(int(got["single"]) + got["batch"])
    assert results == [1] * races
    assert len([h for h in history(raw, q.name) if h["outcome"] == "committed"]) == races


# -- replace-on-push --------------------------------------------------------------


def test_push_replace_upserts_a_waiting_message(queue):
    assert queue.push_replace("debounce", "k", {"v": 1}, run_at=dt.timedelta(hours=1)) == "inserted"
    assert (
        queue.push_replace("debounce", "k", {"v": 2}, run_at=dt.timedelta(hours=2), priority=4) == "replaced"
    )
    assert queue.push_replace("debounce", "k", {"v": 3}) == "replaced"  # run_at NULL = now
    [r] = queue.reserve(n=5)
    assert (r.payload, r.priority, r.attempts) == ({"v": 3}, 0, 1)


def test_push_replace_leaves_a_reserved_message_alone(queue):
    queue.push("job", "k", {"v": 1})
    [r] = queue.reserve()
    assert queue.push_replace("job", "k", {"v": 2}) == "reserved"
    assert queue.commit(r) is True  # the holder's token still works
    assert queue.push_replace("job", "k", {"v": 2}) == "inserted"
    assert queue.reserve()[0].payload == {"v": 2}


def test_push_replace_takes_over_an_expired_reservation(queue):
    queue.push("job", "k", {"v": 1})
    [stale] = queue.reserve(timeout=0.2)
    time.sleep(0.3)
    assert queue.push_replace("job", "k", {"v": 2}) == "replaced"
    assert queue.commit(stale) is False  # the stale holder cannot commit the new payload away
    [r] = queue.reserve()
    assert (r.payload, r.attempts) == ({"v": 2}, 1)


def test_push_replace_with_identical_values_says_replaced(queue):
    at = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    assert queue.push_replace("same", "k", {"v": 1}, run_at=at) == "inserted"
    assert queue.push_replace("same", "k", {"v": 1}, run_at=at) == "replaced"
    assert queue.stats().delayed == 1


def test_push_replace_as_plain_sql_and_its_refusals(queue, raw, dialect):
    sql = (
        "SELECT queue_push_replace(%s, %s, %s, %s, NULL, NULL)"
        if dialect == "postgresql"
        else "CALL queue_push_replace(%s, %s, %s, %s, NULL, NULL)"
    )
    assert raw(sql, (queue.name, "a", "k", '{"n": 1}'))[0][0] == "inserted"
    assert raw(sql, (queue.name, "a", "k", '{"n": 2}'))[0][0] == "replaced"
    with pytest.raises(Exception):
        raw(sql, (queue.name, "", "k", "{}"))
    with pytest.raises(InvalidArgumentError):
        queue.push_replace("a ", "k", 1)
    assert queue.pop()[0].payload == {"n": 2}


def test_concurrent_push_replace_keeps_one_message_with_one_of_the_payloads(queue, connect):
    results = []

    def run(i):
        q = connect().queue(queue.name)
        for j in range(20):
            results.append(q.push_replace("hot", "k", {"writer": i, "j": j}, run_at=dt.timedelta(hours=1)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("inserted") == 1
    assert results.count("replaced") == 59
    assert queue.stats().delayed == 1


def test_history_replay_and_view_as_plain_sql(raw, dialect, make_queue):
    """What a psql / mysql session does: create with retention, commit, read the
    history, replay the last minute."""
    dlq = make_queue()
    q = make_queue()
    if dialect == "postgresql":
        raw("SELECT queue_create(%s, NULL, 1, %s, interval '1 day')", (q.name, dlq.name))
        raw("SELECT queue_push(%s, 'k1', 'job', '{\"n\": 1}')", (q.name,))
        [(key, kind, token)] = raw(
            "SELECT p_key, p_kind, token FROM queue_reserve(%s, 'psql', NULL, 1)", (q.name,)
        )
        assert raw("SELECT queue_commit(%s, %s, %s, %s)", (q.name, key, kind, token))[0][0] is True
        replayed = raw("SELECT queue_replay(%s, now() - interval '1 minute', NULL)", (q.name,))[0][0]
    else:
        raw("CALL queue_create(%s, NULL, 1, %s, 86400)", (q.name, dlq.name))
        raw("CALL queue_push(%s, 'k1', 'job', '{\"n\": 1}', NULL, NULL)", (q.name,))
        [(key, kind, _, token, *_)] = raw("CALL queue_reserve(%s, 'mysql', NULL, 1, NULL)", (q.name,))
        assert raw("CALL queue_commit(%s, %s, %s, %s)", (q.name, key, kind, token))[0][0] == 1
        replayed = raw("CALL queue_replay(%s, UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, NULL)", (q.name,))[0][0]
    assert replayed == 1
    assert [
        tuple(r) for r in raw("SELECT p_key, outcome FROM pyqueue_history WHERE queue_name = %s", (q.name,))
    ] == [("k1", "committed")]
    assert live_count(raw, q.name) == 1

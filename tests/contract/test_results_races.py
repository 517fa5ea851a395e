"""The concurrency guarantees of results, cancellation and progress (docs/contract.md, "Results,
cancellation and progress"), each with several real connections in autocommit mode, on every
dialect, as plain SQL:

- a result is read exactly as committed: while a commit with a result is under way, a reader sees
  the live message, never the outcome without its result nor the outcome the key had before;
- queue_cancel racing queue_commit of the same reservation: the commit wins (a reserved message is
  only ever flagged by queue_cancel), the outcome is 'succeeded';
- queue_cancel of a ready message racing a reserve: either the reserve gets it (the cancel says
  'requested') or the cancel removes it (the reserve gets nothing), never both;
- a stale holder (its token replaced by an extend, or expired and reserved again) can write no
  progress, no result, and cannot cancel the reservation it lost.

Deterministic where a held row lock can stop a call between two of its steps; bounded loops of
racing threads otherwise."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from tests import plainsql

DAY = 86400


class Session(plainsql.Session):
    """A session of its own calling the routines in plain SQL (tests/plainsql.py), with the calls
    these races make and the backend id another session watches it by."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.backend = self.backend_id()  # (a session busy in a call cannot be asked)

    # -- the routines the tests use
    def create(self, queue: str, results: bool = True, visibility: float = 30) -> None:
        if self.pg:
            self.sql("SELECT queue_create(%s, %s)", queue, self.dur(visibility))
        else:
            self.sql("CALL queue_create(%s, %s, NULL, NULL, NULL)", queue, visibility)
        if results:
            self.call("queue_set_result_retention", queue, self.dur(DAY))

    def push(self, queue: str, key: str, kind: str = "k", payload: dict | None = None) -> None:
        text = json.dumps(payload or {})
        if self.pg:
            self.sql("SELECT queue_push(%s, %s, %s, %s::jsonb)", queue, key, kind, text)
        else:
            self.sql("CALL queue_push(%s, %s, %s, %s, NULL, NULL)", queue, key, kind, text)

    def reserve(self, queue: str, n: int = 1, timeout: float | None = 60) -> list[tuple[str, str, str]]:
        """[(key, kind, token)]"""
        t = None if timeout is None else self.dur(timeout)
        if self.pg:
            rows = self.sql(
                "SELECT p_key, p_kind, token::text FROM queue_reserve(%s, 'w', %s::interval, %s::integer)",
                queue,
                t,
                n,
            )
        else:
            rows = [
                row[:2] + (row[3],)
                for row in self.sql("CALL queue_reserve(%s, 'w', %s, %s, NULL)", queue, t, n)
            ]
        return [(str(k), str(kd), str(tok)) for k, kd, tok in rows]

    def extend(self, queue: str, key: str, kind: str, token: str) -> str | None:
        got = self.one("queue_extend", queue, key, kind, token, None)
        return None if got is None else str(got)

    def commit(self, queue: str, key: str, kind: str, token: str) -> bool:
        return bool(self.one("queue_commit", queue, key, kind, token))

    def commit_result(self, queue: str, key: str, kind: str, token: str, result) -> bool:
        return bool(
            self.one(
                "queue_commit_result",
                queue,
                key,
                kind,
                token,
                json.dumps(result),
                casts=("", "", "", "", "::jsonb"),
            )
        )

    def cancel(self, queue: str, key: str, kind: str) -> str:
        return str(self.one("queue_cancel", queue, key, kind))

    def cancel_held(self, queue: str, key: str, kind: str, token: str) -> bool:
        return bool(self.one("queue_cancel_held", queue, key, kind, token))

    def set_progress(self, queue: str, key: str, kind: str, token: str, progress) -> bool:
        return bool(
            self.one(
                "queue_set_progress",
                queue,
                key,
                kind,
                token,
                json.dumps(progress),
                casts=("", "", "", "", "::jsonb"),
            )
        )

    def renew(self, queue: str, key: str, kind: str, token: str) -> tuple[str | None, bool]:
        (row,) = self.call("queue_renew", queue, key, kind, token, None)
        return (None if row[0] is None else str(row[0]), bool(row[1]))

    def result(self, queue: str, key: str, kind: str = "k") -> dict:
        (row,) = self.call("queue_result", queue, key, kind)
        state, result, last_error, attempts, progress, finished_at, requested = row
        return {
            "state": state,
            "result": self.json_out(result),
            "attempts": attempts,
            "progress": self.json_out(progress),
            "cancel_requested": bool(requested),
        }

    def backend_id(self) -> int:
        return self.sql("SELECT pg_backend_pid()" if self.pg else "SELECT CONNECTION_ID()")[0][0]

    def waits_at(self, backend: int, statement: str) -> bool:
        """Whether the session backend waits for a lock in the statement that starts with
        `statement` (MariaDB's INNODB_TRX does not always list a procedure's transaction: the
        session's current statement stands for it there)."""
        if self.pg:
            rows = self.sql("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", backend)
            return bool(rows) and rows[0][0] == "Lock"
        rows = self.sql("SELECT info FROM information_schema.PROCESSLIST WHERE id = %s", backend)
        return bool(rows) and str(rows[0][0] or "").startswith(statement)


@pytest.fixture
def sessions(dsn, dialect):
    opened: list[Session] = []

    def make() -> Session:
        s = Session(dsn)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def in_thread(target, *args):
    """Starts target(*args) in a thread; returns (thread, box) where box holds 'result' or 'error'."""
    box: dict = {}

    def run():
        try:
            box["result"] = target(*args)
        except Exception as exc:  # reported by the test through the box
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def wait_until_waiting(observer: Session, backend: int, statement: str, seconds: float = 10.0) -> None:
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        if observer.waits_at(backend, statement):
            return
        time.sleep(0.01)
    raise AssertionError(f"session {backend} never waited for a lock in {statement!r}")


def outcome(box: dict):
    if "error" in box:
        raise box["error"]
    return box["result"]


# ---- a result is read exactly as committed ---------------------------------------------------


def test_a_reader_sees_the_live_message_until_the_result_is_committed_with_it(sessions):
    """The commit with a result is stopped after it removed the message, at the result row (which
    a third session holds locked): a reader meanwhile sees the message live ('reserved'), neither
    'unknown' nor the outcome its key had before; once the commit is through, the new outcome and
    its result, together."""
    main, committer, holder, reader = sessions(), sessions(), sessions(), sessions()
    queue = unique("torn")
    main.create(queue)
    main.push(queue, "a")
    [(key, kind, token)] = main.reserve(queue)
    assert main.commit_result(queue, key, kind, token, {"run": 1})  # an earlier outcome of the key
    main.push(queue, "a")
    [(key, kind, token)] = main.reserve(queue)

    holder.sql("BEGIN" if holder.pg else "START TRANSACTION")
    holder.sql("SELECT * FROM pyqueue_result WHERE queue_name = %s AND p_key = %s FOR UPDATE", queue, key)
    commit, box = in_thread(committer.commit_result, queue, key, kind, token, {"run": 2})
    try:
        wait_until_waiting(main, committer.backend, "INSERT INTO pyqueue_result")
        time.sleep(0.2)  # (still there: it waits for the result row's lock)
        seen = reader.result(queue, key, kind)
        assert (seen["state"], seen["result"]) == ("reserved", None)
    finally:
        holder.sql("COMMIT")
        commit.join(20)
    assert outcome(box) is True
    seen = reader.result(queue, key, kind)
    assert (seen["state"], seen["result"], seen["attempts"]) == ("succeeded", {"run": 2}, 1)


def test_results_read_while_many_commits_run_are_never_torn(sessions):
    """A consumer commits results while a reader polls them: every key's states go forward only
    (ready or reserved, then succeeded), a 'succeeded' always carries its own result, and no key
    that was pushed ever reads as 'unknown'."""
    main, consumer, reader = sessions(), sessions(), sessions()
    queue = unique("reads")
    main.create(queue)
    keys = [f"m{i:03d}" for i in range(60)]
    for key in keys:
        main.push(queue, key, payload={"n": key})
    done = threading.Event()
    problems: list[str] = []

    def consume():
        try:
            while True:
                got = consumer.reserve(queue, n=1)
                if not got:
                    return
                [(key, kind, token)] = got
                assert consumer.commit_result(queue, key, kind, token, {"done": key})
        finally:
            done.set()

    def read():
        finished: set[str] = set()
        while not done.is_set() or len(finished) < len(keys):
            for key in keys:
                r = reader.result(queue, key)
                if r["state"] == "succeeded":
                    if r["result"] != {"done": key}:
                        problems.append(f"{key}: succeeded with {r['result']!r}")
                    finished.add(key)
                elif r["state"] not in ("ready", "reserved"):
                    problems.append(f"{key}: {r['state']}")
                elif key in finished:
                    problems.append(f"{key}: {r['state']} after succeeded")
            if done.is_set() and len(finished) < len(keys):
                break

    consumer_thread, consumer_box = in_thread(consume)
    read()
    consumer_thread.join(60)
    assert "error" not in consumer_box, consumer_box.get("error")
    assert problems == []
    assert {reader.result(queue, key)["state"] for key in keys} == {"succeeded"}


# ---- queue_cancel racing a commit, and a reserve ----------------------------------------------


def test_a_cancel_racing_the_commit_of_the_reservation_never_wins(sessions):
    """queue_cancel only flags a live reservation: whichever runs first, the commit succeeds and
    the outcome is 'succeeded' with its result; the cancel said 'requested' (it came first) or
    'unknown' (the message had gone)."""
    main, committer, canceller = sessions(), sessions(), sessions()
    queue = unique("cancel.commit")
    main.create(queue)
    seen = set()
    for i in range(25):
        key = f"c{i}"
        main.push(queue, key)
        [(_, kind, token)] = main.reserve(queue)
        start = threading.Barrier(2)

        def commit(key=key, kind=kind, token=token, start=start):
            start.wait()
            return committer.commit_result(queue, key, kind, token, {"i": key})

        def cancel(key=key, kind=kind, start=start):
            start.wait()
            return canceller.cancel(queue, key, kind)

        t1, b1 = in_thread(commit)
        t2, b2 = in_thread(cancel)
        t1.join(20)
        t2.join(20)
        assert outcome(b1) is True
        said = outcome(b2)
        assert said in ("requested", "unknown")
        seen.add(said)
        r = main.result(queue, key, kind)
        assert (r["state"], r["result"], r["cancel_requested"]) == ("succeeded", {"i": key}, False)
    assert seen  # (which of the two came first varies)


def test_a_cancel_requested_before_the_commit_is_answered_requested_and_the_commit_wins(sessions):
    main = sessions()
    queue = unique("cancel.first")
    main.create(queue)
    main.push(queue, "a")
    [(key, kind, token)] = main.reserve(queue)
    assert main.cancel(queue, key, kind) == "requested"
    assert main.cancel(queue, key, kind) == "requested"  # idempotent
    assert main.result(queue, key, kind)["cancel_requested"] is True
    assert main.commit(queue, key, kind, token)
    r = main.result(queue, key, kind)
    assert (r["state"], r["cancel_requested"]) == ("succeeded", False)
    assert main.cancel(queue, key, kind) == "unknown"


def test_a_cancel_racing_a_reserve_of_a_ready_message_ends_in_exactly_one_state(sessions):
    """Either the reserve gets the message and the cancel only asks its holder to stop
    ('requested'), or the cancel removes it ('cancelled') and the reserve gets nothing: never a
    reservation of a cancelled message, never a cancel that did nothing."""
    main, reserver, canceller = sessions(), sessions(), sessions()
    queue = unique("cancel.reserve")
    main.create(queue)
    tally = {"reserved": 0, "cancelled": 0}
    for i in range(40):
        key = f"r{i}"
        main.push(queue, key)
        start = threading.Barrier(2)

        def reserve(start=start):
            start.wait()
            return reserver.reserve(queue)

        def cancel(key=key, start=start):
            start.wait()
            return canceller.cancel(queue, key, "k")

        t1, b1 = in_thread(reserve)
        t2, b2 = in_thread(cancel)
        t1.join(20)
        t2.join(20)
        got, said = outcome(b1), outcome(b2)
        r = main.result(queue, key)
        if got:
            assert [g[0] for g in got] == [key]
            assert said == "requested", (key, said)
            assert (r["state"], r["cancel_requested"]) == ("reserved", True)
            tally["reserved"] += 1
            assert main.cancel_held(queue, key, "k", got[0][2])
        else:
            assert said == "cancelled", (key, said)
            assert r["state"] == "cancelled"
            tally["cancelled"] += 1
    assert tally["reserved"] + tally["cancelled"] == 40


def test_a_cancel_in_a_transaction_whose_snapshot_predates_the_reserve_answers_requested(sessions):
    """The caller's transaction (the server's default isolation; on MySQL 8.0 the client opens one
    around queue_cancel) read the message ready, then another session reserved it: the cancel
    must not remove it (the reservation is live now) nor give up, but ask its holder to stop."""
    canceller, reserver, observer = sessions(), sessions(), sessions()
    queue = unique("cancel.snapshot")
    canceller.create(queue)
    canceller.push(queue, "a")
    canceller.sql("BEGIN" if canceller.pg else "START TRANSACTION")
    try:
        assert canceller.result(queue, "a")["state"] == "ready"  # the transaction's snapshot
        [(key, kind, token)] = reserver.reserve(queue)
        assert canceller.cancel(queue, key, kind) == "requested"
    finally:
        canceller.sql("COMMIT")
    r = observer.result(queue, key, kind)
    assert (r["state"], r["cancel_requested"]) == ("reserved", True)
    assert reserver.renew(queue, key, kind, token)[1] is True


# ---- a stale holder ---------------------------------------------------------------------------


def test_a_holder_whose_token_was_replaced_cannot_write_progress_a_result_or_cancel(sessions):
    """An extend replaces the token: the old one can set no progress, commit no result, cancel
    nothing and renew nothing; the live holder's progress and outcome are untouched."""
    main, stale = sessions(), sessions()
    queue = unique("stale.extend")
    main.create(queue)
    main.push(queue, "a")
    [(key, kind, old)] = main.reserve(queue)
    assert main.set_progress(queue, key, kind, old, {"step": 1})
    new = main.extend(queue, key, kind, old)
    assert new and new != old
    assert stale.set_progress(queue, key, kind, old, {"step": 99}) is False
    assert stale.commit_result(queue, key, kind, old, {"by": "stale"}) is False
    assert stale.cancel_held(queue, key, kind, old) is False
    assert stale.renew(queue, key, kind, old) == (None, False)
    r = main.result(queue, key, kind)
    assert (r["state"], r["progress"], r["result"]) == ("reserved", {"step": 1}, None)
    assert main.commit_result(queue, key, kind, new, {"by": "holder"})
    r = main.result(queue, key, kind)
    assert (r["state"], r["result"], r["progress"]) == ("succeeded", {"by": "holder"}, {"step": 1})
    assert stale.cancel_held(queue, key, kind, old) is False
    assert main.result(queue, key, kind)["state"] == "succeeded"


def test_a_holder_whose_reservation_expired_and_was_taken_over_writes_nothing(sessions):
    """The first holder's lease runs out and a second consumer reserves the message: the first
    one's progress, result and cancel are refused (false) while the second holds it, and after
    the second committed."""
    first, second, observer = sessions(), sessions(), sessions()
    queue = unique("stale.expired")
    first.create(queue)
    first.push(queue, "a")
    [(key, kind, old)] = first.reserve(queue, timeout=0.3)
    time.sleep(0.5)
    [(_, _, new)] = second.reserve(queue)
    assert second.set_progress(queue, key, kind, new, {"by": "second"})
    assert first.set_progress(queue, key, kind, old, {"by": "first"}) is False
    assert first.commit_result(queue, key, kind, old, {"by": "first"}) is False
    assert first.cancel_held(queue, key, kind, old) is False
    r = observer.result(queue, key, kind)
    assert (r["state"], r["progress"], r["attempts"]) == ("reserved", {"by": "second"}, 2)
    assert second.commit_result(queue, key, kind, new, {"by": "second"})
    assert first.commit_result(queue, key, kind, old, {"by": "first"}) is False
    assert first.cancel_held(queue, key, kind, old) is False
    r = observer.result(queue, key, kind)
    assert (r["state"], r["result"]) == ("succeeded", {"by": "second"})


def test_racing_stale_and_live_holders_leave_the_live_holders_outcome(sessions):
    """Threads holding the old token hammer progress, results and cancels while the live holder
    sets its progress and commits: every stale call is refused, the outcome is the live one's."""
    main, live = sessions(), sessions()
    stale = [sessions() for _ in range(2)]
    queue = unique("stale.race")
    main.create(queue)
    for i in range(10):
        key = f"s{i}"
        main.push(queue, key)
        [(_, kind, old)] = main.reserve(queue)
        new = main.extend(queue, key, kind, old)
        stop = threading.Event()

        def hammer(s, key=key, kind=kind, old=old, stop=stop):
            refused = 0
            while not stop.is_set():
                assert s.set_progress(queue, key, kind, old, {"stale": True}) is False
                assert s.commit_result(queue, key, kind, old, {"stale": True}) is False
                assert s.cancel_held(queue, key, kind, old) is False
                refused += 3
            return refused

        threads = [in_thread(hammer, s) for s in stale]
        assert live.set_progress(queue, key, kind, new, {"live": i})
        assert live.commit_result(queue, key, kind, new, {"live": i})
        stop.set()
        for t, box in threads:
            t.join(20)
            assert outcome(box) >= 0
        r = main.result(queue, key, kind)
        assert (r["state"], r["result"], r["progress"]) == ("succeeded", {"live": i}, {"live": i})

"""MySQL/MariaDB: the reserve order lives in a column of its own, pyqueue_message.ready_at, read through
pyqueue_message_order_idx (queue_name, priority, ready_at, id). It is when the message became (or
becomes) due, leases aside: a push, a give-back, a release, a redrive, a group's promotion and a child
made ready set it with scheduled_at; a claim (reserve) and an extend set only scheduled_at, the lease's
end. So a claim leaves the ready index alone, and a committed lease leaves its dead index entry where
the message was pushed, not at its lease's end where every read up to now would step over it while an
open read view keeps it from purge (a nightly dump, a report). Shown here with real connections:

* a claim and an extend leave ready_at as it was; scheduled_at is the lease's end; a give-back sets
  both to the new due time;
* a message whose lease expired keeps its place: it is handed out again before a message that became
  ready after it first did;
* the batch reserve's mark: a message whose lease expired before the mark waits for the session's
  next read from the queue's start, which comes at once when fewer than n lie past the mark, and
  when the mark's time is up;
* under a read view held open while 2,000 messages are pushed, reserved and committed, a batch
  reserve from its mark reads a bounded number of index pages: the commits' dead entries lie where
  the messages were pushed, before the mark, none between it and the messages ready now.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from pathlib import Path

import pytest

import pyqueue_sql
from tests.contract.lock_sessions import Session, unique
from tests.plainsql import MARK_DROPPED, MARK_PASSED

pytestmark = pytest.mark.only_dialect("mysql")

ROUTINES = Path(__file__).resolve().parents[2] / "sql" / "mysql" / "routines" / "05_reserve.sql"


@pytest.fixture
def session(dsn):
    s = Session(dsn)
    yield s
    s.close()


@pytest.fixture
def report(dsn):
    """A second session: a report holding a read view open."""
    s = Session(dsn)
    yield s
    s.close()


def times(s: Session, queue: str) -> dict[str, tuple[dt.datetime, dt.datetime]]:
    """{p_key: (ready_at, scheduled_at)} of the queue's messages."""
    return {
        k: (ready, due)
        for k, ready, due in s.sql(
            "SELECT p_key, ready_at, scheduled_at FROM pyqueue_message WHERE queue_name = %s", queue
        )
    }


def now(s: Session) -> dt.datetime:
    return s.sql("SELECT UTC_TIMESTAMP(6)")[0][0]


def wait_until_due(s: Session, queue: str, keys: list[str], limit: float = 20) -> None:
    """Waits (polling the server's clock) until the leases of the keys have ended."""
    marks = ", ".join(["%s"] * len(keys))
    deadline = time.monotonic() + limit
    while not s.sql(
        f"SELECT MAX(scheduled_at) < UTC_TIMESTAMP(6) FROM pyqueue_message WHERE queue_name = %s AND p_key IN ({marks})",
        queue,
        *keys,
    )[0][0]:
        assert time.monotonic() < deadline, "the leases never ended"
        time.sleep(0.05)


def keys(rows) -> list[str]:
    return [r[0] for r in rows]


# ---- (a) a claim leaves ready_at alone --------------------------------------------------------

CLAIMS = {
    "one": lambda q: q.reserve(1, timeout=600),  # the short way of one
    "batch": lambda q: q.reserve(3, timeout=600),  # the short batch way (the mark)
    "kinds": lambda q: q.reserve(3, timeout=600, kinds=["job"]),  # the general way
    "commit_reserve": lambda q: q.commit_reserve(None, 3, timeout=600)[1],
}


@pytest.mark.parametrize("way", sorted(CLAIMS))
def test_a_claim_and_an_extend_leave_ready_at_and_a_give_back_sets_it(dsn, session, way):
    """After a push ready_at = scheduled_at. A claim sets scheduled_at to its lease's end and leaves
    ready_at as it was, whichever way the reserve takes; so does an extend; a rollback (a give-back
    without a delay) makes the message ready now, both columns the same time again."""
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(unique("claim")).create()
        try:
            q.push_many([(f"m{i}", "job", {}) for i in range(3)])
            before = times(session, q.name)
            assert all(ready == due for ready, due in before.values()), before
            got = CLAIMS[way](q)
            assert got, way
            at = now(session)
            after = times(session, q.name)
            for r in got:
                ready, due = after[r.key]
                assert ready == before[r.key][0], ("the claim moved ready_at", way, r.key, before, after)
                assert due > at + dt.timedelta(seconds=590), ("scheduled_at is not the lease's end", due, at)
            extended = q.extend(got[0], timeout=1200)
            ready, due = times(session, q.name)[got[0].key]
            assert ready == before[got[0].key][0], ("the extend moved ready_at", way)
            assert due > at + dt.timedelta(seconds=1190), due
            assert q.rollback(extended)
            ready, due = times(session, q.name)[got[0].key]
            assert ready == due and ready >= at, ("a give-back sets both to the new due time", ready, due, at)
        finally:
            q.drop()


# ---- (b) an expired lease keeps its place -----------------------------------------------------


@pytest.mark.parametrize("how", ["reserve 1", "reserve 2", "pop"])
def test_a_message_whose_lease_expired_comes_before_one_ready_after_it_first_was(session, how):
    """ "old" is pushed and reserved for 1 s, then "new" pushed: new became ready after old first did,
    before old's lease ended (on PostgreSQL's order, by the lease's end, new would come first). Once
    the lease has ended, a reserve of one (the short way), a batch reserve read from the queue's
    start, and a pop each hand out old first."""
    q = unique("expired")
    session.create(q)
    session.push(q, "old")
    assert keys(session.reserve(q, 1, timeout=1)) == ["old"]
    session.push(q, "new")
    wait_until_due(session, q, ["old"])
    if how == "pop":
        assert session.pop(q, 1) == ["old"]
        assert session.pop(q, 1) == ["new"]
        return
    if how == "reserve 1":
        assert keys(session.reserve(q, 1)) == ["old"]
        assert keys(session.reserve(q, 1)) == ["new"]
    else:
        session.sql(MARK_DROPPED["mysql"])
        assert keys(session.reserve(q, 2)) == ["old", "new"]
    [(attempts,)] = session.sql(
        "SELECT attempts FROM pyqueue_message WHERE queue_name = %s AND p_key = 'old'", q
    )
    assert attempts == 2


# ---- (c) the batch reserve's mark ---------------------------------------------------------------


@pytest.mark.parametrize("then", ["asks for more than lies past the mark", "the mark's time is up"])
def test_an_expired_lease_before_the_mark_waits_for_the_next_read_from_the_start(session, then):
    """Ten messages m0..m9 of one session's batch reserves (the short batch way, its mark kept live as
    a read from the start that took 0.25 s keeps it). The first, from the start, takes m0 and m1 for
    2 s (its mark: m0); the second, from the mark, m2 and m3. m0's and m1's leases end: they keep
    their place, before the mark, so the next batch of 2, from the mark (m2), takes m4 and m5 and
    they wait (at most ~60 s: docs/contract/05_reserve.md). The session's next read from the start
    takes them back first: at once when the batch asks for more than lies past the mark (10: m6..m9
    are fewer), or once the mark's time is up (a batch of 2)."""
    q = unique("marked")
    session.create(q)
    for i in range(10):
        session.push(q, f"m{i}")
    session.sql(MARK_DROPPED["mysql"])
    assert keys(session.reserve(q, 2, timeout=2)) == ["m0", "m1"]  # (2 s: past the next reserve)
    session.keep_mark(q)
    assert keys(session.reserve(q, 2)) == ["m2", "m3"]
    wait_until_due(session, q, ["m0", "m1"])
    session.keep_mark(q)
    assert keys(session.reserve(q, 2)) == ["m4", "m5"], "read from the start while the mark was live"
    session.keep_mark(q)
    if then == "the mark's time is up":
        session.sql(MARK_PASSED["mysql"])
        assert keys(session.reserve(q, 2)) == ["m0", "m1"]
    else:
        assert keys(session.reserve(q, 10)) == ["m0", "m1", "m6", "m7", "m8", "m9"]


# ---- (d) a held read view: the commits' dead entries lie before the mark ------------------------

CHURNED = 2000


def candidates_read(queue: str, k: int, mark: tuple[str, int]) -> str:
    """pyqueue__claim_short_batch's read of candidates, as the routine has it, from a session's mark
    (its first candidate's ready_at and id)."""
    body = (
        ROUTINES.read_text().split("CREATE PROCEDURE pyqueue__claim_short_batch(", 1)[1].split("END //", 1)[0]
    )
    [read] = re.findall(
        r"FROM \((SELECT m\.id, m\.ready_at\s+FROM pyqueue_message m .*?LIMIT v_k)\) AS d", body, re.S
    )
    read = re.sub(r"--[^\n]*", "", read)
    sql = " ".join(read.split()).replace("in_queue", f"'{queue}'").replace("v_now", "UTC_TIMESTAMP(6)")
    sql = sql.replace("v_pr", "0")  # (priority 0: the walk's step where these messages lie)
    return sql.replace("v_at", f"'{mark[0]}'").replace("v_id", str(mark[1] - 1)).replace("v_k", str(k))


def pages(s: Session, sql: str) -> int | None:
    """The pages of pyqueue_message's indexes the statement accessed (None: no r_engine_stats)."""
    [(plan,)] = s.sql("ANALYZE FORMAT=JSON " + sql)
    found = re.findall(r'"r_engine_stats": \{([^}]*)\}', plan)
    if not found:
        return None
    return sum(int(m.group(1)) for f in found if (m := re.search(r'"pages_accessed": (\d+)', f)))


def test_under_a_held_read_view_a_batch_reserve_from_its_mark_reads_no_dead_entry(dsn, session, report):
    """A report holds a consistent snapshot (opened, then a read of another table) while 2,000
    messages are pushed (due an hour ago), reserved in batches of 100 with a lease of 10 ms and
    committed; each commit leaves a delete-marked entry in pyqueue_message_order_idx that purge may
    not remove. The probe's mark lies after where they were pushed (its batch reserve took two
    messages due 30 minutes ago first) and the leases' ends lie before the 20 messages pushed after
    the churn. Its batch reserve of 2, from the mark, takes the first two of those 20; its read of
    candidates, as ANALYZE runs it, accesses a few pages. Were a claim to move the message's entry to
    its lease's end (the ready order by scheduled_at), the commit would leave the dead entry there,
    between the mark and the messages ready now, and the read would step over all 2,000 of them
    (measured: 189 to 4,000 pages against some 13)."""
    probe = session
    held = unique("held.order") + "." + "q" * 90  # a long name: fat index entries
    if pages(probe, "SELECT 1 FROM pyqueue_message m LIMIT 1") is None:
        pytest.skip("ANALYZE's r_engine_stats: MariaDB 10.9 or later")
    probe.create(held, visibility=600)
    t0 = dt.datetime.now(dt.timezone.utc)
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue(held)
        try:
            for i in range(2):
                probe.push(held, f"early{i}", run_at=t0 - dt.timedelta(minutes=30))
            probe.sql(MARK_DROPPED["mysql"])
            assert keys(probe.reserve(held, 2)) == ["early0", "early1"]
            [(at, first)] = probe.sql("SELECT @pyqueue__ready_at, @pyqueue__ready_id")
            report.sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            report.sql("SELECT count(*) FROM pyqueue_queue")
            due = t0 - dt.timedelta(hours=1)
            for b in range(CHURNED // 100):
                q.push_many(
                    [pyqueue_sql.NewMessage(f"c{b}.{j}", "job", {}, due, 0, None) for j in range(100)]
                )
                got = q.reserve(100, timeout=0.01)
                assert len(got) == 100 and q.commit_many(got) == 100
            time.sleep(0.05)  # every lease's end before the pushes that follow
            for i in range(20):
                probe.push(held, f"live{i:02d}")
            read = pages(probe, candidates_read(held, 2, (str(at), int(first))))
            probe.keep_mark(held)
            assert keys(probe.reserve(held, 2)) == ["live00", "live01"]
            # (the dives and the rows' own pages too: some 13 here; stepping over the 2,000 dead entries, 189
            # to 4,000 seen)
            assert read <= 60, read
        finally:
            report.sql("ROLLBACK")
            q.drop()

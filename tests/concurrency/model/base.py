"""What the model's rules share: the model's clock and strategies, the model of one message, the
plain SQL that reads the tables and moves time, the check of a reserve's walk and the race helper
(tests/concurrency/test_model.py says how the model works)."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import threading
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

import pyqueue_sql

from ...conftest import UNDER_CI

TICK_S = 1200  # seconds of one model tick: 20 minutes, the step of the cron schedule "*/20 * * * *"
MAX_ATTEMPTS = 2
KEYS = ("k0", "k1", "k2", "k3", "k4")
KINDS = ("a", "b")
CONSUMERS = ("A", "B", "C")
CONNECTIONS = ("P", "A", "B", "C", "admin")

keys = st.sampled_from(KEYS)
kinds = st.sampled_from(KINDS)
priorities = st.sampled_from((0, 0, 1))
group_index = st.integers(0, 3)  # QueueMachine.GROUPS[i % len(GROUPS)]
push_delays = st.sampled_from((0, 0, 0, 0.5, 1.5, 2.5))  # ticks; 0 = ready now
leases = st.sampled_from((1.5, 2.5))
rollback_delays = st.sampled_from((0, 0, 0.5, 1.5))
consumers = st.sampled_from(CONSUMERS)
# mostly one of the newest handles (likely still holding), sometimes any (likely stale)
handle_index = st.one_of(st.integers(0, 2), st.integers(0, 10_000))
# a push with headers: its pyqueue.expires_at this many ticks from now (None: no expiry; below 0:
# past already); half ticks, so that the seconds an example takes never move one across a boundary
expiries = st.sampled_from((None, None, None, -0.5, 0.5, 1.5))
EXPIRES_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # docs/contract.md, Expiry

# Derandomized under CI (the same interleavings every run), random elsewhere.
SETTINGS = settings(
    max_examples=80,
    stateful_step_count=30,
    deadline=None,
    derandomize=UNDER_CI,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)


def ticks(n: float) -> dt.timedelta:
    return dt.timedelta(seconds=n * TICK_S)


@dataclass
class Msg:
    """The model of one live message of ``main``."""

    key: str
    kind: str
    pid: int  # the payload's number: unique per push
    priority: int
    attempts: int
    due: float  # model time (ticks) at which scheduled_at falls
    token: str | None  # reservation token (kept after expiry until taken over)
    group: str | None = None
    blocked: bool = False  # behind its group's head (scheduled_at = the sentinel)
    init: float = 0.0  # scheduled_at_initially (ticks): its place in its group, with pid
    # MySQL/MariaDB's ready_at (ticks): when it became (or becomes) due, leases aside, its place in
    # reserve order there. Every write of ``due`` writes it too (see __setattr__) but a claim's or an
    # extend's (``lease``): a message whose lease expired keeps the place it had before the claim.
    ready: float | None = None

    def __post_init__(self) -> None:
        if self.ready is None:
            self.ready = self.due

    def __setattr__(self, name: str, value) -> None:
        object.__setattr__(self, name, value)
        if name == "due":
            object.__setattr__(self, "ready", value)

    def lease(self, until: float, token: str) -> None:
        """A claim (reserve) or an extend: scheduled_at is the lease's end; ready_at is left as it is."""
        object.__setattr__(self, "due", until)
        self.token = token

    @property
    def kk(self) -> tuple[str, str]:
        return (self.key, self.kind)


# ---- plain SQL for the checks and the clock (tests only) --------------------

SENTINEL_SQL = {
    "postgresql": "TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'",
    "mysql": "CAST('9999-12-31 23:59:59.999999' AS DATETIME(6))",
}
ROWS_SQL = {
    "postgresql": "SELECT queue_name, p_key, p_kind, (payload->>'n')::int, priority, attempts, reserve_token::text,"
    " scheduled_at <= clock_timestamp(), group_key, scheduled_at = " + SENTINEL_SQL["postgresql"] + ""
    " FROM pyqueue_message WHERE queue_name IN ({names})",
    "mysql": "SELECT queue_name, p_key, p_kind, CAST(JSON_EXTRACT(payload, '$.n') AS SIGNED), priority, attempts,"
    " reserve_token, scheduled_at <= UTC_TIMESTAMP(6), group_key, scheduled_at = "
    + SENTINEL_SQL["mysql"]
    + ""
    " FROM pyqueue_message WHERE queue_name IN ({names})",
}
# MySQL/MariaDB: each row's ready_at (its place in reserve order) beside its scheduled_at, read for
# the invariant every write keeps (ready_at <= scheduled_at; equal while nobody holds the row, the
# sentinel in both for a row blocked behind its group's head or waiting for its parents) and for the
# model's ready time of a held row (how far its lease's end lies past it, in seconds): of a queue and
# the queues named after it (the parameters: its name, and that name followed by '.%').
READY_SQL = (
    "SELECT queue_name, p_key, p_kind, ready_at <= scheduled_at, reserve_token IS NOT NULL OR ready_at = scheduled_at,"
    " scheduled_at = " + SENTINEL_SQL["mysql"] + ", ready_at = " + SENTINEL_SQL["mysql"] + ","
    " TIMESTAMPDIFF(MICROSECOND, ready_at, scheduled_at) / 1000000, ready_at, scheduled_at, reserve_token"
    " FROM pyqueue_message WHERE queue_name = %s OR queue_name LIKE %s"
)
# A blocked row's scheduled_at (the sentinel) stays as it is: it is no time.
SHIFT_SQL = {
    "postgresql": "UPDATE pyqueue_message SET scheduled_at = CASE WHEN scheduled_at = "
    + SENTINEL_SQL["postgresql"]
    + " THEN scheduled_at ELSE scheduled_at - make_interval(secs => %s) END,"
    " scheduled_at_initially = scheduled_at_initially - make_interval(secs => %s),"
    " created_at = created_at - make_interval(secs => %s),"
    # an expiry moves with the clock (as the time machine's testing_advance_messages moves it)
    " headers = CASE WHEN jsonb_typeof(headers -> 'pyqueue.expires_at') = 'string'"
    " THEN jsonb_set(headers, '{pyqueue.expires_at}', to_jsonb(to_char(((headers ->> 'pyqueue.expires_at')::timestamptz"
    " - make_interval(secs => %s)) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))) ELSE headers END"
    " WHERE queue_name IN (%s, %s, %s)",
    # ready_at (the reserve order) moves exactly as scheduled_at does, the sentinel kept (each CASE
    # reads only its own column: MySQL assigns left to right, a later one sees an earlier one's value)
    "mysql": "UPDATE pyqueue_message SET ready_at = CASE WHEN ready_at = "
    + SENTINEL_SQL["mysql"]
    + " THEN ready_at ELSE ready_at - INTERVAL %s SECOND END,"
    " scheduled_at = CASE WHEN scheduled_at = "
    + SENTINEL_SQL["mysql"]
    + " THEN scheduled_at ELSE scheduled_at - INTERVAL %s SECOND END,"
    " scheduled_at_initially = scheduled_at_initially - INTERVAL %s SECOND,"
    " created_at = created_at - INTERVAL %s SECOND,"
    " headers = IF(JSON_TYPE(JSON_EXTRACT(headers, '$.\"pyqueue.expires_at\"')) = 'STRING',"
    " JSON_SET(headers, '$.\"pyqueue.expires_at\"', DATE_FORMAT(STR_TO_DATE(LEFT(JSON_UNQUOTE("
    "JSON_EXTRACT(headers, '$.\"pyqueue.expires_at\"')), 26), '%%Y-%%m-%%dT%%H:%%i:%%s.%%f') - INTERVAL %s SECOND,"
    " '%%Y-%%m-%%dT%%H:%%i:%%s.%%fZ')), headers)"
    " WHERE queue_name IN (%s, %s, %s)",
}


# Moving the messages back in time moves them below where PostgreSQL's reserve starts reading
# (pyqueue_ready_from, which only real time moves up): the shift starts it over.
RESET_READY_FROM_SQL = (
    "UPDATE pyqueue_ready_from SET ready_from = '-infinity', ready_from_id = NULL, next_from = NULL, next_xid = NULL"
    " WHERE queue_name IN (%s, %s, %s)"
)


def shift(db: pyqueue_sql.Database, dialect: str, seconds: float, names: tuple[str, str, str]) -> None:
    """Moves every time of the named queues' messages ``seconds`` into the past."""
    sql(db, SHIFT_SQL[dialect], (seconds,) * (5 if dialect == "mysql" else 4) + names)
    if dialect == "postgresql":
        sql(db, RESET_READY_FROM_SQL, names)


def sql(db: pyqueue_sql.Database, statement: str, params) -> list[tuple]:
    cur = db.connection.cursor()
    try:
        cur.execute(statement, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        cur.close()


def check_walk(
    ready: list[Msg],
    n: int,
    delivered: set,
    dead: set,
    exhaustible: bool,
    dead_past_n: bool = False,
    expired: frozenset | set = frozenset(),
    fills: bool = True,
    by_ready: bool = False,
) -> None:
    """Checks that a reserve/pop of n handed out ``delivered`` and ended ``dead`` as the contract's
    walk does: ready messages in reserve order (priority desc, then scheduled_at, or with by_ready
    (MySQL/MariaDB) ready_at, where a message whose lease expired keeps the place it had before the
    claim; messages the model cannot tell apart may come in any order), exhausted ones dead-lettered and ``expired``
    ones (past their pyqueue.expires_at) ended, both skipped, until n are delivered; fills False
    (a PostgreSQL pop): the ended ones use up places of the n (it reads n, returns the others).
    dead_past_n: the call also handed out messages that became ready during it (a group's next
    message, promoted when its head was dead-lettered, expired or popped), so n here is less than
    the call's own n and the call may have ended messages past it."""

    def place(m: Msg) -> tuple[int, float]:
        return (-m.priority, m.ready if by_ready else m.due)

    order = sorted(ready, key=place)
    left = n
    count = 0
    for _, group in itertools.groupby(order, key=place):
        group = list(group)
        members = {m.kk for m in group}
        ok = {m.kk for m in group if m.kk not in expired and not (exhaustible and m.attempts >= MAX_ATTEMPTS)}
        if left == 0:
            assert not members & (delivered if dead_past_n else delivered | dead), (
                "handed out past the first n in reserve order",
                members & (delivered | dead),
            )
            continue
        cost = len(ok) if fills else len(members)
        if cost < left:
            assert ok <= delivered, ("a ready message was skipped", ok - delivered)
            assert members - ok <= dead, (
                "an exhausted or expired message was delivered or left",
                members - ok - dead,
            )
            left -= cost
            count += len(ok)
        else:
            got = delivered & members
            used = len(got) + (0 if fills else len((members & dead) - ok))
            assert got <= ok and used == left, (
                "wrong choice among equal messages", got, ok, left,
            )  # fmt: skip
            count += len(got)
            left = 0
    everything = {m.kk for m in ready}
    assert delivered <= everything, ("handed out a message that is not ready", delivered - everything)
    assert dead <= everything
    assert len(delivered) == count


def run_at_once(*bodies) -> None:
    """Runs the callables in threads released together by a barrier (a real race between
    connections); re-raises the first error any of them raised."""
    barrier = threading.Barrier(len(bodies))
    errors: list = []

    def run(body):
        try:
            barrier.wait(timeout=30)
            body()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(b,)) for b in bodies]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


# The whole contract's model (ContractMachine): its examples per run from PYQUEUE_MODEL_EXAMPLES
# (python -m bench model --examples N sets it for a long run); the suite's budget by default.
CONTRACT_EXAMPLES = int(os.environ.get("PYQUEUE_MODEL_EXAMPLES", "30"))
CONTRACT_SETTINGS = settings(
    SETTINGS,
    max_examples=CONTRACT_EXAMPLES,
    stateful_step_count=30,
    # PYQUEUE_MODEL_SHRINK=0: report the first failing example as found (shrinking a long one can
    # take minutes against real servers)
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    + ([Phase.shrink] if os.environ.get("PYQUEUE_MODEL_SHRINK", "1") != "0" else []),
)

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
    "mysql": "UPDATE pyqueue_message SET scheduled_at = CASE WHEN scheduled_at = "
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
    sql(db, SHIFT_SQL[dialect], (seconds,) * 4 + names)
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
) -> None:
    """Checks that a reserve/pop of n handed out ``delivered`` and ended ``dead`` as the contract's
    walk does: ready messages in reserve order (priority desc, then scheduled_at; messages the
    model cannot tell apart may come in any order), exhausted ones dead-lettered and ``expired``
    ones (past their pyqueue.expires_at) ended, both skipped, until n are delivered; fills False
    (a PostgreSQL pop): the ended ones use up places of the n (it reads n, returns the others).
    dead_past_n: the call also handed out messages that became ready during it (a group's next
    message, promoted when its head was dead-lettered, expired or popped), so n here is less than
    the call's own n and the call may have ended messages past it."""
    order = sorted(ready, key=lambda m: (-m.priority, m.due))
    left = n
    count = 0
    for _, group in itertools.groupby(order, key=lambda m: (-m.priority, m.due)):
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

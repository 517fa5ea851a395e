"""What the client takes and returns: the row types (dataclasses and named tuples of the
routines' results, and the values a push or a publish takes), and how a row becomes one."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, NamedTuple

from . import dialects, statements
from .dialects import JSONValue, RowValue, read_token
from .statements import Statement


def named(statement: Statement, row: Sequence[RowValue]) -> Any:
    """A result row as its statement's row type (pyqueue_sql.statements), so that its values are
    read by their columns' names: the runner hands a row's values in the declared order (matched by
    name). A row shorter than the declaration (a schema from before its trailing columns) has None
    for those."""
    width = len(statement.columns)
    if len(row) != width:
        row = (*row[:width], *([None] * (width - len(row))))
    return statement.returns(*row)


def read_headers(dialect: dialects.Dialect, value: RowValue) -> dict[str, JSONValue] | None:
    """A headers column's value (None: the message has none, or the schema has no such column yet)."""
    return None if value is None else dialect.codec.read_payload(value)


@dataclass(frozen=True)
class Message:
    """A message taken with pop (already gone from the queue)."""

    queue: str
    key: str
    kind: str
    payload: JSONValue
    priority: int
    attempts: int
    created_at: dt.datetime
    headers: dict[str, JSONValue] | None = None  # the message's headers (None: it has none)


@dataclass(frozen=True)
class Reservation:
    """A reserved message: invisible to other consumers until its timeout passes.

    ``token`` is what commit/rollback/extend/move must show; after the
    reservation expires and another consumer takes the message it no longer works.
    """

    queue: str
    key: str
    kind: str
    payload: JSONValue
    token: str
    priority: int
    attempts: int
    created_at: dt.datetime
    scheduled_at_initially: dt.datetime
    headers: dict[str, JSONValue] | None = None  # the message's headers (None: it has none)


# The states of a finished message in queue_result (its row in pyqueue_result); every other state
# is a live message's ('ready', 'delayed', 'reserved', 'blocked') or 'unknown'.
FINISHED_STATES = frozenset({"succeeded", "failed", "cancelled"})

# The largest progress value queue_set_progress stores, in bytes of its JSON text.
MAX_PROGRESS_BYTES = 65536


@dataclass(frozen=True)
class Result:
    """What queue_result says of one message (Queue.result, Queue.wait_result).

    ``state``: a live message's 'ready', 'delayed', 'reserved', 'blocked' (behind its FIFO
    group's head) or 'waiting' (pushed with push_after: a parent has not succeeded yet); a finished one's 'succeeded', 'failed' or 'cancelled' (kept for the queue's
    result_retention); 'unknown' when there is neither (never pushed, not kept, removed, moved,
    or its result expired). ``result`` is what its consumer committed (succeeded only);
    ``last_error`` and ``attempts`` those of its last delivery; ``progress`` the last value its
    consumer set; ``finished_at`` when it finished; ``cancel_requested`` whether a cancel asked
    its consumer to stop (a live, reserved message)."""

    queue: str
    key: str
    kind: str
    state: str
    result: JSONValue = None
    last_error: str | None = None
    attempts: int | None = None
    progress: JSONValue = None
    finished_at: dt.datetime | None = None
    cancel_requested: bool = False

    @property
    def finished(self) -> bool:
        """Whether the message has finished: succeeded, failed or cancelled."""
        return self.state in FINISHED_STATES


@dataclass(frozen=True)
class ParentResult:
    """One parent of a message pushed with push_after, as Queue.parent_results reads it (in the
    order the parents were given): its queue, key and kind, its ``state`` as queue_result reads
    it ('succeeded', 'failed', 'cancelled'; while it is live 'ready', 'delayed', 'reserved',
    'waiting', 'blocked'; 'unknown' once it moved on or its result was purged) and ``result``,
    what its consumer committed (succeeded only, else None); ``error``, its last error when it
    failed or was cancelled (what a failure callback reports), else None."""

    queue: str
    key: str
    kind: str
    state: str
    result: JSONValue = None
    error: str | None = None


class Renewal(NamedTuple):
    """What Queue.renew returns: the reservation with its new token (None when it no longer
    holds), and whether a cancel was requested for it (queue_cancel)."""

    reservation: Reservation | None
    cancel_requested: bool


@dataclass(frozen=True)
class QueueStats:
    """A queue's depth (queue_stats). ready, delayed and reserved are exact up to 10,000; a count
    above 10,000 means more than 10,000 and is the server's estimate (docs/contract/03_queues.md)."""

    queue: str
    ready: int
    delayed: int
    reserved: int
    dead: int
    oldest_ready_age_s: float | None
    paused: bool


@dataclass(frozen=True)
class KindStats:
    """A queue's messages of one kind (queue_kind_stats): ready, delayed and reserved, counted as
    QueueStats counts them."""

    queue: str
    kind: str
    ready: int
    delayed: int
    reserved: int


@dataclass(frozen=True)
class NewMessage:
    """One message for push_many (key: a str, or an int as its decimal text; group: its FIFO
    group, None for none)."""

    key: str | int
    kind: str
    payload: JSONValue
    run_at: dt.datetime | dt.timedelta | None = None
    priority: int | None = None
    group: str | None = None
    headers: Mapping[str, object] | None = None


@dataclass(frozen=True)
class Publication:
    """One message for publish_many: it goes to every queue bound to a pattern matching topic."""

    topic: str
    key: str | int
    kind: str
    payload: JSONValue
    run_at: dt.datetime | dt.timedelta | None = None
    priority: int | None = None
    headers: Mapping[str, object] | None = None


def settings_from_row(dialect: dialects.Dialect, row: Sequence[RowValue]) -> QueueSettings:
    # the trailing columns (max_reservation...) are None from an older queue_settings, without them
    r = named(statements.SETTINGS, row)
    read_duration = dialect.codec.read_duration
    return QueueSettings(
        r.queue,
        read_duration(r.visibility_timeout),
        int(r.max_attempts),
        r.dead_letter_queue,
        read_duration(r.history_retention),
        bool(r.paused),
        read_duration(r.notify_window),
        read_duration(r.max_reservation),
        None if r.max_payload is None else int(r.max_payload),
        read_duration(r.result_retention),
    )


# A reserved row's values by their columns' names (statements.RESERVE; commit_reserve's rows once its
# codec took the commit's column off), found once rather than per row: one C call a row, as a slice.
_RESERVED = statements.RESERVE.at
_reserved_values = itemgetter(
    _RESERVED.p_key,
    _RESERVED.p_kind,
    _RESERVED.payload,
    _RESERVED.token,
    _RESERVED.priority,
    _RESERVED.attempts,
    _RESERVED.created_at,
    _RESERVED.scheduled_at_initially,
)
_HEADERS_AT = _RESERVED.headers
_new_object = object.__new__
# A dialect's readers of a payload and of a time that pass the driver's value on as it is
# (PostgreSQL: psycopg reads json and timestamptz): reservations_from_rows calls them not at all.
_AS_READ = (dialects.Codec.read_payload, dialects.Codec.read_time)


def reservations_from_rows(
    queue: str, dialect: dialects.Dialect, rows: Iterable[Sequence[RowValue]]
) -> list[Reservation]:
    """The Reservations of reserved rows. Each is made as its frozen dataclass's __init__ would
    make it (the same fields, all set) without that __init__'s ten object.__setattr__ calls, and
    without a call a value where the dialect reads it as the driver gave it: this runs once a
    reserved message (bench/README.md, Worker CPU). Its fields go into the new object's own
    __dict__ one item at a time: about a quarter of the CPU of one update() with a zip or keywords
    (both build a mapping or tuples first), which counts when a worker drains a backlog."""
    read_payload, read_time = dialect.codec.read_payload, dialect.codec.read_time
    as_read = (type(dialect.codec).read_payload, type(dialect.codec).read_time) == _AS_READ
    made = []
    append = made.append
    for row in rows:
        key, kind, payload, token, priority, attempts, created, initially = _reserved_values(row)
        headers = row[_HEADERS_AT] if len(row) > _HEADERS_AT else None
        if not as_read:
            payload, created, initially = read_payload(payload), read_time(created), read_time(initially)
            headers = None if headers is None else read_payload(headers)
        r = _new_object(Reservation)
        fields_of = r.__dict__  # (a frozen dataclass refuses setattr, not its __dict__'s items)
        fields_of["queue"] = queue
        fields_of["key"] = key
        fields_of["kind"] = kind
        fields_of["payload"] = payload
        fields_of["token"] = token if type(token) is str else read_token(token)
        fields_of["priority"] = priority
        fields_of["attempts"] = attempts
        fields_of["created_at"] = created
        fields_of["scheduled_at_initially"] = initially
        fields_of["headers"] = headers
        append(r)
    return made


def stats_from_row(dialect: dialects.Dialect, row: Sequence[RowValue]) -> QueueStats:
    r = named(statements.STATS, row)
    return QueueStats(
        queue=r.queue,
        ready=int(r.ready),
        delayed=int(r.delayed),
        reserved=int(r.reserved),
        dead=int(r.dead),
        oldest_ready_age_s=None if r.oldest_ready_age_s is None else float(r.oldest_ready_age_s),
        paused=bool(r.paused),
    )


def kind_stats_from_row(row: Sequence[RowValue]) -> KindStats:
    r = named(statements.KIND_STATS, row)
    return KindStats(str(r.queue), str(r.kind), int(r.ready), int(r.delayed), int(r.reserved))


@dataclass(frozen=True)
class DeadLetter:
    """A row of the view pyqueue_dead_letters: a message sitting in a dead-letter queue.

    ``from_queue`` is the queue it was dead-lettered from and ``attempts`` the deliveries it had
    there (None for a message pushed into the dead-letter queue directly); ``last_error`` is the
    error recorded by its last failure (Queue.fail), if any."""

    dead_letter_queue: str
    from_queue: str | None
    key: str
    kind: str
    payload: JSONValue
    priority: int
    attempts: int | None
    created_at: dt.datetime
    dead_lettered_at: dt.datetime
    reserved: bool
    last_error: str | None = None
    headers: dict[str, JSONValue] | None = None  # the message's headers (None: it has none)


@dataclass(frozen=True)
class QueueSettings:
    """A queue's settings (queue_settings)."""

    queue: str
    visibility_timeout: dt.timedelta
    max_attempts: int
    dead_letter_queue: str | None
    history_retention: dt.timedelta | None
    paused: bool
    notify_window: dt.timedelta | None
    max_reservation: dt.timedelta | None = None  # the longest reservation a caller may ask for
    max_payload: int | None = None  # bytes: the largest payload a push may write
    result_retention: dt.timedelta | None = None  # how long finished results are kept (None: none)


@dataclass(frozen=True)
class MessageInfo:
    """A live message as queue_message shows it."""

    queue: str
    key: str
    kind: str
    state: str  # 'ready', 'delayed' or 'reserved'
    payload: JSONValue
    priority: int
    attempts: int
    scheduled_at: dt.datetime
    created_at: dt.datetime
    reserved_by: str | None
    last_error: str | None
    dead_from: str | None  # in a dead-letter queue: the queue it was dead-lettered from
    headers: dict[str, JSONValue] | None = None  # the message's headers (None: it has none)


@dataclass(frozen=True)
class HistoryRow:
    """One history row of a message (queue_message_history)."""

    processed_at: dt.datetime
    outcome: str  # 'committed', 'moved', 'dead_lettered', 'popped', ...
    to_queue: str | None
    attempts: int
    reserved_by: str | None
    last_error: str | None


# rows of the worker registry, limits and schedules ------------------------------------
@dataclass(frozen=True)
class WorkerRegistration:
    """A registered worker: reserve with ``reserve_as`` so that release_dead_workers finds its messages.

    ``secret`` proves the registration is yours: heartbeat_worker and deregister_worker take the
    registration and do nothing (False) for a secret that is not the worker's."""

    worker_id: int
    name: str
    reserve_as: str
    secret: str = field(repr=False)


@dataclass(frozen=True)
class WorkerInfo:
    worker_id: int
    name: str
    host: str | None
    pid: int | None
    queues: list[str] | None
    started_at: dt.datetime
    heartbeat_at: dt.datetime
    heartbeat_age_s: float
    reserve_as: str


@dataclass(frozen=True)
class LimitInfo:
    queue: str
    kind: str
    capacity: int
    in_use: int


# The bounds of a rate (queue_set_rate) and of a group's k (queue_set_group_limit), as the routines check them.
MAX_RATE_N = 10000
MAX_RATE_PER = dt.timedelta(days=1)
MAX_GROUP_LIMIT = 10000


@dataclass(frozen=True)
class RateInfo:
    """A rate limit as queue_rates shows it: at most ``n`` messages of ``kind`` (None: of every
    kind of the queue together) delivered in any window of length ``per``. ``in_window``: the
    units used within the last ``per`` (the rate is saturated when it equals n);
    ``next_free_at``: when the next unit is (or was) free, None while some unit was never used."""

    queue: str
    kind: str | None
    n: int
    per: dt.timedelta
    next_free_at: dt.datetime | None
    in_window: int

    @property
    def saturated(self) -> bool:
        """Whether every unit was used within the last ``per`` (the next delivery waits)."""
        return self.in_window >= self.n


def rate_from_row(dialect: dialects.Dialect, row: Sequence[RowValue]) -> RateInfo:
    r = named(statements.RATES, row)
    return RateInfo(
        r.queue,
        r.p_kind,
        int(r.n),
        dialect.codec.read_duration(r.per),
        dialect.codec.read_time(r.next_free_at),
        int(r.in_window),
    )


@dataclass(frozen=True)
class ScheduleInfo:
    queue: str
    key: str
    kind: str
    payload: JSONValue
    every_s: int | None
    cron: str | None
    next_at: dt.datetime


def schedule_from_row(dialect: dialects.Dialect, row: Sequence[RowValue]) -> ScheduleInfo:
    r = named(statements.SCHEDULES, row)
    return ScheduleInfo(
        r.queue,
        r.p_key,
        r.p_kind,
        dialect.codec.read_payload(r.payload),
        None if r.every_s is None else int(r.every_s),
        r.cron,
        dialect.codec.read_time(r.next_at),
    )


@dataclass(frozen=True)
class MessageRow:
    """A live message as queue_messages lists it (no payload: Queue.message shows one whole)."""

    queue: str
    key: str
    kind: str
    state: str  # 'ready', 'delayed' or 'reserved'
    priority: int
    attempts: int
    scheduled_at: dt.datetime
    created_at: dt.datetime
    reserved_by: str | None
    last_error: str | None
    dead_from: str | None  # in a dead-letter queue: the queue it was dead-lettered from
    headers: dict[str, JSONValue] | None = None  # the message's headers (None: it has none)


@dataclass(frozen=True)
class ThroughputRow:
    """How many messages left a queue in one minute, by outcome (queue_throughput)."""

    queue: str
    minute: dt.datetime
    committed: int
    dead_lettered: int
    moved: int
    popped: int


class Horizon(NamedTuple):
    """What holds back the database's cleanup (queue_horizon): on PostgreSQL the oldest snapshot or
    transaction id that VACUUM must keep dead rows for, on MySQL/MariaDB the oldest open transaction
    while InnoDB's purge waits. ``oldest_age_s``: how long the holder's transaction has been open
    (None: nothing holds it back, or a replication slot, whose age has no time); ``backlog``:
    PostgreSQL how many transactions old what it holds is, MySQL/MariaDB the history list length
    (committed transactions' undo logs not purged yet); then the holder: ``holder`` ('session',
    'prepared transaction', 'replication slot' / 'transaction'), ``pid`` (what pg_terminate_backend
    or KILL takes), ``user_name``, ``state``, ``xact_start`` and ``query_start`` (None where the
    holder has none)."""

    oldest_age_s: float | None
    backlog: int
    holder: str | None
    pid: int | None
    user_name: str | None
    state: str | None
    xact_start: dt.datetime | None
    query_start: dt.datetime | None


class Binding(NamedTuple):
    """A binding of a topic pattern to a queue (queue_bindings)."""

    pattern: str
    queue: str
    created_at: dt.datetime


class GroupInfo(NamedTuple):
    """A queue's non-empty FIFO group (queue_groups): its head message (key, kind and state, as
    Queue.message shows it: 'ready', 'delayed' or 'reserved') and how many messages it holds,
    the head included; ``group_limit`` the k in effect for it (queue_set_group_limit: how many
    of its messages may be live at once) and ``in_flight`` how many are live now (None both
    from a schema whose queue_groups has no such columns yet)."""

    group_key: str
    head_key: str
    head_kind: str
    head_state: str
    messages: int
    group_limit: int | None = None
    in_flight: int | None = None

    def __repr__(self) -> str:
        # the trailing fields are named only when the schema has them (an older queue_groups: None)
        shown = [
            (f, v)
            for f, v in zip(self._fields, self)
            if f not in ("group_limit", "in_flight") or v is not None
        ]
        return "GroupInfo(" + ", ".join(f"{f}={v!r}" for f, v in shown) + ")"


def group_from_row(row: Sequence[RowValue]) -> GroupInfo:
    # group_limit and in_flight are trailing columns: None from an older queue_groups, without them
    r = named(statements.GROUPS, row)
    return GroupInfo(
        r.group_key,
        r.head_key,
        r.head_kind,
        None if r.head_state is None else str(r.head_state),
        int(r.messages),
        None if r.group_limit is None else int(r.group_limit),
        None if r.in_flight is None else int(r.in_flight),
    )


def result_from_rows(
    d: dialects.Dialect, queue: str, key: str | int, kind: str, rows: Sequence[Sequence[RowValue]]
) -> Result:
    """A Result from queue_result's one row (no row: 'unknown')."""
    if not rows:
        return Result(queue, str(key), kind, "unknown")
    r = named(statements.RESULT, rows[0])  # result_wait's rows are the same
    return Result(
        queue,
        str(key),
        kind,
        str(r.state),
        d.codec.read_payload(r.result),
        r.last_error,
        None if r.attempts is None else int(r.attempts),
        d.codec.read_payload(r.progress),
        d.codec.read_time(r.finished_at),
        bool(r.cancel_requested),
    )

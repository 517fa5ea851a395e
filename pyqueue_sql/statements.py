"""The named statements of sql/<dialect>/queries.sql, declared: each is a Statement, its name (the
block's ``-- name:`` line) with the parameters the block takes (``%(name)s``) and what it returns: a
row type whose fields are the result's columns, in order (a NamedTuple), VALUE (one value: a
routine's result, whatever the server names its column) or nothing. Every call names its statement
by one of these (``statements.PUSH``), never by a bare string. The runner hands a result's rows with
their values in the row type's order, the columns matched by name (dialects.base.in_declared_order),
and the readers take them by the row type's field names (pyqueue_sql.rows.named; ``Statement.at``
on the hot path). tests/schema/test_statements.py holds each declaration against
both dialects' queries.sql and the columns their servers return, as River generates its typed code
from its named queries.

A Statement is a str (its name), so that it is what the driver looks up in the dialect's
queries.sql and what a Call compares equal to.
"""

from __future__ import annotations

from typing import Any, NamedTuple

# A value of a result row as the driver decoded it (its type is the column's).
RowValue = Any

# What a statement returns when it returns one value (one row, one column), its column's name the
# server's choice: PostgreSQL names it after the function, a MySQL procedure as its SELECT says.
VALUE: Any = object()


class Statement(str):
    """A named statement of queries.sql with its declaration (see the module's docstring)."""

    params: tuple[str, ...]
    mysql_params: tuple[str, ...]
    returns: Any
    only: str | None
    template: bool
    positional: int
    columns: tuple[str, ...]
    _params_by_dialect: dict[str, tuple[str, ...]]

    def __new__(
        cls,
        name: str,
        params: tuple[str, ...] = (),
        *,
        mysql_params: tuple[str, ...] | None = None,
        returns: Any = None,
        only: str | None = None,
        template: bool = False,
        positional: int = 0,
    ) -> Statement:
        self = super().__new__(cls, name)
        self.params = params
        # MySQL's parameters where they differ: a batch is one JSON array of message objects there
        self.mysql_params = params if mysql_params is None else mysql_params
        self._params_by_dialect = {"mysql": self.mysql_params}
        self.returns = returns
        self.only = only  # the one dialect that has it (None: both)
        self.template = template  # {placeholders} filled with quoted names before it runs
        self.positional = positional  # how many %s parameters it takes (DB-API, in order) instead
        # the names of its result's columns, in order (none unless it returns a row type)
        self.columns = tuple(returns._fields) if isinstance(returns, type) else ()
        return self

    @property
    def name(self) -> str:
        return str.__str__(self)

    def params_of(self, dialect: str) -> tuple[str, ...]:
        """The parameters its block takes in a dialect's queries.sql."""
        return self._params_by_dialect.get(dialect, self.params)

    @property
    def at(self) -> Any:
        """Its row type with each field's position as the value (``RESERVE.at.payload == 2``): how a
        reader finds a column by its name in a row, once, rather than per row."""
        return self.returns(*range(len(self.returns._fields)))

    def __repr__(self) -> str:
        return f"Statement({self.name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (named, (self.name,))


# -- row types: a statement's result columns, in order -----------------------------------------


class SettingsRow(NamedTuple):
    queue: RowValue
    visibility_timeout: RowValue
    max_attempts: RowValue
    dead_letter_queue: RowValue
    history_retention: RowValue
    paused: RowValue
    notify_window: RowValue
    max_reservation: RowValue
    max_payload: RowValue
    result_retention: RowValue


class StatsRow(NamedTuple):
    queue: RowValue
    ready: RowValue
    delayed: RowValue
    reserved: RowValue
    dead: RowValue
    oldest_ready_age_s: RowValue
    paused: RowValue


class KindStatsRow(NamedTuple):
    queue: RowValue
    kind: RowValue
    ready: RowValue
    delayed: RowValue
    reserved: RowValue


class PopRow(NamedTuple):
    p_key: RowValue
    p_kind: RowValue
    payload: RowValue
    priority: RowValue
    attempts: RowValue
    created_at: RowValue
    headers: RowValue


class ReserveRow(NamedTuple):
    p_key: RowValue
    p_kind: RowValue
    payload: RowValue
    token: RowValue
    priority: RowValue
    attempts: RowValue
    created_at: RowValue
    scheduled_at_initially: RowValue
    headers: RowValue


class NextScheduledAtRow(NamedTuple):
    next_scheduled_at: RowValue
    wait_s: RowValue


class CommitReserveRow(NamedTuple):
    committed: RowValue
    p_key: RowValue
    p_kind: RowValue
    payload: RowValue
    token: RowValue
    priority: RowValue
    attempts: RowValue
    created_at: RowValue
    scheduled_at_initially: RowValue
    headers: RowValue


class BindingsRow(NamedTuple):
    pattern: RowValue
    queue: RowValue
    created_at: RowValue


class DeadLettersRow(NamedTuple):
    dead_letter_queue: RowValue
    from_queue: RowValue
    p_key: RowValue
    p_kind: RowValue
    payload: RowValue
    priority: RowValue
    attempts: RowValue
    created_at: RowValue
    dead_lettered_at: RowValue
    reserved: RowValue
    last_error: RowValue
    headers: RowValue


class MessageRow(NamedTuple):
    p_key: RowValue
    p_kind: RowValue
    state: RowValue
    payload: RowValue
    priority: RowValue
    attempts: RowValue
    scheduled_at: RowValue
    created_at: RowValue
    reserved_by: RowValue
    last_error: RowValue
    dead_from: RowValue
    progress: RowValue
    cancel_requested: RowValue
    headers: RowValue


class MessageHistoryRow(NamedTuple):
    processed_at: RowValue
    outcome: RowValue
    to_queue: RowValue
    attempts: RowValue
    reserved_by: RowValue
    last_error: RowValue


class MessagesRow(NamedTuple):
    p_key: RowValue
    p_kind: RowValue
    state: RowValue
    priority: RowValue
    attempts: RowValue
    scheduled_at: RowValue
    created_at: RowValue
    reserved_by: RowValue
    last_error: RowValue
    dead_from: RowValue
    headers: RowValue


class ThroughputRow(NamedTuple):
    queue: RowValue
    minute: RowValue
    committed: RowValue
    dead_lettered: RowValue
    moved: RowValue
    popped: RowValue


class GroupsRow(NamedTuple):
    group_key: RowValue
    head_key: RowValue
    head_kind: RowValue
    head_state: RowValue
    messages: RowValue
    group_limit: RowValue
    in_flight: RowValue


class HorizonRow(NamedTuple):
    oldest_age_s: RowValue
    backlog: RowValue
    holder: RowValue
    pid: RowValue
    user_name: RowValue
    state: RowValue
    xact_start: RowValue
    query_start: RowValue


class ResultRow(NamedTuple):
    state: RowValue
    result: RowValue
    last_error: RowValue
    attempts: RowValue
    progress: RowValue
    finished_at: RowValue
    cancel_requested: RowValue


class ResultsRow(NamedTuple):
    p_key: RowValue
    p_kind: RowValue
    state: RowValue
    result: RowValue
    last_error: RowValue
    attempts: RowValue
    progress: RowValue
    finished_at: RowValue


class RenewRow(NamedTuple):
    token: RowValue
    cancel_requested: RowValue


class ParentResultsRow(NamedTuple):
    ordinal: RowValue
    queue: RowValue
    p_key: RowValue
    p_kind: RowValue
    state: RowValue
    result: RowValue


class LimitsRow(NamedTuple):
    queue: RowValue
    p_kind: RowValue
    capacity: RowValue
    in_use: RowValue


class RatesRow(NamedTuple):
    queue: RowValue
    p_kind: RowValue
    n: RowValue
    per: RowValue
    next_free_at: RowValue
    in_window: RowValue


class WorkerRegisterRow(NamedTuple):
    worker_id: RowValue
    secret: RowValue


class WorkersRow(NamedTuple):
    worker_id: RowValue
    worker_name: RowValue
    host: RowValue
    pid: RowValue
    queues: RowValue
    started_at: RowValue
    heartbeat_at: RowValue
    heartbeat_age_s: RowValue
    reserve_as: RowValue


class SchedulesRow(NamedTuple):
    queue: RowValue
    p_key: RowValue
    p_kind: RowValue
    payload: RowValue
    every_s: RowValue
    cron: RowValue
    next_at: RowValue


class IngestFlushRow(NamedTuple):
    enqueued: RowValue
    duplicates: RowValue
    rejected: RowValue


class IngestRejectsRow(NamedTuple):
    reason: RowValue
    messages: RowValue


class GranteeScopeRow(NamedTuple):
    grantee: RowValue
    scope: RowValue


class AccountRoleRow(NamedTuple):
    role_name: RowValue
    role_host: RowValue


# -- the statements, by the topics of queries.sql ---------------------------------------------------

# -- queues ------------------------------------------------------------------------------------
CREATE = Statement(
    "create",
    params=("queue", "visibility_timeout", "max_attempts", "dead_letter_queue", "history_retention"),
    returns=VALUE,
)
RESET_SETTING = Statement("reset_setting", params=("queue", "setting"), returns=VALUE)
SETTINGS = Statement("settings", params=("queue",), returns=SettingsRow)
SET_MAX_RESERVATION = Statement("set_max_reservation", params=("queue", "max_reservation"), returns=VALUE)
SET_MAX_PAYLOAD = Statement("set_max_payload", params=("queue", "max_payload"), returns=VALUE)
DROP = Statement("drop", params=("queue",), returns=VALUE)
PAUSE = Statement("pause", params=("queue",), returns=VALUE)
RESUME = Statement("resume", params=("queue",), returns=VALUE)
STATS = Statement("stats", params=("queue",), returns=StatsRow)
KIND_STATS = Statement("kind_stats", params=("queue",), returns=KindStatsRow)

# -- produce -----------------------------------------------------------------------------------
PUSH = Statement("push", params=("queue", "key", "kind", "payload", "run_at", "priority"), returns=VALUE)
PUSH_WITH_HEADERS = Statement(
    "push_with_headers",
    params=("queue", "key", "kind", "payload", "run_at", "priority", "headers"),
    returns=VALUE,
)
PUSH_BATCH = Statement(
    "push_batch",
    params=("queue", "keys", "kinds", "payloads", "run_ats", "priorities"),
    mysql_params=("queue", "messages"),
    returns=VALUE,
)
PUSH_BATCH_WITH_HEADERS = Statement(
    "push_batch_with_headers",
    params=("queue", "keys", "kinds", "payloads", "run_ats", "priorities", "headers"),
    mysql_params=("queue", "messages"),
    returns=VALUE,
)
PUSH_REPLACE = Statement(
    "push_replace", params=("queue", "key", "kind", "payload", "run_at", "priority"), returns=VALUE
)
PUSH_GROUPED = Statement(
    "push_grouped", params=("queue", "group", "key", "kind", "payload", "run_at", "priority"), returns=VALUE
)
PUSH_GROUPED_WITH_HEADERS = Statement(
    "push_grouped_with_headers",
    params=("queue", "group", "key", "kind", "payload", "run_at", "priority", "headers"),
    returns=VALUE,
)
PUSH_BATCH_GROUPED = Statement(
    "push_batch_grouped",
    params=("queue", "groups", "keys", "kinds", "payloads", "run_ats", "priorities"),
    mysql_params=("queue", "messages"),
    returns=VALUE,
)
PUSH_BATCH_GROUPED_WITH_HEADERS = Statement(
    "push_batch_grouped_with_headers",
    params=("queue", "groups", "keys", "kinds", "payloads", "run_ats", "priorities", "headers"),
    mysql_params=("queue", "messages"),
    returns=VALUE,
)

# -- reserve -----------------------------------------------------------------------------------
POP = Statement("pop", params=("queue", "n"), returns=PopRow)
RESERVE = Statement("reserve", params=("queue", "worker", "timeout", "n", "kinds"), returns=ReserveRow)

# -- settle ------------------------------------------------------------------------------------
COMMIT = Statement("commit", params=("queue", "key", "kind", "token"), returns=VALUE)
ROLLBACK = Statement("rollback", params=("queue", "key", "kind", "token", "delay"), returns=VALUE)
FAIL = Statement("fail", params=("queue", "key", "kind", "token", "delay", "error"), returns=VALUE)
GIVE_UP = Statement("give_up", params=("queue", "key", "kind", "token", "error"), returns=VALUE)
SNOOZE = Statement("snooze", params=("queue", "key", "kind", "token", "delay"), returns=VALUE)
RELEASE = Statement("release", params=("queue", "worker"), returns=VALUE)
EXTEND = Statement("extend", params=("queue", "key", "kind", "token", "timeout"), returns=VALUE)
MOVE = Statement("move", params=("queue", "key", "kind", "token", "to_queue", "payload"), returns=VALUE)
REMOVE = Statement("remove", params=("queue", "key", "kind"), returns=VALUE)

# -- groups ------------------------------------------------------------------------------------
SET_GROUP_LIMIT = Statement("set_group_limit", params=("queue", "group", "k"), returns=VALUE)

# -- wakeups -----------------------------------------------------------------------------------
CHANNEL = Statement("channel", params=("queue",), returns=VALUE)
SET_NOTIFY_WINDOW = Statement("set_notify_window", params=("queue", "window"), returns=VALUE)
NEXT_SCHEDULED_AT = Statement("next_scheduled_at", params=("queue", "kinds"), returns=NextScheduledAtRow)
WAIT = Statement("wait", params=("queue", "kinds", "timeout", "poll"), returns=VALUE)
LISTEN = Statement("listen", only="postgresql", template=True)
TESTING_ADVANCE_MESSAGES = Statement("testing_advance_messages", params=("seconds",))
TESTING_ADVANCE_RESULTS = Statement("testing_advance_results", params=("seconds",))
TESTING_ADVANCE_HISTORY = Statement("testing_advance_history", params=("seconds",))
TESTING_ADVANCE_RATES = Statement("testing_advance_rates", params=("seconds",))
TESTING_ADVANCE_READY_FROM = Statement("testing_advance_ready_from")
TESTING_CLOCK_DATABASE = Statement("testing_clock_database", returns=VALUE)
TESTING_SETTLE_OCCURRENCES = Statement(
    "testing_settle_occurrences", params=("seconds", "queue", "key", "kind")
)

# -- fast paths --------------------------------------------------------------------------------
COMMIT_RESERVE = Statement(
    "commit_reserve",
    params=("queue", "key", "kind", "token", "worker", "timeout", "n", "kinds"),
    returns=CommitReserveRow,
)
COMMIT_BATCH = Statement("commit_batch", params=("queue", "keys", "kinds", "tokens"), returns=VALUE)

# -- topics ------------------------------------------------------------------------------------
PUBLISH = Statement(
    "publish", params=("topic", "key", "kind", "payload", "run_at", "priority"), returns=VALUE
)
PUBLISH_WITH_HEADERS = Statement(
    "publish_with_headers",
    params=("topic", "key", "kind", "payload", "run_at", "priority", "headers"),
    returns=VALUE,
)
PUBLISH_BATCH = Statement(
    "publish_batch",
    params=("topics", "keys", "kinds", "payloads", "run_ats", "priorities"),
    mysql_params=("messages",),
    returns=VALUE,
)
PUBLISH_BATCH_WITH_HEADERS = Statement(
    "publish_batch_with_headers",
    params=("topics", "keys", "kinds", "payloads", "run_ats", "priorities", "headers"),
    mysql_params=("messages",),
    returns=VALUE,
)
BIND = Statement("bind", params=("pattern", "queue"), returns=VALUE)
UNBIND = Statement("unbind", params=("pattern", "queue"), returns=VALUE)
BINDINGS = Statement("bindings", params=("queue",), returns=BindingsRow)

# -- history and dead letters ------------------------------------------------------------------
PURGE_HISTORY = Statement("purge_history", params=("queue", "n"), returns=VALUE)
REPLAY = Statement("replay", params=("queue", "start", "end"), returns=VALUE)
REDRIVE = Statement("redrive", params=("queue", "to_queue", "n"), returns=VALUE)
DEAD_LETTERS = Statement("dead_letters", params=("queue",), returns=DeadLettersRow)
MESSAGE = Statement("message", params=("queue", "key", "kind"), returns=MessageRow)
MESSAGE_HISTORY = Statement("message_history", params=("queue", "key", "kind"), returns=MessageHistoryRow)

# -- browse ------------------------------------------------------------------------------------
MESSAGES = Statement(
    "messages", params=("queue", "state", "key_prefix", "after_key", "after_kind", "n"), returns=MessagesRow
)
THROUGHPUT = Statement("throughput", params=("queue", "since"), returns=ThroughputRow)
GROUPS = Statement("groups", params=("queue", "n"), returns=GroupsRow)
HORIZON = Statement("horizon", returns=HorizonRow)

# -- results -----------------------------------------------------------------------------------
SET_RESULT_RETENTION = Statement("set_result_retention", params=("queue", "retention"), returns=VALUE)
RESULT = Statement("result", params=("queue", "key", "kind"), returns=ResultRow)
RESULTS = Statement("results", params=("queue", "kind", "state", "n", "before"), returns=ResultsRow)
PURGE_RESULTS = Statement("purge_results", params=("queue", "state", "before", "n"), returns=VALUE)
RESULT_WAIT = Statement("result_wait", params=("queue", "key", "kind", "timeout"), returns=ResultRow)
RESULT_CHANNEL = Statement("result_channel", params=("queue",), returns=VALUE)
UNLISTEN = Statement("unlisten", only="postgresql", template=True)
CANCEL = Statement("cancel", params=("queue", "key", "kind"), returns=VALUE)
COMMIT_RESULT = Statement("commit_result", params=("queue", "key", "kind", "token", "result"), returns=VALUE)
COMMIT_RESULT_BATCH = Statement(
    "commit_result_batch", params=("queue", "keys", "kinds", "tokens", "results"), returns=VALUE
)
SET_PROGRESS = Statement("set_progress", params=("queue", "key", "kind", "token", "progress"), returns=VALUE)
RENEW = Statement("renew", params=("queue", "key", "kind", "token", "timeout"), returns=RenewRow)
CANCEL_HELD = Statement("cancel_held", params=("queue", "key", "kind", "token"), returns=VALUE)

# -- dependencies ------------------------------------------------------------------------------
PUSH_AFTER = Statement("push_after", params=("queue", "key", "kind", "payload", "parents"), returns=VALUE)
PUSH_AFTER_ON = Statement(
    "push_after_on", params=("queue", "key", "kind", "payload", "parents", "run_on"), returns=VALUE
)
PUSH_AFTER_WITH_HEADERS = Statement(
    "push_after_with_headers",
    params=("queue", "key", "kind", "payload", "parents", "run_on", "run_at", "priority", "headers"),
    returns=VALUE,
)
PUSH_AFTER_BATCH = Statement("push_after_batch", params=("queue", "messages"), returns=VALUE)
PARENT_RESULTS = Statement("parent_results", params=("queue", "key", "kind"), returns=ParentResultsRow)

# -- limits ------------------------------------------------------------------------------------
SET_LIMIT = Statement("set_limit", params=("queue", "kind", "capacity"), returns=VALUE)
LIMITS = Statement("limits", params=("queue",), returns=LimitsRow)
SET_RATE = Statement("set_rate", params=("queue", "kind", "n", "per"), returns=VALUE)
RATES = Statement("rates", params=("queue",), returns=RatesRow)

# -- workers -----------------------------------------------------------------------------------
WORKER_REGISTER = Statement(
    "worker_register", params=("name", "host", "pid", "queues"), returns=WorkerRegisterRow
)
WORKER_HEARTBEAT = Statement("worker_heartbeat", params=("worker_id", "secret"), returns=VALUE)
WORKER_DEREGISTER = Statement("worker_deregister", params=("worker_id", "secret"), returns=VALUE)
RELEASE_DEAD_WORKERS = Statement("release_dead_workers", params=("older_than",), returns=VALUE)
WORKERS = Statement("workers", returns=WorkersRow)

# -- schedules ---------------------------------------------------------------------------------
SCHEDULE_EVERY = Statement(
    "schedule_every", params=("queue", "key", "kind", "payload", "every"), returns=VALUE
)
SCHEDULE_CRON = Statement("schedule_cron", params=("queue", "key", "kind", "payload", "cron"), returns=VALUE)
UNSCHEDULE = Statement("unschedule", params=("queue", "key", "kind"), returns=VALUE)
SCHEDULES = Statement("schedules", params=("queue",), returns=SchedulesRow)

# -- ingest ------------------------------------------------------------------------------------
INGEST_FLUSH = Statement("ingest_flush", params=("queue",), returns=IngestFlushRow)

# -- privileges --------------------------------------------------------------------------------
CURRENT_SCHEMA = Statement("current_schema", returns=VALUE)
GRANT_SCHEMA_USAGE = Statement("grant_schema_usage", only="postgresql", template=True)
GRANT_EXECUTE = Statement("grant_execute", template=True)
REVOKE_EXECUTE = Statement("revoke_execute", template=True)
GRANT_TABLE = Statement("grant_table", template=True)
REVOKE_TABLE = Statement("revoke_table", template=True)
INGEST_REJECT_MARK = Statement("ingest_reject_mark", returns=VALUE, only="mysql")
INGEST_REJECTS = Statement("ingest_rejects", params=("mark", "queue"), returns=IngestRejectsRow, only="mysql")
TEMPORARY_TABLE_GRANTEES = Statement("temporary_table_grantees", returns=GranteeScopeRow, only="mysql")
ACCOUNT_ROLES = Statement("account_roles", returns=AccountRoleRow, only="mysql", positional=2)
ACCOUNT_ROLES_MYSQL8 = Statement("account_roles_mysql8", returns=AccountRoleRow, only="mysql", positional=2)
SESSION_SQL_MODE = Statement("session_sql_mode", returns=VALUE, only="mysql")
TRACK_EXPIRED = Statement("track_expired", only="mysql")
TAKE_EXPIRED = Statement("take_expired", returns=VALUE, only="mysql")
FORBID_ACCOUNT_CREATION = Statement("forbid_account_creation", only="mysql")
SET_SESSION_SQL_MODE = Statement("set_session_sql_mode", only="mysql", positional=1)
LOAD_INGEST_CSV = Statement("load_ingest_csv", only="mysql", template=True, positional=1)

STATEMENTS: dict[str, Statement] = {s.name: s for s in list(globals().values()) if isinstance(s, Statement)}


def named(name: str) -> Statement:
    """The declared statement of that name (KeyError: none is declared)."""
    return STATEMENTS[name]

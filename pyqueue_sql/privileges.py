"""Least privilege: which routines each kind of application account may call.

The contract routines are SECURITY DEFINER (PostgreSQL, with a pinned
search_path) / SQL SECURITY DEFINER (MySQL/MariaDB): they run with the rights
of the account that installed them, and nobody else may call them until
granted (routines/ revokes EXECUTE from PUBLIC on PostgreSQL; MySQL grants
nothing by default). An application account then needs EXECUTE on the
routines of its capabilities and no privilege on any table:

    producer  pushes (push, push_batch, push_replace, and into FIFO groups: push_grouped,
              push_batch_grouped) and publishes to topics (publish, publish_batch: into every
              queue bound to a matching pattern); cannot reserve, pop or commit
    consumer  takes and finishes work: reserve, pop, commit, rollback, snooze, fail, give_up, extend,
              commit_reserve, commit_batch, the wakeup routines, the worker registry
              (a worker touches only its own registration: heartbeat and deregister
              need the secret register returned), releasing dead workers' messages,
              reading the concurrency limits (queue_limits: the worker holds no more of a
              limited kind than its capacity); cannot push, and cannot move (a message leaves its queue only by being
              finished or dead-lettered)
    pipeline  queue_move: hands a held message (reserved by the same account, so given
              with consumer) on to any queue, its payload possibly rewritten: a stage
              of a pipeline. It puts content into other queues without push rights,
              so it is a capability of its own. A move back into the message's own
              queue keeps its attempt count (max_attempts still applies); a move to
              another queue starts it at 0 there.
    monitor   reads: stats, limits, rates, workers, schedules, dead letters, settings, one
              message and its history, browsing and throughput, the horizon (what holds back
              cleanup), topic bindings, FIFO groups
    admin     manages queues: create, drop, pause, resume, remove, reset a setting,
              max reservation, max payload, releasing reservations (queue_release),
              limits, rates, group limits, schedules, history, redrive, replay, notify window, releasing
              dead workers, binding topic patterns to queues (bind, unbind); plus monitor
    ingest    bulk enqueue through the queue_ingest table (INSERT; and SELECT, which
              Spark's JDBC writer needs to read the table's columns before it
              appends) and queue_ingest_flush; on MySQL/MariaDB also SELECT on
              pyqueue_ingest_reject, the rows the flush refused, which
              pyqueue_sql.spark reads back to report them

Grants are per capability, not per queue (a routine takes the queue as an
argument). The migrations create no account and grant nothing: this module
only prints or runs the GRANT (or REVOKE) statements you ask for, with every
name quoted as an identifier (psycopg.sql.Identifier on PostgreSQL,
backtick-quoting on MySQL after validation); no SQL is built from names as text.

On MySQL/MariaDB a session's TEMPORARY table shadows a table of the same name even inside the
SQL SECURITY DEFINER procedures (even under a name qualified by the database), so an account that
may create temporary tables in the install database could change what the procedures read and
write: apply() refuses to grant a capability to such an account (directly, through *.*, or
through a role it holds, and on MariaDB through PUBLIC, whose privileges every account has),
naming the REVOKE that makes it safe.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from . import dialects, errors
from .capabilities import (
    ADMIN,
    CAPABILITIES,
    CONSUMER,
    DESCRIPTIONS,
    INGEST,
    MONITOR,
    PIPELINE,
    PRODUCER,
    capabilities_with,
)
from .dialects import Dialect
from .statements import (
    ACCOUNT_ROLES,
    ACCOUNT_ROLES_MYSQL8,
    CURRENT_SCHEMA,
    GRANT_EXECUTE,
    GRANT_SCHEMA_USAGE,
    GRANT_TABLE,
    REVOKE_EXECUTE,
    REVOKE_TABLE,
    TEMPORARY_TABLE_GRANTEES,
)

# The capabilities' data lives in pyqueue_sql.capabilities (errors.PermissionDeniedError reads it
# too); it is this module's as well.
__all__ = [
    "ADMIN",
    "CAPABILITIES",
    "CONSUMER",
    "DESCRIPTIONS",
    "INGEST",
    "MONITOR",
    "PIPELINE",
    "PRODUCER",
    "ROUTINES",
    "TABLES",
    "Account",
    "Statements",
    "apply",
    "capabilities_of",
    "capabilities_with",
    "current_schema",
    "no_account_creation",
    "parse_account",
    "refuse_shadowing_account",
    "render",
    "statements",
]

# Table privileges, the only ones any capability gets: (privilege, table) per dialect
# (Dialect.grant_tables). SELECT on queue_ingest: Spark's JDBC writer reads the table's columns
# (SELECT * FROM queue_ingest WHERE 1=0) before an append and fails without it.
# On PostgreSQL the table is empty whenever no INSERT is running (the trigger
# deletes its rows in the inserting statement), so it shows nothing; on
# MySQL/MariaDB it shows the rows appended and not flushed yet (docs/contract.md).
TABLES: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    cls.name: dict(cls.grant_tables) for cls in dialects.DIALECTS
}

# Every contract routine (the same names in both dialects); the internal
# pyqueue__* helpers are granted to nobody.
ROUTINES: tuple[str, ...] = tuple(sorted({r for rs in CAPABILITIES.values() for r in rs}))

_PRIVILEGES = {"INSERT": "INSERT", "SELECT": "SELECT"}  # the only table privileges ever granted


@dataclass(frozen=True)
class Account:
    """A PostgreSQL role (host None), a MySQL/MariaDB account 'user'@'host', or a
    MariaDB role (host '')."""

    name: str
    host: str | None = None


def parse_account(dialect: str | Dialect, text: str) -> Account:
    """PostgreSQL: the role name as is. MySQL: user@host (host '%' when none is
    given); a trailing @ with no host (name@) names a MariaDB role."""
    if not text or "\x00" in text:
        raise errors.InvalidArgumentError("the role name must not be empty or contain NUL")
    return Account(*dialects.as_dialect(dialect).admin.parse_grantee(text))


def capabilities_of(names: Iterable[str]) -> list[str]:
    chosen = list(dict.fromkeys(names))
    unknown = [n for n in chosen if n not in CAPABILITIES]
    if unknown or not chosen:
        raise errors.InvalidArgumentError(
            f"capabilities must be some of {', '.join(CAPABILITIES)}; got {chosen or 'none'}"
        )
    return chosen


class Statements(list):
    """What statements() returns: the statements, and the account they grant to (or revoke
    from), which apply() checks before granting."""

    def __init__(self, items: Iterable[Any], account: Account, revoke: bool) -> None:
        super().__init__(items)
        self.account = account
        self.revoke = revoke


def statements(
    dialect: str | Dialect,
    account: Account,
    capabilities: Sequence[str],
    schema: str | None = None,
    revoke: bool = False,
) -> Statements:
    """The GRANT (or REVOKE) statements for the capabilities: psycopg.sql.Composed on
    PostgreSQL, str on MySQL (the named statements of sql/<dialect>/queries.sql), in a list
    that also carries the account (Statements). schema: the PostgreSQL schema / MySQL database
    the routines live in (None: unqualified names, resolved where the statements run)."""
    d = dialects.as_dialect(dialect)
    caps = capabilities_of(capabilities)
    routines = sorted({r for c in caps for r in CAPABILITIES[c]})
    tables = sorted({t for c in caps for t in d.grant_tables.get(c, ())}, key=lambda t: (t[1], t[0]))
    execute, table = (REVOKE_EXECUTE, REVOKE_TABLE) if revoke else (GRANT_EXECUTE, GRANT_TABLE)

    def qualified(name: str) -> Any:
        return d.admin.identifier(schema, name) if schema else d.admin.identifier(name)

    role = d.admin.grantee(account.name, account.host)
    out = []
    if schema and not revoke and d.grants_schema_usage:
        out.append(
            d.admin.compose(d.statement(GRANT_SCHEMA_USAGE), schema=d.admin.identifier(schema), role=role)
        )

    def signatures(name: str) -> list[Any]:
        """The routine's name, or one name(arguments) per signature when it has several."""
        if name not in d.routine_signatures:
            return [qualified(name)]
        return [
            d.admin.compose("{name}(" + args + ")", name=qualified(name))
            for args in d.routine_signatures[name]
        ]

    out += [
        d.admin.compose(d.statement(execute), routine=s, role=role) for r in routines for s in signatures(r)
    ]
    out += [
        d.admin.compose(
            d.statement(table), privilege=d.admin.keyword(_PRIVILEGES[priv]), table=qualified(t), role=role
        )
        for priv, t in tables
    ]
    return Statements(out, account, revoke)


def render(dialect: str | Dialect, stmts: Sequence[Any], connection: Any = None) -> list[str]:
    """The statements as SQL text (for printing), each ending with ';'."""
    d = dialects.as_dialect(dialect)
    return [d.admin.statement_text(s, connection) + ";" for s in stmts]


def current_schema(dialect: str | Dialect, connection: Any) -> str:
    """The schema (PostgreSQL) or database (MySQL) a connection installs into."""
    cur = connection.cursor()
    try:
        cur.execute(dialects.as_dialect(dialect).statement(CURRENT_SCHEMA))
        row = cur.fetchone()
    finally:
        cur.close()
    if not row or row[0] is None:
        raise errors.QueueError("the connection has no current schema/database to grant on")
    return row[0]


def no_account_creation(dialect: str | Dialect, connection: Any) -> contextlib.AbstractContextManager[None]:
    """While in the block, a GRANT to an account that does not exist fails
    instead of creating it. MariaDB creates a password-less account on such a
    GRANT unless sql_mode has NO_AUTO_CREATE_USER (in its default, but a
    session may lack it): the block adds it for the session and puts the
    session's sql_mode back afterwards. MySQL 8 and PostgreSQL never create
    an account on GRANT."""
    return dialects.as_dialect(dialect).admin.no_account_creation(connection)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


def _rows(connection: Any, statement: str, params: tuple = ()) -> list[tuple]:
    cur = connection.cursor()
    try:
        cur.execute(statement, params or None)
        return [tuple(row) for row in cur.fetchall()]
    finally:
        cur.close()


def _roles_of(d: Dialect, connection: Any, user: str, host: str) -> list[tuple[str, str]]:
    """The roles granted to an account or role (user, host; a MariaDB role has host '')."""
    try:
        rows = _rows(connection, d.statement(ACCOUNT_ROLES), (user, host))
    except Exception as exc:
        if not exc.args or exc.args[0] != 1146:  # MySQL 8: no mysql.roles_mapping
            raise
        rows = _rows(connection, d.statement(ACCOUNT_ROLES_MYSQL8), (user, host))
    return [(_text(role), _text(role_host)) for role, role_host in rows]


def refuse_shadowing_account(dialect: str | Dialect, connection: Any, account: Account) -> None:
    """Raises InsecureSchemaError, one line naming the account and the REVOKE that fixes it,
    when the account may create temporary tables in the connection's database (MySQL/MariaDB:
    granted on the database or a pattern matching it, on *.*, or to a role the account holds,
    directly or through other roles; on MariaDB also granted to PUBLIC or to a role granted to
    PUBLIC, which every account has): its temporary tables would shadow the procedures' own.
    Nothing to check where the routines cannot be shadowed so (Admin.shadowing_grantees is
    empty: PostgreSQL)."""
    d = dialects.as_dialect(dialect)
    shadowing = d.admin.shadowing_grantees(connection)
    if not shadowing:
        return
    start = (account.name, "%" if account.host is None else account.host)
    # holder -> the holder it was granted to (None: the account itself, or PUBLIC)
    through: dict[tuple[str, str], tuple[str, str] | None] = {start: None}
    public = d.admin.public_role(connection)  # MariaDB's PUBLIC: every account's
    if public is not None and start != public:
        through[public] = None
    frontier = list(through)
    while frontier:
        user, host = frontier.pop()
        for role in _roles_of(d, connection, user, host):
            if role not in through:
                through[role] = (user, host)
                frontier.append(role)
    for grantee, scope in _rows(connection, d.statement(TEMPORARY_TABLE_GRANTEES)):
        holder = next((h for h in through if f"'{h[0]}'@'{h[1]}'" == _text(grantee)), None)
        if holder is None:
            continue
        root = holder
        while through[root] is not None:
            root = through[root]  # type: ignore[assignment]
        on = "*.*" if _text(scope) == "*" else f"{d.admin.identifier(_text(scope))}.*"
        database = d.admin.identifier(current_schema(d, connection))
        name = "PUBLIC" if holder == public else d.admin.grantee(*holder)
        if root == public:
            how = (
                " through PUBLIC, whose privileges every account has"
                if holder == public
                else f" through the role {name} granted to PUBLIC, whose privileges every account has"
            )
        else:
            how = "" if holder == start else f" through its role {name}"
        raise errors.InsecureSchemaError(
            f"refusing to grant to {d.admin.grantee(*start)}: it may create temporary tables in database "
            f"{database}{how} (CREATE TEMPORARY TABLES on {on}), which would shadow the "
            f"queue's tables inside its procedures; first run: REVOKE CREATE TEMPORARY TABLES ON {on} "
            f"FROM {name}"
        )


def apply(dialect: str | Dialect, connection: Any, stmts: Sequence[Any]) -> None:
    """Runs the statements on a connection (autocommit, or commit afterwards
    yourself). A GRANT to an account that does not exist fails: it is never
    created here. Grants from statements() to an account whose temporary tables would shadow
    the procedures' tables are refused before any runs (refuse_shadowing_account)."""
    account = getattr(stmts, "account", None)
    if account is not None and not getattr(stmts, "revoke", False):
        refuse_shadowing_account(dialect, connection, account)
    cur = connection.cursor()
    try:
        with no_account_creation(dialect, connection):
            for s in stmts:
                cur.execute(s)
    finally:
        cur.close()

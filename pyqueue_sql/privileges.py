"""Least privilege: which routines each kind of application account may call.

The contract routines are SECURITY DEFINER (PostgreSQL, with a pinned
search_path) / SQL SECURITY DEFINER (MySQL/MariaDB): they run with the rights
of the account that installed them, and nobody else may call them until
granted (routines.sql revokes EXECUTE from PUBLIC on PostgreSQL; MySQL grants
nothing by default). An application account then needs EXECUTE on the
routines of its capabilities and no privilege on any table:

    producer  pushes (push, push_batch, push_replace, and into FIFO groups: push_grouped,
              push_batch_grouped) and publishes to topics (publish, publish_batch: into every
              queue bound to a matching pattern); cannot reserve, pop or commit
    consumer  takes and finishes work: reserve, pop, commit, rollback, snooze, fail, extend,
              commit_reserve, commit_batch, the wakeup routines, the worker registry
              (a worker touches only its own registration: heartbeat and deregister
              need the secret register returned), releasing dead workers' messages;
              cannot push, and cannot move (a message leaves its queue only by being
              finished or dead-lettered)
    pipeline  queue_move: hands a held message (reserved by the same account, so given
              with consumer) on to any queue, its payload possibly rewritten: a stage
              of a pipeline. It puts content into other queues without push rights,
              so it is a capability of its own. A move back into the message's own
              queue keeps its attempt count (max_attempts still applies); a move to
              another queue starts it at 0 there.
    monitor   reads: stats, limits, workers, schedules, dead letters, settings, one
              message and its history, browsing and throughput, topic bindings, FIFO groups
    admin     manages queues: create, drop, pause, resume, remove, reset a setting,
              max reservation, max payload, releasing reservations (queue_release),
              limits, schedules, history, redrive, replay, notify window, releasing
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
    "apply",
    "capabilities_of",
    "capabilities_with",
    "current_schema",
    "no_account_creation",
    "parse_account",
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
    return Account(*dialects.as_dialect(dialect).parse_grantee(text))


def capabilities_of(names: Iterable[str]) -> list[str]:
    chosen = list(dict.fromkeys(names))
    unknown = [n for n in chosen if n not in CAPABILITIES]
    if unknown or not chosen:
        raise errors.InvalidArgumentError(
            f"capabilities must be some of {', '.join(CAPABILITIES)}; got {chosen or 'none'}"
        )
    return chosen


def statements(
    dialect: str | Dialect,
    account: Account,
    capabilities: Sequence[str],
    schema: str | None = None,
    revoke: bool = False,
) -> list[Any]:
    """The GRANT (or REVOKE) statements for the capabilities: psycopg.sql.Composed on
    PostgreSQL, str on MySQL (the named statements of sql/<dialect>/queries.sql).
    schema: the PostgreSQL schema / MySQL database the routines live in (None:
    unqualified names, resolved where the statements run)."""
    d = dialects.as_dialect(dialect)
    caps = capabilities_of(capabilities)
    routines = sorted({r for c in caps for r in CAPABILITIES[c]})
    tables = sorted({t for c in caps for t in d.grant_tables.get(c, ())}, key=lambda t: (t[1], t[0]))
    execute, table = ("revoke_execute", "revoke_table") if revoke else ("grant_execute", "grant_table")

    def qualified(name: str) -> Any:
        return d.identifier(schema, name) if schema else d.identifier(name)

    role = d.grantee(account.name, account.host)
    out = []
    if schema and not revoke and d.grants_schema_usage:
        out.append(d.compose(d.statement("grant_schema_usage"), schema=d.identifier(schema), role=role))

    def signatures(name: str) -> list[Any]:
        """The routine's name, or one name(arguments) per signature when it has several."""
        if name not in d.routine_signatures:
            return [qualified(name)]
        return [
            d.compose("{name}(" + args + ")", name=qualified(name)) for args in d.routine_signatures[name]
        ]

    out += [d.compose(d.statement(execute), routine=s, role=role) for r in routines for s in signatures(r)]
    out += [
        d.compose(d.statement(table), privilege=d.keyword(_PRIVILEGES[priv]), table=qualified(t), role=role)
        for priv, t in tables
    ]
    return out


def render(dialect: str | Dialect, stmts: Sequence[Any], connection: Any = None) -> list[str]:
    """The statements as SQL text (for printing), each ending with ';'."""
    d = dialects.as_dialect(dialect)
    return [d.statement_text(s, connection) + ";" for s in stmts]


def current_schema(dialect: str | Dialect, connection: Any) -> str:
    """The schema (PostgreSQL) or database (MySQL) a connection installs into."""
    cur = connection.cursor()
    try:
        cur.execute(dialects.as_dialect(dialect).statement("current_schema"))
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
    return dialects.as_dialect(dialect).no_account_creation(connection)


def apply(dialect: str | Dialect, connection: Any, stmts: Sequence[Any]) -> None:
    """Runs the statements on a connection (autocommit, or commit afterwards
    yourself). A GRANT to an account that does not exist fails: it is never
    created here."""
    cur = connection.cursor()
    try:
        with no_account_creation(dialect, connection):
            for s in stmts:
                cur.execute(s)
    finally:
        cur.close()

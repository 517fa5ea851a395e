"""Which routines the model's rules call, and which routines of the catalog change state.

``@covers("queue_x", ...)`` on a rule (or on a helper a rule calls) records that the model calls
and checks those routines. ``state_changing(db)`` reads the installed routines from the catalog
(``pg_proc`` / ``information_schema.ROUTINES``) less READ_ONLY, the routines that change nothing."""

from __future__ import annotations

from collections.abc import Callable

import pyqueue_sql

# The public routines that change nothing: they read (browse, stats, results, settings) or wait.
READ_ONLY = frozenset(
    {
        "queue_bindings",
        "queue_channel",
        "queue_dead_letters",
        "queue_groups",
        "queue_horizon",
        "queue_kind_stats",
        "queue_limits",
        "queue_message",
        "queue_message_history",
        "queue_messages",
        "queue_next_scheduled_at",
        "queue_parent_results",
        "queue_rates",
        "queue_result",
        "queue_result_channel",
        "queue_result_wait",
        "queue_results",
        "queue_schedules",
        "queue_settings",
        "queue_stats",
        "queue_throughput",
        "queue_wait",
        "queue_workers",
    }
)

CATALOG_SQL = {
    "postgresql": "SELECT DISTINCT p.proname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = current_schema() AND p.proname LIKE 'queue\\_%%'",
    "mysql": "SELECT DISTINCT ROUTINE_NAME FROM information_schema.ROUTINES"
    " WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME LIKE 'queue\\_%%'",
}


def covers(*routines: str) -> Callable:
    """Marks a rule (or a helper of rules) as calling and checking these routines."""

    def mark(fn: Callable) -> Callable:
        fn.__covers__ = frozenset(routines) | getattr(fn, "__covers__", frozenset())
        return fn

    return mark


def covered(machine: type) -> dict[str, list[str]]:
    """routine -> the names of the machine's rules and helpers that cover it."""
    found: dict[str, list[str]] = {}
    for klass in machine.__mro__:
        for name, value in vars(klass).items():
            fn = getattr(value, "function", value)  # hypothesis wraps rules
            for routine in getattr(fn, "__covers__", getattr(value, "__covers__", ())):
                found.setdefault(routine, []).append(name)
    return found


def catalog_routines(db: pyqueue_sql.Database, dialect: str) -> set[str]:
    cur = db.connection.cursor()
    try:
        cur.execute(CATALOG_SQL[dialect])
        return {str(row[0]) for row in cur.fetchall()}
    finally:
        cur.close()


def state_changing(db: pyqueue_sql.Database, dialect: str) -> set[str]:
    return catalog_routines(db, dialect) - READ_ONLY

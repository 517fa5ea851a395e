"""The capabilities of least privilege and the routines each grants: plain data (no import of
the rest of the package), so that errors.PermissionDeniedError can name the capability a refused
routine needs. pyqueue_sql.privileges turns them into GRANT statements (and describes them)."""

from __future__ import annotations

PRODUCER = (
    "queue_push",
    "queue_push_batch",
    "queue_push_replace",
    "queue_push_grouped",
    "queue_push_batch_grouped",
    "queue_publish",
    "queue_publish_batch",
    "queue_push_with_headers",
    "queue_push_batch_with_headers",
    "queue_push_grouped_with_headers",
    "queue_push_batch_grouped_with_headers",
    "queue_publish_with_headers",
    "queue_publish_batch_with_headers",
    "queue_result",
    "queue_result_wait",
    "queue_result_channel",
    "queue_cancel",
    "queue_push_after",
    "queue_push_after_on",
    "queue_push_after_on_with_headers",
    "queue_push_after_batch",
)
CONSUMER = (
    "queue_reserve",
    "queue_pop",
    "queue_commit",
    "queue_rollback",
    "queue_snooze",
    "queue_fail",
    "queue_give_up",
    "queue_extend",
    "queue_commit_reserve",
    "queue_commit_batch",
    "queue_commit_result",
    "queue_commit_result_batch",
    "queue_renew",
    "queue_cancel_held",
    "queue_set_progress",
    "queue_result",  # the worker polls the cancel flag of a running job (a read; queue_renew moves the token)
    "queue_result_channel",
    "queue_channel",
    "queue_wait",
    "queue_next_scheduled_at",
    "queue_worker_register",
    "queue_worker_heartbeat",
    "queue_worker_deregister",
    "queue_release_dead_workers",
    "queue_parent_results",
    "queue_limits",  # the worker keeps what it holds of a limited kind within the limit's capacity
)
PIPELINE = ("queue_move",)
MONITOR = (
    "queue_stats",
    "queue_kind_stats",
    "queue_limits",
    "queue_rates",
    "queue_workers",
    "queue_schedules",
    "queue_dead_letters",
    "queue_settings",
    "queue_message",
    "queue_message_history",
    "queue_messages",
    "queue_throughput",
    "queue_horizon",
    "queue_bindings",
    "queue_groups",
    "queue_result",
    "queue_result_wait",
    "queue_result_channel",
    "queue_results",
)
ADMIN = (
    "queue_create",
    "queue_drop",
    "queue_pause",
    "queue_resume",
    "queue_remove",
    "queue_reset_setting",
    "queue_set_max_reservation",
    "queue_set_max_payload",
    "queue_set_result_retention",
    "queue_cancel",
    "queue_release",
    "queue_set_notify_window",
    "queue_set_limit",
    "queue_set_rate",
    "queue_set_group_limit",
    "queue_schedule_every",
    "queue_schedule_cron",
    "queue_unschedule",
    "queue_purge_history",
    "queue_purge_results",
    "queue_replay",
    "queue_redrive",
    "queue_release_dead_workers",
    "queue_bind",
    "queue_unbind",
) + MONITOR
INGEST = ("queue_ingest_flush",)

CAPABILITIES: dict[str, tuple[str, ...]] = {
    "producer": PRODUCER,
    "consumer": CONSUMER,
    "pipeline": PIPELINE,
    "monitor": MONITOR,
    "admin": ADMIN,
    "ingest": INGEST,
}

# One line per capability, for `pyqueue-sql grant --help` (same order as CAPABILITIES).
DESCRIPTIONS: dict[str, str] = {
    "producer": "push, push_batch, push_replace, push_grouped, push_batch_grouped, publish, publish_batch, "
    "each of those but push_replace with headers (the *_with_headers siblings), "
    "read and wait for a message's result, cancel a message, push a message that waits for others (push_after)",
    "consumer": "reserve, pop, commit, rollback, snooze, fail, give up, extend, the fast paths, wakeups, its own worker "
    "registration, releasing dead workers, commit with a result, renew (learns of a cancel request), cancel what it "
    "holds, progress, read a result, read the parents' results of a message (parent_results), the concurrency limits (limits) "
    "(no push, no move)",
    "pipeline": "move: hand a held message on to another queue, payload possibly rewritten "
    "(give it with --consumer)",
    "monitor": "stats, limits, rates, workers, schedules, dead letters, settings, message, message history, "
    "messages (browse by state), throughput, horizon (what holds back cleanup), bindings, groups, "
    "a message's result (read, wait)",
    "admin": "create, drop, pause, resume, remove, release reservations, reset a setting, max reservation, "
    "max payload, result retention, cancel, limits, rates, group limits, schedules, history, redrive, replay, bind, unbind; plus monitor",
    "ingest": "INSERT (and SELECT, for Spark) on queue_ingest, queue_ingest_flush",
}


def capabilities_with(routine: str) -> list[str]:
    """The capabilities that grant a routine (e.g. for an error message naming the
    `pyqueue-sql grant --<capability>` that would allow a refused call); [] for
    a routine no capability grants (the internal helpers)."""
    return [name for name, routines in CAPABILITIES.items() if routine in routines]

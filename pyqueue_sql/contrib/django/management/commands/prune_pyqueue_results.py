"""manage.py prune_pyqueue_results: deletes the stored results of finished tasks older than an age,
of the backend's queues, ahead of their RESULT_RETENTION (the reference backend's
prune_db_task_results, by the same option names where they mean the same).

Through the routines, as the backend's ADMIN_DSN (the admin capability): for each queue, its
result retention is set to the age asked for, queue_purge_history deletes what is older (it also
deletes the queue's history rows past their own retention, as it always does), and the retention
is set back, all in one pass per queue. With --status (SUCCESSFUL, FAILED, or the contract's
succeeded, failed, cancelled) only the results of that status older than the age go, through
queue_purge_results, and the queue's history and retention are left as they are."""

from __future__ import annotations

import argparse
import datetime as dt

from django.core.management.base import BaseCommand, CommandError

import pyqueue_sql


def _days(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of days: {value!r}") from None
    if not 1 <= number <= 3650:
        raise argparse.ArgumentTypeError(f"days must be 1 to 3650, not {value!r}")
    return number


# --status: Django's TaskResultStatus names of a finished task, and the contract's states
_STATUSES = {
    "SUCCESSFUL": "succeeded",
    "FAILED": "failed",
    "succeeded": "succeeded",
    "failed": "failed",
    "cancelled": "cancelled",
}


def _status(value: str) -> str:
    try:
        return _STATUSES[value]
    except KeyError:
        raise argparse.ArgumentTypeError(
            f"status must be one of {', '.join(_STATUSES)}, not {value!r}"
        ) from None


class Command(BaseCommand):
    help = (
        "Deletes the stored results of finished tasks older than --min-age-days (needs the admin capability)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--backend", default="default", help="the TASKS alias (default: default)")
        parser.add_argument(
            "--queue-name",
            default="default",
            help="the queues, comma-separated; '*' for every queue of the backend (default: default)",
        )
        parser.add_argument(
            "--min-age-days",
            type=_days,
            default=14,
            help="delete the results of tasks finished more than this many days ago (default 14)",
        )

        parser.add_argument(
            "--status",
            type=_status,
            default=None,
            help="only the results of this status: SUCCESSFUL, FAILED (Django's names) or succeeded, "
            "failed, cancelled (default: every status)",
        )

    def handle(self, *args, backend, queue_name, min_age_days, status=None, **options):
        from pyqueue_sql.contrib.django import setup

        found = [b for b in setup.backends() if b.alias == backend]
        if not found:
            raise CommandError(f"TASKS has no PyQueueBackend {backend!r}")
        chosen = found[0]
        names = [n.strip() for n in queue_name.split(",") if n.strip()]
        queues = sorted(chosen.queues) if "*" in names else names
        unknown = sorted(set(queues) - set(chosen.queues))
        if unknown:
            raise CommandError(f"not queues of TASKS[{backend!r}]: {', '.join(unknown)}")
        age = dt.timedelta(days=min_age_days)
        total = 0
        try:
            with pyqueue_sql.connect(chosen.admin_dsn) as db:
                settings = {s.queue: s for s in db.settings()}
                for name in queues:
                    if name not in settings:
                        self.stdout.write(f"{name}: no such queue")
                        continue
                    queue = db.queue(name)
                    if status is not None:
                        deleted = self._purge_status(queue, status, dt.datetime.now(dt.timezone.utc) - age)
                        total += deleted
                        self.stdout.write(f"{name}: {deleted} {status} row(s) deleted")
                        continue
                    kept = settings[name].result_retention
                    # the purge deletes what is older than the retention: the age asked for, for
                    # this one pass (also when it is longer than the retention, so that nothing
                    # younger than the age goes)
                    queue.set_result_retention(age)
                    try:
                        deleted = self._purge(db, name)
                    finally:
                        if kept is None:
                            queue.reset_setting("result_retention")
                        else:
                            queue.set_result_retention(kept)
                    total += deleted
                    self.stdout.write(f"{name}: {deleted} row(s) deleted")
        except pyqueue_sql.PermissionDeniedError as exc:
            raise CommandError(
                f"{exc} (pruning needs the admin capability: the backend's ADMIN_DSN)"
            ) from None
        self.stdout.write(f"Deleted {total} row(s)")

    @staticmethod
    def _purge_status(queue: pyqueue_sql.Queue, status: str, before: dt.datetime) -> int:
        deleted = 0
        while True:
            n = queue.purge_results(state=status, before=before, n=10000)
            deleted += n
            if n < 10000:
                return deleted

    @staticmethod
    def _purge(db: pyqueue_sql.Database, name: str) -> int:
        deleted = 0
        while True:
            n = db.queue(name).purge_history(10000)
            deleted += n
            if n < 10000:
                return deleted

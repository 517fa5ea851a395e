"""manage.py pyqueue_worker: runs the Django tasks of a pyqueue-sql task backend until SIGTERM or
SIGINT, with the options of `pyqueue-sql worker` that apply."""

from __future__ import annotations

import logging
import sys

from django.core.management.base import BaseCommand, CommandError

import pyqueue_sql


class _Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return (
            f"{self.formatTime(record, '%H:%M:%S')} {record.levelname.lower():<7} {record.getMessage()}"
            + ("\n" + self.formatException(record.exc_info) if record.exc_info else "")
        )


class Command(BaseCommand):
    help = "Runs the Django tasks of a pyqueue-sql task backend (TASKS) until SIGTERM or SIGINT."

    def add_arguments(self, parser):
        parser.add_argument(
            "--backend", default="default", help="the TASKS alias to serve (default: default)"
        )
        parser.add_argument(
            "--queue",
            action="append",
            default=[],
            help="a queue to serve (repeatable; default: the backend's QUEUES)",
        )
        parser.add_argument("--concurrency", type=int, default=4, help="handler threads (default 4)")
        parser.add_argument("--name", help="worker name recorded on reserved messages (default host:pid)")
        parser.add_argument(
            "--lease", type=float, default=30.0, help="seconds of a reservation, renewed (default 30)"
        )
        parser.add_argument("--poll-fallback", type=float, help="seconds between polls when LISTEN is quiet")
        parser.add_argument(
            "--no-listen", dest="listen", action="store_false", help="long-poll instead of LISTEN"
        )
        parser.add_argument(
            "--listen-dsn", help="a direct connection for the LISTEN (behind a transaction pooler)"
        )
        parser.add_argument("--prefetch", type=int, help="messages reserved beyond the free handlers")
        parser.add_argument(
            "--shutdown-timeout", type=float, default=30.0, help="seconds to let handlers finish"
        )
        parser.add_argument(
            "--no-register", dest="register", action="store_false", help="no worker registry row"
        )
        parser.add_argument(
            "--release-dead-after", type=float, help="release the messages of workers silent this long"
        )
        parser.add_argument("--retry-base", type=float, default=1.0, help="first retry delay (default 1 s)")
        parser.add_argument("--retry-factor", type=float, default=2.0, help="backoff factor (default 2)")
        parser.add_argument(
            "--retry-max", type=float, default=300.0, help="longest retry delay (default 300 s)"
        )
        parser.add_argument(
            "--retry-jitter", type=float, default=0.2, help="random share of a delay (default 0.2)"
        )
        parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")

    def handle(self, *args, **options):
        from pyqueue_sql.contrib.django import compat
        from pyqueue_sql.contrib.django.backend import PyQueueBackend
        from pyqueue_sql.contrib.django.worker import build_worker

        try:
            backend = compat.task_backends[options["backend"]]
        except Exception as exc:
            raise CommandError(f"no task backend {options['backend']!r} in TASKS: {exc}") from None
        if not isinstance(backend, PyQueueBackend):
            raise CommandError(
                f"TASKS[{options['backend']!r}] is {type(backend).__name__}, not "
                "pyqueue_sql.contrib.django.PyQueueBackend"
            )
        queues = options["queue"] or sorted(backend.queues)
        if not queues:
            raise CommandError("no queue to serve: set the backend's QUEUES or pass --queue")
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_Formatter())
        logger = logging.getLogger("pyqueue_sql")
        logger.addHandler(handler)
        logger.setLevel(options["log_level"].upper())
        try:
            backend.ensure_queues(queues)
            backend.close()
            settings = {
                "concurrency": options["concurrency"],
                "name": options["name"],
                "lease": options["lease"],
                "poll_fallback": options["poll_fallback"],
                "listen": options["listen"],
                "listen_dsn": options["listen_dsn"],
                "shutdown_timeout": options["shutdown_timeout"],
                "register": options["register"],
                "release_dead_after": options["release_dead_after"],
            }
            if options["prefetch"] is not None:
                settings["prefetch"] = options["prefetch"]
            retry = pyqueue_sql.RetryPolicy(
                base=options["retry_base"],
                factor=options["retry_factor"],
                max_delay=options["retry_max"],
                jitter=options["retry_jitter"],
            )
            try:
                worker = build_worker(backend, queues, **settings)
            except pyqueue_sql.InvalidArgumentError as exc:
                raise CommandError(str(exc)) from None
            for queue in queues:
                worker.set_retry(queue, retry)
            clean = worker.run()
        finally:
            logger.removeHandler(handler)
        if clean is False:
            raise CommandError("handlers still running when the worker stopped; their messages come back")

"""manage.py pyqueue_worker: runs the project's Django tasks of a pyqueue-sql task backend until
SIGTERM or SIGINT, with the options of `pyqueue-sql worker` that apply and those of the reference
database backend's db_worker (--queue-name, --exclude-queues, --batch, --max-tasks, --interval,
--reload, --no-startup-delay, --worker-id)."""

from __future__ import annotations

import argparse
import atexit
import logging
import math
import os
import random
import sys
import threading
import time

from django.core.management.base import BaseCommand, CommandError

import pyqueue_sql
from pyqueue_sql.worker.settings import WorkerSettings, settings_from_options

log = logging.getLogger("pyqueue_sql.django")


# The worker's records of a failed task attempt: Django's own record of it has the traceback.
_TASK_FAILURE_EVENTS = frozenset({"fail", "give_up", "lost", "interrupted"})


def _formatter() -> logging.Formatter:
    """The package's safe formatter (what a message's author controls, a key, a kind, an error's
    text, each line of a traceback, is escaped to one line; passwords are masked), which shows the
    worker's record of a failed task attempt without the traceback that Django's record of the
    same failure shows: one traceback per attempt."""
    from pyqueue_sql.logsafe import SafeFormatter

    class Formatter(SafeFormatter):
        def format(self, record: logging.LogRecord) -> str:
            if getattr(record, "event", None) in _TASK_FAILURE_EVENTS and record.exc_info:
                record = logging.makeLogRecord(vars(record))
                record.exc_info = None
                record.exc_text = None
            return super().format(record)

    return Formatter("%(asctime)s %(levelname)-7s %(message)s", "%H:%M:%S")


def _seconds(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(f"seconds must be finite and >= 0, not {value!r}")
    return number


def _count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value!r}")
    return number


def _worker_id(value: str) -> str:
    if not value or len(value) > 64:
        raise argparse.ArgumentTypeError("a worker id is 1 to 64 characters")
    return value


def _names(values: list[str]) -> list[str]:
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


class Command(BaseCommand):
    help = "Runs the project's Django tasks of a pyqueue-sql task backend (TASKS) until SIGTERM or SIGINT."

    def add_arguments(self, parser):
        from django.conf import settings

        parser.add_argument(
            "--backend", default="default", help="the TASKS alias to serve (default: default)"
        )
        parser.add_argument(
            "--queue-name",
            "--queue",
            dest="queue",
            action="append",
            default=[],
            help="queues to serve, comma-separated or repeated; '*' or none: the backend's QUEUES",
        )
        parser.add_argument(
            "--exclude-queues", action="append", default=[], help="queues not to serve, comma-separated"
        )
        parser.add_argument(
            "--concurrency", type=int, default=WorkerSettings.concurrency, help="handler threads (default 4)"
        )
        parser.add_argument(
            "--worker-id",
            "--name",
            dest="name",
            type=_worker_id,
            help="worker id recorded on reserved messages and in the worker registry (default host:pid)",
        )
        parser.add_argument(
            "--batch",
            action="store_true",
            help="run the tasks that are ready, then exit (when a look for more finds none)",
        )
        parser.add_argument(
            "--max-tasks", type=_count, help="exit after this many tasks finished (succeeded or failed)"
        )
        parser.add_argument(
            "--interval",
            type=_seconds,
            help="seconds between looks for tasks when nothing wakes the worker (its --poll-fallback)",
        )
        parser.add_argument(
            "--reload",
            action=argparse.BooleanOptionalAction,
            default=settings.DEBUG,
            help="restart on code changes, for development: a task running then is cut short and comes "
            "back at its lease end (default: DEBUG)",
        )
        parser.add_argument(
            "--no-startup-delay",
            dest="startup_delay",
            action="store_false",
            help="start at once (default: a random delay under 1 s, so that workers started together spread out)",
        )
        parser.add_argument(
            "--lease",
            type=float,
            default=WorkerSettings.lease,
            help="seconds of a reservation, renewed (default 30)",
        )
        parser.add_argument(
            "--poll-fallback", type=_seconds, help="seconds between polls when LISTEN is quiet"
        )
        parser.add_argument(
            "--no-listen",
            dest="listen",
            action="store_false",
            default=WorkerSettings.listen,
            help="long-poll instead of LISTEN",
        )
        parser.add_argument(
            "--listen-dsn", help="a direct connection for the LISTEN (behind a transaction pooler)"
        )
        parser.add_argument("--prefetch", type=int, help="messages reserved beyond the free handlers")
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            default=WorkerSettings.shutdown_timeout,
            help="seconds to let handlers finish",
        )
        parser.add_argument(
            "--no-register",
            dest="register",
            action="store_false",
            default=WorkerSettings.register,
            help="no worker registry row",
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

    def run_from_argv(self, argv):
        """manage.py pyqueue_worker: once the worker has stopped (a signal, --batch, --max-tasks), the
        process exits at once (_exit_now). call_command() runs handle() without this: it never exits."""
        try:
            super().run_from_argv(argv)
        except SystemExit as exc:
            _exit_now(exc.code)
        _exit_now(0)

    def handle(self, *args, **options):
        from pyqueue_sql.contrib.django import compat
        from pyqueue_sql.contrib.django.backend import PyQueueBackend

        try:
            backend = compat.task_backends[options["backend"]]
        except Exception as exc:
            raise CommandError(f"no task backend {options['backend']!r} in TASKS: {exc}") from None
        if not isinstance(backend, PyQueueBackend):
            raise CommandError(
                f"TASKS[{options['backend']!r}] is {type(backend).__name__}, not "
                "pyqueue_sql.contrib.django.PyQueueBackend"
            )
        named = _names(options["queue"])
        queues = sorted(backend.queues) if not named or "*" in named else named
        excluded = set(_names(options["exclude_queues"]))
        queues = [q for q in queues if q not in excluded]
        if not queues:
            raise CommandError("no queue to serve: set the backend's QUEUES or pass --queue-name")
        if options["batch"] and options["reload"]:
            options["reload"] = False  # a batch exits when done: nothing to reload
        if options["reload"]:
            from django.utils import autoreload

            # The worker runs in a thread of the reloaded process (SIGTERM ends it at once; what it
            # held comes back at its lease end): a development tool, as db_worker's --reload.
            autoreload.run_with_reloader(lambda: self._serve(backend, queues, options, in_thread=True))
            return
        self._serve(backend, queues, options, in_thread=False)

    def _serve(self, backend, queues, options, *, in_thread: bool) -> None:
        from pyqueue_sql import logsafe
        from pyqueue_sql.contrib.django import compat
        from pyqueue_sql.contrib.django.worker import build_worker, tasks_by_queue

        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_formatter())
        # Django's own record of each task's end ("Task id=<queue>:<kind>:<key> ... state=FAILED",
        # with the task's traceback) quotes what the producer wrote: escaped wherever the project
        # sends it, and shown here when the project sends it nowhere (as db_worker does). The
        # worker's own line of that failure leaves the traceback to it: one per attempt.
        task_logger = logsafe.attach(logging.getLogger(compat.SOURCE))
        if not task_logger.hasHandlers():
            task_logger.addHandler(handler)
            task_logger.setLevel(logging.INFO)
        logger = logging.getLogger("pyqueue_sql")
        logger.addHandler(handler)
        logger.setLevel(options["log_level"].upper())
        try:
            served = tasks_by_queue(backend, queues)
            for queue, tasks in served.items():
                log.info(
                    "queue %s: %d task(s) of the project: %s",
                    queue,
                    len(tasks),
                    ", ".join(t.module_path for t in tasks) or "none (every message there will be given up)",
                )
            self._set_up(backend, queues)
            if options["startup_delay"]:
                time.sleep(random.random())  # noqa: S311 - spreading workers out, not a secret
            settings = settings_from_options(options)
            if options["interval"] is not None:  # db_worker's name of the poll fallback
                settings["poll_fallback"] = options["interval"]
            if options["batch"] or options["max_tasks"]:
                settings["prefetch"] = 0  # reserved only for free handlers (see _limits for --batch)
            max_tasks = _MaxTasks(options["max_tasks"])
            try:
                retry = pyqueue_sql.RetryPolicy(  # (a base above the cap: one line, not a traceback)
                    base=options["retry_base"],
                    factor=options["retry_factor"],
                    max_delay=options["retry_max"],
                    jitter=options["retry_jitter"],
                )
                worker = build_worker(backend, queues, after_task=max_tasks, **settings)
            except pyqueue_sql.InvalidArgumentError as exc:
                raise CommandError(str(exc)) from None
            max_tasks.worker = worker
            if in_thread:
                self._stop_before_reload(worker, options["shutdown_timeout"])
            for queue in queues:
                worker.set_retry(queue, retry)
            self._limits(worker, options)
            clean = worker.run(install_signals=False) if in_thread else worker.run()
        finally:
            logger.removeHandler(handler)
            task_logger.removeHandler(handler)
            from pyqueue_sql.contrib.django.backend import close_all

            close_all()
        if clean is False:
            raise CommandError("handlers still running when the worker stopped; their messages come back")

    def _set_up(self, backend, queues) -> None:
        """Sets the queues up when the worker's account may (admin); a worker that holds only the
        consumer capability serves the queues `manage.py migrate` set up."""
        try:
            backend.setup_queues(queues)
        except pyqueue_sql.PermissionDeniedError:
            log.info(
                "queues not set up by the worker (its account is not admin): `manage.py migrate` or "
                "`manage.py pyqueue_setup` sets them up"
            )

    def _stop_before_reload(self, worker, timeout: float) -> None:
        """--reload: a code change stops the worker as SIGTERM would (running tasks finish, what it
        reserved goes back) before the autoreloader ends the process and starts another, so that
        the old one is gone, and serves nothing, when the new one starts."""
        from django.utils import autoreload

        def changed(sender, file_path, **kwargs) -> None:
            log.info("%s changed: stopping the worker before the reload", file_path)
            worker.stop(reason="code changed (--reload)")
            worker.stopped.wait(timeout + 5)

        autoreload.file_changed.connect(changed, weak=False)

    def _limits(self, worker, options) -> None:
        """--batch: stop at the first look that finds nothing, once every message the worker
        reserved has reached its handler."""
        if options["batch"]:

            def idle(*_: object) -> None:
                if worker.stopping:
                    return
                # A message an earlier look reserved for a free handler thread that has not taken
                # it yet: a stop now would hand it back unstarted, and the batch would end without
                # running it. The next look decides; the handlers running finish after a stop.
                if worker.status().waiting:
                    return
                log.info("--batch: no task left; stopping")
                worker.stop(reason="--batch: no task left")

            worker.on_idle.append(idle)


def _exit_now(code: object) -> None:
    """Ends the process of a stopped worker without the interpreter's teardown of every module and
    object it holds: with Django and the project loaded that is half a second of CPU after the last
    task ended, and on a loaded machine seconds, which a signal's stop would wait out before the
    process is gone. What an exit does that matters runs first: the atexit functions (logging's
    flush, a coverage run's save), then the streams' flush. A thread of the project's own that is
    not a daemon is waited for as an ordinary exit does (sys.exit)."""
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001, S110 - a closed or broken stream: nothing left to flush to
            pass
    os._exit(status)


class _MaxTasks:
    """--max-tasks: after the Nth task ran (on its handler's thread, before the handler is free to
    take another), the worker stops; with --concurrency above 1 the tasks already running finish."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.ran = 0
        self.lock = threading.Lock()
        self.worker = None

    def __call__(self) -> None:
        if not self.limit or self.worker is None:
            return
        with self.lock:
            self.ran += 1
            done = self.ran == self.limit
        if done:
            log.info("--max-tasks: %d task(s) finished; stopping", self.limit)
            self.worker.stop(reason=f"--max-tasks: {self.limit} task(s) finished")

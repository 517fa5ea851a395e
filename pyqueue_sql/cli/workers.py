"""Workers: run one (worker: log lines, a live status line, metrics), list the registered ones
(workers)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from .. import errors, logsafe
from ..display import format_age, format_table, format_time, redact, redact_dsn, remember_secrets
from ..worker.settings import WorkerSettings, settings_from_options
from .common import (
    EXIT_FAILURE,
    EXIT_OK,
    PROG,
    Command,
    UsageError,
    check_scheme,
    dsn_of,
    non_negative_int,
    open_database,
    positive_int,
    seconds_arg,
)

DEFAULT_STALE_AFTER_S = 60.0


def format_workers_table(workers: Iterable[Any], stale_after: float = DEFAULT_STALE_AFTER_S) -> str:
    """Registered workers (pyqueue_sql.WorkerInfo) as an aligned text table; ``state`` is
    "stale" when the last heartbeat is older than stale_after seconds."""
    header = ("id", "name", "host", "pid", "queues", "started", "last heartbeat", "state")
    rows = [
        (
            ",".join(str(w.worker_id) for w in group),
            group[0].name,
            group[0].host or "-",
            ",".join("-" if w.pid is None else str(w.pid) for w in group),
            ",".join(sorted({q for w in group for q in (w.queues or [])})) or "-",
            format_time(min(w.started_at for w in group)),
            format_age(min(w.heartbeat_age_s for w in group)) + " ago",
            _group_state(group, stale_after),
        )
        for group in worker_groups(workers)
    ]
    return format_table(header, rows)


def _group_state(group: list[Any], stale_after: float) -> str:
    """ok, stale, or (a worker of several processes, one of which died or hangs) "K of N stale"."""
    stale = sum(w.heartbeat_age_s > stale_after for w in group)
    if not stale:
        return "ok"
    return "stale" if stale == len(group) else f"{stale} of {len(group)} stale"


def worker_groups(workers: Iterable[Any]) -> list[list[Any]]:
    """Registered workers by (name, host), in their first one's order: the processes of one
    `pyqueue-sql worker --processes N` register under one name and are shown as one worker (their
    ids and pids listed, the latest heartbeat, and how many are stale when some are)."""
    groups: dict[tuple[str, str | None], list[Any]] = {}
    for w in workers:
        groups.setdefault((w.name, w.host), []).append(w)
    return list(groups.values())


def cmd_workers(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        if args.release_older_than is not None:
            released = db.release_dead_workers(args.release_older_than)
            print(f"released {released} message(s) of workers silent for over {args.release_older_than:g}s")
        workers = db.workers()
    if not workers:
        print("no workers registered")
        return EXIT_OK
    print(format_workers_table(workers, args.stale_after))
    stale = sum(w.heartbeat_age_s > args.stale_after for w in workers)
    if stale:
        print(
            f"{stale} stale worker(s): no heartbeat for over {args.stale_after:g}s (stopped, hung or "
            f"cut off; `{PROG} workers --release-older-than S` makes their messages ready)",
            file=sys.stderr,
        )
    return EXIT_OK


class _NoneOfThem:
    """What no handler is an instance of (see _task_types)."""


def _task_types() -> tuple[type, type]:
    """(App, Task) for the isinstance checks of `pyqueue-sql worker`'s target; when no module has
    imported pyqueue_sql.tasks (a plain handler function), the target is neither, and the start
    does not load the tasks' modules for the question."""
    if __name__.rsplit(".", 2)[0] + ".tasks" not in sys.modules:
        return _NoneOfThem, _NoneOfThem
    from ..tasks import App, Task

    return App, Task


def load_handler(spec: str) -> Any:
    """What MODULE:OBJECT names: a pyqueue_sql.App, a Worker / AsyncWorker, or one handler function.
    An error importing the module is one line (UsageError), not a traceback."""
    import importlib

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"expected module:object (an App, a Worker or a function), not {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: modules of the current directory
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # the module itself raised while importing
        raise UsageError(
            f"importing {module_name!r} raised {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"{module_name!r} has no attribute {attr!r}") from None
    from ..worker import WorkerBase

    App, Task = _task_types()

    if isinstance(target, Task):
        return target  # not a handler (it takes its own arguments, not a Job): served through its App
    if not isinstance(target, (App, WorkerBase)) and not callable(target):
        raise UsageError(f"{spec} is neither an App, a Worker nor a function")
    return target


def _worker_dsn(args: argparse.Namespace, app: Any) -> str:
    """The database an App's worker serves: the App's own DSN (App("postgresql://...")) unless
    --dsn names another, which is refused: the worker would serve one database while the App's
    jobs wait in the other. An App without a DSN of its own: --dsn, else $PYQUEUE_DSN."""
    own = getattr(app, "_dsn", None)
    if own is None:
        return dsn_of(args)
    remember_secrets(own)
    if args.dsn and args.dsn != own:
        remember_secrets(args.dsn)
        raise UsageError(
            f"--dsn {redact_dsn(args.dsn)} is not the App's own database ({redact_dsn(own)}), where "
            "its jobs are deferred: leave --dsn out to serve the App's"
        )
    check_scheme(own).import_driver()
    return own


class _JsonLogFormatter:
    """One JSON object per log line: time, level, message and the record's extra fields; the
    traceback, if any, under "exc". Texts are escaped (pyqueue_sql.logsafe) and passwords masked
    as in the text lines."""

    _STANDARD = logsafe.STANDARD_ATTRIBUTES

    def format(self, record: Any) -> str:
        entry = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "msg": redact(logsafe.escape_control(record.getMessage())),
        }
        entry.update(
            {
                k: redact(logsafe.escape_control(v)) if isinstance(v, str) else v
                for k, v in vars(record).items()
                if k not in self._STANDARD
            }
        )
        if record.exc_info:
            entry["exc"] = redact(logsafe.format_exception(record.exc_info))
        return json.dumps(entry, default=str)


class _TextLogFormatter:
    """time level message key=value...; extras whose value the message already shows are left out.
    Control characters of the message and the values are escaped (\\n, \\x1b...: see
    pyqueue_sql.logsafe): one record is one line, and its traceback, if any, follows on lines of
    its own, each escaped the same way (an exception message with a newline stays on its line)."""

    _STANDARD = _JsonLogFormatter._STANDARD

    def format(self, record: Any) -> str:
        raw_message = record.getMessage()
        message = logsafe.escape_control(raw_message)
        extra = " ".join(
            f"{k}={logsafe.escape_control(str(v))}"
            for k, v in vars(record).items()
            if k not in self._STANDARD and not (isinstance(v, str) and v and v in raw_message)
        )
        text = f"{dt.datetime.now().strftime('%H:%M:%S.%f')[:-3]} {record.levelname.lower():7} {message}"
        text = f"{text} {extra}".rstrip()
        if record.exc_info:
            text += "\n" + logsafe.format_exception(record.exc_info)
        return redact(text)


class StatusLine:
    """A live status line at the bottom of a terminal stream, with log records printed above it.

    Every write to the stream goes through ``lock``: a log record first clears the
    status line (``\\r`` + erase to end of line), is written with its newline, and
    the status is drawn again after it, so the two never share a line. The text is
    computed outside the lock (``update``), so a record logged while the worker
    holds one of its own locks never waits for the worker.
    """

    CLEAR = "\r\x1b[K"

    def __init__(self, stream: Any) -> None:
        import threading

        self.stream = stream
        self.lock = threading.RLock()
        self.text = ""
        self.shown = False
        self.active = True

    def update(self, text: str) -> None:
        with self.lock:
            self.text = logsafe.escape_control(text)  # a reserve error may quote a payload
            self._draw()

    def _width(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return 0  # not a terminal: no limit

    def _draw(self) -> None:
        if self.active and self.text:
            width = self._width()
            # a line longer than the terminal would wrap, and \r then clears only its last row
            text = self.text if not width or len(self.text) < width else self.text[: width - 1]
            self.stream.write(self.CLEAR + text)
            self.stream.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write(self.CLEAR)
            self.shown = False

    def redraw(self) -> None:
        self._draw()

    def finish(self, text: str) -> None:
        """The last status, ended with a newline; nothing is drawn after it."""
        with self.lock:
            self.clear()
            self.stream.write(logsafe.escape_control(text) + "\n")
            self.stream.flush()
            self.active = False


def _log_handler(stream: Any, status: StatusLine | None) -> Any:
    import logging

    class Handler(logging.StreamHandler):  # type: ignore[type-arg]
        def emit(self, record: logging.LogRecord) -> None:
            if status is None:
                super().emit(record)
                return
            with status.lock:
                status.clear()
                super().emit(record)
                status.redraw()

    return Handler(stream)


def worker_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The worker's settings the command line gives, as WorkerSettings' keywords (checked by the
    worker that takes them); an option not given keeps the worker's default."""
    given = settings_from_options(vars(args))
    if args.start_timeout == 0:  # --start-timeout 0: keep trying
        given["start_timeout"] = None
    return given


def cmd_worker(args: argparse.Namespace) -> int:
    import asyncio
    import inspect
    import logging
    import threading

    from ..worker import RetryPolicy, Worker, WorkerBase

    target = load_handler(args.handler_spec)
    App, Task = _task_types()
    if args.processes > 1:
        return _supervise(args, target)
    task = None
    if isinstance(target, Task):
        # one task, served as its App serves it (decoded arguments, middleware, retry, timeout)
        task, target = target, target.app
        if args.queue and args.queue != [task.queue]:
            raise UsageError(f"{args.handler_spec} is a task of queue {task.queue!r}: --queue is not for it")
    if isinstance(target, WorkerBase):
        given = [f"--{o.replace('_', '-')}" for o in ("queue", "kind", "timeout") if getattr(args, o)]
        if given:
            raise UsageError(
                f"{args.handler_spec} is a Worker with its own handlers: {given[0]} is not for it"
            )
        dsn = target.dsn
    else:
        dsn = _worker_dsn(args, target) if isinstance(target, App) else dsn_of(args)
        if not isinstance(target, App) and not args.queue:
            raise UsageError("a handler function needs --queue (an App's tasks name their queues)")
        if isinstance(target, App) and (args.kind or args.timeout):
            raise UsageError("--kind and --timeout are for a handler function (a task has its own)")
    fn = target
    if isinstance(dsn, str):  # a Worker given with a connection factory: its own calls will tell
        from .. import schema_version  # not migrate: a worker's start loads no alembic/SQLAlchemy

        schema_version.require_schema(dsn)  # one line, exit 1, when the schema is older than this version's
    # An `async def` handler runs as asyncio tasks on AsyncWorker; anything else on Worker's threads.
    if isinstance(target, WorkerBase):
        is_async = inspect.iscoroutinefunction(target.run)
    elif task is not None:
        is_async = task.is_async
    elif isinstance(target, App):
        is_async = any(t.is_async for (q, _), t in target.tasks.items() if not args.queue or q in args.queue)
    else:
        is_async = inspect.iscoroutinefunction(fn)
    if is_async:
        from ..aio.worker import AsyncWorker as worker_class
    else:
        worker_class = Worker
    show_status = args.status if args.status is not None else sys.stderr.isatty()
    status = StatusLine(sys.stderr) if show_status else None
    handler = _log_handler(sys.stderr, status)
    handler.setFormatter(_JsonLogFormatter() if args.log_format == "json" else _TextLogFormatter())  # type: ignore[arg-type]
    logger = logging.getLogger("pyqueue_sql")
    logger.addHandler(handler)
    logger.setLevel(getattr(logging, args.log_level.upper()))
    try:
        try:
            if args.retry_base > args.retry_max:  # (RetryPolicy refuses it too, naming its own fields)
                raise UsageError(
                    f"--retry-base {args.retry_base:g} is above --retry-max {args.retry_max:g}, the cap of "
                    f"every delay (300 s unless given): give --retry-max {args.retry_base:g} or more"
                )
            retry = RetryPolicy(
                base=args.retry_base,
                factor=args.retry_factor,
                max_delay=args.retry_max,
                jitter=args.retry_jitter,
            )
            settings = worker_settings(args)
            if isinstance(target, WorkerBase):
                worker = target
            elif task is not None:
                worker = worker_class(dsn, **settings)
                worker.add_handler(
                    task.queue,
                    target.handler(task),
                    task.kind,
                    retry=task.retry,
                    timeout=task.timeout,
                    store_result=task.store_result,
                )
                worker.set_retry(task.queue, retry)
                worker.on_thread_end.append(target.close)
            elif isinstance(target, App):
                worker = target.worker(queues=args.queue or None, dsn=dsn, **settings)
                for queue in worker.routes:
                    worker.set_retry(queue, retry)
            else:
                worker = worker_class(dsn, **settings)
                for queue in args.queue:
                    for kind in args.kind or [None]:
                        worker.add_handler(queue, fn, kind, retry=retry, timeout=args.timeout)
        except errors.InvalidArgumentError as exc:
            raise UsageError(str(exc)) from None
        ask_fd = os.environ.pop(KILL_FD, None)
        if ask_fd is not None and ask_fd.isdigit():  # a process of --processes: its supervisor replaces it
            worker.overdue.ask = _ask_supervisor(int(ask_fd))
        metrics = _worker_metrics(worker, args)
        finished = threading.Event()
        if status is not None:

            def show() -> None:
                while not finished.wait(1.0):
                    status.update(worker.status_line())

            threading.Thread(target=show, daemon=True, name="pyqueue-status").start()
        try:
            clean = asyncio.run(worker.run()) if is_async else worker.run()
        finally:
            finished.set()
            if metrics is not None:
                metrics.close()
            if status is not None:
                status.finish(worker.status_line())
    finally:
        logger.removeHandler(handler)
    if clean is False and worker.failure is not None:
        print(f"{PROG}: error: {worker.failure}", file=sys.stderr)
        return EXIT_FAILURE
    if clean is False:
        unfinished = list(getattr(worker, "unfinished", ()) or ())
        listed = (
            (": " + ", ".join(unfinished[:10]) + (", ..." if len(unfinished) > 10 else ""))
            if unfinished
            else ""
        )
        print(
            f"{PROG}: error: {len(unfinished) or 'some'} handler(s) still running when the worker stopped"
            f"{listed}; their messages were handed back (or come back when their lease ends)",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    return EXIT_OK


# -- --processes N: one command, N worker processes ------------------------------------------

# The worker subparser (add_worker keeps it): the options a worker process is started with are
# read back from it, so that each option reaches the processes as given.
_WORKER_PARSER: argparse.ArgumentParser | None = None

# Options the supervisor keeps for itself (or refuses) instead of passing them on.
_NOT_PASSED_ON = {"help", "processes", "status", "dsn", "metrics_port", "metrics_host", "name"}

# A worker process that dies is started again after RESTART_DELAY seconds, doubled (up to
# RESTART_DELAY_MAX) while it keeps dying within RESTART_QUICK seconds of its start.
RESTART_DELAY = 1.0
RESTART_DELAY_MAX = 30.0
RESTART_QUICK = 10.0

# The environment variable naming, in a worker process of --processes, the pipe on which it asks its
# supervisor to terminate and replace it (a handler overdue past --kill-grace).
KILL_FD = "PYQUEUE_WORKER_KILL_FD"

# After the shutdown deadline, how long the supervisor waits for its processes to flush their last
# acknowledgements and deregister before it kills them.
STOP_GRACE = 15.0


def _child_argv(args: argparse.Namespace, name: str) -> list[str]:
    """The `pyqueue-sql worker` command line of one worker process: the options given to the
    supervisor (its --dsn goes through the environment, not the process list), --no-status, and
    the supervisor's name, which every process registers under."""
    assert _WORKER_PARSER is not None
    argv = ["worker", args.handler_spec, "--no-status", "--name", name]
    for action in _WORKER_PARSER._actions:
        if not action.option_strings or action.dest in _NOT_PASSED_ON:
            continue
        value = getattr(args, action.dest, None)
        if value is None:
            continue
        flag = action.option_strings[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            argv.append(flag if value else "--no-" + flag.removeprefix("--"))
        elif isinstance(action, argparse._AppendAction):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, repr(value) if isinstance(value, float) else str(value)]
    return argv


class _Processes:
    """The supervisor of `pyqueue-sql worker --processes N`: starts N worker processes, starts
    again one that dies, and stops them all on SIGTERM/SIGINT (forwarded: each process stops
    gracefully within --shutdown-timeout; a second signal stops them at once)."""

    def __init__(self, args: argparse.Namespace, dsn: str | None, log: Any) -> None:
        import socket

        self.n = args.processes
        self.name = args.name or f"{socket.gethostname()}:{os.getpid()}"
        self.argv = [sys.executable, "-m", "pyqueue_sql.cli", *_child_argv(args, self.name)]
        self.env = dict(os.environ)
        if dsn is not None:
            self.env["PYQUEUE_DSN"] = dsn
        self.shutdown_timeout = args.shutdown_timeout
        self.log = log
        self.procs: list[Any] = [None] * self.n
        self.started_at = [0.0] * self.n
        self.delays = [RESTART_DELAY] * self.n
        self.restart_at: list[float | None] = [None] * self.n
        self.signals = 0
        self.restarts = 0
        self.unclean = False
        # each process's end of the pipe it asks to be replaced on (a handler overdue past
        # --kill-grace: WorkerBase.on_overdue), and when a process so terminated is killed
        self.kill_grace = args.kill_grace
        self.asks: list[int | None] = [None] * self.n
        self.kill_at: list[float | None] = [None] * self.n

    def _start(self, i: int) -> None:
        import signal
        import subprocess
        import time

        old = self.asks[i]
        if old is not None:
            os.close(old)
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        try:
            self.procs[i] = subprocess.Popen(
                self.argv,
                env={**self.env, "PYQUEUE_WORKER_PROCESS": f"{i + 1}/{self.n}", KILL_FD: str(write_end)},
                stdin=subprocess.DEVNULL,
                # its own process group: a Ctrl-C in the terminal reaches the supervisor alone, which
                # passes one SIGTERM on (two signals would stop the process at once)
                start_new_session=True,
                preexec_fn=_die_with_parent,
                pass_fds=(write_end,),
            )
        finally:
            os.close(write_end)
        self.asks[i] = read_end
        self.kill_at[i] = None
        self.started_at[i] = time.monotonic()
        self.restart_at[i] = None
        if self.signals:
            # the stop came while this process was being started: the signal handler ran before
            # the process was in self.procs, and passed the SIGTERM on to the others only
            self._signal_one(self.procs[i], signal.SIGTERM)

    @staticmethod
    def _signal_one(proc: Any, signum: int) -> None:
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signum)
            except OSError:
                pass

    def _signal_all(self, signum: int) -> None:
        for proc in self.procs:
            self._signal_one(proc, signum)

    def _on_signal(self, signum: int, _frame: Any) -> None:
        import signal

        self.signals += 1
        self.log.info(
            "%s received: stopping the %d worker processes%s",
            signal.Signals(signum).name,
            self.n,
            " at once" if self.signals > 1 else f" (their running handlers get {self.shutdown_timeout:g} s)",
            extra={"event": "signal", "signal": signum, "force": self.signals > 1},
        )
        self._signal_all(signal.SIGTERM)

    def run(self) -> int:
        import signal
        import time

        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for i in range(self.n):
                self._start(i)
            self.log.info(
                "worker processes starting",
                extra={
                    "event": "processes_start",
                    "worker": self.name,
                    "processes": self.n,
                    "pids": [p.pid for p in self.procs],
                },
            )
            while not self.signals:
                time.sleep(0.1)
                self._watch()
            deadline = time.monotonic() + self.shutdown_timeout + STOP_GRACE
            while any(p is not None and p.poll() is None for p in self.procs):
                if time.monotonic() > deadline:
                    self.log.error(
                        "worker processes still running %g s after the shutdown deadline: killed",
                        STOP_GRACE,
                        extra={"event": "processes_killed"},
                    )
                    self._signal_all(signal.SIGKILL)
                    self.unclean = True
                    break
                time.sleep(0.05)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        for proc in self.procs:
            if proc is not None:
                proc.wait()
                # killed by the SIGTERM passed on before it installed its handlers (just started
                # again: --max-jobs): it had taken no job
                self.unclean = self.unclean or proc.returncode not in (0, None, -signal.SIGTERM)
        self.log.info(
            "worker processes stopped",
            extra={"event": "processes_stop", "worker": self.name, "restarts": self.restarts},
        )
        return EXIT_FAILURE if self.unclean else EXIT_OK

    def _asked(self, i: int) -> str | None:
        """What process i asked for on its pipe (the reason it is to be replaced), else None."""
        fd = self.asks[i]
        if fd is None:
            return None
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return None
        except OSError:
            data = b""
        if not data:  # the process has ended
            os.close(fd)
            self.asks[i] = None
            return None
        return data.decode("utf-8", "replace").strip().splitlines()[-1][:500]

    def _terminate_overdue(self, i: int, proc: Any, reason: str, now: float) -> None:
        """Process i has a handler overdue past --kill-grace: SIGTERM now (its other handlers get
        the grace to finish), SIGKILL after --kill-grace; replaced once it has ended."""
        import signal

        self.log.error(
            "worker process %d of %d (pid %d): %s: terminated (SIGTERM, then SIGKILL after %g s) and "
            "replaced",
            i + 1,
            self.n,
            proc.pid,
            reason,
            self.kill_grace,
            extra={"event": "process_terminated", "pid": proc.pid, "reason": reason},
        )
        self._signal_one(proc, signal.SIGTERM)
        self.kill_at[i] = now + self.kill_grace

    def _watch(self) -> None:
        import signal
        import time

        now = time.monotonic()
        for i, proc in enumerate(self.procs):
            if self.restart_at[i] is not None:
                if now >= self.restart_at[i] and not self.signals:  # (none started after a stop)
                    self.restarts += 1
                    self._start(i)
                continue
            reason = self._asked(i)
            if reason is not None and self.kill_at[i] is None and not self.signals and proc.poll() is None:
                self._terminate_overdue(i, proc, reason, now)
            code = proc.poll()
            kill_at = self.kill_at[i]
            if code is None and kill_at is not None and now >= kill_at:
                self.log.error(
                    "worker process %d of %d (pid %d) still running %g s after its SIGTERM: killed",
                    i + 1,
                    self.n,
                    proc.pid,
                    self.kill_grace,
                    extra={"event": "process_killed", "pid": proc.pid},
                )
                self._signal_one(proc, signal.SIGKILL)
                self.kill_at[i] = now + 3600  # once
            if code is None or self.signals:
                continue
            if self.kill_at[i] is not None:
                # terminated for a handler overdue: its replacement starts at once
                self.restart_at[i] = now
                self.log.info(
                    "worker process %d of %d (pid %d) ended (status %s); starting its replacement",
                    i + 1,
                    self.n,
                    proc.pid,
                    code,
                    extra={"event": "process_replaced", "pid": proc.pid, "status": code},
                )
                continue
            if code == 0:
                # a process that ended as asked (--max-jobs): its successor starts at once
                self.restart_at[i] = now
                self.log.info(
                    "worker process %d of %d (pid %d) ended after its --max-jobs; starting it again",
                    i + 1,
                    self.n,
                    proc.pid,
                    extra={"event": "process_ended", "pid": proc.pid, "status": code},
                )
                continue
            quick = now - self.started_at[i] < RESTART_QUICK
            delay = self.delays[i] if quick else RESTART_DELAY
            self.delays[i] = min(delay * 2, RESTART_DELAY_MAX) if quick else RESTART_DELAY
            self.restart_at[i] = now + delay
            self.log.warning(
                "worker process %d of %d (pid %d) exited with status %s; starting it again in %g s",
                i + 1,
                self.n,
                proc.pid,
                code,
                delay,
                extra={"event": "process_died", "pid": proc.pid, "status": code},
            )


def _ask_supervisor(fd: int) -> Any:
    """A worker process's overdue.ask: writes the reason on its supervisor's pipe (one line)."""

    def ask(reason: str) -> None:
        os.write(fd, (" ".join(reason.split())[:500] + "\n").encode("utf-8"))

    return ask


def _die_with_parent() -> None:
    """In a worker process, before it runs: SIGTERM when the supervisor dies (Linux), so that a
    killed supervisor leaves no worker behind."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _first_connection(dsn: str, start_timeout: float) -> None:
    """The supervisor connects once before it starts its processes, within --start-timeout as a
    worker would: a database it cannot reach ends the command in one line (instead of processes
    that give up and are started again for ever). A refused login ends it at once."""
    import time

    from ..client import connect

    deadline = time.monotonic() + start_timeout if start_timeout > 0 else None
    delay = 0.05
    while True:
        try:
            connect(dsn).close()
            return
        except errors.ConnectionFailedError as exc:
            if not exc.retryable:
                raise
            if deadline is not None and time.monotonic() + delay > deadline:
                reason = redact(str(exc).strip()).removeprefix("cannot connect: ")[:300]
                raise errors.ConnectionFailedError(
                    f"cannot reach the database: no connection within the start timeout of "
                    f"{start_timeout:g} s ({reason})"
                ) from None
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def _supervise(args: argparse.Namespace, target: Any) -> int:
    """`pyqueue-sql worker --processes N`: N worker processes under this one (see _Processes)."""
    import logging

    from ..tasks import App, Task
    from ..worker import WorkerBase

    if args.metrics_port is not None:
        raise UsageError("--metrics-port serves one process: run each worker process with its own")
    app = target.app if isinstance(target, Task) else target
    if isinstance(app, WorkerBase):
        dsn = None  # a Worker of the module: its own DSN
    elif isinstance(app, App):
        dsn = _worker_dsn(args, app)
    else:
        dsn = dsn_of(args)
    _first_connection(dsn if dsn is not None else app.dsn, args.start_timeout)
    handler = _log_handler(sys.stderr, None)
    handler.setFormatter(_JsonLogFormatter() if args.log_format == "json" else _TextLogFormatter())  # type: ignore[arg-type]
    logger = logging.getLogger("pyqueue_sql.worker.processes")
    logger.addHandler(handler)
    logger.setLevel(getattr(logging, args.log_level.upper()))
    logger.propagate = False
    try:
        return _Processes(args, dsn, logger).run()
    finally:
        logger.removeHandler(handler)


def _worker_metrics(worker: Any, args: argparse.Namespace) -> Any:
    """WorkerMetrics served on --metrics-host:--metrics-port, or None without --metrics-port."""
    if args.metrics_port is None:
        return None
    try:
        from ..metrics import WorkerMetrics
    except ImportError as exc:
        raise UsageError(
            f"--metrics-port needs prometheus-client: {errors.install_command('metrics')} ({exc})"
        ) from None
    metrics = WorkerMetrics(worker)
    try:
        port = metrics.serve(args.metrics_port, args.metrics_host)
    except OSError as exc:
        metrics.close()
        raise UsageError(f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc}") from None
    print(f"{PROG}: metrics on http://{args.metrics_host}:{port}/metrics", file=sys.stderr)
    return metrics


# -- argument parsing -------------------------------------------------------------


def add_workers(command: Command) -> None:
    p = command("workers", cmd_workers, "list the registered workers and their last heartbeat")
    p.add_argument(
        "--release-older-than",
        type=seconds_arg,
        metavar="S",
        help="first remove workers silent for over S seconds and make their messages ready",
    )

    p.add_argument(
        "--stale-after",
        type=seconds_arg,
        default=DEFAULT_STALE_AFTER_S,
        metavar="S",
        help="mark a worker stale when its last heartbeat is older than this (default "
        f"{DEFAULT_STALE_AFTER_S:g}; workers heartbeat every lease/3, 10 s with the default lease)",
    )


def add_worker(command: Command) -> None:
    global _WORKER_PARSER
    p = _WORKER_PARSER = command(
        "worker",
        cmd_worker,
        "run an App's tasks, a Worker, or a handler (a function or an async def) for the messages of "
        "one or more queues "
        "until SIGTERM/SIGINT (a second one stops at once), or --max-jobs; exit 1 when handlers were "
        "still running at the shutdown deadline, or more than --max-stuck threads were stuck",
    )
    p.add_argument(
        "handler_spec",
        metavar="MODULE:OBJECT",
        help="what to run: a pyqueue_sql.App (its tasks), a Worker (as it is), or a handler function "
        "called with one pyqueue_sql.worker.Job per message",
    )
    p.add_argument(
        "--queue",
        "-q",
        action="append",
        metavar="Q",
        help="queue to serve (repeatable); needed with a function, narrows an App's queues",
    )
    p.add_argument(
        "--timeout",
        type=seconds_arg,
        metavar="S",
        help="a handler function: seconds one message may take; past it the message is failed with "
        "TimeoutError under the retry policy (a task: its own timeout=)",
    )
    p.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help="only messages of this kind (repeatable; default: every kind)",
    )
    p.add_argument(
        "--concurrency",
        "-c",
        type=positive_int,
        default=WorkerSettings.concurrency,
        metavar="N",
        help="messages handled at once, one thread each (an async def handler: one asyncio task each; "
        "the def tasks of an App with async def ones: one thread each too) (default 4)",
    )
    p.add_argument(
        "--max-stuck",
        type=non_negative_int,
        metavar="N",
        help="a plain (def) handler still running past its timeout in a blocking call leaves its "
        "thread stuck (a thread cannot be killed; its job is not started again in this worker "
        "until it ends): once more than N are stuck the worker takes no more jobs and exits 1, for "
        "--processes or its supervisor to start a fresh process (default: --concurrency)",
    )
    p.add_argument(
        "--max-jobs",
        type=positive_int,
        metavar="N",
        help="the process ends (exit 0) after N jobs, as Celery's max_tasks_per_child; with "
        "--processes it is started again at once (default: no limit)",
    )
    p.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        metavar="N",
        help="run N worker processes under this command (each with --concurrency handlers): one "
        "that dies is started again, SIGTERM/SIGINT stops them all with the same --shutdown-timeout, "
        "and they register under one name (`pyqueue-sql workers` shows them as one) (default 1)",
    )
    p.add_argument(
        "--kill-grace",
        type=seconds_arg,
        default=WorkerSettings.kill_grace,
        metavar="S",
        help="a plain (def) handler still running S seconds after its timeout or cancel (blocked in a "
        "call no exception reaches): with --processes its process is terminated (SIGTERM, then "
        "SIGKILL S seconds later) and replaced, the attempt recorded as timed out or cancelled; "
        "with threads alone it is logged, its thread runs on (default 5)",
    )
    p.add_argument("--name", help="worker name recorded on reserved messages (default host:pid)")
    p.add_argument(
        "--lease",
        type=seconds_arg,
        default=WorkerSettings.lease,
        metavar="S",
        help="reservation length; a heartbeat extends it every S/3 while a handler runs (default 30)",
    )
    p.add_argument(
        "--poll-fallback",
        type=seconds_arg,
        metavar="S",
        help="PostgreSQL: longest wait for a NOTIFY before looking anyway (default 5); "
        "MySQL waits in 1 s long polls inside the server",
    )
    p.add_argument(
        "--listen",
        action=argparse.BooleanOptionalAction,
        default=WorkerSettings.listen,
        help="PostgreSQL: wait for pushes with LISTEN (default on); --no-listen long-polls instead, "
        "as behind a transaction pooler without --listen-dsn",
    )
    p.add_argument(
        "--listen-dsn",
        metavar="DSN",
        help="PostgreSQL behind a transaction pooler (PgBouncer): a direct connection to the server "
        "for the dispatcher, which LISTENs; everything else goes through --dsn",
    )
    p.add_argument(
        "--prefetch",
        type=non_negative_int,
        metavar="N",
        help="messages reserved beyond the free handlers, at most about 0.1 s of their work "
        "(default 15 x concurrency; 0 turns it off)",
    )
    p.add_argument(
        "--ack-batch",
        type=positive_int,
        metavar="N",
        help="most successes committed in one call (default: the worker's, docs/workers.md)",
    )
    p.add_argument(
        "--ack-interval",
        type=seconds_arg,
        metavar="S",
        help="longest wait for more successes before committing them together "
        "(default: the worker's, docs/workers.md)",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=seconds_arg,
        default=WorkerSettings.shutdown_timeout,
        metavar="S",
        help="on SIGTERM/SIGINT, how long running handlers may take to finish (default 30); "
        "a second signal stops at once",
    )
    p.add_argument(
        "--start-timeout",
        type=seconds_arg,
        default=WorkerSettings.start_timeout,
        metavar="S",
        help="before its first connection, give up after S seconds when the database cannot be "
        "reached (default 30; 0: keep trying); once connected, it reconnects for ever",
    )
    p.add_argument(
        "--register",
        action=argparse.BooleanOptionalAction,
        default=WorkerSettings.register,
        help="register in the worker registry (`pyqueue-sql workers`), heartbeat it and "
        "deregister on stop (default on)",
    )
    p.add_argument(
        "--release-dead-after",
        type=seconds_arg,
        metavar="S",
        help="each heartbeat, release the messages of workers silent for over S seconds "
        "(default off; S must be at least every worker's lease)",
    )
    p.add_argument(
        "--retry-base",
        type=seconds_arg,
        default=1.0,
        metavar="S",
        help="first retry delay after a handler exception (default 1)",
    )
    p.add_argument("--retry-factor", type=float, default=2.0, metavar="F", help="backoff factor (default 2)")
    p.add_argument(
        "--retry-max", type=seconds_arg, default=300.0, metavar="S", help="longest retry delay (default 300)"
    )
    p.add_argument(
        "--retry-jitter",
        type=float,
        default=0.2,
        metavar="J",
        help="random +-fraction applied to each delay (default 0.2)",
    )
    p.add_argument("--log-format", choices=("text", "json"), default="text")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="serve Prometheus metrics on http://HOST:N/metrics (the metrics extra)",
    )
    p.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address for --metrics-port (default 127.0.0.1)",
    )
    p.add_argument(
        "--status",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a live status line at the bottom of stderr, log lines printed above it "
        "(default: when stderr is a terminal)",
    )


PARSERS: dict[str, Callable[[Command], None]] = {
    "workers": add_workers,
    "worker": add_worker,
}

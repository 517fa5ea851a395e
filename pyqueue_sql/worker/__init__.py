"""A production worker: handlers per queue and kind, run on a pool of threads.

    worker = pyqueue_sql.Worker("postgresql://localhost/app", concurrency=8)

    @worker.handler("emails", "welcome", retry=RetryPolicy(base=2, max_delay=600))
    def send_welcome(job):
        mail(job.payload["to"])

    worker.run()          # until SIGTERM / SIGINT (or worker.stop())

How it waits (the dispatcher thread, one connection):
  * it reserves as many messages as it has free handler threads plus the
    prefetch (below), back to back while work flows;
  * when a reserve comes back empty it asks each queue for its next
    scheduled_at (queue_next_scheduled_at) and waits until the earliest of
    that, the poll fallback, a wakeup, or the time a message one of its
    handlers failed with a retry delay is due again (a delayed retry sends no
    wakeup; this holds for a handler that fails while the dispatcher already
    waits):
    - PostgreSQL: LISTEN on each queue's channel (queue_channel), registered
      before the first reserve, so a push between an empty reserve and the
      wait is buffered in the connection and never lost. A push that the
      NOTIFY throttle swallowed is caught by a re-check one `linger` after each
      wakeup, and anything else by the poll fallback;
    - MySQL/MariaDB (no NOTIFY), or listen=False: with one queue, a long poll
      inside the server (queue_wait: one client round trip per `long_poll_wait`
      seconds, checking every `long_poll_check` seconds); with several queues,
      client-side polling that backs off from `poll_min` to `poll_max`.

Prefetch: once handlers have finished (so their average time is known) the
dispatcher also holds up to `prefetch` messages (default 15 x concurrency)
beyond the free handlers, but no more than about 0.1 s of the handlers' work
at their average time, so that slow handlers do not sit on messages another
worker could run; it reserves again when half of that is used up. The
heartbeat extends prefetched messages as it does running ones; one that waited
until less than a third of its lease is left is handed back unstarted
(stats.lease_low), never run on a lapsing reservation.

Each message: the handler runs on a pool thread, which makes no database call
for a success: a completer thread (its own connection) acknowledges the
successes in batches with queue_commit_batch, up to `ack_batch` (500) at a
time, at most `ack_interval` (0.002 s) after the first of them finished (one
alone: queue_commit). A reservation that no longer held (a stale token) is not
committed: the batch is logged as lost (the call does not say which one) and
its message is redelivered. A crash before the flush loses nothing: the
messages are still reserved and come back after their lease; a graceful stop
flushes. commit_reserve=True (a worker of one queue) makes each handler thread
commit its success with queue_commit_reserve instead, taking the queue's next
message in the same call (stats.commit_reserves counts them);
exception -> queue_fail with the queue's RetryPolicy delay (exponential,
jittered) and the error text "ExceptionType: message" (stored as the message's
last_error; the traceback goes to the log); the SQL dead-letters it (or drops
it, when the queue has no dead-letter queue) once it has had the queue's
max_attempts deliveries, and the log says which of the three happened. A
handler that is an ``async def`` (or returns any awaitable) is awaited to
completion on an event loop of its handler thread (one loop per thread, kept
for the thread's life) before the commit; a failure there is a failure like
any other. A heartbeat thread extends the reservation of every running
message (every lease/3, by lease) so a long handler keeps it. Commit and
heartbeat of one message are serialised, so a commit never races a token
change.

What a handler raises:
  * any Exception, and any other BaseException (SystemExit, GeneratorExit,
    asyncio.CancelledError...) except KeyboardInterrupt: a failure of that
    message (queue_fail with backoff, logged with its traceback); the worker
    and its thread go on;
  * KeyboardInterrupt: a stop request. The message is handed back at once
    (queue_fail with no delay and the error recorded; the delivery counts) and
    the worker stops gracefully, as for SIGTERM.
A non-connection error in the reserve/dispatch loop (the queue was dropped,
a permission was revoked, an on_idle hook raised...) never ends run(): it is
logged with its traceback (event "dispatch_error"), shown by status(), and the
loop starts again on a fresh connection after a back-off (0.5 s doubling to
30 s; reset once a round succeeds).

Stop (SIGTERM/SIGINT or stop()): no more reserves; messages reserved but not
started are handed back at once (queue_rollback with no delay; the delivery
still counts as an attempt); running handlers get `shutdown_timeout` seconds
to finish and commit. Meanwhile the worker logs (event "stopping") how many
handlers it waits for, their keys and the seconds left, every 10 s. A second
SIGTERM/SIGINT (or stop(force=True)) stops at once. Handlers still running
at the deadline or at a forced stop are abandoned: they lose their heartbeat
and their messages come back after the lease expires; run() then returns
False and lists them in ``worker.unfinished`` (`pyqueue-sql worker` exits
non-zero).

Connection loss: every database call retries on a fresh connection with
exponential backoff (jittered, up to 5 s). A commit or rollback whose reply was
lost is simply sent again: the token makes it apply at most once (the second
returns false). A reserve whose reply was lost leaves its messages reserved by
nobody; they come back when the lease expires. Nothing is lost; a message may
be delivered again (at-least-once), never committed twice.

Results, cancellation and progress (see docs/workers.md): a handler registered
with store_result=True has its return value (JSON) committed as the message's
result, through queue_commit_result_batch in the completer's batches (one alone:
queue_commit_result); a value JSON cannot hold, or one the queue refuses, fails
that message alone. A worker with such a handler refuses to start when the
queue keeps no results (one InvalidArgumentError, before anything is reserved).
``job.set_progress(value)`` returns at once: a watcher thread (its own
connection, opened when needed) writes the latest value with queue_set_progress
soon after, and the handler's own thread writes what is left before the commit
or failure. The heartbeat renews with queue_renew, which also says whether a
cancel of the message was requested: ``job.cancel_requested`` (a
threading.Event) is then set and an async def handler's task cancelled; once
an async def handler has run for CANCEL_POLL_AFTER (0.5 s), the watcher also
reads its cancel flag with queue_result every CANCEL_POLL (0.25 s), so such a
handler stops within a second whatever the lease (short jobs cost no read). A handler that stops for the cancel (it raises
pyqueue_sql.Cancelled, e.g. by job.raise_if_cancelled(), or its coroutine ends in
CancelledError after a cancel was requested) ends its message with
queue_cancel_held (outcome 'cancelled', stats.cancelled); one that returns
anyway is committed as usual.

Worker registry (queue_worker_register, see docs/contract.md): at start the
worker registers itself (name, host, pid, queues) and reserves as the
registration's reserve_as (``name#id``, what `pyqueue-sql workers` shows); each
heartbeat tick also heartbeats the registration (with the secret it got at
register time: a worker can touch only its own registration), and stop
deregisters it. ``worker.registered`` (an Event) is set once the registration
is known in Python, i.e. after it is visible in the database. If
the heartbeat finds the registration gone (another process ran
release_dead_workers because this worker was silent too long: a stalled
process, a long network cut), the worker logs it (event "released"), counts the
messages it is still running as lost (their tokens were cleared and they are
ready again, so their commits return false and they are redelivered) and
registers again. ``release_dead_after=S`` (off by default) makes the heartbeat
thread also call release_dead_workers(S) every tick; keep S well above every
worker's heartbeat interval (lease/3; the minimum accepted is 3 intervals of
this worker): a worker wrongly declared dead has its running messages
delivered twice. ``register=False`` turns the registry off (reserves as name).

Hooks for a worker registry (lists of callables taking the worker):
on_start (before the first reserve), on_heartbeat (every heartbeat tick, on
the heartbeat thread; worker.heartbeat_run(fn) runs fn(db) on its connection
with reconnects), on_stop (after the last handler finished or was abandoned),
and on_idle (after an empty reserve, before waiting).

pyqueue_sql.aio.worker.AsyncWorker is the same worker for `async def` handlers
(asyncio tasks instead of threads): the loops below are written once, as
generators of operations (WorkerBase) that Worker runs on its threads and
AsyncWorker awaits. The operations are typed (steps.py); each runner maps an
operation's type to the method that does it. The package by responsibility
(each part an object of the worker's, see base.py):
dispatch.py (ReserveLoop: the reserve loop and the idle wait; Dispatch: each
message's way to its commit), policy.py (RetryPolicy, the failure outcomes), registry.py (the
registry and the heartbeat), watch.py (progress and the quick cancel poll),
timeouts.py (handlers' time limits), shutdown.py (stop and signals), settings.py
(WorkerSettings: every setting, its default and its check), model.py (Job,
RunState: what the parts share while the worker runs), base.py (WorkerBase:
the parts, the routes and status), threaded.py (Worker).

Watching it: ``worker.status()`` is a snapshot (WorkerStatus: state, running
keys, stats, the stop deadline, the last dispatch error); ``status_line()`` is
that as one line; ``worker.stopping`` / ``worker.stopped`` tell where the stop
is.
"""

from __future__ import annotations

from .base import WorkerBase
from .dispatch import idle_timeout, wait_left
from .interrupt import TimeLimitExceeded
from .model import Handler, Job, RetryDue, WorkerStats, WorkerStatus, log
from .policy import RetryPolicy, describe_error
from .settings import LONG_POLL_CHECK, LONG_POLL_WAIT
from .steps import StoppedError, call_steps, run_steps
from .threaded import Worker

drive = run_steps  # its former name (one a Database method has too), kept importable

__all__ = [
    "LONG_POLL_CHECK",
    "LONG_POLL_WAIT",
    "Handler",
    "Job",
    "RetryDue",
    "RetryPolicy",
    "StoppedError",
    "TimeLimitExceeded",
    "Worker",
    "WorkerBase",
    "WorkerStats",
    "WorkerStatus",
    "call_steps",
    "describe_error",
    "idle_timeout",
    "log",
    "run_steps",
    "wait_left",
]

"""The worker registry and the heartbeat: registering at start (reserve_as), the heartbeat
tick (extending every held reservation, heartbeating the registration, registering again after
being released as dead, release_dead_after), and deregistering at the stop."""

from __future__ import annotations

import os
import socket
import threading
from typing import TYPE_CHECKING, Any

from ..client import Reservation, WorkerRegistration
from ..display import redact
from .model import Job, log, where_of
from .steps import HARD_STOP, Acquire, Hooks, RetriedCall, StoppedError, Wait

if TYPE_CHECKING:
    from collections.abc import Callable

    from .model import Route, RunState
    from .settings import WorkerSettings
    from .watch import Watch


# The longest silence between two heartbeats: a third of the shortest silence
# queue_release_dead_workers accepts as a sign of death (30 s), whatever the lease.
HEARTBEAT_MAX = 10.0


class Registry:
    """The worker's part for the registry and the heartbeat (steps: see steps.py): it registers
    the worker, heartbeats its registration and extends its reservations every lease/3, and
    deregisters it at the stop."""

    def __init__(
        self,
        settings: WorkerSettings,
        state: RunState,
        name: str,
        routes: dict[str, Route],
        on_heartbeat: list[Callable[[Any], Any]],
        jobs: Callable[[], list[Job]],
        watch: Watch,
    ) -> None:
        self.settings = settings
        self.state = state
        self.name = name  # the worker's (resolved: settings.name or host:pid)
        self.routes = routes  # the worker's, shared
        self.on_heartbeat = on_heartbeat  # the worker's hooks, shared
        self.jobs = jobs  # the messages the worker holds now (the runner's)
        self.watch = watch  # told of a cancel the heartbeat learnt
        self.registration: WorkerRegistration | None = None  # while running, when register=True
        self.registered = threading.Event()  # set once self.registration is final (after it is visible)

    @property
    def reserve_as(self) -> str:
        """The worker name recorded on reserved messages (the registration's, when registered)."""
        reg = self.registration
        return reg.reserve_as if reg is not None else self.name

    def registration_fields(self) -> dict[str, Any]:
        """register_worker's arguments."""
        return dict(
            name=self.name, queues=sorted(self.routes), host=socket.gethostname()[:255], pid=os.getpid()
        )

    def registered_as(self, registration: WorkerRegistration) -> None:
        # The row is committed (visible to others) before register_worker
        # returns; `registered` is set only once self.registration holds it,
        # so whoever waits for `registered` sees reserve_as and the row agree.
        self.registration = registration
        self.registered.set()
        log.info(
            "worker registered as %s",
            registration.reserve_as,
            extra={
                "event": "register",
                "worker_id": registration.worker_id,
                "reserve_as": registration.reserve_as,
            },
        )

    def log_released(self, registration: WorkerRegistration) -> None:
        held = [j for j in self.jobs() if not j.done]
        log.warning(
            "this worker was released as dead (its registration heartbeat was missed for too long); "
            "the messages it is still running were made ready again: their commits will return "
            "false and they will be redelivered; registering again",
            extra={
                "event": "released",
                "worker_id": registration.worker_id,
                "running": len(held),
                "keys": [where_of(j) for j in held][:20],
            },
        )

    def log_release_dead(self, released: int) -> None:
        if released:
            log.warning(
                "released the messages of dead workers",
                extra={
                    "event": "release_dead",
                    "released": released,
                    "older_than_s": self.settings.release_dead_after,
                },
            )

    @staticmethod
    def log_deregistered(registration: WorkerRegistration, error: BaseException | None) -> None:
        if error is None:
            log.info(
                "worker deregistered", extra={"event": "deregister", "worker_id": registration.worker_id}
            )
        else:
            log.warning(
                "could not deregister; release_dead_workers removes the registration later",
                extra={
                    "event": "error",
                    "worker_id": registration.worker_id,
                    "error": redact(str(error))[:200],
                },
            )

    @staticmethod
    def log_extended(job: Job, new: Reservation | None, lease_until: float | None = None) -> None:
        if new is None:
            log.warning(
                "heartbeat: reservation no longer held",
                extra={"event": "lost", "queue": job.queue, "key": job.key, "kind": job.kind},
            )
        else:
            job.reservation = new
            job.lease_until = lease_until
            log.debug("extended", extra={"event": "extend", "queue": job.queue, "key": job.key})

    # -- steps ------------------------------------------------------------------------
    def register_steps(self, hard: bool):
        self.registered_as(
            (yield RetriedCall("register_worker", kwargs=self.registration_fields(), hard=hard))
        )

    def heartbeat_loop_steps(self):
        """The heartbeat: a tick every lease/3, and at least every HEARTBEAT_MAX seconds (so that a
        long lease never leaves a live worker silent for the 30 s after which
        queue_release_dead_workers may count it dead). It runs through a graceful stop (running
        handlers still need their reservations extended) and ends with the hard stop."""
        while not (yield Wait(HARD_STOP, min(self.settings.lease / 3, HEARTBEAT_MAX))):
            try:
                yield from self.heartbeat_steps()
            except StoppedError:
                break

    def heartbeat_steps(self):
        """One heartbeat tick: extends every held reservation, heartbeats the registration, runs
        the on_heartbeat hooks. StoppedError (the hard stop) ends the heartbeat."""
        for job in self.jobs():
            yield from self.extend_steps(job)
        try:
            yield from self.tick_steps()
        except StoppedError:
            raise
        except Exception:
            log.exception("heartbeat: worker registry call failed", extra={"event": "error"})
        yield Hooks(self.on_heartbeat, "on_heartbeat")

    def extend_steps(self, job: Job):
        if job.lease_until is not None and job.lease_until - self.state.clock() > self.settings.lease * 0.75:
            # Reserved or extended within the last quarter lease (most of a busy worker's
            # messages): the next tick, lease/3 from now, still finds 5/12 of the lease left.
            return
        yield Acquire(job.lock)
        try:
            if job.done or self.state.hard_stop.is_set():
                return
            lease_until = self.state.clock() + self.settings.lease
            try:
                # queue_renew: queue_extend, and whether a cancel of the message was requested
                new, cancel_requested = yield RetriedCall(
                    "renew", job.queue, (job.reservation,), {"timeout": self.settings.lease}, hard=True
                )
            except StoppedError:
                return
            except Exception:
                log.exception(
                    "heartbeat: could not extend",
                    extra={"event": "error", "queue": job.queue, "key": job.key},
                )
                return
            self.log_extended(job, new, lease_until)
        finally:
            job.lock.release()
        if new is not None and cancel_requested:
            self.watch.cancel_seen(job)

    def tick_steps(self):
        reg = self.registration
        if reg is not None and not (yield RetriedCall("heartbeat_worker", args=(reg,), hard=True)):
            self.log_released(reg)
            yield from self.register_steps(True)
        if reg is not None:  # a limit set or changed since the start (ReserveLoop.limit_room)
            yield from read_limits_steps(self.routes, self.state)
        if self.settings.release_dead_after is not None:
            self.log_release_dead(
                (
                    yield RetriedCall(
                        "release_dead_workers", args=(self.settings.release_dead_after,), hard=True
                    )
                )
            )

    def deregister_steps(self):
        reg, self.registration = self.registration, None
        if reg is None:
            return
        try:
            # One attempt (the hard stop is set): if it fails, release_dead_workers cleans up.
            yield RetriedCall("deregister_worker", args=(reg,), hard=True)
            self.log_deregistered(reg, None)
        except Exception as exc:
            self.log_deregistered(reg, exc)


def read_limits_steps(routes: dict[str, Route], state: RunState):
    """Reads the concurrency limits of the worker's queues (queue_limits) into state.limits, which
    bound what the reserve loop holds of a limited kind (ReserveLoop.limit_room). A queue whose
    limits cannot be read (an account that may not, a queue that does not exist yet) has none here:
    the reserves still keep every limit, only without that bound."""
    limits: dict[str, dict[str, int]] = {}
    for route in routes.values():
        try:
            rows = yield RetriedCall("limits", route.queue, hard=True)
        except StoppedError:
            raise
        except Exception:
            log.debug("reading the limits failed", exc_info=True, extra={"event": "limits_error"})
            continue
        if rows:
            limits[route.queue] = {r.kind: r.capacity for r in rows}
    state.limits = limits

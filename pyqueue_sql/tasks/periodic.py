"""Periodic tasks: a task on a cadence (app.periodic), declared over the contract's schedules
(queue_schedule_every / queue_schedule_cron) and created in the database by schedule()."""

from __future__ import annotations

import dataclasses
import datetime as dt
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from .. import errors
from ..client import Database, ScheduleInfo
from .conversion import UNION_TYPES
from .task import Task

__all__ = ["Periodic", "declare", "every_seconds", "is_datetime_hint", "schedule"]


@dataclasses.dataclass(frozen=True)
class Periodic:
    """A task on a cadence: the contract's schedule (queue, key, kind) with `every` seconds or a
    `cron` expression (UTC) and a fixed payload, which app.create_queues() (or
    app.schedule_periodic()) creates in the database."""

    task: Task[Any, Any]
    key: str
    every: int | None
    cron: str | None
    payload: dict[str, Any]

    @property
    def queue(self) -> str:
        return self.task.queue

    @property
    def kind(self) -> str:
        return self.task.kind


def is_datetime_hint(hint: Any) -> bool:
    """Whether a parameter so annotated takes a datetime (datetime, Optional, Annotated)."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in UNION_TYPES:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return len(args) == 1 and is_datetime_hint(args[0])
    return hint is dt.datetime


def every_seconds(every: float | dt.timedelta) -> int:
    """app.periodic's every=, checked: whole seconds >= 1."""
    seconds = every.total_seconds() if isinstance(every, dt.timedelta) else every
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or seconds != int(seconds)
        or seconds < 1
    ):
        raise errors.InvalidArgumentError(
            f"every must be whole seconds >= 1 (or a timedelta of them), not {every!r}"
        )
    return int(seconds)


def declare(
    t: Task[Any, Any],
    declared: Iterable[Periodic],
    *,
    every: int | None,
    cron: str | None,
    key: str | None,
    kwargs: Mapping[str, Any] | None,
) -> Periodic:
    """The periodic schedule of app.periodic(...) over task t (`declared`: the app's schedules so
    far): checks that every argument of t has a value and finds the parameter the occurrence's
    time goes to (t.pass_occurrence)."""
    fixed = dict(kwargs or {})
    occurrence: tuple[str, str] | None = None
    for p in t.signature.parameters.values():
        if p.kind is p.VAR_KEYWORD or p.name in fixed:
            continue
        if occurrence is None and is_datetime_hint(t.hints.get(p.name)):
            occurrence = (p.name, "datetime")
    if occurrence is None:
        p = t.signature.parameters.get("timestamp")  # type: ignore[assignment]
        if p is not None and "timestamp" not in fixed and t.hints.get("timestamp", int) in (int, Any):
            occurrence = ("timestamp", "timestamp")
    for p in t.signature.parameters.values():
        if p.kind is p.VAR_KEYWORD or p.name in fixed or p.default is not p.empty:
            continue
        if occurrence is None or p.name != occurrence[0]:
            raise errors.InvalidArgumentError(
                f"periodic task {t.kind!r}: argument {p.name!r} has no value: give it in kwargs= "
                "or a default (only the occurrence's time is passed: a parameter annotated "
                "datetime, or one named timestamp)"
            )
    payload = t.partial_payload(fixed)
    schedule_key = t.kind if key is None else key
    if any((d.queue, d.key, d.kind) == (t.queue, schedule_key, t.kind) for d in declared):
        raise errors.InvalidArgumentError(
            f"task {t.kind!r} already has a periodic schedule {schedule_key!r}: give each one its key="
        )
    if occurrence is not None:
        if t.occurrence_parameter not in (None, occurrence):
            raise errors.InvalidArgumentError(
                f"periodic task {t.kind!r}: its schedules pass the occurrence's time to one parameter"
            )
        t.pass_occurrence(occurrence)
    return Periodic(t, schedule_key, every, cron, payload)


def schedule(periodic_tasks: Iterable[Periodic], db: Database) -> list[Periodic]:
    """Creates (or updates) the schedules of periodic tasks in the database (an admin routine:
    app.schedule_periodic() and app.create_queues() call it): a schedule already there with the
    same cadence and payload is left as it is while its pending occurrence is live, and repaired
    (the next occurrence after now pushed) when it has none; another is replaced. Every schedule
    goes through queue_schedule_every / queue_schedule_cron, which decide that under the
    schedule's row lock. Returns the schedules created, replaced or repaired. A schedule no longer
    declared stays: remove it with ``db.queue(queue).unschedule(key, kind)``."""
    changed: list[Periodic] = []
    existing: dict[str, dict[tuple[str, str], ScheduleInfo]] = {}
    for p in periodic_tasks:
        queue = db.queue(p.queue)
        if p.queue not in existing:
            existing[p.queue] = {(s.key, s.kind): s for s in queue.schedules()}
        there = existing[p.queue].get((p.key, p.kind))
        lost = False
        if there is not None and (there.every_s, there.cron, there.payload) == (p.every, p.cron, p.payload):
            # the same schedule without its pending occurrence is repaired (pushed at the same time
            # when that is still ahead, so the call's answer cannot tell): whether it had one is read
            pending = f"{p.key}@{there.next_at.astimezone(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
            found: Any = queue.message(pending, p.kind)
            lost = found is None
        if p.every is not None:
            made: Any = queue.schedule_every(p.key, p.kind, p.payload, p.every)
        else:
            made = queue.schedule_cron(p.key, p.kind, p.payload, p.cron)
        at = typing.cast(dt.datetime, made)  # the sync client's answer (its calls typed as steps)
        if (
            there is None
            or lost
            or (there.every_s, there.cron, there.payload, there.next_at)
            != (
                p.every,
                p.cron,
                p.payload,
                at,
            )
        ):
            changed.append(p)
    return changed

"""setup: what an admin runs once per deploy for an App (its queues and its periodic tasks'
schedules)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from ..display import remember_secrets
from .common import DSN_ENV, EXIT_OK, Command, UsageError, check_scheme
from .workers import load_handler


def cmd_setup(args: argparse.Namespace) -> int:
    """app.create_queues() from the command line: the queues of an App's tasks (a queue with a
    store_result task keeps results), and the schedules of its periodic tasks (an admin's
    routines: queue_create, queue_schedule_every / queue_schedule_cron). A schedule whose cadence
    and arguments did not change is left as it is."""
    from ..tasks import App, Task

    target = load_handler(args.app_spec)
    if isinstance(target, Task):
        target = target.app
    if not isinstance(target, App):
        raise UsageError(
            f"{args.app_spec} is not a pyqueue_sql.App (setup makes an App's queues and schedules)"
        )
    app = target
    # an admin's account: --dsn or $PYQUEUE_DSN (the same database as the App's, another role),
    # else the App's own DSN
    dsn = args.dsn or os.environ.get(DSN_ENV) or app.dsn
    if not dsn:
        raise UsageError(
            f"no database given: pass --dsn DSN or set {DSN_ENV} (the App has no DSN of its own)"
        )
    remember_secrets(dsn)
    check_scheme(dsn).import_driver()
    from ..client import connect

    db = connect(dsn)
    try:
        before = {(s.queue, s.key, s.kind): s for s in db.schedules()}
        changed = app.create_queues(db=db)
    finally:
        db.close()
    print(f"queues: {', '.join(app.queues()) or 'none'}")
    changed_keys = {(p.queue, p.key, p.kind) for p in changed}
    for p in app.periodic_tasks:
        cadence = f"every {p.every} s" if p.every is not None else f"cron {p.cron}"
        there = before.get((p.queue, p.key, p.kind))
        if (p.queue, p.key, p.kind) not in changed_keys:
            state = "unchanged"
        elif there is not None and (there.every_s, there.cron, there.payload) == (p.every, p.cron, p.payload):
            state = "repaired: it had no pending occurrence"
        else:
            state = "created or replaced"
        print(f"schedule {p.queue} {p.key} {p.kind}: {cadence} ({state})")
    return EXIT_OK


def add_setup(command: Command) -> None:
    p = command(
        "setup",
        cmd_setup,
        "create an App's queues and its periodic tasks' schedules (app.create_queues(); an admin's "
        "command, run at each deploy: unchanged schedules stay as they are)",
    )
    p.add_argument("app_spec", metavar="MODULE:APP", help="the pyqueue_sql.App, as `worker` takes it")


PARSERS: dict[str, Callable[[Command], None]] = {"setup": add_setup}

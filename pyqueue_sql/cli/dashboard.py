"""The web dashboard."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from .. import errors
from ..display import redact_dsn
from .common import EXIT_FAILURE, EXIT_OK, PROG, Command, dsn_of


def cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        from ..dashboard import serve
    except ImportError as exc:
        print(
            f"{PROG}: error: the dashboard needs its extra: {errors.install_command('dashboard')} ({exc})",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    dsn = dsn_of(args)
    token = args.token if args.token is not None else os.environ.get("PYQUEUE_DASHBOARD_TOKEN") or None
    where = f"http://{args.host}:{args.port}/"
    print(
        f"{PROG}: dashboard of {redact_dsn(dsn)} on {where}"
        + (" (read-only)" if args.read_only else "")
        + (" (token required)" if token else ""),
        file=sys.stderr,
    )
    serve(dsn, host=args.host, port=args.port, read_only=args.read_only, token=token)
    return EXIT_OK


# -- argument parsing -------------------------------------------------------------


def add_dashboard(command: Command) -> None:
    p = command(
        "dashboard",
        cmd_dashboard,
        "a live web dashboard of the queues, dead letters, workers and schedules, with /metrics "
        "(the dashboard extra; docs/dashboard.md)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument(
        "--read-only", action="store_true", help="offer and accept no action (pause, redrive, remove...)"
    )
    p.add_argument(
        "--token",
        help="require this access token (login form, ?token= once, or Authorization: Bearer); "
        "default: $PYQUEUE_DASHBOARD_TOKEN",
    )


PARSERS: dict[str, Callable[[Command], None]] = {
    "dashboard": add_dashboard,
}

"""The web dashboard."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from .. import errors
from ..display import redact_dsn
from .common import EXIT_FAILURE, EXIT_OK, PROG, Command, UsageError, dsn_of


def cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        from ..dashboard import serve
        from ..dashboard.app import exposed_without_token
    except ImportError as exc:
        print(
            f"{PROG}: error: the dashboard needs its extra: {errors.install_command('dashboard')} ({exc})",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    token = args.token if args.token is not None else os.environ.get("PYQUEUE_DASHBOARD_TOKEN") or None
    refusal = exposed_without_token(args.host, token)
    if refusal is not None:
        raise UsageError(refusal)
    dsn = dsn_of(args)
    shown_host = f"[{args.host}]" if ":" in args.host else args.host
    where = f"http://{shown_host}:{args.port}/"
    print(
        f"{PROG}: dashboard of {redact_dsn(dsn)} on {where}"
        + (" (read-only)" if args.read_only else "")
        + (" (token required)" if token else ""),
        file=sys.stderr,
    )
    serve(
        dsn,
        host=args.host,
        port=args.port,
        read_only=args.read_only,
        token=token,
        allowed_hosts=args.allowed_host or (),
    )
    return EXIT_OK


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"not a port (1 to 65535): {text!r}")
    return value


def _allowed_host(text: str) -> str:
    from ..dashboard.app import host_name

    if host_name(text) is None:
        raise argparse.ArgumentTypeError(f"not a host name or host:port: {text!r}")
    return text


# -- argument parsing -------------------------------------------------------------


def add_dashboard(command: Command) -> None:
    p = command(
        "dashboard",
        cmd_dashboard,
        "a live web dashboard of the queues, dead letters, workers and schedules, with /metrics "
        "(the dashboard extra; docs/dashboard.md)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8080, help="port (default 8080)")
    p.add_argument(
        "--read-only", action="store_true", help="offer and accept no action (pause, redrive, remove...)"
    )
    p.add_argument(
        "--token",
        help="require this access token (login form, ?token= once, or Authorization: Bearer); "
        "default: $PYQUEUE_DASHBOARD_TOKEN; needed to listen on any address but a loopback one",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        type=_allowed_host,
        metavar="NAME",
        help="also answer to this Host name (NAME, any port, or NAME:PORT; repeatable), e.g. the "
        "name of your reverse proxy; by default only localhost, 127.0.0.1, [::1] and --host, on "
        "--port, and every other Host gets 400",
    )


PARSERS: dict[str, Callable[[Command], None]] = {
    "dashboard": add_dashboard,
}

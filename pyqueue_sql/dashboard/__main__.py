"""``python -m pyqueue_sql.dashboard --demo``: the dashboard of the database ``make demo`` used.

With $PYQUEUE_DSN set, that database (as ``pyqueue-sql dashboard --dsn $PYQUEUE_DSN``); without
it, the demo's embedded PostgreSQL (.pyqueue-demo/pgdata), started for as long as the dashboard
runs. Listens on 127.0.0.1:8080 unless --port says otherwise.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from . import serve


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyqueue_sql.dashboard", description=__doc__)
    parser.add_argument("--demo", action="store_true", required=True, help="the demo's database")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--read-only", action="store_true")
    args = parser.parse_args(argv)
    dsn = os.environ.get("PYQUEUE_DSN")
    if dsn:
        print(f"dashboard on http://127.0.0.1:{args.port}/ (Ctrl-C stops it)", file=sys.stderr)
        serve(dsn, port=args.port, read_only=args.read_only)
        return 0
    from ..demo import default_data_dir
    from ..embedded import embedded_postgres_dsn

    where = default_data_dir()
    if where is None or not where.exists():
        print("no demo database here: run `make demo` first (or set PYQUEUE_DSN)", file=sys.stderr)
        return 1
    # uvicorn raises SIGTERM/SIGINT again once it has shut down: leave through SystemExit then, so
    # that the embedded server below is stopped too
    signal.signal(signal.SIGTERM, _exit)
    with embedded_postgres_dsn(where) as dsn:
        print(
            f"dashboard of the demo database on http://127.0.0.1:{args.port}/ (Ctrl-C stops it)",
            file=sys.stderr,
        )
        serve(dsn, port=args.port, read_only=args.read_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())

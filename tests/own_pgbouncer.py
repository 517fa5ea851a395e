"""A PgBouncer owned by one test (or one benchmark): transaction pooling in front of a PostgreSQL
server, on a free loopback port, configured and logging in a temp dir; stopped and removed after.

Debian's `pgbouncer` package (scripts/pgbouncer-deps.sh installs it) gives /usr/sbin/pgbouncer.
PgBouncer refuses to run as root, so as root it drops to the `postgres` system user (its own
`-u` option: the process started is pgbouncer itself, stopped with SIGTERM and waited for). Clients are not authenticated (auth_type = any): every
server connection logs in as the user of the upstream DSN.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from urllib.parse import urlsplit, urlunsplit

from .helpers import free_port

BINARY = "/usr/sbin/pgbouncer"


def binary() -> str | None:
    """The pgbouncer executable, or None when it is not installed."""
    if os.access(BINARY, os.X_OK):
        return BINARY
    return shutil.which("pgbouncer")


class OwnPgBouncer:
    """pool_size server connections per (database, user), shared by all clients in transaction mode."""

    def __init__(self, upstream_dsn: str, *, pool_size: int = 2, pool_mode: str = "transaction") -> None:
        exe = binary()
        if exe is None:
            raise RuntimeError("no pgbouncer binary (apt-get install pgbouncer; scripts/pgbouncer-deps.sh)")
        parts = urlsplit(upstream_dsn)
        self.upstream = parts
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix="pyqueue-pgbouncer-")
        self.as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.tmp, "postgres", "postgres")
        self.config = os.path.join(self.tmp, "pgbouncer.ini")
        self.log = os.path.join(self.tmp, "pgbouncer.log")
        server = f"host={parts.hostname or '127.0.0.1'} port={parts.port or 5432} user={parts.username or 'postgres'}"
        if parts.password:
            server += f" password={parts.password}"
        with open(self.config, "w") as f:
            f.write(
                "[databases]\n"
                f"* = {server}\n"
                "[pgbouncer]\n"
                "listen_addr = 127.0.0.1\n"
                f"listen_port = {self.port}\n"
                "unix_socket_dir =\n"
                "auth_type = any\n"
                f"pool_mode = {pool_mode}\n"
                f"default_pool_size = {pool_size}\n"
                "min_pool_size = 0\n"
                "reserve_pool_size = 0\n"
                "max_client_conn = 500\n"
                "max_db_connections = 0\n"
                # a client waits for a server connection at most this long, then gets an error
                "query_wait_timeout = 60\n"
                "ignore_startup_parameters = extra_float_digits\n"
                f"logfile = {self.log}\n"
                f"pidfile = {os.path.join(self.tmp, 'pgbouncer.pid')}\n"
                "log_connections = 0\n"
                "log_disconnections = 0\n"
            )
        if self.as_user:
            shutil.chown(self.config, "postgres", "postgres")
        self.process: subprocess.Popen | None = None
        self.exe = exe

    def start(self, timeout: float = 15) -> None:
        self.process = subprocess.Popen(
            [self.exe, *self.as_user, self.config],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start: {self.log_text()[-2000:]}") from None
                time.sleep(0.05)

    def log_text(self) -> str:
        try:
            with open(self.log) as f:
                return f.read()
        except OSError:
            return ""

    def dsn(self, upstream_dsn: str) -> str:
        """upstream_dsn (a database of the upstream server) as reached through this PgBouncer."""
        parts = urlsplit(upstream_dsn)
        netloc = f"{parts.username or 'postgres'}@127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: pgbouncer closes every connection and exits
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None

    def destroy(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

"""A PostgreSQL server owned by one test, for tests that restart the server.

The shared server on 5432 is never touched: this one gets its own data
directory (initdb) and a free port on 127.0.0.1. As root, PostgreSQL refuses to
run, so the server then runs as the `postgres` system user (runuser).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time


def _bindir() -> str | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(candidate, "pg_ctl")):
            return candidate
    path = shutil.which("pg_ctl")
    return os.path.dirname(path) if path else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnPostgres:
    def __init__(self) -> None:
        self.bindir = _bindir()
        if self.bindir is None:
            raise RuntimeError("no PostgreSQL binaries (pg_ctl) found")
        self.port = _free_port()
        self.tmp = tempfile.mkdtemp(prefix="pyqueue-own-pg-")
        self.datadir = os.path.join(self.tmp, "data")
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.tmp, "postgres", "postgres")
        self._run("initdb", "-D", self.datadir, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.tmp}'\n"
                "fsync = off\nshared_buffers = 16MB\n"
            )

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_user, os.path.join(self.bindir, tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )

    def start(self) -> None:
        self._run("pg_ctl", "-D", self.datadir, "-l", os.path.join(self.tmp, "log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", self.datadir, "-m", mode, "-w", "stop")

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def wait_ready(self, timeout: float = 30) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.dsn(), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def destroy(self) -> None:
        try:
            self.stop("immediate")
        except Exception:
            pass
        shutil.rmtree(self.tmp, ignore_errors=True)

"""A PostgreSQL server owned by one test, for tests that restart the server.

The shared server on 5432 is never touched: this one gets its own data
directory (initdb) and a free port on 127.0.0.1. As root, PostgreSQL refuses to
run, so the server then runs as the `postgres` system user (runuser).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time

from .helpers import free_port


def _bindir() -> str | None:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(candidate, "pg_ctl")):
            return candidate
    path = shutil.which("pg_ctl")
    return os.path.dirname(path) if path else None


def initialised_copy(datadir: str, name: str, binaries: list[str], initialise, owner: str | None) -> None:
    """Makes ``datadir`` a copy (cp -a: owners and modes kept) of a data directory that
    ``initialise(path)`` made once for every server made with the same binaries: initdb or
    mariadb-install-db takes seconds (most of it writing and syncing files), the copy a fraction
    of one. The master copy is made under a file lock, in the system's temporary directory, by the
    first test process that needs it (the others wait, then copy); no server ever runs on it, so
    each copy is what ``initialise`` would have made in ``datadir``. It is made again when a
    binary changes. ``owner``: the system user the server runs as (who owns the master)."""
    import fcntl
    import hashlib

    stamp = [name]
    for path in binaries:
        stamp.append(f"{path}:{os.stat(path).st_mtime_ns}")
    key = hashlib.sha1("|".join(stamp).encode()).hexdigest()[:12]
    home = os.path.join(tempfile.gettempdir(), f"pyqueue-own-datadirs-{os.geteuid()}")
    os.makedirs(home, exist_ok=True)
    os.chmod(home, 0o755)  # the server's own user reads the master copy through it
    master = os.path.join(home, f"{name}-{key}")
    with open(master + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(master, ".complete")):
            shutil.rmtree(master, ignore_errors=True)
            os.mkdir(master)
            if owner:
                shutil.chown(master, owner, owner)
            initialise(os.path.join(master, "data"))
            open(os.path.join(master, ".complete"), "w").close()
    subprocess.run(["cp", "-a", os.path.join(master, "data"), datadir], check=True, timeout=120)


class OwnPostgres:
    def __init__(self, settings: str = "") -> None:
        self.bindir = _bindir()
        if self.bindir is None:
            raise RuntimeError("no PostgreSQL binaries (pg_ctl) found")
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix="pyqueue-own-pg-")
        self.datadir = os.path.join(self.tmp, "data")
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.tmp, "postgres", "postgres")
        initialised_copy(
            self.datadir,
            "postgresql",
            [os.path.join(self.bindir, "initdb"), os.path.join(self.bindir, "postgres")],
            lambda datadir: self._run(
                "initdb", "--no-sync", "-D", datadir, "-U", "postgres", "--auth=trust", "-E", "UTF8"
            ),
            "postgres" if self.as_user else None,
        )
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.tmp}'\n"
                "fsync = off\nshared_buffers = 16MB\n" + settings
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

    def postmaster_pid(self) -> int | None:
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def kill(self) -> None:
        """SIGKILL of the postmaster and of every backend at once, as a crash of its machine would
        end them (a postmaster killed alone leaves its backends serving their sessions a while).
        pg_ctl starts the postmaster in a session of its own, so its process group is the server."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) != pid:
                raise RuntimeError(f"the postmaster {pid} does not lead its process group")
            os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _running_in_group(pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes of the killed server {pid} still run after 30 s")
            time.sleep(0.01)


def _running_in_group(pgid: int) -> bool:
    """Whether a process of the group still runs (a zombie, dead but not yet reaped by its parent,
    does not count)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            return True
    return False


class OwnPostgresPrimary(OwnPostgres):
    """A primary that waits, at every commit, for its synchronous standby to have flushed the
    commit's WAL (synchronous_commit = on, synchronous_standby_names): a commit acknowledged to
    a client survives the loss of the primary once the standby is promoted. With
    synchronous=False the standby replicates asynchronously (to show what that loses)."""

    standby_name = "standby1"

    def __init__(self, synchronous: bool = True) -> None:
        self.synchronous = synchronous
        names = self.standby_name if synchronous else ""
        super().__init__(
            settings=(
                "wal_level = replica\nmax_wal_senders = 4\nwal_keep_size = 64MB\n"
                f"synchronous_commit = on\nsynchronous_standby_names = '{names}'\n"
            )
        )

    def wait_synchronous(self, timeout: float = 30) -> None:
        """Until the standby streams (and is the synchronous one, unless synchronous=False)."""
        import psycopg

        wanted = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (self.standby_name,),
                ).fetchone()
                if row is not None and row[0] == wanted:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the standby is not streaming ({wanted}) after {timeout}s: {row}")
                time.sleep(0.1)


class OwnPostgresStandby(OwnPostgres):
    """A hot standby of `primary` (pg_basebackup -R: it streams from the primary) on a port of its
    own; `promote()` makes it a primary. It does not wait for a standby of its own once promoted
    (synchronous_standby_names = ''): a lone new primary must accept commits."""

    def __init__(self, primary: OwnPostgresPrimary) -> None:
        self.bindir = primary.bindir
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix="pyqueue-own-pg-standby-")
        self.datadir = os.path.join(self.tmp, "data")
        self.as_user = primary.as_user
        if self.as_user:
            shutil.chown(self.tmp, "postgres", "postgres")
        self._run(
            "pg_basebackup",
            "-d",
            f"host=127.0.0.1 port={primary.port} user=postgres application_name={primary.standby_name}",
            "-D",
            self.datadir,
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        )
        # postgresql.auto.conf is read last: these override what the copy of the primary's files says.
        with open(os.path.join(self.datadir, "postgresql.auto.conf"), "a") as conf:
            conf.write(
                f"\nport = {self.port}\nunix_socket_directories = '{self.tmp}'\n"
                "synchronous_standby_names = ''\nhot_standby = on\n"
            )

    def promote(self) -> None:
        self._run("pg_ctl", "-D", self.datadir, "-w", "promote")

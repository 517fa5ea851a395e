"""A MariaDB (or MySQL) server owned by one test, for tests that stop and restart the server.

The shared server on 3306 is never touched: this one gets its own data
directory (mariadb-install-db), a free port on 127.0.0.1 and its own socket and
pid files, and reads no option file (--no-defaults). As root, the server runs
as the `mysql` system user (--user=mysql), which owns the data directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time

from .helpers import free_port
from .own_postgres import initialised_copy


def _binary(*names: str) -> str | None:
    for name in names:
        for path in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
            if path and os.path.exists(path):
                return path
    return None


class OwnMariaDB:
    def __init__(self, options: tuple[str, ...] = ()) -> None:
        self.options = options  # server options after the defaults below (a later one wins)
        self.server = _binary("mariadbd", "mysqld")
        self.install_db = _binary("mariadb-install-db", "mysql_install_db")
        if self.server is None or self.install_db is None:
            raise RuntimeError("no MariaDB binaries (mariadbd, mariadb-install-db) found")
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix="pyqueue-own-mariadb-")
        os.chmod(self.tmp, 0o755)
        self.datadir = os.path.join(self.tmp, "data")
        self.socket = os.path.join(self.tmp, "mysqld.sock")
        self.pidfile = os.path.join(self.tmp, "mysqld.pid")
        self.log = os.path.join(self.tmp, "error.log")
        # Its own tmpdir: at start-up a server deletes the #sql* files it finds in its tmpdir, so with
        # the default (/tmp) it would delete the temporary tables of the shared server (and of other
        # test-owned ones) in the middle of their statements.
        self.tmpdir = os.path.join(self.tmp, "tmp")
        os.mkdir(self.tmpdir)
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.tmp, "mysql", "mysql")
            shutil.chown(self.tmpdir, "mysql", "mysql")
        self.proc: subprocess.Popen | None = None
        initialised_copy(
            self.datadir,
            "mariadb",
            [self.install_db, self.server],
            self._install,
            "mysql" if self.as_root else None,
        )

    def _install(self, datadir: str) -> None:
        """mariadb-install-db into datadir (its scratch files in a folder of its own beside it)."""
        scratch = os.path.join(os.path.dirname(datadir), "install-tmp")
        os.mkdir(scratch)
        if self.as_root:
            shutil.chown(scratch, "mysql", "mysql")
        # --auth-root-authentication-method=normal: root@localhost with an empty
        # password over TCP (the default, unix_socket, would need the OS user root).
        done = subprocess.run(
            [
                self.install_db,
                "--no-defaults",
                f"--datadir={datadir}",
                f"--tmpdir={scratch}",
                *(["--user=mysql"] if self.as_root else []),
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                "--skip-name-resolve",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=180,
        )
        if done.returncode != 0:
            output = done.stdout.decode(errors="replace")[-2000:]
            raise RuntimeError(f"{os.path.basename(self.install_db)} exited {done.returncode}: {output}")

    def _args(self) -> list[str]:
        return [
            self.server,
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--tmpdir={self.tmpdir}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.socket}",
            f"--pid-file={self.pidfile}",
            f"--log-error={self.log}",
            "--skip-name-resolve",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=16M",
            "--innodb-log-file-size=16M",
            "--innodb-flush-log-at-trx-commit=2",
            "--performance-schema=OFF",
            *(["--user=mysql"] if self.as_root else []),
            *self.options,
        ]

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("the server is already running")
        self.proc = subprocess.Popen(
            self._args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )

    def stop(self, timeout: float = 60) -> None:
        """A clean shutdown (SIGTERM): every connection is killed; waits for the process to exit."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def kill(self) -> None:
        """SIGKILL: the server ends at once, as in a crash of its machine."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)

    def execute(self, sql: str) -> list[tuple]:
        """Runs one statement as root; its rows."""
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        finally:
            conn.close()

    def dsn(self, dbname: str = "") -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{dbname}"

    def wait_ready(self, timeout: float = 60) -> None:
        import pymysql

        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                pymysql.connect(
                    host="127.0.0.1", port=self.port, user="root", password="", connect_timeout=2
                ).close()
                return
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def create_database(self, name: str) -> str:
        import pymysql

        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        finally:
            conn.close()
        return self.dsn(name)

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def destroy(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        shutil.rmtree(self.tmp, ignore_errors=True)


# Lossless semi-synchronous replication: a commit returns to its client only once the replica has
# acknowledged the transaction (AFTER_SYNC: and no other session sees it before that), and the
# primary never falls back to asynchronous replication while the replica is slow (the timeout
# would otherwise be 10 s, after which commits are acknowledged that the replica may not have).
SEMI_SYNC_PRIMARY = (
    "--server-id=1",
    "--log-bin=binlog",
    "--binlog-format=ROW",
    "--rpl-semi-sync-master-enabled=ON",
    "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
    "--rpl-semi-sync-master-timeout=3600000",
)
# The same without semi-synchronous replication: a commit returns before any replica has it.
ASYNC_PRIMARY = tuple(o for o in SEMI_SYNC_PRIMARY if not o.startswith("--rpl-semi-sync"))
SEMI_SYNC_REPLICA = (
    "--server-id=2",
    "--log-bin=binlog",
    "--binlog-format=ROW",
    "--relay-log=relay",
    "--rpl-semi-sync-slave-enabled=ON",
    "--read-only=ON",
    "--skip-slave-start",
)


def replicate(primary: OwnMariaDB, replica: OwnMariaDB, timeout: float = 60) -> None:
    """Makes `replica` (started, empty) a replica of `primary` by GTID, and waits until it
    replicates: semi-synchronously (the primary counts it as its client) when both were started
    with the SEMI_SYNC options, else until its threads run."""
    replica.execute(
        f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, MASTER_USER='root', "
        "MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1"
    )
    replica.execute("START SLAVE")
    semi_sync = primary.execute("SELECT @@rpl_semi_sync_master_enabled")[0][0] == 1
    deadline = time.monotonic() + timeout
    while True:
        if semi_sync:
            status = dict(primary.execute("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_%'"))
            if (
                status["Rpl_semi_sync_master_clients"] == "1"
                and status["Rpl_semi_sync_master_status"] == "ON"
            ):
                return
        else:
            status = _slave_status(replica)
            if status is not None and (status["Slave_IO_Running"], status["Slave_SQL_Running"]) == (
                "Yes",
                "Yes",
            ):
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the replica does not replicate after {timeout}s: {status}")
        time.sleep(0.1)


def _slave_status(replica: OwnMariaDB) -> dict | None:
    """SHOW SLAVE STATUS as a dict (None when the server replicates from nobody)."""
    import pymysql

    conn = pymysql.connect(
        host="127.0.0.1",
        port=replica.port,
        user="root",
        password="",
        autocommit=True,
        cursorclass=pymysql.cursors.DictCursor,
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SLAVE STATUS")
            return cur.fetchone()
    finally:
        conn.close()


def promote(replica: OwnMariaDB, timeout: float = 60) -> None:
    """Promotes the replica once its primary is gone: stops receiving, applies every event it
    received (acknowledged ones included: a semi-synchronous acknowledgement means received, not
    applied), then forgets the primary and accepts writes."""
    import pymysql

    conn = pymysql.connect(
        host="127.0.0.1",
        port=replica.port,
        user="root",
        password="",
        autocommit=True,
        cursorclass=pymysql.cursors.DictCursor,
    )
    try:
        with conn.cursor() as cur:
            cur.execute("STOP SLAVE IO_THREAD")
            deadline = time.monotonic() + timeout
            while True:
                cur.execute("SHOW SLAVE STATUS")
                row = cur.fetchone()
                if row["Slave_SQL_Running"] != "Yes":
                    raise RuntimeError(f"the replica's SQL thread stopped: {row['Last_SQL_Error']}")
                if (row["Relay_Master_Log_File"], row["Exec_Master_Log_Pos"]) == (
                    row["Master_Log_File"],
                    row["Read_Master_Log_Pos"],
                ):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the replica has not applied what it received after {timeout}s")
                time.sleep(0.02)
            cur.execute("STOP SLAVE")
            cur.execute("RESET SLAVE ALL")
            cur.execute("SET GLOBAL read_only = OFF")
    finally:
        conn.close()

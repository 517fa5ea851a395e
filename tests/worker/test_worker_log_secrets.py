"""A worker never writes the database password into its log or a stored last_error: the text of
a driver's error (which may quote the DSN, or a part of it equal to the password) is redacted
(pyqueue_sql.display.redact) in the reconnect log line and in describe_error (a stored last_error,
a log line)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import psycopg
import pymysql
import pytest

from pyqueue_sql import display
from pyqueue_sql.worker import Worker, describe_error
from pyqueue_sql.worker.steps import CLOSE, CONNECT, BackOff, call_steps

PASSWORD = "s3cr3t-pw-4417"
DSNS = {
    "postgresql": f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/none",
    "mysql": f"mysql://root:{PASSWORD}@127.0.0.1:1/none",
}


@pytest.fixture
def remembered(monkeypatch):
    """The command line's remember_secrets(dsn), undone after the test."""
    monkeypatch.setattr(display, "_remembered", set())

    def remember(dsn: str) -> None:
        display.remember_secrets(dsn)

    return remember


def driver_error(dialect: str, dsn: str) -> BaseException:
    """A real error of the dialect's driver whose text quotes the password: libpq's for a
    parameter whose value is the password, PyMySQL's lost connection with the DSN in its text."""
    if dialect == "postgresql":
        with pytest.raises(psycopg.OperationalError) as caught:
            psycopg.connect(f"{dsn}?sslmode={PASSWORD}", connect_timeout=1)
        assert PASSWORD in str(caught.value)
        return caught.value
    return pymysql.err.OperationalError(2013, f"Lost connection to MySQL server ({dsn})")


@pytest.mark.parametrize("dialect", sorted(DSNS))
def test_a_lost_connection_is_logged_without_the_password(dialect, remembered, caplog):
    dsn = DSNS[dialect]
    remembered(dsn)
    worker = Worker(dsn, register=False)
    worker.connected = True  # it had connected: every connection error is retried
    conn = SimpleNamespace(worker=worker, db=None, on_connect=None, role="dispatcher")
    steps = call_steps(conn, lambda db: None, give_up=None)
    assert next(steps) is CONNECT
    with caplog.at_level(logging.WARNING, logger="pyqueue_sql.worker"):
        assert steps.throw(driver_error(dialect, dsn)) is CLOSE
        assert isinstance(steps.send(None), BackOff)
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "reconnect"]
    assert record.error and PASSWORD not in record.error
    assert display.MASK in record.error
    assert PASSWORD not in caplog.text
    steps.close()


@pytest.mark.parametrize("dialect", sorted(DSNS))
def test_a_driver_error_is_described_without_the_password(dialect, remembered):
    dsn = DSNS[dialect]
    remembered(dsn)
    error = driver_error(dialect, dsn)
    text = describe_error(error)
    assert text.startswith("OperationalError: ")
    assert PASSWORD not in text and display.MASK in text

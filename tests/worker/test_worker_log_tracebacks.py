"""The worker's log lines, text and JSON, mask the DSN's password in the traceback of a record that
carries an exception (a driver error can quote the DSN), as they do in the record's own text."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from pyqueue_sql import display
from pyqueue_sql.cli import workers

SECRET = "tr4ceback-s3cret"


@pytest.mark.parametrize(
    "formatter", [workers._TextLogFormatter, workers._JsonLogFormatter], ids=["text", "json"]
)
def test_a_logged_traceback_does_not_show_the_password(formatter):
    display.remember_secrets(f"postgresql://app:{SECRET}@db.example/app")
    try:
        raise ConnectionError(f"could not connect to postgresql://app:{SECRET}@db.example/app")
    except ConnectionError:
        record = logging.LogRecord(
            "pyqueue_sql.worker", logging.ERROR, __file__, 1, "handler failed", (), sys.exc_info()
        )
    line = formatter().format(record)
    if formatter is workers._JsonLogFormatter:
        line = json.loads(line)["exc"]
    assert "ConnectionError" in line
    assert SECRET not in line

"""uninstall.sql drops every routine the routine files create, in both dialects: a helper added to
a topic and left out of it survives an uninstall, and the next install on that database then finds
pyqueue-sql objects it did not record (migrate refuses to adopt them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SQL = Path(__file__).resolve().parents[2] / "sql"
CREATED = re.compile(r"^CREATE\s+(?:OR\s+REPLACE\s+)?(FUNCTION|PROCEDURE)\s+(\w+)", re.I | re.M)
DROPPED = re.compile(r"^DROP\s+(FUNCTION|PROCEDURE)\s+IF\s+EXISTS\s+(\w+)", re.I | re.M)


@pytest.mark.parametrize("dialect", ["postgresql", "mysql"])
def test_uninstall_drops_every_routine_the_routine_files_create(dialect):
    created = {
        name.lower()
        for f in sorted((SQL / dialect / "routines").glob("*.sql"))
        for _, name in CREATED.findall(f.read_text())
    }
    dropped = {name.lower() for _, name in DROPPED.findall((SQL / dialect / "uninstall.sql").read_text())}
    assert len(created) > 100
    assert sorted(created - dropped) == []

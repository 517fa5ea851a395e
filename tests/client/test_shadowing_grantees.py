"""Admin.shadowing_grantees (dialect.admin): the MySQL/MariaDB accounts that could shadow the procedures' tables
with temporary tables of their own (docs/operations.md, least privilege), for `pyqueue-sql grant`
to refuse or warn about; none on PostgreSQL, whose routines put pg_temp last."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import pytest

from pyqueue_sql import dialects


def _run(connection, statement: str) -> None:
    cur = connection.cursor()
    try:
        cur.execute(statement)
    finally:
        cur.close()


@pytest.mark.only_dialect("mysql")
def test_an_account_that_may_create_temporary_tables_is_named(dsn):
    dialect = dialects.for_dsn(dsn)
    database = urlsplit(dsn).path.lstrip("/")
    admin = dialect.connect(dsn)
    names = [f"pq_tmp_{uuid.uuid4().hex[:8]}" for _ in range(3)]
    try:
        for name in names:
            _run(admin, f"CREATE USER `{name}`@`%` IDENTIFIED BY 'x-{uuid.uuid4().hex}'")
        _run(admin, f"GRANT CREATE TEMPORARY TABLES ON `{database}`.* TO `{names[0]}`@`%`")
        _run(admin, f"GRANT EXECUTE ON `{database}`.* TO `{names[1]}`@`%`")
        _run(admin, f"GRANT CREATE TEMPORARY TABLES ON *.* TO `{names[2]}`@`%`")
        found = dialect.admin.shadowing_grantees(admin)
        assert f"'{names[0]}'@'%'" in found
        assert f"'{names[1]}'@'%'" not in found
        assert f"'{names[2]}'@'%'" in found
    finally:
        for name in names:
            _run(admin, f"DROP USER IF EXISTS `{name}`@`%`")
        admin.close()


@pytest.mark.only_dialect("postgresql")
def test_postgresql_names_none(dsn):
    dialect = dialects.for_dsn(dsn)
    connection = dialect.connect(dsn)
    try:
        assert dialect.admin.shadowing_grantees(connection) == frozenset()
    finally:
        connection.close()

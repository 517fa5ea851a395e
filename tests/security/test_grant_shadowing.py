"""`pyqueue-sql grant --apply` refuses a MySQL/MariaDB account that may create temporary tables in
the install database (a session's temporary table shadows the procedures' own tables inside SQL
SECURITY DEFINER: tests/mysql/test_session.py), whether it holds the privilege on the
database, on *.* or through a role, with one line naming the account and the REVOKE to run; the
REVOKE it names makes the grant go through. Real accounts on the server; PostgreSQL is unaffected
(its routines put pg_temp last)."""

from __future__ import annotations

import uuid

import pytest

from pyqueue_sql import cli, privileges

from .test_privileges import Accounts, _database_of, _run


@pytest.fixture
def accounts(dsn):
    made = Accounts(dsn)
    yield made
    made.close()


def _grant(accounts: Accounts, name: str, capsys) -> tuple[int, str]:
    capsys.readouterr()
    argv = ["grant", "--role", accounts.role_arg(name), "--consumer", "--apply", "--dsn", accounts.dsn]
    code = cli.main(argv)
    return code, capsys.readouterr().err


def _routines_granted(accounts: Accounts, name: str) -> set[str]:
    rows = _run(
        accounts.admin,
        "SELECT Routine_name FROM mysql.procs_priv WHERE Db = DATABASE() AND User = %s AND Host = '%%'",
        (name,),
    )
    return {r[0].decode() if isinstance(r[0], bytes) else r[0] for r in rows}


def _refused_then_fixed(accounts: Accounts, name: str, holder: str, on: str, capsys) -> None:
    code, err = _grant(accounts, name, capsys)
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    revoke = f"REVOKE CREATE TEMPORARY TABLES ON {on} FROM {holder}"
    assert f"refusing to grant to `{name}`@`%`" in lines[0]
    assert lines[0].endswith(revoke), lines[0]
    assert _routines_granted(accounts, name) == set()  # nothing granted
    _run(accounts.admin, revoke)  # the fix it names
    code, err = _grant(accounts, name, capsys)
    assert code == 0, err
    assert _routines_granted(accounts, name) == set(privileges.CONSUMER)


@pytest.mark.only_dialect("mysql")
def test_an_account_with_temporary_tables_on_the_database_is_refused(accounts, dsn, capsys):
    name = accounts.create("tmpdb")
    database = _database_of(dsn)
    _run(accounts.admin, f"GRANT CREATE TEMPORARY TABLES ON `{database}`.* TO `{name}`@`%`")
    _refused_then_fixed(accounts, name, f"`{name}`@`%`", f"`{database}`.*", capsys)


@pytest.mark.only_dialect("mysql")
def test_an_account_with_temporary_tables_everywhere_is_refused(accounts, capsys):
    name = accounts.create("tmpall")
    _run(accounts.admin, f"GRANT CREATE TEMPORARY TABLES ON *.* TO `{name}`@`%`")
    _refused_then_fixed(accounts, name, f"`{name}`@`%`", "*.*", capsys)


@pytest.mark.only_dialect("mysql")
def test_an_account_with_temporary_tables_through_a_role_of_a_role_is_refused(accounts, dsn, capsys):
    name = accounts.create("tmprole")
    database = _database_of(dsn)
    inner, outer = (f"pq_r{i}_{uuid.uuid4().hex[:8]}" for i in range(2))
    try:
        _run(accounts.admin, f"CREATE ROLE `{inner}`")
        _run(accounts.admin, f"CREATE ROLE `{outer}`")
        _run(accounts.admin, f"GRANT CREATE TEMPORARY TABLES ON `{database}`.* TO `{inner}`")
        _run(accounts.admin, f"GRANT `{inner}` TO `{outer}`")
        _run(accounts.admin, f"GRANT `{outer}` TO `{name}`@`%`")
        code, err = _grant(accounts, name, capsys)
        assert code != 0
        assert f"through its role `{inner}`" in err
        _refused_then_fixed(accounts, name, f"`{inner}`", f"`{database}`.*", capsys)
    finally:
        for role in (outer, inner):
            _run(accounts.admin, f"DROP ROLE IF EXISTS `{role}`")


@pytest.mark.only_dialect("mysql")
def test_a_revoke_is_not_refused(accounts, dsn, capsys):
    name = accounts.with_capabilities("tmprev", "consumer")
    _run(accounts.admin, f"GRANT CREATE TEMPORARY TABLES ON `{_database_of(dsn)}`.* TO `{name}`@`%`")
    argv = ["grant", "--role", accounts.role_arg(name), "--consumer", "--revoke", "--apply", "--dsn", dsn]
    assert cli.main(argv) == 0
    assert _routines_granted(accounts, name) == set()


def test_a_plain_account_is_granted(accounts, capsys):
    name = accounts.create("plain")
    code, err = _grant(accounts, name, capsys)
    assert code == 0, err

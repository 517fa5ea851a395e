"""MariaDB: PUBLIC's privileges are every account's. CREATE TEMPORARY TABLES granted to PUBLIC on the
install database (or to a role granted to PUBLIC) lets any consumer shadow pyqueue_queue with a
temporary table inside the SQL SECURITY DEFINER procedures and reserve from a paused queue, so
`pyqueue-sql grant --apply` refuses a capability to every account while it holds, with one line
naming PUBLIC and the REVOKE that ends it; after that REVOKE the grant goes through. Also a role
holding the privilege on *.* (MariaDB's information_schema.USER_PRIVILEGES does not list roles).

Each test installs its own database and grants to PUBLIC on that database only (a PUBLIC grant is
every account's on the server: other tests, on their own databases, are not affected), and revokes
it in a finally."""

from __future__ import annotations

import contextlib
import uuid

import pytest

from pyqueue_sql import cli, privileges

from .test_privileges import Accounts, _database_of, _run

pytestmark = pytest.mark.only_dialect("mysql")


@pytest.fixture
def setup(installed_database):
    dsn = installed_database("pub")
    accounts = Accounts(dsn)
    flavor = accounts.admin.get_server_info()
    if "mariadb" not in flavor.lower():
        accounts.close()
        pytest.skip("GRANT ... TO PUBLIC is MariaDB's (10.11+)")
    cleanup: list[str] = []
    try:
        yield accounts, _database_of(dsn), cleanup
    finally:
        for statement in cleanup:
            with contextlib.suppress(Exception):
                _run(accounts.admin, statement)
        accounts.close()


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


def _reserve_from_a_paused_queue(accounts: Accounts, consumer: str) -> int:
    """The attack: the consumer shadows pyqueue_queue with a temporary table of its own (the queue not
    paused) and reserves from the paused queue; the number of messages it took."""
    queue = f"pub.{uuid.uuid4().hex[:10]}"
    _run(accounts.admin, "CALL queue_create(%s, NULL, NULL, NULL, NULL)", (queue,))
    for key in ("a", "b", "c"):
        _run(accounts.admin, "CALL queue_push(%s, %s, 'k', '1', NULL, NULL)", (queue, key))
    _run(accounts.admin, "CALL queue_pause(%s)", (queue,))
    attacker = accounts.raw(consumer)
    table = _run(accounts.admin, "SHOW CREATE TABLE pyqueue_queue")[0][1]
    _run(
        attacker,
        table.replace("CREATE TABLE", "CREATE TEMPORARY TABLE", 1)
        .split(") ENGINE")[0]
        .split(",\n  CONSTRAINT")[0]
        + ")",
    )
    _run(
        attacker, "INSERT INTO pyqueue_queue (queue_name, created_at) VALUES (%s, UTC_TIMESTAMP(6))", (queue,)
    )
    return len(_run(attacker, "CALL queue_reserve(%s, 'w', NULL, 5, NULL)", (queue,)))


def _refused_then_fixed(accounts: Accounts, name: str, capsys, *, how: str, revoke: str) -> None:
    code, err = _grant(accounts, name, capsys)
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert f"refusing to grant to `{name}`@`%`" in lines[0]
    assert how in lines[0], lines[0]
    assert lines[0].endswith(revoke), lines[0]
    assert _routines_granted(accounts, name) == set()  # nothing granted
    _run(accounts.admin, revoke)  # the fix it names
    code, err = _grant(accounts, name, capsys)
    assert code == 0, err
    assert _routines_granted(accounts, name) == set(privileges.CONSUMER)


def test_temporary_tables_granted_to_public_refuse_every_grant(setup, capsys):
    accounts, database, cleanup = setup
    # a consumer granted while nothing was wrong
    earlier = accounts.with_capabilities("early", "consumer")
    revoke = f"REVOKE CREATE TEMPORARY TABLES ON `{database}`.* FROM PUBLIC"
    cleanup.append(revoke)
    _run(accounts.admin, f"GRANT CREATE TEMPORARY TABLES ON `{database}`.* TO PUBLIC")
    # what the refusal guards against: with PUBLIC's grant that consumer reserves from a paused queue
    assert _reserve_from_a_paused_queue(accounts, earlier) == 3
    name = accounts.create("pub")
    _refused_then_fixed(
        accounts,
        name,
        capsys,
        how=f"through PUBLIC, whose privileges every account has (CREATE TEMPORARY TABLES on `{database}`.*)",
        revoke=revoke,
    )


def test_temporary_tables_of_a_role_granted_to_public_refuse_every_grant(setup, capsys):
    accounts, database, cleanup = setup
    role = f"pq_pubrole_{uuid.uuid4().hex[:8]}"
    cleanup += [f"REVOKE `{role}` FROM PUBLIC", f"DROP ROLE IF EXISTS `{role}`"]
    _run(accounts.admin, f"CREATE ROLE `{role}`")
    _run(accounts.admin, f"GRANT CREATE TEMPORARY TABLES ON `{database}`.* TO `{role}`")
    earlier = accounts.with_capabilities("early", "consumer")
    _run(accounts.admin, f"GRANT `{role}` TO PUBLIC")
    # every account has the role's privileges, without SET ROLE
    assert _reserve_from_a_paused_queue(accounts, earlier) == 3
    name = accounts.create("pubrole")
    _refused_then_fixed(
        accounts,
        name,
        capsys,
        how=f"through the role `{role}` granted to PUBLIC",
        revoke=f"REVOKE CREATE TEMPORARY TABLES ON `{database}`.* FROM `{role}`",
    )


def test_a_role_with_temporary_tables_everywhere_is_counted(setup, capsys):
    """A MariaDB role granted CREATE TEMPORARY TABLES on *.*: the grant tables list it,
    information_schema.USER_PRIVILEGES does not."""
    accounts, _, cleanup = setup
    role = f"pq_allrole_{uuid.uuid4().hex[:8]}"
    cleanup.append(f"DROP ROLE IF EXISTS `{role}`")
    _run(accounts.admin, f"CREATE ROLE `{role}`")
    _run(accounts.admin, f"GRANT CREATE TEMPORARY TABLES ON *.* TO `{role}`")
    name = accounts.create("allrole")
    _run(accounts.admin, f"GRANT `{role}` TO `{name}`@`%`")
    _refused_then_fixed(
        accounts,
        name,
        capsys,
        how=f"through its role `{role}`",
        revoke=f"REVOKE CREATE TEMPORARY TABLES ON *.* FROM `{role}`",
    )

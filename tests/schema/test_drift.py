"""`pyqueue-sql migrate --check` (drift) and `pyqueue-sql version`, on both dialects: a routine
edited by hand on the server and a dropped index are named (exit 1), none when the database holds
what this version's migrate installs (exit 0); a database that migrate has still to bring up to
this version is told to run it."""

from __future__ import annotations

import pytest

from pyqueue_sql import __version__, cli, dialects, migrate

from .test_migrate_interrupted import _sql


def _check(dsn: str, capsys) -> tuple[int, list[str], str]:
    code = cli.main(["migrate", "--check", "--dsn", dsn])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def _edit_routine_by_hand(dsn: str) -> str:
    """queue_stats with another body, as an operator's hot fix on the server; its drift name."""
    if dialects.for_dsn(dsn).name == "postgresql":
        [(definition,)] = _sql(dsn, "SELECT pg_get_functiondef('queue_stats'::regproc)")
        _sql(dsn, definition.replace("$function$", "$function$\n-- hot fix", 1))
        [(name,)] = _sql(dsn, "SELECT 'queue_stats'::regproc::oid::regprocedure::text")
        return name
    [row] = _sql(dsn, "SHOW CREATE PROCEDURE queue_stats")
    conn = dialects.for_dsn(dsn).connect(dsn)
    try:
        cur = conn.cursor()
        cur.execute("SET SESSION sql_mode = %s", (row[1],))
        cur.execute("DROP PROCEDURE queue_stats")
        cur.execute(row[2].replace("BEGIN", "BEGIN\n-- hot fix", 1))
    finally:
        conn.close()
    return "queue_stats"


def _drop_index(dsn: str) -> tuple[str, str]:
    """Drops the due-time index of pyqueue_message; its drift name and the SQL that rebuilds it."""
    if dialects.for_dsn(dsn).name == "postgresql":
        [(definition,)] = _sql(
            dsn, "SELECT indexdef FROM pg_indexes WHERE indexname = 'pyqueue_message_due_idx'"
        )
        _sql(dsn, "DROP INDEX pyqueue_message_due_idx")
        return "pyqueue_message_due_idx", definition
    _sql(dsn, "ALTER TABLE pyqueue_message DROP INDEX pyqueue_message_due_idx")
    rebuild = "ALTER TABLE pyqueue_message ADD INDEX pyqueue_message_due_idx (queue_name, scheduled_at, id)"
    return "pyqueue_message.pyqueue_message_due_idx", rebuild


def test_check_names_a_routine_edited_by_hand_and_a_dropped_index(installed_database, capsys):
    dsn = installed_database("drift")
    code, out, _ = _check(dsn, capsys)
    assert (code, out) == (
        0,
        [f"no drift: revision {migrate.head()}, as pyqueue-sql {__version__} installs it"],
    )

    routine = _edit_routine_by_hand(dsn)
    index, rebuild = _drop_index(dsn)
    code, out, err = _check(dsn, capsys)
    assert code == 1
    assert out == [
        f"index {index} is missing",
        f"routine {routine} differs from what migrate installed",
    ], out
    assert err.strip() == f"pyqueue-sql: 2 difference(s) from what pyqueue-sql {__version__} installs"

    # migrate puts the routines back; an index is the operator's to rebuild (docs/operations.md)
    migrate.upgrade(dsn)
    assert _check(dsn, capsys)[1] == [f"index {index} is missing"]
    _sql(dsn, rebuild)
    assert _check(dsn, capsys)[0] == 0


@pytest.mark.only_dialect("postgresql")
def test_check_names_a_routine_granted_to_public(installed_database, capsys):
    """The install revokes EXECUTE from PUBLIC (anyone could push and reserve): a grant back is drift."""
    dsn = installed_database("public")
    _sql(dsn, "GRANT EXECUTE ON FUNCTION queue_stats(text) TO PUBLIC")
    code, out, _ = _check(dsn, capsys)
    assert (code, out) == (1, ["grant EXECUTE on queue_stats(text) to PUBLIC was not installed by migrate"])


def test_check_and_version_on_a_database_of_the_release_before(fresh_database, capsys):
    """A database migrate left at 0.1.0's revision: --check and version say so, migrate
    brings it up and then nothing differs."""
    dsn = fresh_database("old")
    migrate.upgrade(dsn, "0001_baseline")
    code, out, _ = _check(dsn, capsys)
    assert code == 1 and out == [
        f"the schema is at revision 0001_baseline, this version ({__version__}) installs "
        f"{migrate.head()}: run `pyqueue-sql migrate`"
    ]
    assert cli.main(["version", "--dsn", dsn]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"pyqueue-sql {__version__}",
        f"schema revision: 0001_baseline (head is {migrate.head()})",
    ]
    migrate.upgrade(dsn)
    assert _check(dsn, capsys)[0] == 0
    assert cli.main(["version", "--dsn", dsn]) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"schema revision: {migrate.head()} (head)"


def test_version_without_a_database(capsys, monkeypatch):
    monkeypatch.delenv("PYQUEUE_DSN", raising=False)
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"pyqueue-sql {__version__}",
        "schema revision: unknown (no database: pass --dsn DSN or set PYQUEUE_DSN)",
    ]


def test_check_on_a_routines_only_release_says_run_migrate(installed_database, capsys, monkeypatch):
    """A release that changes only routine bodies has no revision: the sources digest that migrate
    recorded tells --check that migrate has still to run, and migrate installs them."""
    dsn = installed_database("sources")
    monkeypatch.setattr(migrate, "sources_digest", lambda dialect: "0" * 32)
    code, out, _ = _check(dsn, capsys)
    assert code == 1 and "run `pyqueue-sql migrate`" in out[0] and "whose SQL differs" in out[0]
    assert not migrate.upgrade(dsn).changed
    assert _check(dsn, capsys)[0] == 0


def test_a_worker_refuses_to_start_on_a_schema_older_than_its_version(fresh_database):
    """`pyqueue-sql worker` of this version against a database migrate left at the release before:
    one line saying to run migrate, exit 1, before it reserves anything."""
    import subprocess
    import sys

    dsn = fresh_database("oldworker")
    migrate.upgrade(dsn, "0001_baseline")
    argv = [
        sys.executable,
        "-m",
        "pyqueue_sql.cli",
        "worker",
        "tests.worker.worker_handlers:sleepy",
        "--queue",
        "q",
        "--dsn",
        dsn,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done
    assert done.stderr.strip().splitlines() == [
        f"pyqueue-sql: error: pyqueue-sql {__version__} needs schema revision {migrate.head()}, this "
        "database is at 0001_baseline: run `pyqueue-sql migrate` first (docs/operations.md, Upgrading)"
    ]


def test_the_worker_check_reads_the_head_alembic_finds_without_alembic():
    """`pyqueue-sql worker` checks the schema without importing alembic (pyqueue_sql.schema_version,
    which reads migrations/versions itself): it must name the head and revisions alembic walks."""
    from pyqueue_sql import schema_version

    known, ours = schema_version.revisions()
    assert ours == migrate.head()
    assert known == {r.revision for r in migrate._script().walk_revisions()}


def test_the_worker_check_reads_the_sql_digest_only_for_an_older_release(monkeypatch):
    """The routines of an older release (its record's digest not this version's SQL) are refused; the
    digest, read from the package's SQL files, is computed only for a record of an older release, so
    a worker's start at the current release skips it."""
    from pyqueue_sql import schema_version
    from pyqueue_sql.errors import SchemaNotInstalledError

    ours = schema_version.revisions()[1]
    digest = schema_version.sources_digest("postgresql")
    older = {(schema_version.PACKAGE, "pyqueue-sql 0.0.1"): "0" * 32}
    with pytest.raises(
        SchemaNotInstalledError, match="needs its routines, this database has those of pyqueue-sql 0.0.1"
    ):
        schema_version.refuse_older((ours,), older, "postgresql")
    schema_version.refuse_older(
        (ours,), {(schema_version.PACKAGE, "pyqueue-sql 0.0.1"): digest}, "postgresql"
    )
    monkeypatch.setattr(schema_version, "sources_digest", lambda dialect: pytest.fail("digest read"))
    current = {(schema_version.PACKAGE, f"pyqueue-sql {__version__}"): "0" * 32}
    schema_version.refuse_older((ours,), current, "postgresql")


def test_the_worker_check_reads_the_schema_in_one_statement(installed_database):
    """`pyqueue-sql worker`'s schema check on a database at the head: one statement
    (schema_state) returns what the three of the fallback return."""
    from pyqueue_sql import schema_version
    from pyqueue_sql.queries import migration_queries

    dsn = installed_database("onecheck")
    dialect = dialects.for_dsn(dsn)
    queries = migration_queries(dialect.name)
    conn = dialect.connect(dsn)
    try:
        cursor = conn.cursor()
        cursor.execute(queries["schema_state"])  # an error here: the start pays three round trips
        assert cursor.fetchall()
        apart = schema_version._read_apart(cursor, queries, dialect.name)
        cursor.close()
    finally:
        conn.close()
    assert apart[1]  # at the head: what migrate recorded
    assert schema_version._read(dsn) == apart


def test_check_names_what_least_privilege_forbids_and_spares_the_ingest_grants(installed_database, capsys):
    """Application accounts hold no table privilege but the ingest capability's, and the internal
    helpers are granted to nobody (docs/operations.md, "Least privilege"): --check names a table
    grant to an application account, a column grant, EXECUTE on a helper, and (PostgreSQL) a
    disabled trigger of queue_ingest and a rule that copies every message elsewhere (MySQL/MariaDB:
    a trigger that does), one line each, also after a migrate since; `pyqueue-sql grant --ingest`
    is no drift."""
    from tests.security.test_privileges import Accounts

    dsn = installed_database("exposed")
    accounts = Accounts(dsn)
    try:
        app = accounts.with_capabilities("app", "producer", "consumer")
        accounts.with_capabilities("spark", "ingest")
        assert _check(dsn, capsys)[0] == 0
        pg = dialects.for_dsn(dsn).name == "postgresql"
        who = f'"{app}"' if pg else f"`{app}`@`%`"
        shown = app if pg else f"'{app}'@'%'"
        helper = "pyqueue__check_name(text,text,integer)" if pg else "pyqueue__check_name"
        _sql(dsn, f"GRANT SELECT, UPDATE ON pyqueue_message TO {who}")
        _sql(dsn, f"GRANT SELECT (result) ON pyqueue_result TO {who}")
        _sql(dsn, f"GRANT EXECUTE ON {'FUNCTION' if pg else 'PROCEDURE'} {helper} TO {who}")
        forbids = "application accounts hold no table privilege but the ingest capability's"
        expected = [
            f"grant SELECT on table pyqueue_message to {shown}: {forbids} (INSERT and SELECT on queue_ingest)",
            f"grant UPDATE on table pyqueue_message to {shown}: {forbids} (INSERT and SELECT on queue_ingest)",
            f"grant SELECT on column pyqueue_result.result to {shown}: {forbids} (INSERT and SELECT on queue_ingest)",
            f"grant EXECUTE on {helper} to {shown}: the internal pyqueue__* helpers are granted to nobody",
        ]
        if pg:
            [(trigger,)] = _sql(
                dsn,
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'queue_ingest'::regclass AND NOT tgisinternal",
            )
            _sql(dsn, "ALTER TABLE queue_ingest DISABLE TRIGGER USER")
            _sql(dsn, "CREATE TABLE spy (LIKE pyqueue_message)")
            _sql(
                dsn,
                "CREATE RULE copy_all AS ON INSERT TO pyqueue_message DO ALSO INSERT INTO spy SELECT NEW.*",
            )
            expected += [
                f"trigger queue_ingest.{trigger} is disabled: ALTER TABLE ... ENABLE TRIGGER puts it back",
                "rule copy_all on pyqueue_message was not installed by migrate: DROP RULE removes it",
            ]
        else:  # MySQL/MariaDB have no rules and cannot disable a trigger: a trigger added is the way
            _sql(dsn, "CREATE TABLE spy LIKE pyqueue_message")
            _sql(
                dsn,
                "CREATE TRIGGER copy_all AFTER INSERT ON pyqueue_message FOR EACH ROW "
                "INSERT INTO spy (queue_name, p_key, p_kind, payload) VALUES (NEW.queue_name, NEW.p_key, NEW.p_kind, NEW.payload)",
            )
            expected.append("trigger pyqueue_message.copy_all was not installed by migrate")
        code, out, _ = _check(dsn, capsys)
        assert code == 1
        assert sorted(out) == sorted(expected), out
        migrate.upgrade(dsn)  # a migrate since makes none of it look installed
        assert sorted(_check(dsn, capsys)[1]) == sorted(expected)
    finally:
        accounts.close()

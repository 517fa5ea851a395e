"""The alembic migrations: same catalog as sql/, round trips, idempotent, safe in parallel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import dialects, migrate
from pyqueue_sql.queries import install_script, parse_named, script, split_script

HERE = Path(__file__).parent


def _run_all(dsn: str, statements: dict[str, str]) -> dict[str, list[tuple]]:
    dialect = dialects.for_dsn(dsn)
    conn = dialect.connect(dsn)
    try:
        out = {}
        for name, sql in statements.items():
            cur = conn.cursor()
            cur.execute(sql)
            out[name] = [tuple(str(v) for v in row) for row in cur.fetchall()]
            cur.close()
        return out
    finally:
        conn.close()


def catalog(dsn: str) -> dict[str, list[tuple]]:
    name = dialects.for_dsn(dsn).name
    return _run_all(dsn, parse_named((HERE / f"catalog_{name}.sql").read_text()))


def install_from_sql(dsn: str) -> None:
    """What a user of another migration tool does: run sql/<dialect>/schema.sql, then routines.sql."""
    dialect = dialects.for_dsn(dsn)
    text = install_script(dialect.name)
    conn = dialect.connect(dsn)
    try:
        cur = conn.cursor()
        if dialect.name == "postgresql":
            cur.execute(text)
        else:
            for statement in split_script(text):
                cur.execute(statement)
        cur.close()
    finally:
        conn.close()


def smoke(dsn: str) -> None:
    with pyqueue_sql.connect(dsn) as db:
        q = db.queue("smoke").create()
        assert q.push("k", "kind", {"ok": True})
        [r] = q.reserve()
        assert q.commit(r)
        q.drop()


@pytest.mark.slow
def test_schema_sql_and_migrations_build_the_same_catalog(fresh_database):
    from_sql, from_migrations = fresh_database("sql"), fresh_database("mig")
    install_from_sql(from_sql)
    migrate.upgrade(from_migrations)
    a, b = catalog(from_sql), catalog(from_migrations)
    assert a["columns"] and a["routines"] and a["indexes"]
    for part in a:
        assert a[part] == b[part], part
    smoke(from_sql)


@pytest.mark.slow
def test_upgrade_downgrade_upgrade_round_trip(fresh_database):
    dsn = fresh_database()
    migrate.upgrade(dsn)
    installed = catalog(dsn)
    assert migrate.current(dsn) == (migrate.head(),)
    smoke(dsn)
    migrate.downgrade(dsn)
    assert migrate.current(dsn) == ()
    assert all(rows == [] for rows in catalog(dsn).values())
    migrate.upgrade(dsn)
    assert catalog(dsn) == installed
    smoke(dsn)


@pytest.mark.slow
def test_migrate_twice_is_a_no_op_and_keeps_data(fresh_database):
    dsn = fresh_database()
    migrate.upgrade(dsn)
    with pyqueue_sql.connect(dsn) as db:
        db.queue("kept").create().push("k", "kind", 1)
    migrate.upgrade(dsn)
    with pyqueue_sql.connect(dsn) as db:
        assert db.queue("kept").stats().ready == 1


@pytest.mark.slow
def test_migrate_from_several_processes_at_once(fresh_database):
    dsn = fresh_database()
    code = "import sys; from pyqueue_sql import migrate; migrate.upgrade(sys.argv[1])"
    procs = [
        subprocess.Popen([sys.executable, "-c", code, dsn], stderr=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    assert [rc for rc, _ in results] == [0, 0, 0, 0], results
    assert migrate.current(dsn) == (migrate.head(),)
    smoke(dsn)


@pytest.mark.slow
def test_own_version_table_leaves_the_applications_alone(fresh_database):
    dsn = fresh_database()
    dialect = dialects.for_dsn(dsn)
    conn = dialect.connect(dsn)
    cur = conn.cursor()
    cur.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
    cur.execute("INSERT INTO alembic_version VALUES ('app_rev_42')")
    cur.close()
    migrate.upgrade(dsn)
    migrate.downgrade(dsn)
    migrate.upgrade(dsn)
    cur = conn.cursor()
    cur.execute("SELECT version_num FROM alembic_version")
    assert cur.fetchall() in ([("app_rev_42",)], (("app_rev_42",),))
    cur.execute("SELECT version_num FROM pyqueue_alembic_version")
    assert [tuple(r) for r in cur.fetchall()] == [(migrate.head(),)]
    cur.close()
    conn.close()


@pytest.mark.slow
def test_upgrade_from_an_applications_alembic_connection(fresh_database):
    """An application calls migrate.upgrade(op.get_bind()) inside its own migration."""
    from sqlalchemy import create_engine, pool

    dsn = fresh_database()
    dialect = dialects.for_dsn(dsn)
    engine = create_engine(
        f"{dialect.sqlalchemy_dialect}://",
        poolclass=pool.NullPool,
        creator=lambda: dialect.connect(dsn, autocommit=False),
    )
    with engine.begin() as connection:
        migrate.upgrade(connection)
    engine.dispose()
    assert migrate.current(dsn) == (migrate.head(),)
    smoke(dsn)


def _revisions() -> list[str]:
    return sorted(p.stem for p in (migrate.migrations_dir() / "versions").glob("0*.py"))


def test_latest_revision_freezes_the_current_routines():
    """The newest revision re-installs sql/<dialect>/routines.sql as it is now
    (`make freeze` copies it); older revisions stay as they were released."""
    latest = _revisions()[-1]
    assert latest == migrate.head()
    for name in ("postgresql", "mysql"):
        frozen = migrate.migrations_dir() / "sql" / name / f"{latest}.routines.sql"
        assert frozen.read_text() == script(name, "routines.sql"), f"{name}: run `make freeze`"


def test_core_revision_is_still_what_was_released():
    """0001 installs the tables and routines of the core contract; its routines
    are what 0002 restores on the way down."""
    for name in ("postgresql", "mysql"):
        up = (migrate.migrations_dir() / "sql" / name / "0001_core.up.sql").read_text()
        restore = (migrate.migrations_dir() / "sql" / name / "0002_extensions.down_routines.sql").read_text()
        assert "CREATE TABLE pyqueue_message" in up
        for routine in ("queue_push", "queue_reserve", "queue_commit", "queue_stats"):
            assert routine in restore, (name, routine)


def test_released_routines_are_what_the_next_revision_restores():
    """Each revision's down migration re-installs exactly the routines its
    predecessor froze when it was released: a copy of them
    (<next>.down_routines.sql, older revisions) or that very file."""
    import inspect

    from alembic.script import ScriptDirectory

    script = ScriptDirectory(str(migrate.migrations_dir()))
    revisions = _revisions()
    for previous, nxt in zip(revisions[1:], revisions[2:]):
        for name in ("postgresql", "mysql"):
            folder = migrate.migrations_dir() / "sql" / name
            copy = folder / f"{nxt}.down_routines.sql"
            if copy.is_file():
                assert copy.read_text() == (folder / f"{previous}.routines.sql").read_text(), (
                    name,
                    previous,
                    nxt,
                )
            else:
                down = inspect.getsource(script.get_revision(nxt).module.downgrade)
                assert down.rstrip().endswith(f'run_sql_file("{previous}.routines.sql")'), (
                    previous,
                    nxt,
                    down,
                )


@pytest.mark.slow
def test_downgrade_one_revision_restores_the_previous_catalog(fresh_database):
    revisions = _revisions()
    previous = revisions[-2]
    only_previous, round_trip = fresh_database("prev"), fresh_database("back")
    migrate.upgrade(only_previous, previous)
    migrate.upgrade(round_trip)
    smoke(round_trip)
    migrate.downgrade(round_trip, previous)
    assert migrate.current(round_trip) == (previous,)
    a, b = catalog(only_previous), catalog(round_trip)
    for part in a:
        assert a[part] == b[part], part
    smoke(round_trip)
    migrate.upgrade(round_trip)
    smoke(round_trip)


@pytest.mark.slow
def test_a_migration_that_fails_half_way_keeps_what_it_did_and_resumes(
    fresh_database, tmp_path, monkeypatch, dialect
):
    """PostgreSQL: the run is one transaction, nothing stays. MySQL: DDL commits at
    once, nothing is undone (no table is ever dropped on failure) and the run is
    recorded, so the next run after the fix resumes and completes it."""
    import shutil

    broken = tmp_path / "migrations"
    shutil.copytree(migrate.migrations_dir(), broken)
    up = broken / "sql" / dialect / "0001_core.up.sql"
    up.write_text(up.read_text() + "\nCREATE TABLE pyqueue_queue (this is not sql);\n")
    monkeypatch.setattr(migrate, "migrations_dir", lambda: broken)
    dsn = fresh_database()
    with pytest.raises(Exception):
        migrate.upgrade(dsn)
    assert migrate.current(dsn) == ()
    left = catalog(dsn)
    if dialect == "postgresql":
        assert all(rows == [] for rows in left.values())
    else:
        assert left["columns"] and left["routines"], "what MySQL committed stays"
    monkeypatch.undo()
    migrate.upgrade(dsn)
    assert migrate.current(dsn) == (migrate.head(),)
    smoke(dsn)


def test_calls_on_a_database_without_the_schema_say_so(fresh_database):
    with pyqueue_sql.connect(fresh_database()) as db:
        with pytest.raises(pyqueue_sql.SchemaNotInstalledError, match="pyqueue-sql migrate"):
            db.queue("q").push("k", "kind", 1)
        with pytest.raises(pyqueue_sql.SchemaNotInstalledError):
            db.stats()

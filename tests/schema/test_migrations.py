"""The alembic migrations: same catalog as sql/, round trips, idempotent, safe in parallel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import dialects, migrate
from pyqueue_sql._resources import sql_file
from pyqueue_sql.queries import install_files, install_script, parse_named, split_script

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
    """What a user of another migration tool does: run sql/<dialect>/schema.sql, then routines/."""
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
    assert everything_in(dsn) == {"tables": [], "routines": []}, "nothing is left behind"
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


# ---- the revisions --------------------------------------------------------------------


def test_the_revisions_are_one_chain_and_copy_no_sql():
    """0001_baseline (0.1.0, frozen), then one revision per later table change, each
    down_revision the one before; their DDL is in sql/<dialect>/revisions/, where `pyqueue-sql
    sql` reads it too, never in migrations/."""
    folder = migrate.migrations_dir()
    names = sorted(p.stem for p in (folder / "versions").glob("*.py"))
    assert names[0] == "0001_baseline" and migrate.head() == names[-1], names
    chain = [r.revision for r in reversed(list(migrate._script().walk_revisions()))]
    assert chain == names, "each revision's down_revision is the one before it"
    assert list(folder.rglob("*.sql")) == []
    for dialect in dialects.NAMES:
        files = sorted(p.name for p in sql_file(dialect, "revisions").glob("*.sql"))
        assert files == sorted(f"{n}.{way}.sql" for n in names[1:] for way in ("up", "down")), files
        assert install_files(dialect) == ["schema.sql"] + [f"revisions/{n}.up.sql" for n in names[1:]] + [
            "routines"
        ]


def break_sql_file(monkeypatch, tmp_path: Path, filename: str, edit) -> None:
    """The migrations read ``edit(text)`` instead of sql/<dialect>/<filename> (a file, or
    routines: its files as one script)."""
    real_file, real_script = migrate.sql_file, migrate.script

    def patched(dialect: str, name: str) -> Path:
        if name != filename:
            return real_file(dialect, name)
        path = tmp_path / dialect / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(edit(real_script(dialect, name)))
        return path

    monkeypatch.setattr(migrate, "sql_file", patched)
    monkeypatch.setattr(migrate, "script", lambda dialect, name: patched(dialect, name).read_text())


@pytest.mark.slow
def test_a_migration_that_fails_half_way_keeps_what_it_did_and_resumes(
    fresh_database, tmp_path, monkeypatch, dialect
):
    """The revisions are committed before the routines (PostgreSQL: so that their locks
    are held for the DDL only; MySQL: DDL commits at once). Nothing is undone (no table
    is ever dropped on failure): the revisions are recorded, the routines (the run's
    last step) are what stays to do, `migrate --check` says so, and the next run after
    the fix installs them (MySQL: resuming the recorded run)."""
    break_sql_file(
        monkeypatch,
        tmp_path,
        "routines",
        lambda text: text + "\nCREATE TABLE pyqueue_queue (this is not sql);\n",
    )
    dsn = fresh_database()
    with pytest.raises(Exception):
        migrate.upgrade(dsn)
    left = catalog(dsn)
    assert migrate.current(dsn) == (migrate.head(),)
    assert left["columns"], "the tables stay"
    problems = " ".join(migrate.check(dsn).problems)
    if dialect == "postgresql":
        assert left["routines"] == [] and "run `pyqueue-sql migrate`" in problems, problems
    else:
        assert left["routines"], "what MySQL committed stays"
        assert "interrupted" in problems
    monkeypatch.undo()
    migrate.upgrade(dsn)
    assert migrate.current(dsn) == (migrate.head(),)
    assert migrate.check(dsn).ok
    smoke(dsn)


# ---- alembic's offline mode ---------------------------------------------------------------


def sqlalchemy_url(dsn: str) -> str:
    return f"{dialects.for_dsn(dsn).sqlalchemy_dialect}://{dsn.split('://', 1)[1]}"


def run_sql_output(dsn: str, text: str) -> None:
    """Runs SQL that `alembic ... --sql` printed, as psql / the mysql client would."""
    dialect = dialects.for_dsn(dsn)
    conn = dialect.connect(dsn)
    try:
        cur = conn.cursor()
        for statement in [text] if dialect.name == "postgresql" else split_script(text):
            cur.execute(statement)
        cur.close()
    finally:
        conn.close()


def everything_in(dsn: str) -> dict[str, list[tuple]]:
    """Every table, view and routine in the database's current schema, ours or not."""
    schema = "current_schema()" if dialects.for_dsn(dsn).name == "postgresql" else "DATABASE()"
    return _run_all(
        dsn,
        {
            "tables": f"SELECT table_name FROM information_schema.tables WHERE table_schema = {schema}",
            "routines": "SELECT routine_name FROM information_schema.routines "
            f"WHERE routine_schema = {schema}",
        },
    )


def _alembic_on_migrations(tmp_path: Path, dsn: str, *args: str) -> str:
    """`alembic` itself on migrations/ (migrations/env.py), pointed at dsn; its stdout."""
    ini = tmp_path / f"alembic-{dsn.rsplit('/', 1)[1]}.ini"
    ini.write_text(
        f"[alembic]\nscript_location = {migrate.migrations_dir()}\nsqlalchemy.url = {sqlalchemy_url(dsn)}\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(ini), *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_alembic_offline_mode_prints_sql_that_installs_and_removes_the_schema(fresh_database, tmp_path):
    """`alembic upgrade base:head --sql` on migrations/ prints schema.sql and routines.sql
    (MySQL: with their DELIMITER lines) and our version table; run by a SQL client, that
    output builds the catalog `alembic upgrade head` builds online, and `downgrade
    head:base --sql` removes it all."""
    offline, online = fresh_database("offline"), fresh_database("online")
    run_sql_output(offline, _alembic_on_migrations(tmp_path, offline, "upgrade", "base:head", "--sql"))
    _alembic_on_migrations(tmp_path, online, "upgrade", "head")
    assert migrate.current(offline) == migrate.current(online) == (migrate.head(),)
    assert catalog(offline) == catalog(online)
    smoke(offline)
    assert not migrate.upgrade(offline).changed
    run_sql_output(offline, _alembic_on_migrations(tmp_path, offline, "downgrade", "head:base", "--sql"))
    assert migrate.current(offline) == ()
    left = everything_in(offline)
    # older alembic drops its version table at base in offline mode, newer keeps it (empty)
    assert left["routines"] == [] and left["tables"] in ([], [("pyqueue_alembic_version",)]), left


def test_calls_on_a_database_without_the_schema_say_so(fresh_database):
    with pyqueue_sql.connect(fresh_database()) as db:
        with pytest.raises(pyqueue_sql.SchemaNotInstalledError, match="pyqueue-sql migrate"):
            db.queue("q").push("k", "kind", 1)
        with pytest.raises(pyqueue_sql.SchemaNotInstalledError):
            db.stats()


def test_a_target_that_is_neither_a_dsn_nor_a_connection_is_refused_in_one_line():
    """Outside an offline alembic run, a mock connection (or anything else) is no target."""
    from sqlalchemy import create_mock_engine

    engine = create_mock_engine("postgresql+psycopg://", lambda *a, **k: None)
    for target in (engine, 42):
        with pytest.raises(pyqueue_sql.UnsupportedDsnError, match="a DSN is a string such as postgresql://"):
            migrate.upgrade(target)

"""The alembic migrations: same catalog as sql/, round trips, idempotent, safe in parallel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import dialects, migrate, routine_sets
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


# ---- one copy of each routine definition ---------------------------------------------


def _routine_files(folder: Path, dialect: str) -> list[tuple[str, routine_sets.RoutineFile]]:
    """(revision, parsed routine file) of every released revision, oldest first, read from
    the revision modules' ROUTINES under ``folder`` (a migrations folder)."""
    from alembic.script import ScriptDirectory

    out = []
    for i, rev in enumerate(reversed(list(ScriptDirectory(str(folder)).walk_revisions()))):
        name = getattr(rev.module, "ROUTINES", None)
        if name and name != migrate.CURRENT_ROUTINES:
            text = (folder / "sql" / dialect / name).read_text()
            out.append((rev.revision, routine_sets.parse(dialect, text, name, i)))
    return out


def identical_files(folder: Path) -> list[tuple[str, str]]:
    """Pairs of files under <folder>/sql with the same content."""
    seen: dict[str, str] = {}
    pairs = []
    for path in sorted((folder / "sql").rglob("*.sql")):
        text = path.read_text()
        name = str(path.relative_to(folder))
        if text in seen:
            pairs.append((seen[text], name))
        seen.setdefault(text, name)
    return pairs


def repeated_definitions(folder: Path, dialect: str) -> list[str]:
    """Routines that a revision's routine file defines exactly as the set before it did
    (a copy), or removes although the set before it does not have them."""
    found, current = [], {}
    for revision, routines in _routine_files(folder, dialect):
        for name, routine in routines.routines.items():
            before = current.get(name)
            if routine.removal and before is None:
                found.append(f"{revision}: removes {name}, which it does not have")
            elif not routine.removal and before is not None and before.definition() == routine.definition():
                found.append(f"{revision}: {name} is defined as in {before.source.origin}")
        current = routine_sets.overlay(current, routines)
    return found


def test_no_two_migration_files_are_identical():
    assert identical_files(migrate.migrations_dir()) == []


def test_no_routine_definition_is_in_two_migration_files_unless_changed():
    for dialect in ("postgresql", "mysql"):
        files = _routine_files(migrate.migrations_dir(), dialect)
        assert [rev for rev, _ in files] == _revisions()[: len(files)]
        assert sum(len(f.routines) for _, f in files) >= 100  # the check sees the routines
        assert repeated_definitions(migrate.migrations_dir(), dialect) == [], dialect


def test_the_checks_find_a_copy(tmp_path):
    """The two checks above fail on a copied file and on a routine copied unchanged into
    a later revision's file."""
    import shutil

    copy = tmp_path / "migrations"
    shutil.copytree(migrate.migrations_dir(), copy)
    folder = copy / "sql" / "postgresql"
    shutil.copy(folder / "0001_core.down.sql", folder / "0001_core.down_again.sql")
    assert identical_files(copy) == [
        ("sql/postgresql/0001_core.down.sql", "sql/postgresql/0001_core.down_again.sql")
    ]
    (folder / "0001_core.down_again.sql").unlink()
    # queue_stats did not change in 0002 on PostgreSQL: appending 0001's definition to 0002's file
    core = routine_sets.parse("postgresql", (folder / "0001_core.routines.sql").read_text(), "0001")
    stats = [s.render() for s in core.routines["queue_stats"].statements]
    extended = folder / "0002_extensions.routines.sql"
    text = extended.read_text()
    at = text.index("-- No routine is callable") if "-- No routine is callable" in text else len(text)
    extended.write_text(text[:at] + "\n".join(stats) + "\n\n" + text[at:])
    assert repeated_definitions(copy, "postgresql") == [
        "0002_extensions: queue_stats is defined as in 0001_core.routines.sql"
    ]
    assert repeated_definitions(copy, "mysql") == []


def test_the_newest_revision_reads_the_current_routines_and_has_no_copy_of_them():
    """Until released, the newest revision applies sql/<dialect>/routines.sql itself:
    no frozen copy of it (nor of its routines) lies under migrations/."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(migrate.migrations_dir())).get_revision(migrate.head())
    assert head.module.ROUTINES == migrate.CURRENT_ROUTINES
    for dialect in ("postgresql", "mysql"):
        folder = migrate.migrations_dir() / "sql" / dialect
        assert not (folder / f"{migrate.head()}.routines.sql").exists()
        current = script(dialect, "routines.sql")
        assert all(p.read_text() != current for p in folder.glob("*.sql"))
        # the upgrade to the head runs exactly what differs from the set before it
        chain = migrate.routine_chain(dialect)
        head_set = chain.routine_set(migrate.head())
        before = chain.routine_set(chain.previous(migrate.head()))
        assert set(head_set) == set(routine_sets.parse(dialect, current, "current").routines)
        ran = routine_sets.parse(dialect, chain.upgrade_script(migrate.head()), "head")
        # ... and DROPs of the routines it removed
        assert set(ran.routines) == set(routine_sets.changed(before, head_set)) | set(
            routine_sets.removed(before, head_set)
        )


def test_release_freezes_what_the_newest_revision_runs(tmp_path):
    """`make release-routines` (migrate.release_routines) writes the newest revision's
    routine file and switches the revision to it; its upgrade then runs the same
    statements, its downgrade too, and a second release has nothing to do."""
    import shutil

    copy = tmp_path / "migrations"
    shutil.copytree(migrate.migrations_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    head = migrate.head()
    before = {d: migrate.routine_chain(d) for d in ("postgresql", "mysql")}
    assert migrate.release_routines(copy) == head
    module = (copy / "versions" / f"{head}.py").read_text()
    assert f'ROUTINES = "{head}.routines.sql"' in module and "CURRENT_ROUTINES" not in module
    with pytest.raises(migrate.MigrationError, match="nothing to release"):
        migrate.release_routines(copy)
    for dialect, chain in before.items():
        released = (copy / "sql" / dialect / f"{head}.routines.sql").read_text()

        def codes(text: str) -> list[str]:
            return [s.code for s in routine_sets.split(dialect, text)]

        assert codes(released) == codes(chain.upgrade_script(head))
        after = routine_sets.Chain(
            dialect,
            [routine_sets.RevisionRoutines(r.revision, r.routines) for r in chain.revisions[:-1]]
            + [routine_sets.RevisionRoutines(head, f"{head}.routines.sql")],
            copy / "sql" / dialect,
            migrate.current_routines_file(dialect),
        )
        assert codes(after.downgrade_script(head)) == codes(chain.downgrade_script(head))
        assert {n: r.definition() for n, r in after.routine_set(head).items()} == {
            n: r.definition() for n, r in chain.routine_set(head).items()
        }
        assert repeated_definitions(copy, dialect) == []
    assert identical_files(copy) == []


def test_routine_files_split_as_the_migrator_runs_them():
    """routine_sets reads MySQL files statement by statement exactly as split_script
    (which runs them) does, and a composed script splits back into its statements."""
    for path in sorted((migrate.migrations_dir() / "sql" / "mysql").glob("*.sql")) + [
        migrate.current_routines_file("mysql")
    ]:
        text = path.read_text()
        mine = routine_sets.split("mysql", text)
        assert [s.code for s in mine] == [
            routine_sets.Statement.parse(s, ";").code for s in split_script(text)
        ], path
    for dialect in ("postgresql", "mysql"):
        chain = migrate.routine_chain(dialect)
        restoring = []
        for rev in _revisions():
            composed = chain.downgrade_script(rev)
            restored = routine_sets.restore(chain.routine_set(chain.previous(rev)), chain.routine_set(rev))
            assert sorted(routine_sets.created_routines(dialect, composed)) == sorted(
                r.name for r in restored
            )
            if restored:
                restoring.append(rev)
        # the first revision has nothing before it; a revision that only adds routines restores none
        assert _revisions()[0] not in restoring and restoring, (dialect, restoring)


def test_postgresql_statements_end_only_outside_quotes_comments_and_bodies():
    text = """
-- a comment; not a statement end
CREATE OR REPLACE FUNCTION f(a text) RETURNS text LANGUAGE plpgsql AS $body$
BEGIN
    RETURN 'it''s; fine' || $$;$$ || E'\\';' || "odd;name";  /* ; */
END;
$body$;
DO $$ BEGIN PERFORM 1; END $$;
SELECT 1"""
    statements = routine_sets.split("postgresql", text)
    assert [s.code.split()[0] for s in statements] == ["CREATE", "DO", "SELECT"]
    assert statements[0].comment == "-- a comment; not a statement end"
    assert statements[0].code.endswith("$body$") and "it''s; fine" in statements[0].code
    assert routine_sets.created_routines("postgresql", text) == ["f"]


# ---- downgrades, one revision at a time ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("revision", _revisions()[1:])
def test_downgrade_one_revision_restores_the_previous_catalog(fresh_database, revision):
    """Up to a revision, down one: the catalog is the one a database upgraded straight
    to the previous revision has; the queue works there, and up again works too."""
    revisions = _revisions()
    previous = revisions[revisions.index(revision) - 1]
    only_previous, round_trip, straight = (
        fresh_database("prev"),
        fresh_database("back"),
        fresh_database("straight"),
    )
    migrate.upgrade(only_previous, previous)
    migrate.upgrade(straight, revision)
    migrate.upgrade(round_trip, revision)
    smoke(round_trip)
    migrate.downgrade(round_trip, previous)
    assert migrate.current(round_trip) == (previous,)
    a, b = catalog(only_previous), catalog(round_trip)
    assert a["routines"]
    for part in a:
        assert a[part] == b[part], part
    smoke(round_trip)
    migrate.upgrade(round_trip, revision)
    assert migrate.current(round_trip) == (revision,)
    assert _renumbered(catalog(round_trip)) == _renumbered(catalog(straight))
    smoke(round_trip)


def _renumbered(parts: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """The catalog with each table's column positions counted 1, 2, ...: PostgreSQL keeps
    the number of a dropped column, so columns a downgrade dropped and the upgrade added
    again come back with higher numbers, in the same order."""
    out = dict(parts)
    seen: dict[str, int] = {}
    renumbered = []
    for row in parts["columns"]:
        seen[row[0]] = seen.get(row[0], 0) + 1
        renumbered.append((row[0], row[1], str(seen[row[0]]), *row[3:]))
    out["columns"] = renumbered
    return out


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
    routines = broken / "sql" / dialect / "0001_core.routines.sql"
    routines.write_text(routines.read_text() + "\nCREATE TABLE pyqueue_queue (this is not sql);\n")
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

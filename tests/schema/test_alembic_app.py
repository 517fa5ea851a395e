"""The README's alembic recipe, run by alembic itself on an application made with `alembic init`.

The application has revisions of its own before and after the one that calls
``migrate.upgrade(op.get_bind())``; `alembic upgrade head`, `alembic downgrade
base` and `alembic upgrade head` again must all succeed, and so must the env.py
variant (``migrate.upgrade(connection)`` after the application's own
migrations). Each runs with the newest alembic installed in the test
environment and with the lowest version pyproject allows (alembic 1.13.0, installed
once under .venv/alembic-min/ and kept for later runs: put before the test
environment's own packages, it is the alembic that both the alembic command and
pyqueue_sql.migrate import; everything else is the test environment's).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pyqueue_sql import dialects, migrate

from ..conftest import UNDER_CI
from .test_migrations import everything_in, run_sql_output

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MIN_DIR = ROOT / ".venv" / "alembic-min"
MIN_SPEC = "alembic==1.13.0"


def _min_alembic_python() -> Path:
    """A python that imports alembic 1.13 (and this project, SQLAlchemy and the drivers from the
    test environment): built once, by one test process at a time (the suite runs in several: the
    others wait and reuse it)."""
    MIN_DIR.parent.mkdir(parents=True, exist_ok=True)
    with open(MIN_DIR.parent / "alembic-min.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build_min_alembic_python()


def _build_min_alembic_python() -> Path:
    """MIN_DIR/site holds alembic 1.13 alone (pip install --target --no-deps: its dependencies,
    SQLAlchemy, Mako and typing-extensions, are the test environment's, which pyproject's floors
    allow it); MIN_DIR/bin/python runs the test environment's python with MIN_DIR/site first on
    sys.path (PYTHONPATH comes before site-packages). A few seconds, where a venv of its own with
    the drivers and this project installed took most of a minute."""
    python, site = MIN_DIR / "bin" / "python", MIN_DIR / "site"
    stamp = MIN_DIR / ".complete"
    wanted = f"{MIN_SPEC} --target, for {sys.executable}"
    if stamp.is_file() and stamp.read_text() == wanted and python.is_file():
        return python
    shutil.rmtree(MIN_DIR, ignore_errors=True)
    step = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    step += ["--no-deps", "--target", str(site), MIN_SPEC]
    done = subprocess.run(step, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        reason = f"could not install {MIN_SPEC} into {site}: {done.stderr[-2000:]}"
        if UNDER_CI:
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    python.parent.mkdir(parents=True)
    python.write_text(
        f'#!/bin/sh\nPYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" exec "{sys.executable}" "$@"\n'
    )
    python.chmod(0o755)
    stamp.write_text(wanted)
    return python


@pytest.fixture(params=["newest", "lowest"])
def alembic_python(request) -> Path:
    if request.param == "newest":
        return Path(sys.executable)
    return _min_alembic_python()


def _alembic_version(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import alembic; print(alembic.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _sqlalchemy_url(dsn: str) -> str:
    dialect = dialects.for_dsn(dsn)
    scheme, rest = dsn.split("://", 1)
    return f"{dialect.sqlalchemy_dialect}://{rest}"


def _alembic(python: Path, app: Path, *args: str, stderr: bool = True) -> str:
    done = subprocess.run(
        [str(python), "-m", "alembic", *args],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode == 0, (
        f"alembic {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done.stdout + (done.stderr if stderr else "")


def _init_app(python: Path, tmp_path: Path, dsn: str) -> Path:
    """What `alembic init` makes, in tmp_path, pointed at the test database. `alembic init` runs
    once per alembic of a test process (tmp_path.parent is the process's own base directory):
    each test gets a copy of what it made, and edits that."""
    made = tmp_path.parent / f"alembic-init-{'lowest' if python.parent.parent == MIN_DIR else 'newest'}"
    if not (made / "alembic.ini").is_file():
        shutil.rmtree(made, ignore_errors=True)
        made.mkdir()
        _alembic(python, made, "init", "migrations")
    app = tmp_path / "app"
    shutil.copytree(made, app)
    ini = app / "alembic.ini"
    text = re.sub(
        r"^sqlalchemy\.url\s*=.*$",
        lambda _: f"sqlalchemy.url = {_sqlalchemy_url(dsn)}",
        ini.read_text(),
        flags=re.MULTILINE,
    )
    ini.write_text(text)
    return app


def _revision(app: Path, revision: str, down: str | None, upgrade: str, downgrade: str) -> None:
    (app / "migrations" / "versions" / f"{revision}.py").write_text(
        textwrap.dedent(f"""\
        from alembic import op
        import sqlalchemy as sa
        from pyqueue_sql import migrate

        revision = {revision!r}
        down_revision = {down!r}
        branch_labels = None
        depends_on = None


        def upgrade():
            {upgrade}


        def downgrade():
            {downgrade}
        """)
    )


def _app_tables(dsn: str) -> set[str]:
    dialect = dialects.for_dsn(dsn)
    conn = dialect.connect(dsn)
    try:
        cur = conn.cursor()
        if dialect.name == "postgresql":
            cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        else:
            cur.execute("SHOW TABLES")
        names = {row[0] for row in cur.fetchall()}
        cur.close()
        return {n for n in names if n.startswith("app_") or n == "alembic_version"}
    finally:
        conn.close()


def _app_version(dsn: str) -> list[str]:
    dialect = dialects.for_dsn(dsn)
    conn = dialect.connect(dsn)
    try:
        cur = conn.cursor()
        cur.execute("SELECT version_num FROM alembic_version")
        return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


def _smoke(dsn: str) -> None:
    import pyqueue_sql

    with pyqueue_sql.connect(dsn) as db:
        q = db.queue("alembic-app").create()
        assert q.push("k", "kind", {"ok": True})
        [r] = q.reserve()
        assert q.commit(r)
        q.drop()


def _recipe_app(alembic_python: Path, tmp_path: Path, dsn: str) -> Path:
    """The README recipe: our upgrade in the application's second revision."""
    app = _init_app(alembic_python, tmp_path, dsn)
    _revision(
        app,
        "app1_accounts",
        None,
        'op.create_table("app_account", sa.Column("id", sa.Integer, primary_key=True))',
        'op.drop_table("app_account")',
    )
    _revision(
        app,
        "app2_queue",
        "app1_accounts",
        "migrate.upgrade(op.get_bind())",
        "migrate.downgrade(op.get_bind())",
    )
    _revision(
        app,
        "app3_invoices",
        "app2_queue",
        'op.create_table("app_invoice", sa.Column("id", sa.Integer, primary_key=True))',
        'op.drop_table("app_invoice")',
    )
    return app


def test_readme_recipe_inside_alembic_upgrade_downgrade_upgrade(alembic_python, fresh_database, tmp_path):
    dsn = fresh_database("app")
    app = _recipe_app(alembic_python, tmp_path, dsn)
    for round_no in range(2):
        _alembic(alembic_python, app, "upgrade", "head")
        assert _app_tables(dsn) == {"alembic_version", "app_account", "app_invoice"}
        assert _app_version(dsn) == ["app3_invoices"]
        assert migrate.current(dsn) == (migrate.head(),)
        _smoke(dsn)
        if round_no == 0:
            _alembic(alembic_python, app, "downgrade", "base")
            assert _app_tables(dsn) == {"alembic_version"}
            assert _app_version(dsn) == []
            assert migrate.current(dsn) == ()


def test_readme_recipe_in_offline_mode(alembic_python, fresh_database, tmp_path):
    """`alembic upgrade head --sql` (offline: op.get_bind() is a mock connection) prints
    the application's SQL with ours inside it, recorded in our own version table; a SQL
    client runs it into a working queue, and `downgrade head:base --sql` takes it away."""
    dsn = fresh_database("offline")
    app = _recipe_app(alembic_python, tmp_path, dsn)
    run_sql_output(dsn, _alembic(alembic_python, app, "upgrade", "head", "--sql", stderr=False))
    assert _app_tables(dsn) == {"alembic_version", "app_account", "app_invoice"}
    assert _app_version(dsn) == ["app3_invoices"]
    assert migrate.current(dsn) == (migrate.head(),)
    _smoke(dsn)
    run_sql_output(dsn, _alembic(alembic_python, app, "downgrade", "head:base", "--sql", stderr=False))
    assert _app_tables(dsn) <= {"alembic_version"}
    assert migrate.current(dsn) == ()
    assert everything_in(dsn)["routines"] == []


def test_env_py_variant(alembic_python, fresh_database, tmp_path):
    dsn = fresh_database("env")
    app = _init_app(alembic_python, tmp_path, dsn)
    env = app / "migrations" / "env.py"
    text = env.read_text()
    # The online runner is the last `with context.begin_transaction():` block of the generated env.py.
    match = list(
        re.finditer(
            r"^( *)with context\.begin_transaction\(\):\n\1    context\.run_migrations\(\)\n",
            text,
            flags=re.MULTILINE,
        )
    )[-1]
    indent = match.group(1)
    text = (
        text[: match.end()] + f"{indent}from pyqueue_sql import migrate\n"
        f"{indent}migrate.upgrade(connection)\n" + text[match.end() :]
    )
    env.write_text(text)
    _revision(
        app,
        "app1_accounts",
        None,
        'op.create_table("app_account", sa.Column("id", sa.Integer, primary_key=True))',
        'op.drop_table("app_account")',
    )
    _revision(
        app,
        "app2_invoices",
        "app1_accounts",
        'op.create_table("app_invoice", sa.Column("id", sa.Integer, primary_key=True))',
        'op.drop_table("app_invoice")',
    )

    _alembic(alembic_python, app, "upgrade", "head")
    assert _app_tables(dsn) == {"alembic_version", "app_account", "app_invoice"}
    assert migrate.current(dsn) == (migrate.head(),)
    _smoke(dsn)
    _alembic(alembic_python, app, "downgrade", "base")
    assert _app_tables(dsn) == {"alembic_version"}
    assert migrate.current(dsn) == (migrate.head(),)  # env.py upgrades ours on every run
    _alembic(alembic_python, app, "upgrade", "head")
    assert _app_version(dsn) == ["app2_invoices"]
    assert migrate.current(dsn) == (migrate.head(),)
    _smoke(dsn)


def test_lowest_alembic_is_what_pyproject_allows():
    """The 'lowest' variant really runs the floor pyproject declares."""
    text = (ROOT / "pyproject.toml").read_text()
    assert '"alembic>=1.13"' in text, "update MIN_SPEC in tests/schema/test_alembic_app.py with the new floor"
    assert _alembic_version(_min_alembic_python()) == "1.13.0"


def _push(dsn: str, count: int) -> None:
    import pyqueue_sql

    with pyqueue_sql.connect(dsn) as db:
        q = db.queue("alembic-live").create()
        for i in range(count):
            assert q.push(f"k{i}", "kind", {"i": i})


def _live(dsn: str) -> int:
    return migrate.live_messages(dsn)


def _alembic_fails(python: Path, app: Path, *args: str) -> str:
    done = subprocess.run(
        [str(python), "-m", "alembic", *args],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert done.returncode != 0, f"alembic {' '.join(args)} succeeded:\n{done.stdout}\n{done.stderr}"
    return done.stderr


def _alembic_on_a_terminal(python: Path, app: Path, answer: str, *args: str) -> tuple[int, str]:
    """alembic run with a terminal (a pty) as stdin, stdout and stderr, typing answer once asked."""
    import pty
    import select

    pid, fd = pty.fork()
    if pid == 0:  # the child: alembic on the pty
        os.chdir(app)
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        os.execv(str(python), [str(python), "-m", "alembic", *args])
    seen, answered = b"", False
    while True:
        ready, _, _ = select.select([fd], [], [], 120)
        if not ready:
            os.kill(pid, 9)
            raise AssertionError(f"alembic on a terminal said nothing for 120 s: {seen!r}")
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
        if not answered and b"[y/N]" in seen:
            os.write(fd, answer.encode() + b"\n")
            answered = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace")


def test_recipe_downgrade_refuses_to_drop_live_messages_without_confirmation(
    alembic_python, fresh_database, tmp_path
):
    """`alembic downgrade` past the recipe's revision drops the queue's tables: like `pyqueue-sql
    migrate --downgrade`, it refuses without a terminal unless confirmed (`-x yes`), nothing
    changed; with `-x yes` the queue and its messages are gone."""
    dsn = fresh_database("live")
    app = _recipe_app(alembic_python, tmp_path, dsn)
    _alembic(alembic_python, app, "upgrade", "app2_queue")
    _push(dsn, 3)

    err = _alembic_fails(alembic_python, app, "downgrade", "app1_accounts")
    assert "refusing to drop 3 live message(s) without confirmation" in err, err
    assert "alembic -x yes downgrade" in err, err
    assert _live(dsn) == 3 and migrate.current(dsn) == (migrate.head(),)
    assert _app_version(dsn) == ["app2_queue"]

    _alembic(alembic_python, app, "-x", "yes", "downgrade", "app1_accounts")
    assert migrate.current(dsn) == () and _live(dsn) == 0
    assert _app_version(dsn) == ["app1_accounts"]
    assert _app_tables(dsn) == {"alembic_version", "app_account"}


@pytest.mark.parametrize("answer", ["n", "y"])
def test_recipe_downgrade_asks_on_a_terminal(fresh_database, tmp_path, answer):
    dsn = fresh_database("tty")
    python = Path(sys.executable)
    app = _recipe_app(python, tmp_path, dsn)
    _alembic(python, app, "upgrade", "app2_queue")
    _push(dsn, 2)

    code, seen = _alembic_on_a_terminal(python, app, answer, "downgrade", "app1_accounts")
    assert "drops its 2 live message(s); continue? [y/N]" in seen, seen
    if answer == "n":
        assert code != 0 and "downgrade cancelled; nothing changed" in seen, seen
        assert _live(dsn) == 2 and migrate.current(dsn) == (migrate.head(),)
        assert _app_version(dsn) == ["app2_queue"]
    else:
        assert code == 0, seen
        assert migrate.current(dsn) == () and _live(dsn) == 0
        assert _app_version(dsn) == ["app1_accounts"]


def test_downgrade_on_a_connection_refuses_live_messages_unless_told(fresh_database):
    """The API the recipe calls: on a Connection, refused without a terminal; drop_messages=True
    drops; drop_messages=False refuses on a DSN too."""
    from sqlalchemy import create_engine

    dsn = fresh_database("api")
    migrate.upgrade(dsn)
    _push(dsn, 1)
    with pytest.raises(migrate.LiveMessagesError, match="refusing to drop 1 live message"):
        migrate.downgrade(dsn, drop_messages=False)
    engine = create_engine(_sqlalchemy_url(dsn))
    try:
        with engine.connect() as connection:
            with pytest.raises(migrate.LiveMessagesError, match="without confirmation"):
                migrate.downgrade(connection)
            connection.rollback()
            assert migrate.current(connection) == (migrate.head(),)
            migrate.downgrade(connection, drop_messages=True)
            connection.commit()
    finally:
        engine.dispose()
    assert migrate.current(dsn) == () and _live(dsn) == 0

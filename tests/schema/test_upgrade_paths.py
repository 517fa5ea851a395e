"""Upgrades from the newest release (RELEASES) to head by the two other paths an application
takes: its own alembic setup (`alembic upgrade head`, our revisions called from its env.py or from
a revision of its own), and Django's `manage.py migrate`. Each installs with the release's code
(its tree, test_mixed_fleet.released_tree), then upgrades with head's: our revisions after the
release's are applied, the routines are this version's, and `migrate --check` finds nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import migrate

from .releases import ROOT
from .test_alembic_app import _init_app, _revision
from .test_mixed_fleet import released_tree  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow


def _run(argv: list[str], cwd: Path, pythonpath: str, **env: str) -> str:
    done = subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": pythonpath, "PYTHONDONTWRITEBYTECODE": "1", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout


def _upgraded(dsn: str) -> None:
    assert migrate.current(dsn) == (migrate.head(),)
    assert migrate.check(dsn).problems == []
    with pyqueue_sql.connect(dsn) as db:
        assert db.queue("kept").stats().ready == 1, "the message pushed under the release is still there"


def _push_one(dsn: str, tree: Path) -> None:
    code = "import sys, pyqueue_sql\nwith pyqueue_sql.connect(sys.argv[1]) as db:\n"
    code += "    db.queue('kept').create().push('k', 'kind', {})\n"
    _run([sys.executable, "-c", code, dsn], tree, str(tree))


@pytest.mark.parametrize("where", ["env.py", "revision"])
def test_an_applications_alembic_upgrades_from_the_release(fresh_database, released_tree, tmp_path, where):  # noqa: F811
    """env.py: migrate.upgrade(connection) after the application's migrations, so every `alembic
    upgrade` brings ours up. revision: the README recipe, migrate.upgrade(op.get_bind()) in a
    revision of the application's; the upgrade is a new revision of the application's that
    calls it again (docs/operations.md, "Upgrading")."""
    dsn = fresh_database("alembicup")
    python = Path(sys.executable)
    app = _init_app(python, tmp_path, dsn)
    if where == "env.py":
        env = app / "migrations" / "env.py"
        text = env.read_text()
        runner = "        with context.begin_transaction():\n            context.run_migrations()\n"
        assert text.count(runner) == 1
        env.write_text(
            text.replace(
                runner,
                runner + "        from pyqueue_sql import migrate\n        migrate.upgrade(connection)\n",
            )
        )
        _revision(app, "app1", None, "pass", "pass")
    else:
        _revision(app, "app1", None, "migrate.upgrade(op.get_bind())", "migrate.downgrade(op.get_bind())")
    alembic = [sys.executable, "-m", "alembic", "upgrade", "head"]
    _run(alembic, app, str(released_tree))
    assert migrate.current(dsn) == ("0001_baseline",)
    _push_one(dsn, released_tree)
    if where == "revision":
        _revision(app, "app2", "app1", "migrate.upgrade(op.get_bind())", "pass")
    _run(alembic, app, str(ROOT))
    _upgraded(dsn)


def test_django_manage_py_migrate_upgrades_from_the_release(fresh_database, released_tree):  # noqa: F811
    """The release's test project migrated with the release's code (install_schema), then head's
    project with head's code: the app's migration after install_schema runs the upgrade."""
    dsn = fresh_database("djangoup")
    for tree in (released_tree, ROOT):
        project = tree / "tests" / "django" / "project"
        _run(
            [sys.executable, "manage.py", "migrate", "--no-input"],
            project,
            f"{project}{os.pathsep}{tree}",
            PYQUEUE_DJANGO_DSN=dsn,
        )
        if tree == released_tree:
            assert migrate.current(dsn) == ("0001_baseline",)
            _push_one(dsn, released_tree)
    _upgraded(dsn)

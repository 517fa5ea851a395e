"""Installs pyqueue-sql's schema on ``manage.py migrate`` and removes it when the app is migrated
back to zero: pyqueue_sql.migrate.upgrade / downgrade, the same revisions and version table
(pyqueue_alembic_version) as ``pyqueue-sql migrate``, so a database installed either way is
current for the other. They run on a connection of their own (a DSN built from the migrated
database's settings): on PostgreSQL the install is one transaction of its own, on MySQL/MariaDB it
resumes where an interrupted run stopped."""

from django.db import migrations


def _dsn(schema_editor):
    """The migrated database's DSN; None for a database pyqueue-sql cannot live in (another alias
    of a project with several databases, e.g. SQLite): nothing is installed there."""
    from pyqueue_sql.contrib.django.connection import DSN_SCHEMES, backend_dsn

    if schema_editor.connection.vendor not in DSN_SCHEMES:
        return None
    return backend_dsn(schema_editor.connection.alias)


def install(apps, schema_editor):
    from pyqueue_sql import migrate

    dsn = _dsn(schema_editor)
    if dsn is not None:
        migrate.upgrade(dsn)


def uninstall(apps, schema_editor):
    from pyqueue_sql import migrate

    dsn = _dsn(schema_editor)
    if dsn is not None:
        migrate.downgrade(dsn, drop_messages=True)


class Migration(migrations.Migration):
    atomic = False  # the schema's own connection commits; Django's holds no transaction meanwhile
    initial = True
    dependencies = []
    operations = [migrations.RunPython(install, uninstall)]

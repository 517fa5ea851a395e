"""Installs pyqueue-sql's schema on ``manage.py migrate`` and removes it when the app is migrated
back to zero: pyqueue_sql.migrate.upgrade / downgrade, the same revisions and version table
(pyqueue_alembic_version) as ``pyqueue-sql migrate``, so a database installed either way is
current for the other. They run on a connection of their own (a DSN built from the migrated
database's settings): on PostgreSQL the install is one transaction of its own, on MySQL/MariaDB it
resumes where an interrupted run stopped."""

from django.db import migrations


def _dsn(schema_editor):
    from pyqueue_sql.contrib.django.connection import dsn_for

    return dsn_for(schema_editor.connection.alias)


def install(apps, schema_editor):
    from pyqueue_sql import migrate

    migrate.upgrade(_dsn(schema_editor))


def uninstall(apps, schema_editor):
    from pyqueue_sql import migrate

    migrate.downgrade(_dsn(schema_editor), drop_messages=True)


class Migration(migrations.Migration):
    atomic = False  # the schema's own connection commits; Django's holds no transaction meanwhile
    initial = True
    dependencies = []
    operations = [migrations.RunPython(install, uninstall)]

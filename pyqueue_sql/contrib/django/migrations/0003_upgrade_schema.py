"""Brings pyqueue-sql's schema up to this version on ``manage.py migrate`` (pyqueue_sql.migrate.upgrade:
the revisions after the one recorded, then the routines of this version), in a database that an
earlier release installed. install_schema ran once, when the project first migrated; each release
whose SQL changed adds one migration like this one, so that ``manage.py migrate`` runs the
upgrade again. Migrating back past it changes nothing: a schema is never downgraded to a release
before (docs/operations.md, "Upgrading"); migrating the app to zero removes it all."""

from django.db import migrations

from .install_schema import install


class Migration(migrations.Migration):
    atomic = False  # the schema's own connection commits; Django's holds no transaction meanwhile
    dependencies = [("pyqueue_sql", "0002_queuemessage")]
    operations = [migrations.RunPython(install, migrations.RunPython.noop)]

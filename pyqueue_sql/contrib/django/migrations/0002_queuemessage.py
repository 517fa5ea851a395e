"""The admin's stand-in for the queue's messages: an unmanaged model (no table is created), whose
permissions Django's admin checks."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("pyqueue_sql", "install_schema")]
    operations = [
        migrations.CreateModel(
            name="QueueMessage",
            fields=[
                (
                    "id",
                    models.AutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID"),
                )
            ],
            options={
                "managed": False,
                "db_table": "pyqueue_admin_placeholder",
                "verbose_name": "queue message",
                "verbose_name_plural": "queue messages and results",
                "default_permissions": ("view", "change", "delete"),
            },
        )
    ]

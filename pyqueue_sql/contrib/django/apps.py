from django.apps import AppConfig


class PyQueueConfig(AppConfig):
    name = "pyqueue_sql.contrib.django"
    label = "pyqueue_sql"
    verbose_name = "pyqueue-sql"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from django.core.signals import setting_changed
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from . import setup

        # manage.py migrate: the backends' queues, set up where the admin capability is held
        post_migrate.connect(setup.after_migrate, sender=self, dispatch_uid="pyqueue_sql.setup")
        # the backends' own connections close when Django closes its own (the end of a request,
        # close_old_connections, connections.close_all(), the test runner's teardown)
        connection_created.connect(setup.watch_connection, dispatch_uid="pyqueue_sql.watch")
        # and when a test's override_settings(TASKS=...) makes Django drop every backend
        setting_changed.connect(setup.tasks_changed, dispatch_uid="pyqueue_sql.tasks_changed")

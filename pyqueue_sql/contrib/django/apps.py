from django.apps import AppConfig


class PyQueueConfig(AppConfig):
    name = "pyqueue_sql.contrib.django"
    label = "pyqueue_sql"
    verbose_name = "pyqueue-sql"
    default_auto_field = "django.db.models.AutoField"

"""Settings of the test project: its database is the one PYQUEUE_DJANGO_DSN names (a PostgreSQL or
MySQL/MariaDB DSN of the tests' server)."""

import datetime as dt
import os
from urllib.parse import unquote, urlsplit

dsn = urlsplit(os.environ["PYQUEUE_DJANGO_DSN"])
if dsn.scheme.startswith("mysql"):
    import pymysql

    pymysql.install_as_MySQLdb()  # Django's MySQL backend on PyMySQL, pyqueue-sql's driver
    ENGINE = "django.db.backends.mysql"
else:
    ENGINE = "django.db.backends.postgresql"

try:  # Django 6.0+: the task framework is Django's own
    import django.tasks  # noqa: F401

    TASK_APPS = []
except ImportError:  # Django 5.2: the django-tasks backport
    TASK_APPS = ["django_tasks"]

SECRET_KEY = "tests-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",  # the admin's pages over the queues (optional)
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    *TASK_APPS,
    "pyqueue_sql.contrib.django",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": ENGINE,
        "NAME": unquote(dsn.path.lstrip("/")),
        "USER": unquote(dsn.username or ""),
        "PASSWORD": unquote(dsn.password or ""),
        "HOST": dsn.hostname or "",
        "PORT": str(dsn.port or ""),
    }
}
TASKS = {
    "default": {
        "BACKEND": "pyqueue_sql.contrib.django.PyQueueBackend",
        "QUEUES": ["default", "emails"],  # pyqueue-sql queues, created with these settings
        "OPTIONS": {
            "DATABASE": "default",  # the Django database whose transaction an enqueue joins
            "RESULT_RETENTION": dt.timedelta(days=1),  # how long results are kept
            "QUEUE_SETTINGS": {"max_attempts": 1},  # Queue.create(...): no retries here
        },
    }
}
# Django's records of the tasks (each task's end, a failure with its traceback) on the console
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        name: {"handlers": ["console"], "level": "INFO", "propagate": False}
        for name in ("django.tasks", "django_tasks")
    },
}

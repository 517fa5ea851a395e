"""The backend's system checks (run by tests/django/test_django.py with each Django): a DATABASE
missing from DATABASES, one that is SQLite, one whose driver Django cannot load (MySQL without
mysqlclient or PyMySQL installed as MySQLdb), and one that is fine (PostgreSQL on psycopg 3).
With the argument `without-app`: the same settings without pyqueue_sql.contrib.django in
INSTALLED_APPS."""

import sys

import django
from django.conf import settings
from django.core.management import call_command

try:
    import django.tasks  # noqa: F401

    apps = []
except ImportError:
    apps = ["django_tasks"]
settings.configure(
    INSTALLED_APPS=[*apps] if sys.argv[1:] == ["without-app"] else [*apps, "pyqueue_sql.contrib.django"],
    DATABASES={
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
        "pg": {"ENGINE": "django.db.backends.postgresql", "NAME": "app"},
        "my": {"ENGINE": "django.db.backends.mysql", "NAME": "app"},
    },
    TASKS={
        "lite": {"BACKEND": "pyqueue_sql.contrib.django.PyQueueBackend"},
        "missing": {"BACKEND": "pyqueue_sql.contrib.django.PyQueueBackend", "OPTIONS": {"DATABASE": "nope"}},
        "pg": {"BACKEND": "pyqueue_sql.contrib.django.PyQueueBackend", "OPTIONS": {"DATABASE": "pg"}},
        "my": {"BACKEND": "pyqueue_sql.contrib.django.PyQueueBackend", "OPTIONS": {"DATABASE": "my"}},
    },
)
django.setup()
try:
    call_command("check")
except Exception as exc:  # SystemCheckError: the errors, one per line
    for line in str(exc).splitlines():
        if "(pyqueue_sql." in line:
            print(" ".join(line.split(": ", 1)[1].split()[:2]))  # its id and backend

"""What the app connects to Django's signals: setting the backends' queues up after
``manage.py migrate``, and closing the backends' own connections when Django closes its own."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("pyqueue_sql.django")


def backends(database: str | None = None) -> list[Any]:
    """The PyQueueBackends of TASKS (those whose DATABASE is ``database``, when given)."""
    from django.conf import settings

    from . import compat
    from .backend import PyQueueBackend

    found = []
    for alias, params in (getattr(settings, "TASKS", None) or {}).items():
        if not str(params.get("BACKEND", "")).endswith(".PyQueueBackend"):
            continue
        backend = compat.task_backends[alias]
        if isinstance(backend, PyQueueBackend) and (database is None or backend.database == database):
            found.append(backend)
    return found


def after_migrate(sender: Any, using: str = "default", verbosity: int = 1, **kwargs: Any) -> None:
    """post_migrate of this app: the queues of the backends of the migrated database, once the
    schema is there (not after ``migrate pyqueue_sql zero``, which removed it)."""
    from django.db import connections

    from pyqueue_sql import migrate

    from .connection import DSN_SCHEMES

    if connections[using].vendor not in DSN_SCHEMES:
        return
    for backend in backends(using):
        if not migrate.current(backend.admin_dsn):
            continue
        names = backend.setup_queues()
        if verbosity >= 1:
            print(f"  pyqueue-sql: queues of TASKS[{backend.alias!r}] set up: {', '.join(names)}")


def close_this_thread() -> None:
    """Closes this thread's own connections of every PyQueueBackend it made."""
    from . import compat
    from .backend import PyQueueBackend

    for backend in compat.task_backends.all(initialized_only=True):
        if isinstance(backend, PyQueueBackend):
            backend.close_thread()


def tasks_changed(sender: Any, setting: str, **kwargs: Any) -> None:
    """setting_changed (override_settings(TASKS=...) in a test): Django drops every task backend
    and makes new ones, and the dropped ones stay referenced (from the context of each thread that
    used them) where nothing closes them: their own connections close now. Otherwise they would
    stay open to the end of the process, and the test database could not be dropped."""
    if setting == "TASKS":
        from .backend import close_all

        close_all()


def watch_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    """connection_created: when Django closes this connection (the end of a request with
    CONN_MAX_AGE 0, close_old_connections, connections.close_all()), this thread's own connections
    of the backends close too; before the test runner drops a test database, every thread's."""
    if getattr(connection, "_pyqueue_watched", False):
        return
    connection._pyqueue_watched = True
    close = connection.close

    def closing() -> None:
        try:
            close_this_thread()
        finally:
            close()

    connection.close = closing
    creation = connection.creation
    destroy = creation.destroy_test_db

    def destroy_test_db(*args: Any, **kw: Any) -> Any:
        from .backend import close_all

        close_all()
        return destroy(*args, **kw)

    creation.destroy_test_db = destroy_test_db

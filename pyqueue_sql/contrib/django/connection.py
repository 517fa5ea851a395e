"""Django's database connections, as pyqueue-sql reaches them.

The enqueue runs on Django's own connection of the backend's database alias (``Database.wrap`` of
the DB-API connection under it: psycopg 3 for PostgreSQL, PyMySQL installed as MySQLdb for
MySQL/MariaDB), so it is part of the transaction Django has open there. What needs connections of
its own (the worker, the migration, the queues' setup, reading results) gets a DSN built from the
same ``DATABASES`` entry."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections

import pyqueue_sql

# Django's database vendors (connection.vendor) -> the scheme of pyqueue-sql's DSNs.
DSN_SCHEMES = {"postgresql": "postgresql", "mysql": "mysql"}
# The DB-API modules under Django's connection that Database.wrap takes (PyMySQL also when installed
# as MySQLdb: its module is still pymysql).
DRIVERS = frozenset({"psycopg", "pymysql"})


def dsn_for(alias: str) -> str:
    """The pyqueue-sql DSN of Django's database ``alias``, from its NAME, USER, PASSWORD, HOST and
    PORT (its OPTIONS are not carried over: the backend's ``DSN`` option says what they would)."""
    settings = connections.settings[alias]
    scheme = DSN_SCHEMES.get(connections[alias].vendor)
    if scheme is None:
        raise ImproperlyConfigured(
            f"pyqueue-sql needs a PostgreSQL or MySQL/MariaDB database; DATABASES[{alias!r}] uses "
            f"{settings.get('ENGINE')!r}"
        )
    user = quote(settings.get("USER") or "", safe="")
    password = settings.get("PASSWORD") or ""
    auth = ""
    if user:
        auth = user + (":" + quote(password, safe="") if password else "") + "@"
    host = settings.get("HOST") or ""
    query = ""
    if host.startswith("/"):  # a Unix socket's folder (libpq's host=)
        host, query = "", f"?host={quote(host, safe='')}"
    elif ":" in host and not host.startswith("["):  # an IPv6 address
        host = f"[{host}]"
    port = settings.get("PORT")
    netloc = auth + host + (f":{port}" if port else "")
    return f"{scheme}://{netloc}/{quote(settings.get('NAME') or '', safe='')}{query}"


def backend_dsn(alias: str) -> str:
    """The DSN of pyqueue-sql's own connections to Django's database ``alias``: the ``DSN`` option
    of a PyQueueBackend in TASKS whose DATABASE is this alias, else dsn_for(alias)."""
    from django.conf import settings

    for params in (getattr(settings, "TASKS", None) or {}).values():
        options = params.get("OPTIONS") or {}
        if (
            str(params.get("BACKEND", "")).endswith(".PyQueueBackend")
            and options.get("DATABASE", DEFAULT_DB_ALIAS) == alias
            and options.get("DSN")
        ):
            return str(options["DSN"])
    return dsn_for(alias)


def wrapped(alias: str) -> pyqueue_sql.Database:
    """A Database on Django's connection of ``alias``, inside whatever transaction Django has open
    on it (outside ``atomic()`` Django's connection is in autocommit: each call commits at once)."""
    connection = connections[alias]
    connection.ensure_connection()
    raw: Any = connection.connection
    try:
        return pyqueue_sql.Database.wrap(raw)
    except pyqueue_sql.UnsupportedDsnError as exc:
        raise ImproperlyConfigured(
            f"pyqueue-sql cannot run on the driver of DATABASES[{alias!r}] "
            f"({type(raw).__module__}.{type(raw).__name__}): PostgreSQL needs psycopg 3, MySQL/MariaDB "
            "PyMySQL installed as MySQLdb (import pymysql; pymysql.install_as_MySQLdb() in settings.py)"
        ) from exc

"""pyqueue-sql for Django: a backend of Django's task framework (``django.tasks`` on Django 6.0+,
the ``django-tasks`` backport before), the schema installed by ``manage.py migrate``, and
``manage.py pyqueue_worker``. Add ``"pyqueue_sql.contrib.django"`` to INSTALLED_APPS and see
docs/django.md."""

from __future__ import annotations

from typing import Any

__all__ = ["PyQueueBackend"]


def __getattr__(name: str) -> Any:  # the backend imports Django's task API: only when asked for
    if name == "PyQueueBackend":
        from .backend import PyQueueBackend

        return PyQueueBackend
    raise AttributeError(name)

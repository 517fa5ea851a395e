"""The project's tasks, found where the project defines them, never where a message says.

A message's kind names a task (``task.module_path``), but the kind is written by whoever may push:
a producer. So nothing here imports a name read from a message or a result id. The tasks are
discovered once per process, the way Django's admin discovers ``admin`` modules: the ``tasks``
module of every installed app that has one, plus the modules named by the backend's
``TASK_MODULES`` option (for tasks that live elsewhere). Every Django ``Task`` found among those
modules' names is known by its ``module_path``; a kind that is not one of them is unknown, and
nothing is imported for it."""

from __future__ import annotations

import threading
from importlib import import_module
from types import ModuleType
from typing import Any

from . import compat

_LOCK = threading.Lock()
_FOUND: dict[tuple[str, ...], dict[str, Any]] = {}


class UnknownTask(LookupError):
    """A kind that is no task of the project, or a task on a queue that is not its own."""


def task_modules(extra: Any = ()) -> list[ModuleType]:
    """Imports (once: Python caches them) and returns the ``tasks`` module of every installed app
    that has one, then the modules of ``extra`` (dotted names written by the project in its
    settings). An app's tasks module that fails to import fails here, loudly: a worker that
    silently lost some tasks would dead-letter their messages."""
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    modules = []
    for app in apps.get_app_configs():
        if app.module is not None and module_has_submodule(app.module, "tasks"):
            modules.append(import_module(f"{app.name}.tasks"))
    for name in extra or ():
        modules.append(import_module(str(name)))
    return modules


def discover(extra: Any = ()) -> dict[str, Any]:
    """{module_path: Task} of every task the project defines (see task_modules), found once per
    process and set of extra modules."""
    key = tuple(str(name) for name in extra or ())
    with _LOCK:
        found = _FOUND.get(key)
        if found is None:
            found = {}
            for module in task_modules(key):
                for value in list(vars(module).values()):
                    if isinstance(value, compat.Task):
                        found.setdefault(value.module_path, value)
            _FOUND[key] = found
        return found


def resolve(kind: str, queue: str | None, backend_alias: str, extra: Any = ()) -> Any:
    """The project's task of this kind, for a message on ``queue`` (None: any of its queues) of the
    backend ``backend_alias``; UnknownTask when there is none, or when the task's own queue
    (``queue_name``) or backend is another."""
    task = discover(extra).get(str(kind))
    if task is None:
        raise UnknownTask(
            f"no task of the project has the kind {kind!r} (the tasks modules of INSTALLED_APPS and the "
            "backend's TASK_MODULES define the tasks; nothing else is imported)"
        )
    if task.backend != backend_alias:
        raise UnknownTask(
            f"the task {kind!r} belongs to the task backend {task.backend!r}, not {backend_alias!r}"
        )
    if queue is not None and task.queue_name != queue:
        raise UnknownTask(
            f"the task {kind!r} runs on its own queue {task.queue_name!r}, not on {queue!r}: not run here"
        )
    return task

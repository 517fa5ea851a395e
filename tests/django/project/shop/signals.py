"""Django's task signals, written one a line to the file PYQUEUE_DJANGO_SIGNAL_LOG names (the test
reads what the views' process and the worker's sent)."""

import os

try:
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks.signals import task_enqueued, task_finished, task_started


def _record(event):
    def receiver(sender, task_result, **kwargs):
        path = os.environ.get("PYQUEUE_DJANGO_SIGNAL_LOG")
        if path:
            with open(path, "a", encoding="utf-8") as log:
                log.write(f"{event} {task_result.task.name} {task_result.status} {sender.__name__}\n")

    return receiver


_receivers = {event: _record(event) for event in ("enqueued", "started", "finished")}
task_enqueued.connect(_receivers["enqueued"])
task_started.connect(_receivers["started"])
task_finished.connect(_receivers["finished"])

"""manage.py pyqueue_setup: creates the queues of the project's pyqueue-sql task backends, with
their QUEUE_SETTINGS and RESULT_RETENTION, as each backend's ADMIN_DSN (an account with the admin
capability). `manage.py migrate` does the same after its migrations."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

import pyqueue_sql


class Command(BaseCommand):
    help = "Creates the queues of the pyqueue-sql task backends of TASKS (needs the admin capability)."

    def add_arguments(self, parser):
        parser.add_argument("--backend", help="only this TASKS alias")

    def handle(self, *args, backend=None, **options):
        from pyqueue_sql.contrib.django import setup

        found = setup.backends()
        if backend is not None:
            found = [b for b in found if b.alias == backend]
            if not found:
                raise CommandError(f"TASKS has no PyQueueBackend {backend!r}")
        for each in found:
            try:
                names = each.setup_queues()
            except pyqueue_sql.PermissionDeniedError as exc:
                raise CommandError(
                    f"TASKS[{each.alias!r}]: {exc} (setting queues up needs the admin capability: give the "
                    "backend an ADMIN_DSN of such an account)"
                ) from None
            self.stdout.write(f"TASKS[{each.alias!r}]: {', '.join(names)}")

"""manage.py drive STEP: what a user of the project does, through Django's test Client and the task
API, printed as one JSON object for tests/django/test_django.py (which runs it with each Django)."""

import asyncio
import datetime
import json
import sys

import django
from django.core.management.base import BaseCommand
from django.test import Client
from django.utils import timezone

from shop.models import Order
from shop.tasks import attempt_of, confirm_order, divide, exit_now, shout


class Command(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument("step", choices=("enqueue", "results"))
        parser.add_argument("ids", nargs="*")

    def handle(self, *args, step, ids, **options):
        client = Client(raise_request_exception=False)
        if step == "enqueue":
            broken = client.post("/orders/broken/", {"item": "lamp", "quantity": 2})
            placed = client.post("/orders/", {"item": "chair", "quantity": 4})
            out = {
                "django": django.get_version(),
                "broken_status": broken.status_code,
                "placed_status": placed.status_code,
                "orders": list(Order.objects.values_list("item", flat=True)),
                "confirm": placed.json()["result_id"],
                "divide_ok": divide.enqueue(6, 3).id,
                "divide_zero": divide.enqueue(1, 0).id,
                "attempt": attempt_of.enqueue("ctx").id,
                "shout": asyncio.run(shout.aenqueue("hey")).id,
                "exit": exit_now.enqueue(3).id,
            }
            first = confirm_order.get_result(out["confirm"])
            out["status_before"] = str(first.status)
            out["args_before"] = first.args
            # run_after: a delayed message; the backend's cancel removes it, and its result is FAILED
            later = divide.using(run_after=timezone.now() + datetime.timedelta(hours=1)).enqueue(8, 2)
            out["later"] = later.id
            out["later_status"] = str(divide.get_result(later.id).status)
            out["cancelled"] = divide.get_backend().cancel(later.id)
            gone = divide.get_result(later.id)
            out["later_after_cancel"] = [str(gone.status), [e.exception_class_path for e in gone.errors]]
        else:
            out = {}
            for name, result_id in zip(
                ("confirm", "divide_ok", "divide_zero", "attempt", "shout", "exit"), ids
            ):
                result = divide.get_backend().get_result(result_id)
                result.refresh()
                row = {"status": str(result.status), "attempts": result.attempts}
                if result.status == "SUCCESSFUL":
                    row["value"] = result.return_value
                row["errors"] = [e.exception_class_path for e in result.errors]
                row["traceback_ends"] = [
                    [e.traceback.splitlines()[0], e.traceback.strip().splitlines()[-1]] for e in result.errors
                ]
                out[name] = row
            out["view"] = client.get(f"/results/{ids[0]}/").json()
        json.dump(out, sys.stdout)

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
        parser.add_argument("step", choices=("enqueue", "results", "admin", "out_of_reach", "teardown"))
        parser.add_argument("ids", nargs="*")

    def handle(self, *args, step, ids, **options):
        client = Client(raise_request_exception=False)
        if step == "admin":
            out = admin_pages()
        elif step == "out_of_reach":
            out = out_of_reach()
        elif step == "teardown":
            out = teardown()
        elif step == "enqueue":
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
            # what enqueue returned, read back: the same, field for field (the arguments of a
            # waiting task are the monitor's to read: this web tier reads them empty)
            enqueued = divide.using(run_after=timezone.now() + datetime.timedelta(hours=2)).enqueue(4, 2)
            again = divide.get_result(enqueued.id)
            fields = (
                "id",
                "status",
                "enqueued_at",
                "started_at",
                "finished_at",
                "last_attempted_at",
                "kwargs",
            )
            fields += ("backend", "worker_ids", "errors")
            out["read_back_differs"] = [f for f in fields if getattr(enqueued, f) != getattr(again, f)]
            out["read_back_args"] = again.args
            out["enqueued_at_set"] = enqueued.enqueued_at is not None
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
                row["args"] = result.args
                times = [result.enqueued_at, result.started_at, result.last_attempted_at, result.finished_at]
                row["times_in_order"] = None not in times and times == sorted(times)
                row["traceback_ends"] = [
                    [e.traceback.splitlines()[0], e.traceback.strip().splitlines()[-1]] for e in result.errors
                ]
                out[name] = row
            out["view"] = client.get(f"/results/{ids[0]}/").json()
        json.dump(out, sys.stdout)


def admin_pages():
    """The admin's pages over the queues, as users of each kind meet them: anonymous, not staff,
    staff without the app's permissions, a viewer, an operator who may cancel and redrive, one who
    may also remove."""
    import html

    from django.contrib.auth.models import Permission, User

    import pyqueue_sql

    backend = divide.get_backend()
    with pyqueue_sql.connect(backend.admin_dsn) as db:  # a dead-letter queue of the backend's queue
        db.queue("default.dead").create()
        db.queue("default").create(max_attempts=1, dead_letter_queue="default.dead")
        db.queue("default.dead").push("dl-1", "shop.tasks.divide", {"args": [9, 3], "kwargs": {}})
        db.queue("default").push("<b>k</b>", "shop.tasks.divide", {"args": [1, 1], "kwargs": {}})
    ids = [divide.enqueue(1, n).id for n in (1, 2, 3)]
    keys = [i.rsplit(":", 1)[1] for i in ids]

    def user(name, *perms, staff=True):
        made = User.objects.create_user(name, password="pw", is_staff=staff)
        made.user_permissions.set(
            Permission.objects.filter(content_type__app_label="pyqueue_sql", codename__in=perms)
        )
        return made

    people = {
        "anonymous": None,
        "not_staff": user("visitor", "view_queuemessage", staff=False),
        "staff_without": user("clerk"),
        "viewer": user("viewer", "view_queuemessage"),
        "operator": user("operator", "view_queuemessage", "change_queuemessage"),
        "owner": user("owner", "view_queuemessage", "change_queuemessage", "delete_queuemessage"),
    }
    url = "/admin/pyqueue_sql/queuemessage/"
    out = {}
    for name, person in people.items():
        c = Client(raise_request_exception=False)
        if person is not None:
            c.force_login(person)
        page = c.get(url, {"queue": "default"})
        text = page.content.decode()
        out[name] = {"list": page.status_code, "keys_shown": sum(k in text for k in keys)}
        if page.status_code == 200:
            one = c.get(url + "message/", {"id": ids[0]})
            out[name]["message"] = one.status_code
            out[name]["payload_shown"] = '"args": [\n    1,\n    1\n  ]' in html.unescape(
                one.content.decode()
            )
            out[name]["markup_escaped"] = "&lt;b&gt;k&lt;/b&gt;" in text and "<b>k</b>" not in text
            out[name]["other_queue"] = c.get(url, {"queue": "not_a_backend_queue"}).status_code
            out[name]["actions"] = [a for a in ("cancel", "remove") if f'value="{a}"' in text]
    index = Client()
    index.force_login(people["viewer"])
    out["index_lists_it"] = "/admin/pyqueue_sql/queuemessage/" in index.get("/admin/").content.decode()

    def post(person, **data):
        c = Client(raise_request_exception=False)
        c.force_login(person)
        return c.post(url, {"queue": data.pop("queue", "default"), **data}).status_code

    def selected(i):
        return json.dumps([keys[i], "shop.tasks.divide"])

    out["viewer_cancel"] = post(people["viewer"], action="cancel", selected=[selected(0)])
    out["operator_cancel"] = post(people["operator"], action="cancel", selected=[selected(0)])
    out["operator_remove"] = post(people["operator"], action="remove", selected=[selected(1)])
    out["owner_remove"] = post(people["owner"], action="remove", selected=[selected(1)])
    out["viewer_redrive"] = post(
        people["viewer"], queue="default.dead", action="redrive", to_queue="default", n="1"
    )
    out["operator_redrive"] = post(
        people["operator"], queue="default.dead", action="redrive", to_queue="default", n="1"
    )
    # the finished tasks, listed from their stored results: the cancelled one, not the removed one
    viewer = Client(raise_request_exception=False)
    viewer.force_login(people["viewer"])
    finished = viewer.get(url, {"queue": "default", "state": "cancelled"})
    text = finished.content.decode()
    out["finished_cancelled"] = {
        "list": finished.status_code,
        "keys_shown": [k in text for k in keys],
        "actions": [a for a in ("cancel", "remove") if f'value="{a}"' in text],
    }
    with pyqueue_sql.connect(backend.admin_dsn) as db:
        q = db.queue("default")
        out["states"] = [q.result(k, "shop.tasks.divide").state for k in keys]
        out["redriven"] = q.message("dl-1", "shop.tasks.divide") is not None
    return out


def out_of_reach():
    """What the backend and its admin pages do with what is not theirs to act on: a result id of a
    queue that is not the backend's (billing's message, pushed by another application), and a
    dead-letter queue's messages, which queue_cancel refuses."""
    from django.contrib.auth.models import Permission, User
    from django.contrib.messages import get_messages

    import pyqueue_sql

    backend = divide.get_backend()
    with pyqueue_sql.connect(backend.admin_dsn) as db:
        db.queue("billing").create()
        db.queue("billing").push("invoice-42", "charge", {"amount": 10})
        db.queue("default.dead").create()
        db.queue("default").create(max_attempts=1, dead_letter_queue="default.dead")
        db.queue("default.dead").push("dl-1", "shop.tasks.divide", {"args": [9, 3], "kwargs": {}})
    out = {}
    foreign = "billing:charge:invoice-42"
    try:
        backend.get_result(foreign)
        out["get_result"] = "read"
    except Exception as exc:  # noqa: BLE001 - its class is what is compared
        out["get_result"] = type(exc).__name__
    out["cancel"] = backend.cancel(foreign)
    owner = User.objects.create_user("owner", password="pw", is_staff=True)
    owner.user_permissions.set(Permission.objects.filter(content_type__app_label="pyqueue_sql"))
    c = Client(raise_request_exception=False)
    c.force_login(owner)
    url = "/admin/pyqueue_sql/queuemessage/"
    text = c.get(url, {"queue": "default.dead"}).content.decode()
    out["dead_actions"] = [a for a in ("cancel", "remove") if f'value="{a}"' in text]
    dead = json.dumps(["dl-1", "shop.tasks.divide"])
    posted = c.post(url, {"queue": "default.dead", "action": "cancel", "selected": [dead]})
    out["dead_cancel"] = posted.status_code
    out["dead_cancel_said"] = [str(m) for m in get_messages(posted.wsgi_request)]
    with pyqueue_sql.connect(backend.admin_dsn) as db:
        out["billing_live"] = db.queue("billing").message("invoice-42", "charge") is not None
        out["dead_letter_live"] = db.queue("default.dead").message("dl-1", "shop.tasks.divide") is not None
    return out


def other_sessions():
    """The sessions open on the project's database, but the one asking."""
    import os

    from pyqueue_sql import dialects

    dsn = os.environ["PYQUEUE_DJANGO_DSN"]
    dialect = dialects.for_dsn(dsn)
    conn = dialect.connect(dsn)
    try:
        with conn.cursor() as cur:
            if dialect.name == "postgresql":
                cur.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            else:
                cur.execute(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                    " WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
                )
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def teardown():
    """What a test suite of the project does with the backend (a test that overrides TASKS, results
    read through asyncio and from another thread), then its teardown: every task backend's close(),
    Django's connections closed, gc.collect(). The sessions open on the database before and after:
    a database that still has one cannot be dropped."""
    import asyncio
    import gc
    import threading

    from django.conf import settings
    from django.db import connections
    from django.test import override_settings

    from pyqueue_sql.contrib.django import compat

    before = other_sessions()
    tasks = settings.TASKS
    options = {**tasks["default"].get("OPTIONS", {}), "RESULT_RETENTION": 60}
    with override_settings(TASKS={**tasks, "default": {**tasks["default"], "OPTIONS": options}}):
        divide.get_result(divide.enqueue(1, 2).id)  # a backend Django drops when the override ends
    result = divide.enqueue(6, 3)
    asyncio.run(divide.aget_result(result.id))  # get_result in sync_to_async's executor thread
    asyncio.run(result.arefresh())
    reader = threading.Thread(target=lambda: divide.get_result(result.id))
    reader.start()
    reader.join()
    for backend in compat.task_backends.all(initialized_only=True):
        backend.close()
    connections.close_all()
    gc.collect()
    return {"before": before, "after": other_sessions()}

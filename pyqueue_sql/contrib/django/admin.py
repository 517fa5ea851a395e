"""Django admin pages over the backends' queues: their live messages (by queue, state, task and key
prefix), a message whole (payload, attempts, last error, progress) with its result, a result
looked up by its TaskResult id, and the dashboard's actions: cancel, remove, redrive a
dead-letter queue.

Read-only but for those actions. Nothing here reads a table: every page calls the contract's
routines (queue_messages, queue_message, queue_result, queue_cancel, queue_remove, queue_redrive)
on a connection of the backend's ADMIN_DSN, opened for the request and closed after it. Django's
permissions of the stand-in model QueueMessage decide who may do what: ``view_queuemessage`` to
see the pages (a staff user without it gets 403), ``change_queuemessage`` to cancel and redrive,
``delete_queuemessage`` to remove."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.http import urlencode

import pyqueue_sql

from .models import QueueMessage

STATES = ("ready", "delayed", "reserved")
# the states of finished tasks, listed from their stored results (queue_results), newest first
FINISHED = ("succeeded", "failed", "cancelled")
PAGE = 100


def _backends() -> list[Any]:
    from .setup import backends

    return backends()


def _queues(backend: Any, db: pyqueue_sql.Database) -> tuple[list[str], set[str]]:
    """(the queues shown: the backend's and their dead-letter queues, as their settings name them;
    the dead-letter queues among them). No other queue of the database is shown or acted on."""
    own = set(backend.queues)
    dead = {s.dead_letter_queue for s in db.settings() if s.queue in own and s.dead_letter_queue}
    return sorted(own | dead), dead


@admin.register(QueueMessage)
class QueueMessageAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: Any) -> bool:
        return False

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view
        return [
            path("", view(self.messages_view), name="pyqueue_sql_queuemessage_changelist"),
            path("message/", view(self.message_view), name="pyqueue_sql_queuemessage_message"),
        ]

    # -- helpers -----------------------------------------------------------------------
    def _context(self, request: Any, **extra: Any) -> dict:
        return {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "app_label": self.model._meta.app_label,
            "can_change": self.has_change_permission(request),
            "can_delete": self.has_delete_permission(request),
            **extra,
        }

    def _backend(self, request: Any) -> Any:
        found = _backends()
        alias = request.GET.get("backend") or request.POST.get("backend")
        for backend in found:
            if alias in (None, "", backend.alias):
                return backend
        raise PermissionDenied(f"no PyQueueBackend {alias!r} in TASKS")

    # -- the list of a queue's messages, and the actions on them -----------------------
    def messages_view(self, request: Any) -> Any:
        if not self.has_view_permission(request):
            raise PermissionDenied
        backend = self._backend(request)
        params = request.POST if request.method == "POST" else request.GET
        with pyqueue_sql.connect(backend.admin_dsn) as db:
            queues, dead = _queues(backend, db)
            queue = params.get("queue") or (sorted(backend.queues)[0] if backend.queues else "")
            if queue not in queues:
                raise PermissionDenied(f"{queue!r} is not a queue of TASKS[{backend.alias!r}]")
            if request.method == "POST":
                self._act(request, backend, db, queue, dead)
                back = {"backend": backend.alias, "queue": queue}
                return HttpResponseRedirect(
                    reverse("admin:pyqueue_sql_queuemessage_changelist") + "?" + urlencode(back)
                )
            state = request.GET.get("state") or None
            if state is not None and state not in STATES + FINISHED:
                state = None
            kind = request.GET.get("kind") or ""
            prefix = request.GET.get("q") or None
            after = None
            if request.GET.get("after_key") and request.GET.get("after_kind"):
                after = (request.GET["after_key"], request.GET["after_kind"])
            finished = state in FINISHED
            if finished:
                before = None
                with contextlib.suppress(ValueError):
                    before = dt.datetime.fromisoformat(request.GET.get("before") or "")
                rows = db.queue(queue).results(kind=kind or None, state=state, n=PAGE, before=before)
            else:
                rows = db.queue(queue).messages(state=state, key_prefix=prefix, after=after, n=PAGE)
        more = len(rows) >= PAGE
        shown = [r for r in rows if (not kind or r.kind == kind) and (not prefix or r.key.startswith(prefix))]
        base = {"backend": backend.alias, "queue": queue}
        if state:
            base["state"] = state
        if kind:
            base["kind"] = kind
        if prefix:
            base["q"] = prefix
        next_page = None
        if more and finished:
            next_page = "?" + urlencode({**base, "before": rows[-1].finished_at.isoformat()})
        elif more:
            next_page = "?" + urlencode({**base, "after_key": rows[-1].key, "after_kind": rows[-1].kind})
        context = self._context(
            request,
            title=f"Queue {queue}",
            backend=backend,
            queues=queues,
            queue=queue,
            states=STATES + FINISHED,
            finished=finished,
            state=state or "",
            kind=kind,
            q=prefix or "",
            kinds=sorted({r.kind for r in rows} | ({kind} if kind else set())),
            rows=[
                {
                    "row": r,
                    "value": json.dumps([r.key, r.kind]),
                    "link": reverse("admin:pyqueue_sql_queuemessage_message")
                    + "?"
                    + urlencode({"backend": backend.alias, "queue": queue, "key": r.key, "kind": r.kind}),
                }
                for r in shown
            ],
            next_page=next_page,
            is_dead_letter_queue=queue in dead,
            redrive_to=sorted(backend.queues),
        )
        return TemplateResponse(request, "pyqueue_sql/admin/messages.html", context)

    def _act(self, request: Any, backend: Any, db: pyqueue_sql.Database, queue: str, dead: set[str]) -> None:
        action = request.POST.get("action")
        if action == "redrive":
            if not self.has_change_permission(request):
                raise PermissionDenied
            to = request.POST.get("to_queue", "")
            if queue not in dead or to not in backend.queues:
                raise PermissionDenied(
                    f"redrive moves a dead-letter queue's messages to a queue of TASKS[{backend.alias!r}]"
                )
            try:
                n = max(1, min(int(request.POST.get("n") or 1), 1000))
            except ValueError:
                n = 1
            moved = db.queue(queue).redrive(to, n)
            messages.success(request, f"{moved} message(s) moved from {queue} to {to}")
            return
        if action not in ("cancel", "remove"):
            messages.error(request, "choose an action")
            return
        if action == "cancel" and queue in dead:
            # queue_cancel refuses a dead letter (it is no longer waiting to run): remove or redrive it
            messages.error(
                request,
                f"{queue} is a dead-letter queue: its messages are removed or redriven, not cancelled",
            )
            return
        allowed = (
            self.has_delete_permission(request) if action == "remove" else self.has_change_permission(request)
        )
        if not allowed:
            raise PermissionDenied
        picked = []
        for value in request.POST.getlist("selected"):
            try:
                key, kind = json.loads(value)
            except (ValueError, TypeError):
                continue
            if isinstance(key, str) and isinstance(kind, str):
                picked.append((key, kind))
        done = 0
        q = db.queue(queue)
        for key, kind in picked:
            if action == "remove":
                done += bool(q.remove(key, kind))
            else:
                try:
                    done += q.cancel(key, kind) in ("cancelled", "requested")
                except pyqueue_sql.InvalidArgumentError as exc:  # refused for this message: said, not a 500
                    messages.error(request, f"cancel {key!r}: {exc}")
        messages.success(request, f"{action}: {done} of {len(picked)} message(s)")

    # -- one message and its result ----------------------------------------------------
    def message_view(self, request: Any) -> Any:
        if not self.has_view_permission(request):
            raise PermissionDenied
        backend = self._backend(request)
        result_id = request.GET.get("id")
        if result_id:
            from .backend import parse_result_id

            try:
                queue, kind, key = parse_result_id(result_id)
            except Exception:  # noqa: BLE001 - a malformed id: nothing to show
                queue, kind, key = "", "", ""
        else:
            queue, key, kind = (
                request.GET.get("queue", ""),
                request.GET.get("key", ""),
                request.GET.get("kind", ""),
            )
        with pyqueue_sql.connect(backend.admin_dsn) as db:
            if queue not in _queues(backend, db)[0] or not key or not kind:
                raise PermissionDenied("name a queue of the backend, a key and a kind (or a result id)")
            live = db.queue(queue).message(key, kind)
            result = db.queue(queue).result(key, kind)
        context = self._context(
            request,
            title=f"{queue} / {kind} / {key}",
            backend=backend,
            queue=queue,
            key=key,
            kind=kind,
            live=live,
            payload=json.dumps(live.payload, indent=2, ensure_ascii=False) if live is not None else "",
            result=result,
            result_json=json.dumps(result.result, indent=2, ensure_ascii=False)
            if result.result is not None
            else "",
            progress=json.dumps(result.progress, indent=2, ensure_ascii=False)
            if result.progress is not None
            else "",
            value=json.dumps([key, kind]),
            back=reverse("admin:pyqueue_sql_queuemessage_changelist")
            + "?"
            + urlencode({"backend": backend.alias, "queue": queue}),
        )
        return TemplateResponse(request, "pyqueue_sql/admin/message.html", context)

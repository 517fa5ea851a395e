"""The web dashboard: a Starlette app of server-rendered pages (Jinja2, autoescaped), a little
vanilla JavaScript that refreshes the live parts, and /metrics for Prometheus.

Safe by default: the CLI binds 127.0.0.1 (and refuses any other address without a token); a
request whose Host is not one of the dashboard's own names is refused (400), so that a page that
rebinds its DNS name to this address gets nothing; with a token every request needs it (a cookie
set by the login form or by ``?token=`` once, or ``Authorization: Bearer``); every POST carries a
CSRF token the server signed (HMAC under a key of the process, bound to the session) that must also
equal its cookie, and a cross-origin POST is refused; every response forbids framing and MIME
sniffing (X-Frame-Options, Content-Security-Policy, X-Content-Type-Options); actions are offered and
accepted only when the dashboard is not read-only and the account may call the routine.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import secrets
import traceback
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import errors
from ..dialects import UnreadableJSON, dump_json_text
from ..display import describe_error, format_age, format_duration, redact, redact_dsn, remember_secrets
from .data import ACTIONS, GRANTED_BY, STALE_AFTER_S, Dashboard, worker_groups
from .metrics import DashboardCollector, metrics_response

if TYPE_CHECKING:
    from starlette.datastructures import FormData
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

HERE = Path(__file__).parent
_log = logging.getLogger("pyqueue_sql.dashboard")
# How many finished jobs the results page lists at once (queue_results: a page may hold more, never
# splitting one instant)
RESULTS_SHOWN = 100
SESSION_COOKIE = "pyqueue_dashboard"
CSRF_COOKIE = "pyqueue_csrf"
FLASH_COOKIE = "pyqueue_flash"
PAGE_SIZES = (25, 50, 100, 250)
STATES = ("ready", "delayed", "reserved")
# A payload's page shows at most this many characters of its JSON; the rest is downloaded.
PAYLOAD_SHOWN = 64 * 1024
# The names the dashboard answers to unless told others (with the port it listens on).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
WILDCARDS = ("", "0.0.0.0", "::", "[::]")
SECURITY_HEADERS = (
    (b"x-frame-options", b"DENY"),
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; "
        b"frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)
_HOST = re.compile(r"(?P<name>\[[0-9a-f:.]+\]|[^:\[\]/@\s]+)(?::(?P<port>[0-9]{1,5}))?")


def _templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(HERE / "templates")),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = format_age
    env.filters["duration"] = _duration
    env.filters["time"] = lambda t: (
        "-" if t is None else t.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    )
    env.filters["pretty"] = json_shown
    env.filters["pct"] = lambda x: "-" if x is None else f"{100 * x:.1f}%"
    env.globals["url"] = lambda path, **params: (
        path + ("?" + urlencode({k: v for k, v in params.items() if v is not None}) if params else "")
    )
    env.globals["spark"] = sparkline
    return env


def _duration(value: object) -> str:
    """A setting's duration: 30s, 0.05s; from a minute on as 5m00s, 2h00m, 7d00h."""
    if isinstance(value, dt.timedelta) and value.total_seconds() >= 60:
        return format_age(value.total_seconds())
    return format_duration(value)


def sparkline(
    series: list[tuple[dt.datetime, int, int]], width: int = 180, height: int = 28
) -> dict[str, object]:
    """Bars for an inline SVG: committed per minute (and dead-lettered on top), oldest first."""
    peak = max([c + d for _, c, d in series] + [1])
    step = width / max(len(series), 1)
    bars = []
    for i, (minute, committed, dead) in enumerate(series):
        h_ok = round(height * committed / peak, 2)
        h_dead = round(height * dead / peak, 2)
        bars.append(
            {
                "x": round(i * step, 2),
                "w": round(max(step - 1, 1), 2),
                "ok_y": round(height - h_ok, 2),
                "ok_h": h_ok,
                "dead_y": round(height - h_ok - h_dead, 2),
                "dead_h": h_dead,
                "title": f"{minute:%H:%M} UTC: {committed} committed, {dead} dead-lettered",
            }
        )
    return {"width": width, "height": height, "bars": bars, "peak": peak}


def host_name(text: str) -> tuple[str, int | None] | None:
    """(name, port) of a Host header or an --allowed-host value, the name lowercased without a
    trailing dot (IPv6 in brackets); None when it is not one."""
    match = _HOST.fullmatch(text.strip().lower())
    if match is None:
        return None
    name = match["name"].rstrip(".")
    if ":" in name and not name.startswith("["):
        return None
    port = int(match["port"]) if match["port"] else None
    return (name, port) if name else None


def is_loopback(host: str) -> bool:
    """Whether an address to listen on is reachable from this machine only."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any address


def exposed_without_token(host: str, token: str | None) -> str | None:
    """Why the dashboard must not listen on host without a token (None when it may)."""
    if token or is_loopback(host):
        return None
    return (
        f"refusing to listen on {host} without a token: anyone who can reach it could read every "
        "payload and act on the queues; pass --token (or set $PYQUEUE_DASHBOARD_TOKEN), or listen "
        "on 127.0.0.1 behind your proxy"
    )


class HostAllowList:
    """The Host values the dashboard answers to: its loopback names and the address it listens on
    (on its port, when known), and any name given for a proxy (any port unless it names one)."""

    def __init__(
        self, listen_host: str | None, port: int | None, extra: Iterable[object] | None = ()
    ) -> None:
        self.port = port
        self.names = set(LOOPBACK_NAMES)
        if listen_host is not None and listen_host.strip() not in WILDCARDS:
            bound = listen_host.strip().lower()
            if ":" in bound and not bound.startswith("["):
                bound = f"[{bound}]"
            self.names.add(bound.rstrip("."))
        self.extra: set[tuple[str, int | None]] = set()
        for value in extra or ():
            parsed = host_name(str(value))
            if parsed is None:
                raise errors.InvalidArgumentError(f"not a host name or host:port: {value!r}")
            self.extra.add(parsed)

    def allows(self, header: str | None) -> bool:
        parsed = host_name(header or "")
        if parsed is None:
            return False
        name, port = parsed
        if (name, port) in self.extra or (name, None) in self.extra:
            return True
        if name not in self.names:
            return False
        if self.port is None:
            return True
        return port == self.port or (port is None and self.port == 80)


class DashboardApp:
    def __init__(
        self,
        dsn: str,
        read_only: bool = False,
        token: str | None = None,
        allowed_hosts: Iterable[object] | None = (),
        listen_host: str | None = None,
        port: int | None = None,
    ) -> None:
        if token is not None and not token:
            raise errors.InvalidArgumentError("the access token must not be empty")
        remember_secrets(dsn)
        self.hosts = HostAllowList(listen_host, port, allowed_hosts)
        self.dsn = dsn
        self.dashboard = Dashboard(dsn, read_only=read_only)
        self.token = token
        self._secret = secrets.token_bytes(32)
        self.templates = _templates()
        self.collector = DashboardCollector(self.dashboard)
        routes = [
            Route("/", self.overview_page),
            Route("/fragment/overview", self.overview_fragment),
            Route("/queue", self.queue_page),
            Route("/fragment/queue", self.queue_fragment),
            Route("/message", self.message_page),
            Route("/message/payload.json", self.message_payload),
            Route("/message/result.json", self.message_result),
            Route("/dead-letters", self.dead_letters_page),
            Route("/workers", self.workers_page),
            Route("/schedules", self.schedules_page),
            Route("/results", self.results_page),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/metrics", self.metrics),
            Route("/actions/{action}", self.action, methods=["POST"]),
            Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
        ]
        self.app = Starlette(
            routes=routes,
            lifespan=self._lifespan,
            exception_handlers={errors.QueueError: self.queue_error},
        )
        self.app.add_middleware(_Failures, owner=self)  # type: ignore[arg-type]
        self.app.add_middleware(_Guard, owner=self)  # type: ignore[arg-type]
        # outermost: the Host check, then headers on every response (the refusals' too)
        self.app.add_middleware(_HostCheck, hosts=self.hosts)  # type: ignore[arg-type]
        self.app.add_middleware(_SecurityHeaders)  # type: ignore[arg-type]

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        yield
        self.dashboard.close()

    # -- access ------------------------------------------------------------------------
    def session_value(self) -> str:
        assert self.token is not None
        return hmac.new(self._secret, self.token.encode(), hashlib.sha256).hexdigest()

    def authorized(self, request: Request) -> bool:
        if self.token is None:
            return True
        cookie = request.cookies.get(SESSION_COOKIE, "")
        if cookie and hmac.compare_digest(cookie, self.session_value()):
            return True
        bearer = request.headers.get("authorization", "")
        if bearer.lower().startswith("bearer "):
            return hmac.compare_digest(bearer[7:].strip().encode(), self.token.encode())
        return False

    def token_matches(self, given: str) -> bool:
        return self.token is not None and hmac.compare_digest(given.encode(), self.token.encode())

    # -- CSRF: tokens the server made (nonce.HMAC of it and the session), never the client's ------
    def _csrf_mac(self, nonce: str, request: Request) -> str:
        session = request.cookies.get(SESSION_COOKIE, "") if self.token is not None else ""
        message = f"csrf|{nonce}|{session}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def new_csrf(self, request: Request) -> str:
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._csrf_mac(nonce, request)}"

    def csrf_valid(self, value: str, request: Request) -> bool:
        nonce, dot, mac = value.partition(".")
        if not nonce or not dot or not mac:
            return False
        return hmac.compare_digest(mac.encode(), self._csrf_mac(nonce, request).encode())

    def csrf_ok(self, request: Request, form: FormData) -> bool:
        """A POST's CSRF token: one this process signed for this session, in the form and equal to
        its cookie (SameSite=Strict), from this origin (Origin and Sec-Fetch-Site when sent)."""
        cookie = request.cookies.get(CSRF_COOKIE, "")
        given = str(form.get("csrf", ""))
        if not cookie or not given or not hmac.compare_digest(cookie.encode(), given.encode()):
            return False
        if not self.csrf_valid(given, request):
            return False
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return False
        origin = request.headers.get("origin")
        if origin is not None:  # "null" (a sandboxed or opaque origin) included
            if urlsplit(origin).netloc != request.headers.get("host", ""):
                return False
        return True

    # -- rendering -------------------------------------------------------------------------
    def render(self, request: Request, template: str, status: int = 200, **context: object) -> HTMLResponse:
        csrf = request.cookies.get(CSRF_COOKIE) or ""
        if not self.csrf_valid(csrf, request):
            csrf = self.new_csrf(request)
        flash = request.cookies.get(FLASH_COOKIE)
        allowed = context.pop("allowed", None)
        known = self.authorized(request)
        html = self.templates.get_template(template).render(
            request=request,
            csrf=csrf,
            flash=flash,
            read_only=self.dashboard.read_only,
            allowed=allowed or dict.fromkeys(ACTIONS, False),
            # "monitor only" is said only where what the account may do was looked up
            allowed_known=allowed is not None,
            # the database (user, host, name) only once logged in: the login page shows none of it
            dsn=redact_dsn(self.dsn) if known else None,
            dialect=self.dashboard.dialect.name if known else None,
            stale_after=STALE_AFTER_S,
            **context,
        )
        response = HTMLResponse(html, status_code=status)
        if request.cookies.get(CSRF_COOKIE) != csrf:
            response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict", secure=_https(request))
        if flash:
            response.delete_cookie(FLASH_COOKIE)
        return response

    async def queue_error(self, request: Request, exc: Exception) -> Response:
        """A refusal of the database (unknown queue, bad argument, missing capability) as a page."""
        status = (
            404
            if isinstance(exc, errors.UnknownQueueError)
            else 403
            if isinstance(exc, errors.PermissionDeniedError)
            else 400
        )
        message = describe_error(exc) or redact(str(exc), self.dsn)
        if request.url.path.startswith("/fragment/"):
            return PlainTextResponse(message, status_code=status)
        try:
            allowed = await self.allowed()
        except Exception:  # the database is away: say nothing of what the account may do
            allowed = None
        return self.render(request, "error.html", status=status, message=message, allowed=allowed)

    async def allowed(self) -> dict[str, bool]:
        return await run_in_threadpool(self.dashboard.allowed_actions)

    # -- pages ---------------------------------------------------------------------------------
    async def overview_page(self, request: Request) -> Response:
        snapshot = await run_in_threadpool(self.dashboard.overview)
        return self.render(request, "overview.html", o=snapshot, allowed=await self.allowed())

    async def overview_fragment(self, request: Request) -> Response:
        snapshot = await run_in_threadpool(self.dashboard.overview)
        return self.render(request, "_overview.html", o=snapshot, allowed=await self.allowed())

    async def queue_page(self, request: Request) -> Response:
        name = request.query_params.get("name") or ""
        state = request.query_params.get("state") or None
        prefix = request.query_params.get("prefix") or None
        after_key = request.query_params.get("after_key")
        after_kind = request.query_params.get("after_kind")
        after = (after_key, after_kind) if after_key and after_kind else None
        try:
            n = int(request.query_params.get("n", "50"))
        except ValueError:
            n = 50
        n = n if n in PAGE_SIZES else 50
        if state is not None and state not in STATES:
            return self.render(request, "error.html", status=400, message=f"unknown state {state!r}")
        page = await run_in_threadpool(self.dashboard.queue_page, name, state, prefix, after, n)
        return self.render(
            request,
            "queue.html",
            name=name,
            state=state,
            prefix=prefix,
            after=after,
            n=n,
            page_sizes=PAGE_SIZES,
            states=STATES,
            allowed=await self.allowed(),
            **page,
        )

    async def queue_fragment(self, request: Request) -> Response:
        name = request.query_params.get("name") or ""
        stats = await run_in_threadpool(self.dashboard.queue_stats, name)
        return self.render(request, "_queue_stats.html", stats=stats)

    async def message_page(self, request: Request) -> Response:
        q = request.query_params
        queue, key, kind = q.get("queue") or "", q.get("key") or "", q.get("kind") or ""
        message, history, settings = await run_in_threadpool(self.dashboard.message, queue, key, kind)
        # progress and cancel request of the live message, the stored result of a finished one
        result = await run_in_threadpool(self.dashboard.result, queue, key, kind)
        payload = _cut(message.payload) if message is not None else _Cut(None, 0, False)
        finished = result is not None and result.finished and message is None
        return self.render(
            request,
            "message.html",
            queue=queue,
            key=key,
            kind=kind,
            message=message,
            payload_text=payload.text,
            payload_size=payload.size,
            payload_truncated=payload.truncated,
            payload_shown=PAYLOAD_SHOWN,
            result=result,
            finished=finished,
            result_value=(
                _cut(result.result) if finished and result is not None and result.result is not None else None
            ),
            progress=_cut(result.progress) if result is not None and result.progress is not None else None,
            result_retention=None if settings is None else settings.result_retention,
            history=history,
            history_retention=None if settings is None else settings.history_retention,
            settings_known=settings is not None,
            allowed=await self.allowed(),
        )

    async def message_result(self, request: Request) -> Response:
        """A finished message's whole result as a JSON file to download (never rendered as a page)."""
        q = request.query_params
        queue, key, kind = q.get("queue") or "", q.get("key") or "", q.get("kind") or ""
        result = await run_in_threadpool(self.dashboard.result, queue, key, kind)
        if result is None:
            return PlainTextResponse(
                "refused: this account may not read results (queue_result)", status_code=403
            )
        if not result.finished:
            return PlainTextResponse("no finished message with this key and kind", status_code=404)
        body = json_download(result.result).encode()
        return Response(
            body,
            media_type="application/json",
            headers={
                "content-disposition": f'attachment; filename="{_stem(queue, key, kind, "result")}.json"'
            },
        )

    async def message_payload(self, request: Request) -> Response:
        """A message's whole payload as a JSON file to download (never rendered as a page)."""
        q = request.query_params
        queue, key, kind = q.get("queue") or "", q.get("key") or "", q.get("kind") or ""
        message, _, _ = await run_in_threadpool(self.dashboard.message, queue, key, kind, False)
        if message is None:
            return PlainTextResponse("no live message with this key and kind", status_code=404)
        body = json_download(message.payload).encode()
        return Response(
            body,
            media_type="application/json",
            headers={
                "content-disposition": f'attachment; filename="{_stem(queue, key, kind, "payload")}.json"'
            },
        )

    async def dead_letters_page(self, request: Request) -> Response:
        snapshot = await run_in_threadpool(self.dashboard.overview)
        chosen = request.query_params.get("queue") or None
        dlqs = sorted(snapshot.dead_letter_queues)
        if chosen is None and dlqs:
            # the first that holds letters (an empty one first in the list would hide the others')
            held = {
                r.stats.queue
                for r in snapshot.queues
                if r.stats.queue in snapshot.dead_letter_queues
                and r.stats.ready + r.stats.delayed + r.stats.reserved > 0
            }
            chosen = next((q for q in dlqs if q in held), dlqs[0])
        page = None
        if chosen is not None:
            page = await run_in_threadpool(self.dashboard.queue_page, chosen, None, None, None, 250, False)
        return self.render(
            request,
            "dead_letters.html",
            o=snapshot,
            dlqs=dlqs,
            chosen=chosen,
            page=page,
            allowed=await self.allowed(),
        )

    async def workers_page(self, request: Request) -> Response:
        workers, held = await run_in_threadpool(self.dashboard.workers)
        # the processes of one `pyqueue-sql worker --processes N` (one name, one host): one worker,
        # its processes on adjacent rows, each marked "process i of N"
        groups = worker_groups(workers)
        workers = [w for g in groups for w in g]
        processes = {w.reserve_as: (i, len(g)) for g in groups if len(g) > 1 for i, w in enumerate(g, 1)}
        return self.render(
            request,
            "workers.html",
            workers=workers,
            held=held,
            processes=processes,
            allowed=await self.allowed(),
        )

    async def results_page(self, request: Request) -> Response:
        """The finished jobs of a queue that keeps results (queue_results), newest first, by kind
        and state, a page of RESULTS_SHOWN; "older" opens the next page. No queue chosen: the
        first that keeps results."""
        params = request.query_params
        settings = await run_in_threadpool(self.dashboard.settings)
        keeping = sorted(s.queue for s in settings if s.result_retention is not None)
        chosen = params.get("queue") or (keeping[0] if keeping else None)
        kind = params.get("kind") or None
        state = params.get("state") or None
        before = None
        if params.get("before"):
            try:
                before = dt.datetime.fromisoformat(params["before"])
            except ValueError:
                raise errors.InvalidArgumentError(
                    f"before must be an ISO 8601 time, not {params['before']!r:.40}"
                ) from None
            if before.tzinfo is None:
                before = before.replace(tzinfo=dt.timezone.utc)
        rows = []
        if chosen is not None:
            rows = await run_in_threadpool(self.dashboard.results, chosen, kind, state, RESULTS_SHOWN, before)
        return self.render(
            request,
            "results.html",
            queues=keeping,
            chosen=chosen,
            kind=kind,
            state=state,
            rows=rows,
            older=rows[-1].finished_at.isoformat() if len(rows) >= RESULTS_SHOWN else None,
        )

    async def schedules_page(self, request: Request) -> Response:
        schedules = await run_in_threadpool(self.dashboard.schedules)
        # a next time in the past: no worker ran that occurrence yet, or it is gone (setup repairs it)
        now = dt.datetime.now(dt.timezone.utc)
        past = {(s.queue, s.key, s.kind) for s in schedules if s.next_at < now}
        return self.render(request, "schedules.html", schedules=schedules, past=past)

    async def login(self, request: Request) -> Response:
        if self.token is None:
            return RedirectResponse("/", status_code=303)
        if request.method == "POST":
            form = await request.form()
            if self.csrf_ok(request, form) and self.token_matches(str(form.get("token", ""))):
                response = RedirectResponse(_local(str(form.get("next", "/"))), status_code=303)
                self._set_session(request, response)
                return response
            return self.render(
                request, "login.html", status=401, failed=True, next=_local(str(form.get("next", "/")))
            )
        return self.render(
            request, "login.html", failed=False, next=_local(request.query_params.get("next", "/"))
        )

    def _set_session(self, request: Request, response: Response) -> None:
        response.set_cookie(
            SESSION_COOKIE, self.session_value(), httponly=True, samesite="strict", secure=_https(request)
        )

    async def metrics(self, request: Request) -> Response:
        return await run_in_threadpool(
            metrics_response, self.collector.registry, request.headers.get("accept")
        )

    async def action(self, request: Request) -> Response:
        action = request.path_params["action"]
        form = await request.form()
        if not self.csrf_ok(request, form):
            return PlainTextResponse("refused: missing or wrong CSRF token", status_code=403)
        if action not in ACTIONS:
            return PlainTextResponse("unknown action", status_code=404)
        if self.dashboard.read_only:
            return PlainTextResponse("refused: the dashboard is read-only", status_code=403)
        if not await run_in_threadpool(self.dashboard.may, action):
            return PlainTextResponse(
                f"refused: this account may not {action} (grant it {GRANTED_BY[action]})", status_code=403
            )
        back = _local(str(form.get("next", "/")))
        f = {k: str(v) for k, v in form.items()}
        try:
            if action == "pause":
                await run_in_threadpool(self.dashboard.pause, f.get("queue", ""))
                done = f"paused {f.get('queue')}"
            elif action == "resume":
                await run_in_threadpool(self.dashboard.resume, f.get("queue", ""))
                done = f"resumed {f.get('queue')}"
            elif action == "remove":
                removed = await run_in_threadpool(
                    self.dashboard.remove, f.get("queue", ""), f.get("key", ""), f.get("kind", "")
                )
                done = (
                    f"removed {f.get('key')} ({f.get('kind')})"
                    if removed
                    else "nothing removed: the message was gone"
                )
            elif action == "cancel":
                key, kind = f.get("key", ""), f.get("kind", "")
                outcome = await run_in_threadpool(self.dashboard.cancel, f.get("queue", ""), key, kind)
                done = {
                    "cancelled": f"cancelled {key} ({kind}): it was waiting and is removed, it will not run",
                    "requested": f"cancel requested for {key} ({kind}): its consumer is asked to stop",
                }.get(outcome, f"nothing cancelled: no live message {key} ({kind})")
            elif action == "release":
                worker = f.get("worker") or None
                released = await run_in_threadpool(self.dashboard.release, f.get("queue", ""), worker)
                held = f" held by {worker}" if worker else ""
                done = f"released {released} reservation(s){held} in {f.get('queue')}"
            else:
                n = None if f.get("n") == "all" else _whole(f.get("n", "1"))
                moved = await run_in_threadpool(
                    self.dashboard.redrive, f.get("queue", ""), f.get("to_queue", ""), n
                )
                done = f"redrove {moved} message(s) from {f.get('queue')} to {f.get('to_queue')}"
        except errors.PermissionDeniedError as exc:
            return PlainTextResponse(
                f"refused by the database: {redact(str(exc), self.dsn)}", status_code=403
            )
        except (errors.QueueError, ValueError) as exc:
            done = f"{action} failed: {describe_error(exc) or redact(str(exc), self.dsn)}"
        response = RedirectResponse(back, status_code=303)
        response.set_cookie(
            FLASH_COOKIE, done[:300], httponly=True, samesite="strict", secure=_https(request)
        )
        return response


class _Cut(NamedTuple):
    text: str | None  # the JSON shown (its first PAYLOAD_SHOWN characters)
    size: int  # bytes of the whole JSON text
    truncated: bool


def _cut(value: object) -> _Cut:
    """A JSON value (a payload, a result, progress) as the page shows it: indented, cut after
    PAYLOAD_SHOWN characters (the whole value is downloaded)."""
    text = json_shown(value)
    truncated = len(text) > PAYLOAD_SHOWN
    return _Cut(text[:PAYLOAD_SHOWN] if truncated else text, len(text.encode()), truncated)


def json_shown(value: object) -> str:
    """A stored JSON value (a payload, a result, progress) as a page shows it: indented, as
    json.dumps writes it. What the client reads beyond json.dumps (dialects.load_json) never fails
    the page: a Decimal (an integer past int()'s digits, a number past a float's range) and nesting
    deeper than json.dumps recurses are written on one line by dump_json_text, and JSON no client
    reads (an UnreadableJSON) as why, then the text the server stores."""
    if type(value) is UnreadableJSON:
        return f"(unreadable: {value.reason})\n{value.text}"
    try:
        return json.dumps(value, indent=2, ensure_ascii=False)
    except (RecursionError, TypeError):
        return dump_json_text(value)


def json_download(value: object) -> str:
    """A stored JSON value as a download's JSON text: json.dumps, or dump_json_text for what it
    does not write (an unreadable value: a JSON string naming why)."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (RecursionError, TypeError):
        return dump_json_text(value)


def _stem(queue: str, key: str, kind: str, fallback: str) -> str:
    """A download's file name (without .json): the message's names, only safe characters."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{queue}-{key}-{kind}")[:120].strip("._") or fallback


def _whole(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("n must be at least 1")
    return value


def _https(request: Request) -> bool:
    return request.url.scheme == "https"


def _local(target: str) -> str:
    """A redirect target on this site only (a path; never //host or a scheme)."""
    parts = urlsplit(target)
    if (
        parts.scheme
        or parts.netloc
        or not target.startswith("/")
        or target.startswith("//")
        or "\\" in target
    ):
        return "/"
    return target


class _Failures:
    """ASGI middleware: a failure that is not the database's refusal of a request (the server is
    away, the DSN is unusable) as a 503 page of one line, its secrets masked; anything else as a
    500 whose traceback is logged with them masked too (never the driver's raw text)."""

    def __init__(self, app: ASGIApp, owner: DashboardApp) -> None:
        self.app = app
        self.owner = owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            if started:
                raise
            message = describe_error(exc)
            if message is None:
                _log.error(
                    "dashboard request failed: %s",
                    redact("".join(traceback.format_exception(exc)), self.owner.dsn),
                )
                response: Response = PlainTextResponse("500 internal error (logged)", status_code=500)
            else:
                request = Request(scope)
                if request.url.path.startswith("/fragment/"):
                    response = PlainTextResponse(message, status_code=503)
                else:
                    response = self.owner.render(request, "error.html", status=503, message=message)
            await response(scope, receive, send)


class _SecurityHeaders:
    """ASGI middleware: headers on every response that forbid framing the dashboard (clickjacking),
    loading anything from elsewhere, MIME sniffing, and sending its addresses (a ?token=) onward;
    pages are not cached."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope.get("path", "").startswith("/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in SECURITY_HEADERS:
                    if name not in present:
                        headers.append((name, value))
                if not static and b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


class _HostCheck:
    """ASGI middleware: 400 for a request whose Host header is not one the dashboard answers to. A
    page on any site can rebind its own DNS name to 127.0.0.1; its requests then reach the
    dashboard with that name as Host, and are refused here."""

    def __init__(self, app: ASGIApp, hosts: HostAllowList) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), None)
        if self.hosts.allows(host):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            "400 Bad Request: this dashboard does not answer to this Host name "
            "(start it with --allowed-host NAME for the name of your proxy)",
            status_code=400,
        )
        await response(scope, receive, send)


class _Guard:
    """ASGI middleware: the access token, and ?token= turned into the session cookie."""

    def __init__(self, app: ASGIApp, owner: DashboardApp) -> None:
        self.app = app
        self.owner = owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.owner.token is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        path = scope.get("path", "")
        if path == "/login" or path.startswith("/static/"):
            await self.app(scope, receive, send)
            return
        given = request.query_params.get("token")
        if given is not None and request.method == "GET":
            if self.owner.token_matches(given):
                rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                response: Response = RedirectResponse(
                    path + ("?" + urlencode(rest) if rest else ""), status_code=303
                )
                self.owner._set_session(request, response)
            else:
                response = PlainTextResponse("wrong token", status_code=401)
            await response(scope, receive, send)
            return
        if self.owner.authorized(request):
            await self.app(scope, receive, send)
            return
        if request.method == "GET" and not path.startswith(("/fragment/", "/metrics")):
            response = RedirectResponse(
                "/login?"
                + urlencode(
                    {
                        "next": _local(
                            str(request.url.path) + ("?" + request.url.query if request.url.query else "")
                        )
                    }
                ),
                status_code=303,
            )
        else:
            response = PlainTextResponse("unauthorized: log in or send the token", status_code=401)
        await response(scope, receive, send)


def create_app(
    dsn: str,
    read_only: bool = False,
    token: str | None = None,
    allowed_hosts: Iterable[object] | None = (),
    listen_host: str | None = None,
    port: int | None = None,
) -> Starlette:
    """The ASGI app (run it with uvicorn). It answers to the Host names localhost, 127.0.0.1 and
    [::1] (on port, when given), listen_host, and allowed_hosts (a proxy's names: NAME for any port,
    NAME:PORT for one)."""
    return DashboardApp(
        dsn,
        read_only=read_only,
        token=token,
        allowed_hosts=allowed_hosts,
        listen_host=listen_host,
        port=port,
    ).app

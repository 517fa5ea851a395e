"""The dashboard attacked with raw HTTP requests, on both dialects: a page that rebinds its DNS name
to 127.0.0.1 (any Host but the dashboard's own is refused), forged CSRF tokens (a double submit the
caller chooses, a token of another process, Origin: null), framing and MIME sniffing (headers on
every response), listening on a public address without a token, a payload too big for a page, and
the database's password given in every way a DSN takes it."""

from __future__ import annotations

import json
import re
import urllib.parse
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import cli, errors
from pyqueue_sql.dashboard import create_app
from pyqueue_sql.dashboard import serve as serve_forever
from pyqueue_sql.dashboard.app import PAYLOAD_SHOWN, exposed_without_token

from ..security.test_privileges import Accounts
from .conftest import Served, http

REBIND = "rebind.example"


def _page_csrf(served, path: str = "/", headers: dict | None = None) -> tuple[str, str]:
    """(cookie token, form token) of a page, as a browser gets them."""
    status, body, response_headers = http(served.url + path, headers=headers)
    assert status == 200, body
    cookie = re.search(r"pyqueue_csrf=([^;]+)", response_headers.get("set-cookie", ""))
    form = re.search(r'name="csrf" value="([^"]+)"', body)
    return (cookie.group(1) if cookie else ""), (form.group(1) if form else "")


def _pause(served, queue: str, csrf: str | None, cookie: str | None = None, **headers) -> int:
    data = {"queue": queue, "next": "/"}
    if csrf is not None:
        data["csrf"] = csrf
    if cookie is not None:
        headers["Cookie"] = f"pyqueue_csrf={cookie}"
    status, _, _ = http(f"{served.url}/actions/pause", data=data, headers=headers)
    return status


# -- DNS rebinding: the Host allow-list ----------------------------------------------------------


def test_a_rebound_host_name_gets_400_and_no_data(serve, dsn, queue):
    queue.push("secret-key", "x", {"card": "4111"})
    served = serve(dsn)
    port = served.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST.:{port}"):
        status, body, _ = http(served.url + "/", headers={"Host": host})
        assert status == 200 and queue.name in body, host
    for host in (f"{REBIND}:{port}", REBIND, f"127.0.0.1.{REBIND}:{port}", "", f"localhost@{REBIND}"):
        for path in (
            "/",
            "/queue?name=" + urllib.parse.quote(queue.name),
            "/metrics",
            "/static/dashboard.js",
        ):
            status, body, _ = http(served.url + path, headers={"Host": host})
            assert status == 400, (host, path, status)
            assert queue.name not in body and "4111" not in body
    # the attack of the report: a POST from the rebound page, its own Origin and Host
    cookie, form = _page_csrf(served)
    status = _pause(
        served, queue.name, form, cookie, Host=f"{REBIND}:{port}", Origin=f"http://{REBIND}:{port}"
    )
    assert status == 400
    assert not queue.settings().paused


def test_the_listening_port_and_allowed_hosts_decide(dsn, queue):
    served = Served(
        create_app(
            dsn, listen_host="127.0.0.1", port=None, allowed_hosts=["dash.example", "ops.example:8443"]
        )
    )
    try:
        assert http(served.url + "/", headers={"Host": "dash.example"})[0] == 200
        assert http(served.url + "/", headers={"Host": "dash.example:9999"})[0] == 200
        assert http(served.url + "/", headers={"Host": "ops.example:8443"})[0] == 200
        assert http(served.url + "/", headers={"Host": "ops.example:8444"})[0] == 400
        assert http(served.url + "/", headers={"Host": "evil.example"})[0] == 400
    finally:
        served.stop()
    # told its port (as the command line does), the loopback names must come with that port
    served = Served(create_app(dsn, listen_host="127.0.0.1", port=8080))
    try:
        assert http(served.url + "/", headers={"Host": "127.0.0.1:8080"})[0] == 200
        assert http(served.url + "/", headers={"Host": "localhost:8080"})[0] == 200
        assert http(served.url + "/", headers={"Host": "localhost:8081"})[0] == 400
    finally:
        served.stop()
    with pytest.raises(errors.InvalidArgumentError):
        create_app(dsn, allowed_hosts=["not a host/"])


# -- CSRF: tokens the server signed --------------------------------------------------------------


def test_a_csrf_token_the_caller_chose_is_refused(serve, dsn, queue):
    served = serve(dsn)
    # the double submit of the report: any cookie value equal to the form field
    for chosen in ("x", "attacker-chosen-value", "a.b", "0" * 40 + "." + "0" * 64):
        for origin in ({}, {"Origin": "null"}):
            assert _pause(served, queue.name, chosen, chosen, **origin) == 403, (chosen, origin)
    # a token another dashboard process signed (the attacker's own, say)
    other = serve(dsn)
    page = "/queue?name=" + urllib.parse.quote(queue.name)
    foreign_cookie, foreign_form = _page_csrf(other, page)
    assert foreign_cookie and foreign_cookie == foreign_form
    assert _pause(served, queue.name, foreign_form, foreign_cookie) == 403
    # this server's token, sent from an opaque origin or another site
    cookie, form = _page_csrf(served, page)
    assert cookie == form and "." in form
    assert _pause(served, queue.name, form, cookie, Origin="null") == 403
    assert _pause(served, queue.name, form, cookie, Origin="http://evil.example") == 403
    assert _pause(served, queue.name, form, cookie, **{"Sec-Fetch-Site": "cross-site"}) == 403
    assert _pause(served, queue.name, form, None) == 403  # the form's without its cookie
    assert not queue.settings().paused
    # the real thing, from the page's own origin
    assert (
        _pause(served, queue.name, form, cookie, Origin=served.url, **{"Sec-Fetch-Site": "same-origin"})
        == 303
    )
    assert queue.settings().paused


def test_with_a_token_the_csrf_token_is_bound_to_the_session(serve, dsn, queue):
    served = serve(dsn, token="csrf-session-token")
    bearer = {"Authorization": "Bearer csrf-session-token"}
    # a token made before logging in (the login page's) does not carry over to a session
    status, _, headers = http(served.url + "/login")
    login_csrf = re.search(r"pyqueue_csrf=([^;]+)", headers["set-cookie"]).group(1)
    status, _, headers = http(
        served.url + "/login",
        data={"token": "csrf-session-token", "csrf": login_csrf, "next": "/"},
        headers={"Cookie": f"pyqueue_csrf={login_csrf}"},
    )
    assert status == 303
    session = re.search(r"pyqueue_dashboard=([^;]+)", headers["set-cookie"]).group(1)
    cookies = f"pyqueue_dashboard={session}; pyqueue_csrf={login_csrf}"
    status, _, _ = http(
        f"{served.url}/actions/pause",
        data={"queue": queue.name, "csrf": login_csrf},
        headers={"Cookie": cookies},
    )
    assert status == 403 and not queue.settings().paused
    # the session's own page gives a token that works
    status, body, headers = http(served.url + "/", headers={"Cookie": cookies})
    assert status == 200
    fresh = re.search(r"pyqueue_csrf=([^;]+)", headers["set-cookie"]).group(1)
    status, _, _ = http(
        f"{served.url}/actions/pause",
        data={"queue": queue.name, "csrf": fresh},
        headers={"Cookie": f"pyqueue_dashboard={session}; pyqueue_csrf={fresh}"},
    )
    assert status == 303 and queue.settings().paused
    assert http(served.url + "/", headers=bearer)[0] == 200


# -- headers on every response -------------------------------------------------------------------


def test_every_response_forbids_framing_and_sniffing(serve, dsn, queue):
    served = serve(dsn)
    tokened = serve(dsn, token="headers-token")
    cookie, form = _page_csrf(served)
    requests = [
        (served, "/", None, {}),
        (served, "/queue?name=" + urllib.parse.quote(queue.name), None, {}),
        (served, "/queue?name=no-such-queue-" + uuid.uuid4().hex, None, {}),
        (served, "/fragment/overview", None, {}),
        (served, "/metrics", None, {}),
        (served, "/static/dashboard.js", None, {}),
        (served, "/static/dashboard.css", None, {}),
        (served, "/no-such-page", None, {}),
        (served, "/", None, {"Host": "rebind.example"}),
        (served, "/actions/pause", {"queue": queue.name, "csrf": "x"}, {}),
        (
            served,
            "/actions/resume",
            {"queue": queue.name, "csrf": form, "next": "/"},
            {"Cookie": f"pyqueue_csrf={cookie}"},
        ),
        (tokened, "/", None, {}),
        (tokened, "/login", None, {}),
        (tokened, "/metrics", None, {}),
    ]
    seen = set()
    for target, path, data, headers in requests:
        status, _, got = http(target.url + path, data=data, headers=headers)
        seen.add(status)
        assert got.get("X-Frame-Options") == "DENY", path
        csp = got.get("Content-Security-Policy", "")
        assert (
            "frame-ancestors 'none'" in csp and "default-src 'self'" in csp and "script-src 'self'" in csp
        ), path
        assert got.get("X-Content-Type-Options") == "nosniff", path
    assert {200, 303, 400, 401, 403, 404} <= seen


# -- listening on a public address --------------------------------------------------------------


def test_a_public_address_without_a_token_is_refused(capsys, dsn, monkeypatch):
    monkeypatch.delenv("PYQUEUE_DASHBOARD_TOKEN", raising=False)
    for host in ("0.0.0.0", "::", "192.0.2.1", "dash.example"):
        code = cli.main(["dashboard", "--host", host, "--port", "18080", "--dsn", dsn])
        _, err = capsys.readouterr()
        assert code == 2, host
        assert len(err.strip().splitlines()) == 1 and "without a token" in err and "--token" in err
        with pytest.raises(errors.InvalidArgumentError):
            serve_forever(dsn, host=host, port=18080)
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        assert exposed_without_token(host, None) is None
    assert exposed_without_token("0.0.0.0", "some-token") is None


# -- a big payload -------------------------------------------------------------------------------


def test_a_big_payload_is_shown_cut_with_a_download_link(serve, dsn, queue):
    payload = {"html": "<script>alert(1)</script>", "rows": ["x" * 100 + str(i) for i in range(3000)]}
    queue.push("big", "blob", payload)
    queue.push("small", "blob", {"n": 1})
    served = serve(dsn)
    query = urllib.parse.urlencode({"queue": queue.name, "key": "big", "kind": "blob"})
    status, body, _ = http(f"{served.url}/message?{query}")
    assert status == 200
    full = len(json.dumps(payload, indent=2))
    assert full > 3 * PAYLOAD_SHOWN
    assert len(body) < PAYLOAD_SHOWN + 20_000  # the page holds the first part only
    assert 'id="payload-truncated"' in body
    link = re.search(r'id="payload-download" href="([^"]+)"', body).group(1).replace("&amp;", "&")
    status, raw, headers = http(served.url + link)
    assert status == 200 and json.loads(raw) == payload
    assert headers.get_content_type() == "application/json"
    assert headers.get("Content-Disposition", "").startswith("attachment;")
    assert headers.get("X-Content-Type-Options") == "nosniff"
    # a small one is shown whole, with the link too
    query = urllib.parse.urlencode({"queue": queue.name, "key": "small", "kind": "blob"})
    status, body, _ = http(f"{served.url}/message?{query}")
    assert status == 200 and 'id="payload-truncated"' not in body and 'id="payload-download"' in body
    query = urllib.parse.urlencode({"queue": queue.name, "key": "gone", "kind": "blob"})
    assert http(f"{served.url}/message/payload.json?{query}")[0] == 404


# -- secrets in the DSN --------------------------------------------------------------------------


def _with_password(dsn: str, form: str, secret: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ("postgres" if dsn.startswith("postgresql") else "root")
    if form == "userinfo":
        netloc, query = f"{user}:{secret}@{host}", parts.query
    else:
        netloc = f"{user}@{host}"
        query = {"first": f"password={secret}", "later": f"sslmode=prefer&password={secret}"}[form]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))


@pytest.mark.parametrize("form", ["userinfo", "first", "later"])
def test_the_header_never_shows_the_password(serve, dsn, dialect, form):
    if dialect == "mysql" and form != "userinfo":
        # MySQL DSNs take no password= parameter: refused by the option's name, its value never shown
        with pytest.raises(errors.UnsupportedDsnError) as refused:
            pyqueue_sql.connect(_with_password(dsn, form, "not-shown-pw"))
        assert "password" in str(refused.value) or "sslmode" in str(refused.value)
        assert "not-shown-pw" not in str(refused.value)
        return
    accounts = Accounts(dsn)
    try:
        from ..security.test_privileges import PASSWORD

        name = accounts.with_capabilities("dashpw", "monitor")
        target = _with_password(accounts.dsn_for(name), form, PASSWORD)
        served = serve(target)
        for path in ("/", "/queue?name=no-such-queue", "/workers"):
            status, body, _ = http(served.url + path)
            assert status in (200, 404), (path, status, body[:300])
            assert PASSWORD not in body
            assert "***" in body  # the header says a password was given, not which
    finally:
        accounts.close()


def test_an_unusable_password_is_not_echoed_by_the_pages(serve, dsn, dialect):
    secret = "pw%zz" + uuid.uuid4().hex[:8]  # not percent-encoding: the driver quotes it back
    served = serve(_with_password(dsn, "userinfo", secret))
    for path in ("/", "/fragment/overview", "/queue?name=x"):
        status, body, _ = http(served.url + path)
        assert status >= 400
        assert secret not in body and secret[5:] not in body, body[:500]

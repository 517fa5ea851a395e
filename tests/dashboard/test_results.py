"""Results, cancellation and progress on the dashboard, with raw HTTP on both dialects: the message
page shows a live message's progress and cancel request and a finished one's stored result (cut
over 64 KiB, downloadable whole); the queue page its result retention; the Cancel button is a POST
refused without or with a wrong CSRF token, refused to a monitor-only account, and cancels with
the server's token (a waiting message is removed, a held one flagged)."""

from __future__ import annotations

import datetime as dt
import html
import re
import urllib.parse

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from pyqueue_sql.dashboard.app import PAYLOAD_SHOWN

from ..security.test_privileges import Accounts
from .conftest import http


def _message_url(served, queue, key, kind) -> str:
    return served.url + "/message?" + urllib.parse.urlencode({"queue": queue.name, "key": key, "kind": kind})


def _page(url: str) -> tuple[int, str, str]:
    status, body, headers = http(url)
    cookie = re.search(r"pyqueue_csrf=([^;]+)", headers.get("set-cookie", ""))
    return status, body, cookie.group(1) if cookie else ""


def _cancel_forms(body: str) -> list[dict[str, str]]:
    forms = re.findall(r'<form method="post" action="/actions/cancel".*?</form>', body, re.S)
    return [dict(re.findall(r'name="([^"]+)" value="([^"]*)"', f)) for f in forms]


def _post_cancel(served, fields: dict[str, str], csrf: str | None) -> tuple[int, str, object]:
    headers = {} if csrf is None else {"Cookie": f"pyqueue_csrf={csrf}"}
    return http(f"{served.url}/actions/cancel", data=fields, headers=headers)


def test_the_cancel_button_needs_the_csrf_token_and_cancels(serve, dsn, queue):
    queue.set_result_retention(dt.timedelta(hours=1))
    queue.push("waiting", "mail", {"to": "a"})
    queue.push("running", "mail", {"to": "b"})
    served = serve(dsn)
    status, body, csrf = _page(_message_url(served, queue, "waiting", "mail"))
    assert status == 200 and csrf
    [form] = _cancel_forms(body)
    assert (form["queue"], form["key"], form["kind"], form["csrf"]) == (queue.name, "waiting", "mail", csrf)
    fields = {k: html.unescape(v) for k, v in form.items()}

    # no token, a forged one, a token that is not the cookie's: refused, nothing cancelled
    for given, cookie in ((None, None), ("x", "x"), ("forged.token", "forged.token"), (csrf, "other.value")):
        attempt = dict(fields)
        if given is None:
            del attempt["csrf"]
        else:
            attempt["csrf"] = given
        status, text, _ = _post_cancel(served, attempt, cookie)
        assert status == 403 and "CSRF" in text, (given, status, text)
    assert {m.key for m in queue.messages()} == {"waiting", "running"}

    status, _, headers = _post_cancel(served, fields, csrf)
    assert status == 303 and headers["location"] == fields["next"]
    assert "cancelled waiting (mail)" in urllib.parse.unquote(headers["set-cookie"])
    assert {m.key for m in queue.messages()} == {"running"}
    status, body, _ = _page(_message_url(served, queue, "waiting", "mail"))
    assert status == 200 and 'id="result-state">cancelled<' in body and not _cancel_forms(body)

    [held] = queue.reserve(timeout=3600)
    status, body, csrf = _page(_message_url(served, queue, "running", "mail"))
    assert "not requested" in body
    [form] = _cancel_forms(body)
    status, _, headers = _post_cancel(served, {k: html.unescape(v) for k, v in form.items()}, csrf)
    assert status == 303 and "cancel requested for running (mail)" in urllib.parse.unquote(
        headers["set-cookie"]
    )
    assert queue.result("running", "mail").cancel_requested and queue.stats().reserved == 1
    status, body, _ = _page(_message_url(served, queue, "running", "mail"))
    assert 'class="badge cancel-requested">requested</span> its consumer is asked to stop' in body
    assert queue.cancel_held(held)  # its consumer stops
    status, _, headers = _post_cancel(served, {k: html.unescape(v) for k, v in form.items()}, csrf)
    assert status == 303 and "nothing cancelled: no live message running" in urllib.parse.unquote(
        headers["set-cookie"]
    )


def test_a_monitor_sees_results_but_may_not_cancel(serve, dsn, queue):
    queue.set_result_retention(dt.timedelta(hours=1))
    queue.push("a", "x", {})
    accounts = Accounts(dsn)
    try:
        watcher = accounts.with_capabilities("cancwatch", "monitor")
        monitor = serve(accounts.dsn_for(watcher))
        status, body, csrf = _page(_message_url(monitor, queue, "a", "x"))
        assert status == 200 and not _cancel_forms(body) and 'id="cancel-state"' in body
        fields = {"queue": queue.name, "key": "a", "kind": "x", "csrf": csrf, "next": "/"}
        status, text, _ = _post_cancel(monitor, fields, csrf)
        assert status == 403 and "producer or admin" in text, text
        assert [m.key for m in queue.messages()] == ["a"]

        producer = accounts.with_capabilities("cancprod", "producer", "monitor")
        served = serve(accounts.dsn_for(producer))
        status, body, csrf = _page(_message_url(served, queue, "a", "x"))
        [form] = _cancel_forms(body)
        status, _, headers = _post_cancel(served, {k: html.unescape(v) for k, v in form.items()}, csrf)
        assert status == 303 and "cancelled a (x)" in urllib.parse.unquote(headers["set-cookie"])
        assert queue.messages() == []
    finally:
        accounts.close()


def test_a_read_only_dashboard_offers_no_cancel(serve, dsn, queue):
    queue.push("a", "x", {})
    served = serve(dsn, read_only=True)
    status, body, _ = _page(served.url + "/queue?" + urllib.parse.urlencode({"name": queue.name}))
    assert status == 200 and 'id="result-lookup"' not in body  # the queue keeps no results
    status, body, csrf = _page(_message_url(served, queue, "a", "x"))
    assert status == 200 and not _cancel_forms(body)
    status, text, _ = _post_cancel(served, {"queue": queue.name, "key": "a", "kind": "x", "csrf": csrf}, csrf)
    assert status == 403 and "read-only" in text
    assert [m.key for m in queue.messages()] == ["a"]


def test_progress_and_a_stored_result_are_shown_and_a_big_result_is_cut(serve, dsn, queue):
    queue.set_result_retention(dt.timedelta(hours=1))
    queue.push("job", "report", {"month": 11})
    [held] = queue.reserve(timeout=3600)
    assert queue.set_progress(held, {"rows": 1200, "step": "<merge>"})
    served = serve(dsn)
    status, body, _ = _page(served.url + "/queue?" + urllib.parse.urlencode({"name": queue.name}))
    assert status == 200 and re.search(r'id="result-retention">1h00m<', body), body
    lookup = re.search(
        r'<form method="get" action="/message"[^>]*id="result-lookup">(.*?)</form>', body, re.S
    )
    assert lookup and f'name="queue" value="{queue.name}"' in lookup.group(1)  # a finished one's page too
    status, body, _ = _page(_message_url(served, queue, "job", "report"))
    progress = re.search(r'<pre class="payload" id="progress">(.*?)</pre>', body, re.S).group(1)
    assert '"rows": 1200' in html.unescape(progress) and "&lt;merge&gt;" in progress  # escaped, not markup
    assert "kept for 1h00m once it finishes" in body

    big = {"lines": ["x" * 1000] * 100}  # about 100 KiB of JSON
    assert queue.commit_result(held, big)
    status, body, _ = _page(_message_url(served, queue, "job", "report"))
    assert status == 200 and 'id="result-state">succeeded<' in body and 'id="result-truncated"' in body
    shown = html.unescape(re.search(r'<pre class="payload" id="result">(.*?)</pre>', body, re.S).group(1))
    assert PAYLOAD_SHOWN <= len(shown) <= PAYLOAD_SHOWN + 2 and shown.endswith("…")
    assert '"rows": 1200' in html.unescape(body)  # the progress it had when it finished
    download = (
        served.url
        + "/message/result.json?"
        + urllib.parse.urlencode({"queue": queue.name, "key": "job", "kind": "report"})
    )
    status, whole, headers = http(download)
    assert status == 200 and headers["content-type"] == "application/json"
    assert "attachment" in headers["content-disposition"] and len(whole) > 100_000
    status, _, _ = http(
        served.url
        + "/message/result.json?"
        + urllib.parse.urlencode({"queue": queue.name, "key": "no", "kind": "x"})
    )
    assert status == 404


def test_a_failed_message_shows_its_last_error_and_no_result(serve, dsn, make_queue):
    queue = make_queue(max_attempts=1)
    queue.set_result_retention(dt.timedelta(hours=1))
    queue.push("k", "x", {})
    [held] = queue.reserve()
    queue.fail(held, error="<b>smtp</b> timeout")
    status, body, _ = _page(_message_url(serve(dsn), queue, "k", "x"))
    assert status == 200 and 'id="result-state">failed<' in body
    assert "&lt;b&gt;smtp&lt;/b&gt; timeout" in body and 'id="result">No result value' in body


@pytest.mark.slow
def test_the_cancel_button_in_a_browser(page, serve, dsn, queue):
    queue.set_result_retention(dt.timedelta(hours=1))
    queue.push("a", "x", {})
    served = serve(dsn)
    page.get(_message_url(served, queue, "a", "x"))
    page.find_element(By.XPATH, "//button[normalize-space()='Cancel']").click()
    alert = WebDriverWait(page, 10).until(lambda d: d.switch_to.alert)
    assert "It is removed and will not run" in alert.text
    alert.accept()
    WebDriverWait(page, 10).until(lambda d: "cancelled a (x)" in d.find_element(By.ID, "flash").text)
    assert page.find_element(By.ID, "result-state").text == "cancelled"
    assert queue.messages() == []

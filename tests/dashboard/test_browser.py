"""The dashboard in a real browser (headless Chromium), on both dialects: live updates without a
reload, dead letters redriven and removed through the page, read-only and monitor-only accounts
without actions (and the server refusing forged POSTs), user data shown as text."""

from __future__ import annotations

import datetime as dt
import re
import urllib.parse

import pytest
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from ..security.test_privileges import Accounts
from .conftest import http

# a real Chromium and a dashboard server per test: left out of make test-fast
pytestmark = pytest.mark.slow


def _wait(driver, condition, timeout=15):
    """Polls condition until it is truthy. An element found in one poll that the page replaced
    before it was read (a navigation, the live refresh) is stale: that poll counts as not yet."""
    waiting = WebDriverWait(
        driver, timeout, poll_frequency=0.1, ignored_exceptions=(StaleElementReferenceException,)
    )
    return waiting.until(lambda d: condition(d))


def _texts(driver, selector: str) -> list[str]:
    """The text of every element matching selector, read in one script: an element found by one
    command and read by the next can be replaced between the two by the search's navigation or the
    live refresh, which Chromium reports as an unknown error, not as a stale element."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent.trim());", selector
    )


def _cell(driver, queue: str, column: str) -> str:
    """One cell of the overview, read in one script (the refresh may replace the table meanwhile)."""
    return driver.execute_script(
        "for (const row of document.querySelectorAll('tr[data-queue]')) {"
        "  if (row.dataset.queue === arguments[0]) return row.querySelector('td.' + arguments[1]).textContent.trim();"
        "} return '';",
        queue,
        column,
    )


def _csrf_cookie(served) -> str:
    """A CSRF cookie as a browser gets it with any page."""
    status, _, headers = http(served.url + "/")
    assert status == 200
    match = re.search(r"pyqueue_csrf=([^;]+)", headers.get("set-cookie", ""))
    assert match, headers
    return match.group(1)


def _forged_post(served, action: str, fields: dict, csrf: str | None) -> int:
    data = dict(fields)
    headers = {}
    if csrf is not None:
        data["csrf"] = csrf
        headers["Cookie"] = f"pyqueue_csrf={csrf}"
    status, _, _ = http(f"{served.url}/actions/{action}", data=data, headers=headers)
    return status


def test_overview_shows_pushed_messages_and_updates_without_reload(page, serve, dsn, make_queue):
    queue = make_queue()
    for i in range(3):
        queue.push(f"k{i}", "x", {"i": i})
    served = serve(dsn)
    page.get(served.url + "/")
    _wait(page, lambda d: _cell(d, queue.name, "ready") == "3")
    page.execute_script("window.notReloaded = 'yes';")
    for i in range(3, 7):
        queue.push(f"k{i}", "x", {"i": i})
    queue.push("later", "x", {}, run_at=dt.timedelta(hours=1))
    _wait(page, lambda d: _cell(d, queue.name, "ready") == "7" and _cell(d, queue.name, "delayed") == "1")
    assert page.execute_script("return window.notReloaded;") == "yes"
    # the queue's page: its settings and messages by state
    page.find_element(By.LINK_TEXT, queue.name).click()
    _wait(page, lambda d: "Queue" in d.find_element(By.TAG_NAME, "h1").text)
    assert "30s" in page.find_element(By.CSS_SELECTOR, "table.settings").text
    page.find_element(By.ID, "tab-delayed").click()
    _wait(page, lambda d: _texts(d, "a.message-link") == ["later"])
    page.find_element(By.ID, "tab-ready").click()
    search = page.find_element(By.ID, "key-search")
    search.send_keys("k1")
    search.submit()
    _wait(page, lambda d: _texts(d, "a.message-link") == ["k1"])


def test_dead_letters_are_redriven_and_removed_through_the_page(page, serve, dsn, make_queue):
    dead = make_queue()
    jobs = make_queue(max_attempts=1, dead_letter_queue=dead.name)
    jobs.push("a", "x", {"n": 1})
    jobs.push("b", "x", {"n": 2})
    for r in jobs.reserve(n=2):
        assert jobs.fail(r, "RuntimeError: boom") == "dead_lettered"
    served = serve(dsn)
    page.get(served.url + "/dead-letters?" + urllib.parse.urlencode({"queue": dead.name}))
    rows = page.find_elements(By.CSS_SELECTOR, "table.dead-letters tr[data-key]")
    assert sorted(r.get_attribute("data-key") for r in rows) == ["a", "b"]
    assert "RuntimeError: boom" in page.find_element(By.CSS_SELECTOR, "table.dead-letters").text
    button = page.find_element(By.XPATH, f"//button[normalize-space()='Redrive next 1 to {jobs.name}']")
    button.click()
    _wait(page, lambda d: "redrove 1 message(s)" in d.find_element(By.ID, "flash").text)
    assert len(jobs.messages()) == 1 and len(dead.messages()) == 1
    [left] = dead.messages()
    row = page.find_element(By.CSS_SELECTOR, f"table.dead-letters tr[data-key='{left.key}']")
    row.find_element(By.XPATH, ".//button[normalize-space()='Remove']").click()
    alert = _wait(page, lambda d: d.switch_to.alert)
    assert "Remove the dead letter" in alert.text
    alert.accept()
    _wait(page, lambda d: "removed" in d.find_element(By.ID, "flash").text)
    assert dead.messages() == []
    assert [m.key for m in jobs.messages()] != [left.key]


def test_read_only_has_no_buttons_and_refuses_forged_posts(page, serve, dsn, make_queue):
    dead = make_queue()
    jobs = make_queue(max_attempts=1, dead_letter_queue=dead.name)
    jobs.push("a", "x", {})
    [r] = jobs.reserve(n=1)
    jobs.fail(r, "boom")
    served = serve(dsn, read_only=True)
    for path in (
        "/",
        "/queue?name=" + urllib.parse.quote(jobs.name),
        "/dead-letters?queue=" + urllib.parse.quote(dead.name),
    ):
        page.get(served.url + path)
        assert page.find_elements(By.ID, "read-only")
        assert page.find_elements(By.CSS_SELECTOR, "form.action") == []
    csrf = _csrf_cookie(served)
    assert _forged_post(served, "pause", {"queue": jobs.name}, csrf) == 403
    assert (
        _forged_post(served, "redrive", {"queue": dead.name, "to_queue": jobs.name, "n": "all"}, csrf) == 403
    )
    assert not jobs.settings().paused
    assert len(dead.messages()) == 1


def test_a_post_without_the_csrf_token_is_refused(serve, dsn, queue):
    served = serve(dsn)
    assert _forged_post(served, "pause", {"queue": queue.name}, None) == 403
    csrf = _csrf_cookie(served)
    # a token in the form that is not the cookie's
    status, _, _ = http(
        f"{served.url}/actions/pause",
        data={"queue": queue.name, "csrf": "not-it"},
        headers={"Cookie": f"pyqueue_csrf={csrf}"},
    )
    assert status == 403
    # from another origin, even with the right token
    status, _, _ = http(
        f"{served.url}/actions/pause",
        data={"queue": queue.name, "csrf": csrf},
        headers={"Cookie": f"pyqueue_csrf={csrf}", "Origin": "http://evil.example"},
    )
    assert status == 403
    assert not queue.settings().paused
    # the same request from the page's own origin is done
    assert _forged_post(served, "pause", {"queue": queue.name, "next": "/"}, csrf) == 303
    assert queue.settings().paused


def test_an_account_with_only_monitor_sees_no_buttons(page, serve, dsn, make_queue):
    dead = make_queue()
    jobs = make_queue(max_attempts=1, dead_letter_queue=dead.name)
    jobs.push("a", "x", {})
    [r] = jobs.reserve(n=1)
    jobs.fail(r, "boom")
    accounts = Accounts(dsn)
    try:
        name = accounts.with_capabilities("dash", "monitor")
        served = serve(accounts.dsn_for(name))
        page.get(served.url + "/dead-letters?" + urllib.parse.urlencode({"queue": dead.name}))
        assert page.find_elements(By.ID, "monitor-only")
        assert "boom" in page.find_element(By.CSS_SELECTOR, "table.dead-letters").text
        assert page.find_elements(By.CSS_SELECTOR, "form.action") == []
        page.get(served.url + "/queue?" + urllib.parse.urlencode({"name": jobs.name}))
        assert page.find_elements(By.CSS_SELECTOR, "form.action") == []
        csrf = _csrf_cookie(served)
        assert _forged_post(served, "pause", {"queue": jobs.name}, csrf) == 403
        assert not jobs.settings().paused
        # an admin account gets the buttons
        admin = accounts.with_capabilities("dashadm", "admin")
        served_admin = serve(accounts.dsn_for(admin))
        page.get(served_admin.url + "/queue?" + urllib.parse.urlencode({"name": jobs.name}))
        assert page.find_elements(By.XPATH, "//button[normalize-space()='Pause']")
    finally:
        accounts.close()


def test_a_script_in_a_payload_or_key_is_shown_as_text(page, serve, dsn, queue):
    payload = {"html": "<script>alert('payload')</script>", "img": '<img src=x onerror="alert(2)">'}
    key = "<b>bold</b><script>alert('key')</script>"
    queue.push(key, "x", payload)
    served = serve(dsn)
    page.get(served.url + "/queue?" + urllib.parse.urlencode({"name": queue.name}))
    link = page.find_element(By.CSS_SELECTOR, "a.message-link")
    assert link.text == key
    assert page.find_elements(By.TAG_NAME, "b") == []
    link.click()
    text = _wait(page, lambda d: d.find_element(By.ID, "payload").text)
    assert "<script>alert('payload')</script>" in text
    assert '<img src=x onerror=\\"alert(2)\\">' in text
    assert page.find_element(By.CSS_SELECTOR, "h1 .name").text == key
    with pytest.raises(NoAlertPresentException):
        page.switch_to.alert.text  # noqa: B018 - the access raises when no alert is open
    assert page.find_elements(By.CSS_SELECTOR, "#payload script, #payload img") == []

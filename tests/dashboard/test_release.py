"""The dashboard's "Release reservations" button: offered to an admin account only, a POST that
needs the server's CSRF token, and in Chromium a click (confirmed) that hands the queue's
reservations back, on both dialects."""

from __future__ import annotations

import re
import urllib.parse

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from ..security.test_privileges import Accounts
from .conftest import http


def _queue_page(served, queue) -> tuple[int, str, str]:
    status, body, headers = http(served.url + "/queue?" + urllib.parse.urlencode({"name": queue.name}))
    cookie = re.search(r"pyqueue_csrf=([^;]+)", headers.get("set-cookie", ""))
    return status, body, cookie.group(1) if cookie else ""


def test_release_is_an_admin_action_behind_the_csrf_token(serve, dsn, queue):
    queue.push("a", "x", {})
    queue.push("b", "x", {})
    queue.reserve(n=2, worker="stuck-worker", timeout=3600)
    accounts = Accounts(dsn)
    try:
        watcher = accounts.with_capabilities("relwatch", "monitor")
        monitor = serve(accounts.dsn_for(watcher))
        status, body, csrf = _queue_page(monitor, queue)
        assert status == 200 and "Release reservations" not in body
        status, _, _ = http(
            f"{monitor.url}/actions/release",
            data={"queue": queue.name, "csrf": csrf},
            headers={"Cookie": f"pyqueue_csrf={csrf}"},
        )
        assert status == 403 and queue.stats().reserved == 2
    finally:
        accounts.close()
    served = serve(dsn)
    status, body, csrf = _queue_page(served, queue)
    assert status == 200 and "Release reservations" in body
    for forged in ("x", "forged.token"):
        status, _, _ = http(
            f"{served.url}/actions/release",
            data={"queue": queue.name, "csrf": forged},
            headers={"Cookie": f"pyqueue_csrf={forged}"},
        )
        assert status == 403
    assert queue.stats().reserved == 2
    status, _, headers = http(
        f"{served.url}/actions/release",
        data={"queue": queue.name, "csrf": csrf, "worker": "another-worker", "next": "/"},
        headers={"Cookie": f"pyqueue_csrf={csrf}"},
    )
    assert status == 303 and "released 0 reservation(s) held by another-worker" in headers["set-cookie"]
    assert queue.stats().reserved == 2


@pytest.mark.slow
def test_the_release_button_in_a_browser(page, serve, dsn, queue):
    queue.push("a", "x", {})
    queue.reserve(n=1, worker="stuck-worker", timeout=3600)
    served = serve(dsn)
    page.get(served.url + "/queue?" + urllib.parse.urlencode({"name": queue.name}))
    page.find_element(By.XPATH, "//button[normalize-space()='Release reservations']").click()
    alert = WebDriverWait(page, 10).until(lambda d: d.switch_to.alert)
    assert "Hand back every message" in alert.text
    alert.accept()
    WebDriverWait(page, 10).until(
        lambda d: "released 1 reservation(s)" in d.find_element(By.ID, "flash").text
    )
    stats = queue.stats()
    assert (stats.ready, stats.reserved) == (1, 0)


def test_the_workers_page_releases_one_workers_reservations(serve, dsn, db, queue):
    for key in ("a", "b", "c"):
        queue.push(key, "x", {})
    registration = db.register_worker(name=f"stuck-{queue.name}", queues=[queue.name])
    queue.reserve(n=2, worker=registration.reserve_as, timeout=3600)
    queue.reserve(n=1, worker="someone-else", timeout=3600)
    served = serve(dsn)
    status, body, headers = http(served.url + "/workers")
    assert status == 200
    csrf = re.search(r"pyqueue_csrf=([^;]+)", headers["set-cookie"]).group(1)
    forms = re.findall(r'<form method="post" action="/actions/release".*?</form>', body, re.S)
    mine = [f for f in forms if registration.reserve_as in f]
    assert len(mine) == 1 and f"Release in {queue.name}" in mine[0]
    fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', mine[0]))
    assert fields["worker"] == registration.reserve_as and fields["csrf"] == csrf
    status, _, headers = http(
        f"{served.url}/actions/release", data=fields, headers={"Cookie": f"pyqueue_csrf={csrf}"}
    )
    assert status == 303 and "released 2 reservation(s)" in headers["set-cookie"]
    stats = queue.stats()
    assert (stats.ready, stats.reserved) == (2, 1)  # someone-else's stays held

"""Fixtures of the dashboard tests: a real headless Chromium (Debian's, driven by Selenium with
the driver's path given, so that nothing is ever downloaded) and the dashboard served by uvicorn on
a free port of 127.0.0.1 in a background thread."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest

from ..conftest import UNDER_CI
from ..helpers import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,900",
)


def _missing_browser() -> str | None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        return f"the browser tests need {', '.join(missing)} (bash scripts/browser-deps.sh installs them)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "the browser tests need selenium (the dev extra)"
    return None


def start_browser(window: tuple[int, int] = (1400, 900), flags: tuple[str, ...] = ()):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="pyqueue-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--window-size={window[0]},{window[1]}")
    options.add_argument(f"--user-data-dir={profile}")
    for flag in flags:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    return driver, profile


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session (fresh profile); a test starts from about:blank."""
    reason = _missing_browser()
    if reason:
        if UNDER_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    driver, profile = start_browser()
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def page(browser):
    browser.delete_all_cookies()
    browser.get("about:blank")
    yield browser
    with contextlib.suppress(Exception):
        browser.switch_to.alert.dismiss()


class Served:
    """A dashboard app served by uvicorn in a thread; ``url`` is its base URL."""

    def __init__(self, app) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="dashboard")
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the dashboard did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def serve():
    """serve(dsn, read_only=False, token=None) -> Served; stopped after the test."""
    from pyqueue_sql.dashboard import create_app

    running: list[Served] = []

    def start(dsn: str, **options) -> Served:
        served = Served(create_app(dsn, **options))
        running.append(served)
        return served

    yield start
    for s in running:
        s.stop()


def http(url: str, data: dict | None = None, headers: dict | None = None) -> tuple[int, str, Any]:
    """(status, body, headers) of a GET (or a form POST with data), redirects not followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    body = None if data is None else urllib.parse.urlencode(data).encode()
    request = urllib.request.Request(url, data=body, headers=headers or {})
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers

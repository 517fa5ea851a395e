"""The dashboard attacked from a real browser (headless Chromium): a page of another site that
frames it, and a page whose DNS name is rebound to 127.0.0.1 (Chromium's resolver told to map the
name, as a rebinding DNS server would) reading and acting through it."""

from __future__ import annotations

import http.server
import shutil
import threading
import time
import urllib.parse

import pytest
from selenium.webdriver.common.by import By

from ..helpers import free_port
from .conftest import _missing_browser, start_browser

pytestmark = pytest.mark.slow

REBIND = "rebind.example"


class _Attacker:
    """A page of another origin (http://localhost:PORT/), served from a thread."""

    def __init__(self, html: str) -> None:
        body = html.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://localhost:{self.port}/"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_another_site_cannot_frame_the_dashboard(page, serve, dsn, queue):
    queue.push("framed", "x", {})
    served = serve(dsn)
    target = served.url + "/queue?" + urllib.parse.urlencode({"name": queue.name})
    attacker = _Attacker(
        f'<html><body><iframe id="f" src="{target}" width="800" height="600"></iframe></body></html>'
    )
    try:
        page.get(attacker.url)
        frame = page.find_element(By.ID, "f")
        time.sleep(1.5)  # the frame's load (or its refusal)
        page.switch_to.frame(frame)
        shown = page.execute_script("return document.documentElement.outerHTML;")
        page.switch_to.default_content()
        assert queue.name not in shown and "framed" not in shown
        assert page.find_elements(By.ID, "f")  # the attacker's page itself is there
    finally:
        attacker.stop()


def test_a_rebound_name_reads_and_does_nothing(serve, dsn, queue):
    reason = _missing_browser()
    if reason:
        pytest.skip(reason)
    queue.push("rebound-key", "x", {"card": "4111"})
    served = serve(dsn)
    driver, profile = start_browser(flags=(f"--host-resolver-rules=MAP {REBIND} 127.0.0.1",))
    try:
        # the sanity check: the mapped name reaches this very server
        driver.get(f"http://{REBIND}:{served.port}/queue?" + urllib.parse.urlencode({"name": queue.name}))
        text = driver.find_element(By.TAG_NAME, "body").text
        assert "400" in text and queue.name not in text and "4111" not in text
        # the page's script (same origin as the rebound name) reads and posts: refused
        got = driver.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            (async () => {
              const read = await fetch('/fragment/overview');
              const body = await read.text();
              const form = new URLSearchParams({queue: arguments[0], csrf: 'x', next: '/'});
              const post = await fetch('/actions/pause', {method: 'POST', body: form});
              done([read.status, body, post.status]);
            })().catch(e => done(['error', String(e), 0]));
            """,
            queue.name,
        )
        assert got[0] == 400 and queue.name not in got[1] and got[2] == 400, got
        assert not queue.settings().paused
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)

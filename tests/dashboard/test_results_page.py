"""The dashboard's results page (queue_results) with raw HTTP on both dialects: a queue's finished
jobs newest first with their state, attempts and last error, filtered by state and kind, paged
through "older"; with no queue chosen, the first that keeps results; a bad time refused in one
line."""

from __future__ import annotations

import re
import urllib.parse

import pyqueue_sql.dashboard.app as dashboard_app

from .conftest import http


def _rows(body: str) -> list[tuple[str, str]]:
    return re.findall(r'<tr data-key="([^"]+)" data-state="([^"]+)">', body)


def test_the_results_page_lists_finished_jobs_newest_first_by_state_and_in_pages(serve, dsn, db, monkeypatch):
    # names of this test alone: the test process shares one database, and another dashboard test's
    # "b.jobs" has a dead-letter queue (queue_create leaves it), so a failure there is dead_lettered
    db.queue("a.results-plain").create()  # keeps no results: not the one opened
    q = db.queue("b.results-jobs").create(max_attempts=1)
    q.set_result_retention(3600)
    for key in ("first", "second", "third"):
        q.push(key, "send", {})
        [r] = q.reserve()
        if key == "second":
            assert q.fail(r, "ValueError: no such address") == "dropped"
        else:
            assert q.commit(r)
    served = serve(dsn)
    status, body, _ = http(served.url + "/results")
    assert status == 200 and "Results of b.results-jobs" in body
    assert _rows(body) == [("third", "succeeded"), ("second", "failed"), ("first", "succeeded")]
    assert "ValueError: no such address" in body

    _, body, _ = http(served.url + "/results?" + urllib.parse.urlencode({"queue": q.name, "state": "failed"}))
    assert _rows(body) == [("second", "failed")]
    _, body, _ = http(served.url + "/results?" + urllib.parse.urlencode({"queue": q.name, "kind": "other"}))
    assert _rows(body) == [] and "No finished job kept of that kind and state" in body

    monkeypatch.setattr(dashboard_app, "RESULTS_SHOWN", 2)
    _, body, _ = http(served.url + "/results?queue=b.results-jobs")
    assert _rows(body) == [("third", "succeeded"), ("second", "failed")]
    older = re.search(r'<a id="older" href="([^"]+)"', body).group(1).replace("&amp;", "&")
    _, body, _ = http(served.url + older)
    assert _rows(body) == [("first", "succeeded")] and 'id="older"' not in body

    status, body, _ = http(served.url + "/results?queue=b.results-jobs&before=yesterday")
    assert status == 400 and "before must be an ISO 8601 time" in body

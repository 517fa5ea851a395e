"""The dashboard's dead letters page with no queue chosen opens a dead-letter queue that holds
letters, not the first one in the list when that one is empty."""

from __future__ import annotations

from .conftest import http


def test_dead_letters_without_a_queue_chosen_opens_one_that_holds_letters(serve, dsn, db):
    empty = db.queue("a.dead").create()
    full = db.queue("b.dead").create()
    db.queue("a.jobs").create(max_attempts=1, dead_letter_queue=empty.name)
    jobs = db.queue("b.jobs").create(max_attempts=1, dead_letter_queue=full.name)
    jobs.push("lost-letter", "job", {})
    [r] = jobs.reserve()
    assert jobs.fail(r, "boom") == "dead_lettered"
    served = serve(dsn)
    status, body, _ = http(served.url + "/dead-letters")
    assert status == 200
    assert "lost-letter" in body  # b.dead's letter, though a.dead comes first

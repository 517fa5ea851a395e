"""`pyqueue-sql show` of a message that was dead-lettered points to its dead-letter queue."""

from __future__ import annotations

import uuid

from pyqueue_sql import cli


def test_show_of_a_dead_lettered_message_names_its_dead_letter_queue(capsys, db, dsn):
    name = f"showdl.{uuid.uuid4().hex[:8]}"
    dead = db.queue(f"{name}.dead").create()
    queue = db.queue(name).create(max_attempts=1, dead_letter_queue=dead.name)
    try:
        queue.push("k1", "charge", {"n": 1})
        [job] = queue.reserve(n=1)
        assert queue.fail(job, error="boom") == "dead_lettered"
        code = cli.main(["show", name, "k1", "charge", "--dsn", dsn])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert (
            f"state:        gone, dead-lettered into {dead.name} (`pyqueue-sql show {dead.name} k1 charge`"
            in out
        )
        code = cli.main(["show", dead.name, "k1", "charge", "--dsn", dsn])
        out, err = capsys.readouterr()
        assert code == 0 and "last error:   boom" in out, (out, err)
    finally:
        queue.drop()
        dead.drop()

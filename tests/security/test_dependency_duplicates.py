"""Parents are a set: a parent named 1,000 times by a child is one edge, so its commit stays cheap.

The attacker holds only the producer capability. It pushes, in plain SQL, children that each name
the same parent of another queue 1,000 times (queue_push_after_batch, 10 children; and
queue_push_after, one child). A parent's commit costs one step per child (the contract): each
child records each of its parents once, the parent has 10 + 1 children, and its single commit by
its own consumer, from another connection, makes every child ready at once. Before, each naming
was an edge: that commit walked 11,000 of them (with 40 children, 41,000: 10-23 s).
"""

from __future__ import annotations

import json
import time
import uuid

from tests.plainsql import Session

from .test_privileges import accounts  # noqa: F401 - the fixture is used by name

CHILDREN = 10
NAMINGS = 1000


def _edges(admin: Session, queue: str, key: str, role: str) -> int:
    return int(
        admin.sql(
            "SELECT COUNT(*) FROM pyqueue_dependency WHERE queue_name = %s AND p_key = %s AND role = %s",
            queue,
            key,
            role,
        )[0][0]
    )


def test_a_parent_named_a_thousand_times_is_one_edge_and_its_commit_stays_cheap(sql_session, accounts):  # noqa: F811
    admin = sql_session()
    pg = admin.dialect == "postgresql"
    suffix = uuid.uuid4().hex[:8]
    victim, mine = f"dup.victim.{suffix}", f"dup.mine.{suffix}"
    for q in (victim, mine):
        if pg:
            admin.raw("SELECT queue_create(%s)", (q,))
            admin.raw("SELECT queue_set_result_retention(%s, interval '1 day')", (q,))
        else:
            admin.call("queue_create", q, None, None, None, None)
            admin.call("queue_set_result_retention", q, 86400)
    admin.call("queue_push", victim, "P", "k", "{}", None, None)
    admin.call("queue_push", victim, "Q", "k", "{}", None, None)  # named once among the duplicates

    producer = Session(accounts.dsn_for(accounts.with_capabilities("prod", "producer")))
    parent = {"queue": victim, "p_key": "P", "p_kind": "k"}
    parents = (
        [parent] * (NAMINGS // 2)
        + [{"queue": victim, "p_key": "Q", "p_kind": "k"}]
        + [parent] * (NAMINGS // 2 - 1)
    )
    batch = [{"p_key": f"c{i}", "p_kind": "k", "payload": {}, "parents": parents} for i in range(CHILDREN)]
    assert int(producer.one("queue_push_after_batch", mine, json.dumps(batch))) == CHILDREN
    assert (
        int(producer.one("queue_push_after", mine, "single", "k", "{}", json.dumps([parent] * NAMINGS))) == 1
    )

    # the mechanism: one edge per (parent, child), one parent row per child, each child waits for its 2 or 1
    assert _edges(admin, victim, "P", "c") == CHILDREN + 1
    assert _edges(admin, victim, "Q", "c") == CHILDREN
    assert _edges(admin, mine, "c0", "p") == 2 and _edges(admin, mine, "single", "p") == 1
    ordinals = [(int(r[0]), r[2]) for r in admin.call("queue_parent_results", mine, "c7", "k")]
    assert ordinals == [(1, "P"), (NAMINGS // 2 + 1, "Q")]  # each at the place it was first named

    # the parent's commit by its consumer, from another connection: one step per child
    consumer = sql_session()
    for key in ("P", "Q"):
        [row] = consumer.call("queue_reserve", victim, "w", consumer.dur(30), 1, None)
        assert row[0] == key
        start = time.monotonic()
        assert consumer.one("queue_commit", victim, key, "k", str(row[3])) in (True, 1)
        took = time.monotonic() - start
        assert took < 1.0, f"the commit of {key} took {took:.2f} s"
    ready = consumer.call("queue_reserve", mine, "w", consumer.dur(30), CHILDREN + 5, None)
    assert sorted(r[0] for r in ready) == sorted([f"c{i}" for i in range(CHILDREN)] + ["single"])
    producer.close()

"""What docs/operations.md says of wakeups on PostgreSQL, tried as a role that holds no capability:
it may LISTEN on a queue's channel (PostgreSQL has no privilege for LISTEN or NOTIFY) and learns the
queue's name and that messages became ready, never their payloads, keys or kinds; its NOTIFY wakes a
listener that then finds nothing."""

from __future__ import annotations

import hashlib
import uuid

import psycopg
import pytest

pytestmark = pytest.mark.only_dialect("postgresql")

SECRET = f"secret-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def outsider(db):
    """A login role with no grant at all, connected to the test database."""
    name = f"pq_outsider_{uuid.uuid4().hex[:8]}"
    with db.connection.cursor() as cur:
        cur.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{SECRET}'")
    info = db.connection.info
    connection = psycopg.connect(
        host=info.host, port=info.port, dbname=info.dbname, user=name, password=SECRET, autocommit=True
    )
    try:
        yield connection
    finally:
        connection.close()
        with db.connection.cursor() as cur:
            cur.execute(f'DROP ROLE "{name}"')


def test_a_role_without_capabilities_learns_only_the_queue_name(db, queue, outsider):
    channel = "pyqueue_" + hashlib.md5(queue.name.encode()).hexdigest()
    assert channel == queue.channel()
    with outsider.cursor() as cur:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            cur.execute("SELECT queue_channel(%s)", (queue.name,))
        cur.execute(f'LISTEN "{channel}"')
    assert queue.push(f"key-{SECRET}", f"kind-{SECRET}", {"card": SECRET})
    heard = list(outsider.notifies(timeout=5, stop_after=1))
    assert [(n.channel, n.payload) for n in heard] == [(channel, queue.name)]
    assert all(SECRET not in n.payload for n in heard)


def test_a_notify_from_a_role_without_capabilities_only_wakes_a_listener(db, queue, outsider, connect):
    listener = connect()
    listener.dialect.listener.listen(listener.connection, [queue.channel()])
    with outsider.cursor() as cur:
        cur.execute("SELECT pg_notify(%s, %s)", (queue.channel(), "forged"))
    woken = listener.dialect.listener.wait_for_notification(listener.connection, 5)
    assert woken == [(queue.channel(), "forged")]
    assert queue.reserve(n=10) == []  # the poll it causes finds nothing: no message was made

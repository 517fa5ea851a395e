"""Topics (spec: docs/contract.md, "Topics"), on every dialect and client: queue_bind,
queue_unbind, queue_bindings, queue_publish, queue_publish_batch.

Every topic and pattern here starts with a word of its own test (``uid``), so that the bindings
other tests leave in the shared database never match what a test publishes; the few patterns that
must start with a wildcard are unbound again at the end of their test.
"""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

import pyqueue_sql
from pyqueue_sql import InvalidArgumentError, UnknownQueueError

UTC = dt.timezone.utc


@pytest.fixture
def uid():
    return "t" + uuid.uuid4().hex[:10]


def ready_keys(queue):
    return sorted(m.key for m in queue.pop(1000))


# pattern, then the topics it matches and those it does not (both relative: "P." is prepended).
MATCHING = [
    ("a.*", ["a.b", "a.x"], ["a", "a.b.c", "b.a", "ab"]),
    ("a.#", ["a", "a.b", "a.b.c"], ["b", "ab", "b.a"]),
    ("#", ["a", "a.b.c", "x"], []),
    ("#.c", ["c", "a.c", "a.b.c"], ["a.c.d", "ac", "x.cc"]),
    ("a.#.c", ["a.c", "a.b.c", "a.x.y.c"], ["a.b", "b.a.c", "a.c.d", "ac"]),
    ("*.b", ["a.b", "x.b"], ["b", "a.a.b", "a.b.c"]),
    ("*", ["a", "x"], ["a.b"]),
    ("*.*", ["a.b"], ["a", "a.b.c"]),
    ("a.*.#", ["a.b", "a.b.c"], ["a"]),
    ("#.*", ["a", "a.b"], []),
    ("a.b", ["a.b"], ["a", "a.bc", "a.b.c", "A.b", "a.B", "ab"]),
    # the characters a regular expression gives a meaning to are literal in a word
    ("a+b.c", ["a+b.c"], ["aab.c", "ab.c"]),
    ("x(y)|z", ["x(y)|z"], ["xy", "z", "x(y)"]),
    ("[ab]^$", ["[ab]^$"], ["a", "b"]),
    ("q?.{1}", ["q?.{1}"], ["q.{1}", "q?.1"]),
    ("back\\slash", ["back\\slash"], ["backslash", "back\\\\slash"]),
    ("dot-free_words~!@%&=", ["dot-free_words~!@%&="], ["dot-free_words"]),
    ("é.😀", ["é.😀"], ["e.😀"]),
]


def test_pattern_matching_follows_the_topic_exchange_rules(db, make_queue, uid):
    """Each pattern gets a queue of its own (bound as "P.<pattern>"); every topic of the table is
    published once ("P.<topic>"): each queue holds exactly the topics its pattern matches, and each
    publish counts the queues it reached."""
    queues = {}
    for pattern, _, _ in MATCHING:
        q = make_queue()
        assert db.bind(f"{uid}.{pattern}", q) is True
        queues[pattern] = q
    topics = sorted({t for _, yes, no in MATCHING for t in yes + no})
    for i, topic in enumerate(topics):
        matched = [p for p in queues if topic in _matches_of(p)]
        assert db.publish(f"{uid}.{topic}", f"m{i}", "evt", {"topic": topic}) == len(matched), (
            topic,
            matched,
        )
    for pattern, yes, no in MATCHING:
        got = {m.payload["topic"] for m in queues[pattern].pop(1000)}
        assert set(yes) <= got, (pattern, "missed", set(yes) - got)
        assert not set(no) & got, (pattern, "matched", set(no) & got)
        assert got == _matches_of(pattern) & set(topics), (pattern, got)


def _matches_of(pattern):
    """The table's topics a pattern matches, computed independently of the routines (the AMQP rule:
    "*" one word, "#" zero or more), for the counts of the publishes."""
    topics = {t for _, yes, no in MATCHING for t in yes + no}

    def match(pw, tw):
        if not pw:
            return not tw
        if pw[0] == "#":
            return any(match(pw[1:], tw[i:]) for i in range(len(tw) + 1))
        if not tw:
            return False
        return (pw[0] == "*" or pw[0] == tw[0]) and match(pw[1:], tw[1:])

    return {t for t in topics if match(pattern.split("."), t.split("."))}


def test_the_reference_matcher_agrees_with_the_table():
    for pattern, yes, no in MATCHING:
        m = _matches_of(pattern)
        assert set(yes) <= m and not set(no) & m, pattern


def test_patterns_that_start_with_a_wildcard(db, make_queue, uid):
    hash_q, hash_c_q, star_b_q, star_q = (make_queue() for _ in range(4))
    bound = [("#", hash_q), ("#.c", hash_c_q), ("*.b", star_b_q), ("*", star_q)]
    try:
        for pattern, q in bound:
            assert db.bind(pattern, q) is True
        db.publish(uid, "k1", "evt", 1)  # one word
        db.publish(f"{uid}.c", "k2", "evt", 2)
        db.publish(f"{uid}.b", "k3", "evt", 3)
        db.publish(f"x.{uid}.b", "k4", "evt", 4)
        db.publish(f"{uid}.x.c", "k5", "evt", 5)
    finally:
        for pattern, q in bound:
            db.unbind(pattern, q)
    assert ready_keys(hash_q) == ["k1", "k2", "k3", "k4", "k5"]
    assert ready_keys(hash_c_q) == ["k2", "k5"]
    assert ready_keys(star_b_q) == ["k3"]
    assert ready_keys(star_q) == ["k1"]


def test_bind_and_unbind_say_whether_they_changed_anything(db, make_queue, uid):
    q = make_queue()
    assert db.bind(f"{uid}.a", q) is True
    assert db.bind(f"{uid}.a", q.name) is False
    assert db.publish(f"{uid}.a", "k1", "evt", 1) == 1
    assert db.unbind(f"{uid}.a", q) is True
    assert db.unbind(f"{uid}.a", q) is False
    assert db.unbind(f"{uid}.never", q) is False
    assert db.publish(f"{uid}.a", "k2", "evt", 2) == 0
    assert ready_keys(q) == ["k1"]


def test_bindings_lists_by_queue_then_pattern(db, make_queue, uid):
    q1, q2 = sorted((make_queue(), make_queue()), key=lambda q: q.name)
    before = dt.datetime.now(UTC) - dt.timedelta(seconds=5)
    db.bind(f"{uid}.z", q1)
    db.bind(f"{uid}.a.#", q1)
    db.bind(f"{uid}.m", q2)
    db.bind(f"{uid}.a.#", q2)
    mine = [(b.pattern, b.queue) for b in db.bindings() if b.queue in (q1.name, q2.name)]
    assert mine == [
        (f"{uid}.a.#", q1.name),
        (f"{uid}.z", q1.name),
        (f"{uid}.a.#", q2.name),
        (f"{uid}.m", q2.name),
    ]
    everything = [(b.queue, b.pattern) for b in db.bindings()]
    assert everything == sorted(everything)
    only = db.bindings(q2)
    assert [(b.pattern, b.queue) for b in only] == [(f"{uid}.a.#", q2.name), (f"{uid}.m", q2.name)]
    assert all(before <= b.created_at <= dt.datetime.now(UTC) + dt.timedelta(seconds=5) for b in only)
    assert db.bindings(make_queue()) == []


def test_dropping_a_queue_drops_its_bindings(db, make_queue, uid):
    q = make_queue()
    db.bind(f"{uid}.#", q)
    q.drop()
    with pytest.raises(UnknownQueueError):
        db.bindings(q.name)
    assert [b for b in db.bindings() if b.queue == q.name] == []
    assert db.publish(f"{uid}.x", "k", "evt", 1) == 0


def test_a_queue_bound_by_two_matching_patterns_gets_one_copy(db, make_queue, uid):
    q, other = make_queue(), make_queue()
    db.bind(f"{uid}.a.*", q)
    db.bind(f"{uid}.#", q)
    db.bind(f"{uid}.a.b", q)
    db.bind(f"{uid}.#", other)
    assert db.publish(f"{uid}.a.b", "k1", "evt", {"v": 1}) == 2
    assert [m.payload for m in q.pop(10)] == [{"v": 1}]
    assert [m.payload for m in other.pop(10)] == [{"v": 1}]


def test_publish_counts_only_the_queues_that_got_a_new_message(db, make_queue, uid):
    q1, q2, q3 = make_queue(), make_queue(), make_queue()
    for q in (q1, q2, q3):
        db.bind(f"{uid}.orders.*", q)
    q2.push("o1", "created", {"old": True})
    assert db.publish(f"{uid}.orders.eu", "o1", "created", {"new": True}) == 2
    assert db.publish(f"{uid}.orders.eu", "o1", "created", {"new": True}) == 0
    assert db.publish(f"{uid}.orders.eu", "o1", "updated", {"new": True}) == 3  # another kind
    assert q2.message("o1", "created").payload == {"old": True}
    assert [q.stats().ready for q in (q1, q2, q3)] == [2, 2, 2]


def test_publish_to_a_topic_nobody_is_bound_to_returns_zero(db, uid):
    assert db.publish(f"{uid}.nobody.listens", "k", "evt", 1) == 0
    assert db.publish_many([(f"{uid}.nobody", "k", "evt", 1), (f"{uid}.nor.here", "k2", "evt", 2)]) == 0


def test_published_messages_carry_payload_run_at_and_priority(db, make_queue, uid):
    q = make_queue()
    db.bind(f"{uid}.#", q)
    later = (dt.datetime.now(UTC) + dt.timedelta(hours=1)).replace(microsecond=250000)
    assert db.publish(f"{uid}.a", "late", "evt", {"x": [1, "é"]}, run_at=later, priority=3) == 1
    assert db.publish(f"{uid}.a", "now", "evt", {"y": None}, priority=-2) == 1
    late = q.message("late", "evt")
    assert (late.state, late.scheduled_at, late.payload, late.priority, late.attempts) == (
        "delayed",
        later,
        {"x": [1, "é"]},
        3,
        0,
    )
    [r] = q.reserve(n=10, timeout=60)
    assert (r.key, r.payload, r.priority) == ("now", {"y": None}, -2)


def test_published_messages_have_no_group(db, make_queue, raw, uid):
    q = make_queue()
    db.bind(f"{uid}.#", q)
    q.push("g1", "evt", 1, group="g")
    db.publish(f"{uid}.a", "p1", "evt", 1)
    [(group,)] = raw(
        "SELECT group_key FROM pyqueue_message WHERE queue_name = %s AND p_key = 'p1'", (q.name,)
    )
    assert group is None
    assert sorted(r.key for r in q.reserve(n=10)) == ["g1", "p1"]


def test_publish_into_a_paused_queue_still_enqueues(db, make_queue, uid):
    q = make_queue()
    db.bind(f"{uid}.#", q)
    q.pause()
    assert db.publish(f"{uid}.x", "k", "evt", 1) == 1
    assert q.reserve() == []
    assert q.stats().ready == 1
    q.resume()
    assert [r.key for r in q.reserve()] == ["k"]


def test_publish_many_sends_each_message_to_the_queues_of_its_own_topic(db, make_queue, uid):
    eu, us, audit = make_queue(), make_queue(), make_queue()
    db.bind(f"{uid}.orders.eu.*", eu)
    db.bind(f"{uid}.orders.us.*", us)
    db.bind(f"{uid}.orders.#", audit)
    later = dt.datetime.now(UTC) + dt.timedelta(hours=1)
    n = db.publish_many(
        [
            pyqueue_sql.Publication(f"{uid}.orders.eu.created", "o1", "evt", 1),
            (f"{uid}.orders.us.created", "o2", "evt", 2),
            {"topic": f"{uid}.orders.eu.paid", "key": "o3", "kind": "evt", "payload": 3, "priority": 4},
            (f"{uid}.orders.us.created", "o2", "evt", 99),  # the same key and kind again: deduped
            (f"{uid}.orders.eu.created", "o4", "evt", 4, later),
            (f"{uid}.billing.eu.created", "o5", "evt", 5),  # nobody bound
        ]
    )
    assert n == 3 + 1 + 2 + 2
    assert ready_keys(eu) == ["o1", "o3"]
    assert eu.message("o4", "evt").state == "delayed"
    assert [(m.key, m.payload) for m in us.pop(10)] == [("o2", 2)]
    assert ready_keys(audit) == ["o1", "o2", "o3"]
    assert db.publish_many([]) == 0


def test_publish_many_refuses_the_whole_batch_for_one_bad_topic(db, make_queue, uid):
    q = make_queue()
    db.bind(f"{uid}.#", q)
    with pytest.raises(InvalidArgumentError, match="topic"):
        db.publish_many([(f"{uid}.ok", "k1", "evt", 1), (f"{uid}..bad", "k2", "evt", 2)])
    assert q.stats().ready == 0


BAD_NAMES = ["", ".a", "a.", "a..b", " a", "a ", "x" * 256, "x." + "y" * 254]


@pytest.mark.parametrize("bad", BAD_NAMES + ["a.*", "a.#", "#", "a*", "a.b#"])
def test_an_invalid_topic_is_refused(db, bad):
    with pytest.raises(InvalidArgumentError, match="topic"):
        db.publish(bad, "k", "evt", 1)


@pytest.mark.parametrize("bad", BAD_NAMES + ["a*", "a.b#", "**", "##", "a.*b", "#a.b", "a.#*"])
def test_an_invalid_pattern_is_refused(db, make_queue, bad):
    q = make_queue()
    with pytest.raises(InvalidArgumentError, match="pattern"):
        db.bind(bad, q)
    assert db.bindings(q) == []


def test_the_longest_topic_and_pattern_are_accepted(db, make_queue, uid):
    q = make_queue()
    long_pattern = f"{uid}." + "#." + "w" * (255 - len(uid) - 3)
    assert len(long_pattern) == 255
    assert db.bind(long_pattern, q)
    topic = f"{uid}.x." + "w" * (255 - len(uid) - 3)
    assert len(topic) == 255
    assert db.publish(topic, "k", "evt", 1) == 1
    db.unbind(long_pattern, q)


def test_bind_refuses_unknown_queues_and_publish_other_bad_arguments(db, make_queue, uid):
    with pytest.raises(UnknownQueueError):
        db.bind(f"{uid}.a", "t.no-such-queue-bind")
    q = make_queue()
    db.bind(f"{uid}.a", q)
    with pytest.raises(InvalidArgumentError):
        db.publish(f"{uid}.a", "", "evt", 1)
    with pytest.raises(InvalidArgumentError):
        db.publish(f"{uid}.a", "k", "evt ", 1)
    assert q.stats().ready == 0


# -- plain SQL ---------------------------------------------------------------------------------------


def test_topics_from_plain_sql(make_queue, raw, dialect, uid):
    def call(sql, params=None):
        return [tuple(r) for r in raw(sql, params)]

    q = make_queue().name
    if dialect == "postgresql":
        assert call("SELECT queue_bind(%s, %s)", (f"{uid}.#", q)) == [(True,)]
        assert call("SELECT queue_publish(%s, 'k1', 'evt', '{}')", (f"{uid}.x",)) == [(1,)]
        assert call(
            "SELECT queue_publish_batch(ARRAY[%s, %s], ARRAY['k2', 'k3'], ARRAY['evt', 'evt'], "
            "ARRAY['{}', '{}']::jsonb[])",
            (f"{uid}.y", "nobody.else"),
        ) == [(1,)]
        rows = call("SELECT pattern, queue FROM queue_bindings(%s)", (q,))
        assert call("SELECT queue_unbind(%s, %s)", (f"{uid}.#", q)) == [(True,)]
    else:
        assert call("CALL queue_bind(%s, %s)", (f"{uid}.#", q)) == [(1,)]
        assert call("CALL queue_publish(%s, 'k1', 'evt', '{}', NULL, NULL)", (f"{uid}.x",)) == [(1,)]
        assert call(
            # as queue_push_batch: one JSON array of messages, each with its topic
            "CALL queue_publish_batch(%s, NULL, NULL, NULL, NULL, NULL)",
            (
                f'[{{"topic": "{uid}.y", "p_key": "k2", "p_kind": "evt", "payload": {{}}}}, '
                '{"topic": "nobody.else", "p_key": "k3", "p_kind": "evt", "payload": {}}]',
            ),
        ) == [(1,)]
        rows = call("CALL queue_bindings(%s)", (q,))
        assert call("CALL queue_unbind(%s, %s)", (f"{uid}.#", q)) == [(1,)]
    assert [tuple(r[:2]) for r in rows] == [(f"{uid}.#", q)]


# -- wakeups (PostgreSQL): publish, and the promotion of a group's next message ------------------------------------------------------------------------------


@pytest.fixture
def listener(db, dsn):
    """A plain psycopg connection LISTENing to queues' channels; received() returns the
    notifications that arrived within a short time."""
    assert db.dialect.name == "postgresql", (
        'LISTEN/NOTIFY: mark the test @pytest.mark.only_dialect("postgresql")'
    )
    import psycopg

    conn = psycopg.connect(dsn.replace("postgresql+psycopg", "postgresql"), autocommit=True)

    def listen(queue):
        [(channel,)] = conn.execute("SELECT queue_channel(%s)", (queue.name,)).fetchall()
        conn.execute(f'LISTEN "{channel}"')
        return channel

    def received(expect=0, wait=0.5):
        """The notifications that arrive: the first ``expect`` waited for (up to 30 s: a loaded
        machine), then any more within ``wait`` seconds."""
        got = [(n.channel, n.payload) for n in conn.notifies(timeout=30, stop_after=expect)] if expect else []
        return got + [(n.channel, n.payload) for n in conn.notifies(timeout=wait)]

    yield listen, received
    conn.close()


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_publish_wakes_each_queue_that_got_a_ready_message(db, make_queue, listener, uid):
    listen, received = listener
    q1, q2, q3 = make_queue(), make_queue(), make_queue()
    channels = {}
    for q in (q1, q2, q3):
        q.set_notify_window(0)
        channels[q.name] = listen(q)
    db.bind(f"{uid}.a.*", q1)
    db.bind(f"{uid}.#", q2)
    db.bind(f"{uid}.b", q3)
    assert db.publish(f"{uid}.a.x", "k1", "evt", 1) == 2
    assert sorted(received(2)) == sorted([(channels[q1.name], q1.name), (channels[q2.name], q2.name)])
    assert db.publish(f"{uid}.a.x", "k2", "evt", 2, run_at=dt.timedelta(hours=1)) == 2
    assert received() == []  # delayed: nothing to wake for
    assert db.publish(f"{uid}.a.x", "k1", "evt", 3) == 0
    assert received() == []  # duplicates: nothing new
    assert db.publish_many([(f"{uid}.b", "k3", "evt", 1), (f"{uid}.b", "k4", "evt", 1)]) == 4
    assert sorted(received(2)) == sorted([(channels[q2.name], q2.name), (channels[q3.name], q3.name)])


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_a_promotion_wakes_the_queue(queue, listener):
    listen, received = listener
    channel = listen(queue)
    queue.set_notify_window(0)
    queue.push("a1", "job", 1, group="g")
    queue.push("a2", "job", 2, group="g")
    assert received(1) == [(channel, queue.name)]  # a2 is blocked: one wakeup, for a1
    [r] = queue.reserve(timeout=60)
    assert received() == []
    assert queue.commit(r)
    assert received(1) == [(channel, queue.name)]

"""Message headers through the client (push, push_many, grouped, publish, and every reader: reserve,
commit_reserve, pop, message, messages, dead letters), on both dialects, against the real routines."""

from __future__ import annotations

import uuid

import pytest

from pyqueue_sql import InvalidArgumentError, NewMessage, Publication

H = {
    "tenant": "acme",
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "n": [1, {"x": None}],
}


def test_a_push_with_headers_is_read_back_by_message_and_reserve(queue):
    assert queue.push("k", "job", {"a": 1}, headers=H)
    assert queue.message("k", "job").headers == H
    [r] = queue.reserve()
    assert (r.payload, r.headers) == ({"a": 1}, H)
    queue.rollback(r)
    [again] = queue.reserve()
    assert again.headers == H  # kept through a retry
    queue.commit(again)


def test_a_push_without_headers_reads_back_none(queue):
    queue.push("k", "job", 1)
    assert queue.message("k", "job").headers is None
    [row] = queue.messages()
    assert row.headers is None
    [r] = queue.reserve()
    assert r.headers is None


def test_an_empty_dict_is_headers_too(queue):
    queue.push("k", "job", 1, headers={})
    assert queue.message("k", "job").headers == {}


def test_a_duplicate_push_changes_nothing_headers_included(queue):
    assert queue.push("k", "job", 1, headers={"v": 1})
    assert not queue.push("k", "job", 2, headers={"v": 2})
    assert not queue.push("k", "job", 3)
    info = queue.message("k", "job")
    assert (info.payload, info.headers) == (1, {"v": 1})


def test_pop_messages_and_commit_reserve_return_headers(queue):
    queue.push("a", "job", 1, headers={"h": "a"})
    queue.push("b", "job", 2, headers={"h": "b"})
    queue.push("c", "job", 3)
    queue.push("d", "job", 4, headers={"h": "d"})
    assert {r.key: r.headers for r in queue.messages()} == {
        "a": {"h": "a"},
        "b": {"h": "b"},
        "c": None,
        "d": {"h": "d"},
    }
    [first] = queue.reserve()
    assert first.headers == {"h": "a"}
    committed, [second] = queue.commit_reserve(first)
    assert committed and second.headers == {"h": "b"}
    queue.commit(second)
    assert [(m.key, m.headers) for m in queue.pop(n=2)] == [("c", None), ("d", {"h": "d"})]


def test_batches_carry_each_messages_headers(queue):
    pushed = queue.push_many(
        [
            ("a", "job", 1),
            NewMessage("b", "job", 2, headers={"h": "b"}),
            {"key": "c", "kind": "job", "payload": 3, "headers": {"h": "c", "deep": {"x": [1, 2]}}},
            ("d", "job", 4, None, None, None, {"h": "d"}),
            NewMessage(
                "e", "job", {"s": '}]"headers":', "é": "ü"}, priority=3, headers={"s": "}]", "é": "☃"}
            ),
        ]
    )
    assert pushed == 5
    got = {r.key: r for r in queue.reserve(n=10)}
    assert (got["e"].payload, got["e"].priority) == ({"s": '}]"headers":', "é": "ü"}, 3)
    assert {k: r.headers for k, r in got.items()} == {
        "a": None,
        "b": {"h": "b"},
        "c": {"h": "c", "deep": {"x": [1, 2]}},
        "d": {"h": "d"},
        "e": {"s": "}]", "é": "☃"},
    }


def test_a_grouped_push_and_a_grouped_batch_carry_headers(queue):
    assert queue.push("g1", "job", 1, group="tenant-1", headers={"h": 1})
    assert (
        queue.push_many([NewMessage("g2", "job", 2, group="tenant-1", headers={"h": 2}), ("g3", "job", 3)])
        == 2
    )
    assert queue.message("g1", "job").headers == {"h": 1}
    assert queue.message("g2", "job").headers == {"h": 2}
    assert queue.message("g3", "job").headers is None


def test_publish_and_publish_many_carry_headers(db, make_queue):
    a, b = make_queue(), make_queue()
    topic = f"orders{uuid.uuid4().hex[:8]}.created"  # a prefix of its own: the tests share a database
    db.bind(topic, a)
    db.bind(f"{topic.split('.')[0]}.#", b)
    try:
        assert db.publish(topic, "o1", "created", {"id": 1}, headers={"h": "o1"}) == 2
        assert (
            db.publish_many(
                [Publication(topic, "o2", "created", 2, headers={"h": "o2"}), (topic, "o3", "created", 3)]
            )
            == 4
        )
        for q in (a, b):
            assert {r.key: r.headers for r in q.reserve(n=10)} == {
                "o1": {"h": "o1"},
                "o2": {"h": "o2"},
                "o3": None,
            }
    finally:
        db.unbind(topic, a)
        db.unbind(f"{topic.split('.')[0]}.#", b)


def test_dead_letters_keep_the_headers(make_queue):
    dlq = make_queue()
    q = make_queue(max_attempts=1, dead_letter_queue=dlq)
    q.push("k", "job", 1, headers={"h": 1})
    [r] = q.reserve()
    q.fail(r, "boom")
    [dead] = dlq.dead_letters()
    assert (dead.key, dead.headers) == ("k", {"h": 1})


@pytest.mark.parametrize("bad", [["a"], "text", 1, {1: "x"}])
def test_headers_that_are_not_a_dict_of_str_are_refused_before_any_call(queue, bad):
    with pytest.raises(InvalidArgumentError, match="headers"):
        queue.push("k", "job", 1, headers=bad)
    with pytest.raises(InvalidArgumentError, match="headers"):
        queue.push_many([NewMessage("k", "job", 1, headers=bad)])
    assert queue.message("k", "job") is None


def test_headers_json_cannot_hold_are_refused(queue):
    with pytest.raises(InvalidArgumentError, match="headers are not JSON-serialisable"):
        queue.push("k", "job", 1, headers={"x": {1, 2}})


def test_headers_over_8192_bytes_are_refused_by_the_routine(queue):
    with pytest.raises(InvalidArgumentError, match="more than 8192 bytes"):
        queue.push("k", "job", 1, headers={"a": "x" * 8200})
    with pytest.raises(InvalidArgumentError, match="more than 8192 bytes"):
        queue.push_many([("j", "job", 1), NewMessage("k", "job", 1, headers={"a": "x" * 8200})])
    assert queue.messages() == []

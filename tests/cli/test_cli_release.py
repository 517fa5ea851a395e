"""`pyqueue-sql release QUEUE [--worker W]`: reservations handed back without deleting anything,
on both dialects; one worker's only with --worker; an account without admin refused in one line."""

from __future__ import annotations

from ..helpers import run_cli
from ..security.test_privileges import Accounts


def test_release_hands_back_reservations_by_worker_then_all(capsys, dsn, queue):
    for i in range(4):
        queue.push(f"k{i}", "x", {"i": i})
    held_a = queue.reserve(n=2, worker="worker-a", timeout=3600)
    [held_b] = queue.reserve(n=1, worker="worker-b", timeout=3600)
    code, out, err = run_cli(capsys, "release", queue.name, "--worker", "worker-a", "--dsn", dsn)
    assert code == 0, err
    assert out.startswith("released 2 reservation(s) held by worker-a")
    stats = queue.stats()
    assert (stats.ready, stats.reserved) == (3, 1)
    assert all(not queue.commit(r) for r in held_a)  # their tokens no longer hold
    code, out, err = run_cli(capsys, "release", queue.name, "--dsn", dsn)
    assert code == 0 and out.startswith("released 1 reservation(s) in"), err
    assert not queue.commit(held_b)
    stats = queue.stats()
    assert (stats.ready, stats.reserved) == (4, 0)  # nothing deleted
    assert {m.attempts for m in queue.messages()} == {0, 1}  # attempts unchanged
    code, out, err = run_cli(capsys, "release", queue.name, "--dsn", dsn)
    assert code == 0 and "released 0 reservation(s)" in out and "none was held" in out


def test_release_of_an_unknown_queue_or_without_admin_is_one_line(capsys, dsn, queue):
    queue.push("k", "x", {})
    queue.reserve(n=1, worker="w", timeout=3600)
    code, _, err = run_cli(capsys, "release", "no-such-queue-x", "--dsn", dsn)
    assert code == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    code, _, err = run_cli(capsys, "release", queue.name, "--worker", "", "--dsn", dsn)
    assert code == 1 and len(err.strip().splitlines()) == 1
    accounts = Accounts(dsn)
    try:
        consumer = accounts.with_capabilities("relcons", "consumer", "monitor")
        capsys.readouterr()  # what granting printed
        code, _, err = run_cli(capsys, "release", queue.name, "--dsn", accounts.dsn_for(consumer))
        assert code == 1 and len(err.strip().splitlines()) == 1 and "admin" in err, err
        assert queue.stats().reserved == 1
    finally:
        accounts.close()

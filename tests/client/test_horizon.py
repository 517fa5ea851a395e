"""queue_horizon on both dialects: while another session holds a snapshot (a report reading another
table, REPEATABLE READ on PostgreSQL, START TRANSACTION WITH CONSISTENT SNAPSHOT after a read on
MySQL/MariaDB), the figures operators watch rise, the holder is named, and once it ends it is gone;
`pyqueue-sql stats`, the dashboard's overview and a worker's /metrics show it."""

from __future__ import annotations

import time
import uuid

import pyqueue_sql
from pyqueue_sql import cli
from tests import plainsql

CHURN = 60  # committed transactions while the snapshot is held


def churn(db: pyqueue_sql.Database, queue: pyqueue_sql.Queue) -> None:
    """CHURN transactions that each push and consume a message (each a dead row and an undo log)."""
    for i in range(CHURN):
        queue.push(f"k{i}", "kind", {"i": i})
        [held] = queue.reserve()
        assert queue.commit(held)


def shown_by_stats_dashboard_and_metrics(dsn: str, capsys, monkeypatch) -> tuple[str, str, dict[str, float]]:
    """stats' line on stderr (its threshold put at 0 s), the overview fragment's HTML and the
    worker's two gauges, each read now."""
    from pyqueue_sql.cli import queues
    from pyqueue_sql.dashboard.app import _templates
    from pyqueue_sql.dashboard.data import Dashboard
    from pyqueue_sql.metrics import WorkerMetrics

    monkeypatch.setattr(queues, "HORIZON_WARN_S", 0.0)
    capsys.readouterr()
    assert cli.main(["stats", "--dsn", dsn]) == 0
    stats_err = capsys.readouterr().err
    board = Dashboard(dsn)
    try:
        html = _templates().get_template("_overview.html").render(o=board.overview(), allowed={})
    finally:
        board.close()
    metrics = WorkerMetrics(pyqueue_sql.Worker(dsn, register=False))
    try:
        names = ("pyqueue_db_oldest_transaction_age_seconds", "pyqueue_db_cleanup_backlog")
        gauges = {n: metrics.registry.get_sample_value(n) for n in names}
    finally:
        metrics.close()
    return stats_err, html, gauges


def test_the_horizon_rises_while_a_snapshot_is_held_and_names_its_holder(
    installed_database, dialect, capsys, monkeypatch, request
):
    # PostgreSQL's horizon is the database's: a database of its own, where the report is the oldest
    # holder. MySQL/MariaDB's is the server's (one history, one list of transactions), so the test
    # process's shared database serves as well as a new one, which would be migrated (seconds).
    dsn = installed_database("horizon") if dialect == "postgresql" else request.getfixturevalue("dsn")
    report = plainsql.Session(dsn)
    with pyqueue_sql.connect(dsn) as db:
        queue = db.queue(f"horizon.{uuid.uuid4().hex[:8]}").create()
        try:
            report.begin() if dialect == "mysql" else report.sql("BEGIN ISOLATION LEVEL REPEATABLE READ")
            report.sql("SELECT count(*) FROM pyqueue_queue")  # a read of another table: the snapshot
            if dialect == "mysql":  # a read view of its own, as a backup's consistent snapshot takes
                report.commit()
                report.sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
                report.sql("SELECT count(*) FROM pyqueue_queue")
            pid = int(
                report.sql(
                    "SELECT pg_backend_pid()" if dialect == "postgresql" else "SELECT CONNECTION_ID()"
                )[0][0]
            )
            held_since = time.monotonic()
            before = db.horizon()
            churn(db, queue)
            time.sleep(1.1)  # MySQL/MariaDB time a transaction from a whole second
            # The snapshot is certainly older than this when the server computes `after` (its age
            # is read then, on the server's clock; a trx_started truncated to the second only adds)
            held_for_at_least = time.monotonic() - held_since
            after = db.horizon()
            stats_err, html, gauges = shown_by_stats_dashboard_and_metrics(dsn, capsys, monkeypatch)
            held_for = time.monotonic() - held_since
            if dialect == "postgresql":  # a database of its own: the report is the oldest holder
                assert (before.holder, before.pid, after.pid) == ("session", pid, pid)
                assert (after.user_name, after.state) == ("postgres", "idle in transaction")
                assert after.backlog >= before.backlog + CHURN  # each commit a transaction behind it
                assert after.oldest_age_s >= before.oldest_age_s + 1.0
                assert after.xact_start is not None and after.query_start >= after.xact_start
            else:  # one history and one list of transactions for the whole server, other tests' too
                assert after.backlog >= CHURN  # none of the churn's undo logs can be purged yet
                assert after.holder == "transaction" and after.pid is not None
                # the report, or a transaction older still (0.25 s for the two clocks' rates)
                assert after.oldest_age_s >= held_for_at_least - 0.25
                if after.pid == pid:
                    assert after.state == "Sleep"
            assert after.oldest_age_s <= held_for + 600
            assert (
                f"by {after.holder} pid {after.pid}" in stats_err or dialect == "mysql"
            )  # others' may be older
            assert "cleanup held back for" in stats_err and 'id="horizon-age"' in html
            assert gauges["pyqueue_db_oldest_transaction_age_seconds"] >= held_for_at_least - 0.25
            assert gauges["pyqueue_db_cleanup_backlog"] >= CHURN
        finally:
            report.sql("ROLLBACK")
            report.close()
        deadline = time.monotonic() + 10  # a closed connection leaves INNODB_TRX a moment later
        while (ended := db.horizon()).pid == pid and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ended.pid != pid
        if dialect == "postgresql":
            assert ended.backlog < after.backlog
        queue.drop()

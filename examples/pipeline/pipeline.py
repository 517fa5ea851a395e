"""An ETL pipeline of three stage processes connected by queue_move.

    raw lines --extract--> parsed records --transform--> clean records --load--> sink table

    python examples/pipeline/pipeline.py setup  --dsn DSN      # queues + the sink table
    python examples/pipeline/pipeline.py feed   --dsn DSN -n 1000
    python examples/pipeline/pipeline.py stage extract   --dsn DSN   # one process per stage,
    python examples/pipeline/pipeline.py stage transform --dsn DSN   # as many as you like
    python examples/pipeline/pipeline.py stage load      --dsn DSN
    python examples/pipeline/pipeline.py report --dsn DSN

Why nothing is lost or doubled, even when a stage process is killed at any
instant (tests/contract/test_settle_pipeline.py kills them with SIGKILL, over and over):

* extract and transform hand a message on with ``queue_move``: one step that
  commits the reservation in this stage's queue and pushes the rewritten
  payload into the next stage's queue. Killed before the move, the message
  comes back after the visibility timeout and is done again (these stages
  only rewrite the payload, so doing it twice is harmless); killed after it,
  the message has moved. A stage whose reservation expired and was taken by
  another process gets ``False`` from the move and moves nothing.
* load is the sink: its effect (a row in the application's table) and
  ``queue_commit`` run in ONE database transaction. Killed before the
  transaction commits, both are undone and the message comes back; after, both
  happened. If the commit returns False (the reservation expired and another
  process took the message), the transaction is rolled back, so the other
  process's row is the only one.

The sink table is the application's own table, so its SQL lives here, not in
pyqueue-sql's named statements.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import pyqueue_sql

VISIBILITY_TIMEOUT = 1.0  # seconds a killed stage's messages stay invisible
BATCH = 5

QUEUES = ("etl.raw", "etl.parsed", "etl.clean")
STAGES = {  # stage -> (reads from, moves to; None = the sink)
    "extract": ("etl.raw", "etl.parsed"),
    "transform": ("etl.parsed", "etl.clean"),
    "load": ("etl.clean", None),
}

SINK_DDL = {
    "postgresql": """CREATE TABLE IF NOT EXISTS pipeline_sink (
                         p_key        varchar(255) NOT NULL,
                         name         text         NOT NULL,
                         amount_cents bigint       NOT NULL,
                         attempts     integer      NOT NULL,
                         loaded_at    timestamptz  NOT NULL DEFAULT now())""",
    "mysql": """CREATE TABLE IF NOT EXISTS pipeline_sink (
                    p_key        VARCHAR(255) NOT NULL,
                    name         TEXT         NOT NULL,
                    amount_cents BIGINT       NOT NULL,
                    attempts     INT          NOT NULL,
                    loaded_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB""",
}
SINK_INSERT = "INSERT INTO pipeline_sink (p_key, name, amount_cents, attempts) VALUES (%s, %s, %s, %s)"


def _execute(db: pyqueue_sql.Database, sql: str, params: Any = None) -> list[tuple]:
    cur = db.connection.cursor()
    try:
        cur.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []
    finally:
        cur.close()


# -- the three payload rewrites -------------------------------------------------


def extract(payload: dict) -> dict:
    """{"line": "id,name,amount"} -> {"id", "name", "amount"} (strings)."""
    ident, name, amount = payload["line"].split(",")
    return {"id": ident, "name": name.strip(), "amount": amount.strip()}


def transform(payload: dict) -> dict:
    """Normalises: upper-case name, amount in integer cents."""
    return {
        "id": payload["id"],
        "name": payload["name"].upper(),
        "amount_cents": round(float(payload["amount"]) * 100),
    }


# -- commands -----------------------------------------------------------------------


def setup(dsn: str, history_retention: float | None = 86400) -> None:
    """Creates the three queues (keeping a day of history, to inspect traffic) and the sink table."""
    with pyqueue_sql.connect(dsn) as db:
        for name in QUEUES:
            db.queue(name).create(
                visibility_timeout=VISIBILITY_TIMEOUT, max_attempts=1000, history_retention=history_retention
            )
        _execute(db, SINK_DDL[db.dialect.name])


def feed(dsn: str, n: int) -> int:
    with pyqueue_sql.connect(dsn) as db:
        raw = db.queue("etl.raw")
        return raw.push_many(
            [
                (f"rec-{i:06d}", "record", {"line": f"rec-{i:06d}, item {i}, {i % 97}.{i % 100:02d}"})
                for i in range(n)
            ]
        )


def load(db: pyqueue_sql.Database, queue: pyqueue_sql.Queue, r: pyqueue_sql.Reservation) -> bool:
    """The sink: the row and the queue commit in one transaction."""

    class LostReservation(Exception):
        pass

    try:
        with db.transaction():
            _execute(db, SINK_INSERT, (r.key, r.payload["name"], r.payload["amount_cents"], r.attempts))
            if not queue.commit(r):
                raise LostReservation(r.key)
    except LostReservation:
        return False
    return True


def run_stage(dsn: str, stage: str, work_seconds: float = 0.0, idle_exit: float | None = None) -> None:
    source, target = STAGES[stage]
    worker = f"{stage}:{os.getpid()}"
    with pyqueue_sql.connect(dsn) as db:
        queue = db.queue(source)
        idle_since = time.monotonic()
        while True:
            batch = queue.reserve(n=BATCH, worker=worker)
            if not batch:
                if idle_exit is not None and time.monotonic() - idle_since > idle_exit:
                    return
                time.sleep(0.05)
                continue
            idle_since = time.monotonic()
            for r in batch:
                if work_seconds:
                    time.sleep(work_seconds)  # the "work": a kill lands here, mid-flight
                if target is None:
                    load(db, queue, r)
                else:
                    rewrite = extract if stage == "extract" else transform
                    queue.move(r, target, payload=rewrite(r.payload))


def report(dsn: str) -> None:
    with pyqueue_sql.connect(dsn) as db:
        for s in db.stats():
            if s.queue in QUEUES:
                print(f"{s.queue:12} ready={s.ready} reserved={s.reserved} delayed={s.delayed}")
        rows = _execute(db, "SELECT count(*), count(DISTINCT p_key) FROM pipeline_sink")
        print(f"sink rows={rows[0][0]} distinct keys={rows[0][1]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=("setup", "feed", "stage", "report"))
    parser.add_argument("stage", nargs="?", choices=tuple(STAGES))
    parser.add_argument("--dsn", default=os.environ.get("PYQUEUE_DSN"))
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--work-seconds", type=float, default=0.0)
    parser.add_argument("--idle-exit", type=float, default=None)
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("--dsn or PYQUEUE_DSN is required")
    if args.command == "setup":
        setup(args.dsn)
    elif args.command == "feed":
        print(feed(args.dsn, args.n))
    elif args.command == "stage":
        if not args.stage:
            parser.error("stage needs a name: extract, transform or load")
        run_stage(args.dsn, args.stage, args.work_seconds, args.idle_exit)
    else:
        report(args.dsn)


if __name__ == "__main__":
    sys.exit(main())

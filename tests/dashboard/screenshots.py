"""Screenshots of the dashboard from a real run, for docs/ (``make screenshots``).

A fresh database on the PostgreSQL server at $PYQUEUE_DSN (default the local test server,
postgresql://postgres@127.0.0.1:5432/) gets a few queues; producers push and a registered worker
handles messages for a few minutes (some fail, are retried, and a few end as dead letters); then
headless Chromium saves the overview, a queue's page and the dead letters as PNGs in docs/.

    python -m tests.dashboard.screenshots [--minutes 3] [--out docs]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import random
import shutil
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import pyqueue_sql
from pyqueue_sql import RetryPolicy, Worker, migrate
from pyqueue_sql.dashboard import create_app

from .conftest import Served, start_browser

ROOT = Path(__file__).resolve().parents[2]


def _database(base: str) -> tuple[str, str, str]:
    """(dsn of a fresh database, its name, the admin dsn) on the server of base."""
    import psycopg

    name = f"pyqueue_screens_{uuid.uuid4().hex[:8]}"
    parts = urllib.parse.urlsplit(base)
    admin = parts._replace(path="/postgres").geturl()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return parts._replace(path=f"/{name}").geturl(), name, admin


def _drop(admin: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(minutes: float, out: Path) -> None:
    logging.getLogger("pyqueue_sql").addHandler(logging.NullHandler())  # the handlers' failures are planned
    base = os.environ.get("PYQUEUE_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    dsn, name, admin = _database(base)
    rng = random.Random(7)
    try:
        migrate.upgrade(dsn)
        db = pyqueue_sql.connect(dsn)
        db.queue("emails.dead").create()
        emails = db.queue("emails").create(
            visibility_timeout=30,
            max_attempts=3,
            dead_letter_queue="emails.dead",
            history_retention=dt.timedelta(days=7),
        )
        thumbs = db.queue("thumbnails").create(history_retention=dt.timedelta(days=1))
        reports = db.queue("reports").create(visibility_timeout=300)
        db.queue("exports").create().pause()
        reports.schedule_cron("nightly", "sales-report", {"region": "eu"}, "0 2 * * *")
        for i in range(40):
            reports.push(f"report-{i:03d}", "pdf", {"customer": i}, run_at=dt.timedelta(hours=2 + i % 5))
        db.queue("exports").push("export-2026-11", "csv", {"month": "2026-11"})
        emails.push(
            "user-1042",
            "welcome",
            {"to": "<script>alert('hi')</script>@example.com", "name": "Ada"},
            run_at=dt.timedelta(hours=6),
        )

        slow = threading.Event()

        def handle(job):
            time.sleep(rng.uniform(0.005, 0.05) if not slow.is_set() else rng.uniform(2, 6))
            if job.kind == "welcome" and job.payload.get("bounce"):
                raise RuntimeError(
                    f"SMTPRecipientsRefused: 550 5.1.1 <{job.payload['to']}> mailbox unavailable"
                )
            if rng.random() < 0.04:
                raise TimeoutError("smtp.example.com:587 timed out after 10 s")

        worker = Worker(dsn, concurrency=4, name="mailer-1", poll_max=0.2)
        retry = RetryPolicy(base=2, factor=2, max_delay=20, jitter=0.2)
        worker.add_handler("emails", handle, retry=retry)
        worker.add_handler("thumbnails", handle, retry=retry)
        thread = threading.Thread(target=lambda: worker.run(install_signals=False), daemon=True)
        thread.start()
        deadline = time.monotonic() + minutes * 60
        n = 0
        print(f"screenshots: a real run of {minutes} min on {name} ...", flush=True)
        while time.monotonic() < deadline:
            burst = rng.randint(3, 12)
            emails.push_many(
                [
                    (
                        f"user-{n + i}",
                        "welcome",
                        {"to": f"user{n + i}@example.com", "bounce": rng.random() < 0.03},
                    )
                    for i in range(burst)
                ]
            )
            thumbs.push_many([(f"img-{n + i}", "resize", {"width": 640}) for i in range(rng.randint(2, 8))])
            n += burst
            time.sleep(rng.uniform(0.2, 0.6))
        # a backlog that the (now slower) worker is still working through when the pictures are taken
        slow.set()
        emails.push_many(
            [(f"user-{n + i}", "welcome", {"to": f"user{n + i}@example.com"}) for i in range(300)]
        )
        time.sleep(3)
        served = Served(create_app(dsn))
        driver, profile = start_browser((1440, 1000))
        try:
            out.mkdir(parents=True, exist_ok=True)
            driver.get(served.url + "/")
            time.sleep(2.5)  # one live refresh
            driver.save_screenshot(str(out / "dashboard-overview.png"))
            driver.get(served.url + "/queue?name=emails&n=25")
            time.sleep(1)
            driver.save_screenshot(str(out / "dashboard-queue.png"))
            driver.get(served.url + "/dead-letters?queue=emails.dead")
            time.sleep(0.5)
            driver.save_screenshot(str(out / "dashboard-dead-letters.png"))
        finally:
            driver.quit()
            shutil.rmtree(profile, ignore_errors=True)
            served.stop()
            worker.stop(force=True)
            thread.join(30)
            db.close()
        print(f"screenshots: wrote {', '.join(p.name for p in sorted(out.glob('dashboard-*.png')))} in {out}")
    finally:
        _drop(admin, name)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=3.0, help="how long producers and the worker run")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    args = parser.parse_args()
    run(args.minutes, args.out)


if __name__ == "__main__":
    main()

"""A batch task's item that its type's constructor refuses (a dataclass's __post_init__) fails its
own job, naming why; the other items of the batch go to the function, as a plain task's argument
its type refuses fails that job alone."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from pyqueue_sql import App


@dataclass
class Parcel:
    n: int

    def __post_init__(self) -> None:
        assert self.n != 3, f"parcel {self.n} has no address"


def test_an_item_its_type_refuses_fails_alone_and_the_others_run(dsn):
    app = App(dsn, queue=f"b.{uuid.uuid4().hex[:12]}")
    seen: list[list[int]] = []

    @app.task(batch=4)
    def ship(parcels: list[Parcel]) -> None:
        seen.append([p.n for p in parcels])

    try:
        app.create_queues(max_attempts=3, result_retention=3600)
        handles = app.defer_many(ship.call(n) for n in (1, 2, 3, 4))
        report = app.run_pending()
        states = [h.status().state for h in handles]
    finally:
        for q in app.queues():
            app.database().queue(q).drop()
        app.close()
    assert seen == [[1, 2, 4]]
    by_key = {job.key: (job.outcome, job.error) for job in report.jobs}
    outcomes = [by_key[h.key] for h in handles]
    assert [o for o, _ in outcomes] == ["succeeded", "succeeded", "dropped", "succeeded"], outcomes
    error = outcomes[2][1]
    assert error.startswith("PayloadMismatchError: task 'ship': the payload does not fit Parcel"), error
    assert "AssertionError: parcel 3 has no address" in error, error
    assert states == ["succeeded", "succeeded", "failed", "succeeded"], states

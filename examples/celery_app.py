"""A Celery application ported to pyqueue-sql: a shop's orders (docs/tasks.md, "Coming from Celery").

What each part was in Celery, and is here:

- checkout: ``chain(reserve_stock.s(7, skus), quote_shipping.s(), charge.s(), send_receipt.s(7))``
  with ``link_error=order_failed.si(7)``: ``pyqueue_sql.chain(...).on_error(order_failed.si(7))``;
  each step gets the value of the one before as its first argument, as in Celery.
- invoice: ``chord(price.s(sku) for sku in skus)(invoice_total.s(7))``:
  ``pyqueue_sql.chord([...], invoice_total.s(7)).on_error(...)``.
- routing, ``task_routes = {"shop.send_receipt": {"queue": "emails"}}``: ``@app.task(queue=EMAILS)``;
  one call routed, ``order_failed.si(7).set(queue="emails")``: the same, the queue declared in
  ``App(routes=[EMAILS])`` so that the app's workers run any of its tasks there.
- ``rate_limit="10/s"`` on send_receipt: the same, ``@app.task(rate_limit="10/s")``, the rate of its
  kind in SQL, set by setup(), which every worker counts together.
- ``soft_time_limit=2, time_limit=4`` on quote_shipping: ``timeout=2`` (a def gets TimeLimitExceeded
  in its thread; its attempt fails with TimeoutError), and the worker's ``--processes 2
  --kill-grace 2``: a call still blocked in C 2 s after its timeout has its process terminated and
  replaced.
- beat, purge_carts every hour: ``@app.periodic(every=3600)``, a schedule in the database; no beat
  process.
- the result backend: ``store_result=True``; ``handle.result(timeout=...)`` is ``AsyncResult.get``.

Run it (tests/tasks/test_canvas.py runs it so, on both dialects):

    export PYQUEUE_DSN=postgresql://localhost/app
    python -m examples.celery_app setup                 # queues, the rate, the schedule (an admin's)
    pyqueue-sql worker examples.celery_app:app --processes 2 --kill-grace 2   # celery -A shop worker -B
    python -m examples.celery_app order 7 book pen      # places an order, prints its receipt and invoice
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from dataclasses import dataclass

import pyqueue_sql
from pyqueue_sql import App, RetryPolicy, TaskHandle

SHOP = "shop"
EMAILS = "shop.emails"
PRICES = {"book": 1500, "pen": 300, "lamp": 4200}  # cents

app = App(os.environ.get("PYQUEUE_DSN", "postgresql://localhost/app"), queue=SHOP, routes=[EMAILS])


@dataclass(frozen=True)
class Order:
    id: int
    skus: list[str]
    shipping: int = 0  # cents


# An unknown product is not worth retrying: the step fails for good at once.
NO_RETRY_ON_KEYS = RetryPolicy(base=1, give_up_on=KeyError)


@app.task(store_result=True, retry=NO_RETRY_ON_KEYS)
def reserve_stock(order_id: int, skus: list[str]) -> Order:
    for sku in skus:
        PRICES[sku]  # KeyError: no such product
    return Order(order_id, skus)


@app.task(store_result=True, timeout=2, retry=RetryPolicy(base=1, give_up_on=TimeoutError))
def quote_shipping(order: Order, carrier_delay: float = 0.0) -> Order:
    # the carrier's API, a blocking call (a socket read): TimeLimitExceeded cannot reach it, so
    # past the timeout its attempt fails and, --kill-grace seconds later, its process is replaced
    time.sleep(carrier_delay)
    return Order(order.id, order.skus, shipping=500)


@app.task(store_result=True)
def charge(order: Order) -> int:
    return sum(PRICES[sku] for sku in order.skus) + order.shipping


@app.task(queue=EMAILS, store_result=True, rate_limit="10/s")
def send_receipt(total: int, order_id: int) -> str:
    return f"receipt for order {order_id}: {total} cents"


@app.task(store_result=True, retry=NO_RETRY_ON_KEYS)
def price(sku: str) -> int:
    return PRICES[sku]


@app.task(store_result=True)
def invoice_total(prices: list[int], order_id: int) -> str:
    return f"invoice for order {order_id}: {' + '.join(map(str, prices))} = {sum(prices)} cents"


@app.task(store_result=True)
def order_failed(order_id: int, flow: str) -> str:
    """The failure callback of an order's flows (routed to the emails queue): which step
    failed, and why."""
    failed = [p for p in app.failed_parents() if p.state == "failed"]
    return f"order {order_id} {flow} failed: " + "; ".join(f"{p.kind}: {p.error}" for p in failed)


@app.periodic(every=3600)
@app.task(store_result=True)
def purge_carts(at: dt.datetime) -> str:
    return f"carts older than {at - dt.timedelta(days=1):%Y-%m-%d %H:%M} purged"


def setup() -> None:
    """The queues and the route (results kept a day), send_receipt's rate of 10 a second, the
    hourly schedule."""
    app.create_queues(max_attempts=3)


def place_order(
    order_id: int, skus: list[str], carrier_delay: float = 0.0
) -> tuple[TaskHandle[str], TaskHandle[str]]:
    """Defers an order's checkout (a chain) and invoice (a chord), each with its failure callback
    on the emails queue, keyed by the order (app.handle(EMAILS, f"order-{order_id}-checkout-failed",
    "order_failed") reads it). Returns the handles of the receipt and of the invoice."""
    checkout = pyqueue_sql.chain(
        reserve_stock.s(order_id, skus),
        quote_shipping.s(carrier_delay),
        charge.s(),
        send_receipt.s(order_id),
    ).on_error(
        order_failed.si(order_id, "checkout").set(queue=EMAILS, key=f"order-{order_id}-checkout-failed")
    )
    invoice = pyqueue_sql.chord([price.s(sku) for sku in skus], invoice_total.s(order_id)).on_error(
        order_failed.si(order_id, "invoice").set(queue=EMAILS, key=f"order-{order_id}-invoice-failed")
    )
    return checkout.defer(), invoice.defer()


def main(argv: list[str]) -> int:
    if argv[:1] == ["setup"]:
        setup()
        return 0
    if len(argv) >= 3 and argv[0] == "order":
        receipt, invoice = place_order(int(argv[1]), argv[2:])
        try:
            print(receipt.result(timeout=60))
            print(invoice.result(timeout=60))
        except (pyqueue_sql.TaskCancelled, pyqueue_sql.TaskFailed) as exc:
            print(exc)
            return 1
        return 0
    print(__doc__.split("Run it", 1)[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

try:
    from django.tasks import task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task

import pyqueue_sql
from shop.models import Order


@task(queue_name="emails", priority=10)
def confirm_order(order_id: int) -> dict:
    order = Order.objects.get(pk=order_id)
    return {"order": order.pk, "item": order.item, "total": order.quantity * 3}


@task
def divide(a: int, b: int) -> float:
    return a / b


@task(takes_context=True)
def attempt_of(context, label: str) -> str:
    # the pyqueue-sql job running it is current_job() (its progress, its cancel request)
    return f"{label}: attempt {context.attempt} of {pyqueue_sql.current_job().kind}"


@task
async def shout(word: str) -> str:
    return word.upper()


@task
def exit_now(code: int) -> None:
    raise SystemExit(code)  # a BaseException: recorded FAILED with its traceback, as any error


@task(takes_context=True)
def flaky(context) -> int:
    if context.attempt == 1:
        raise RuntimeError("first attempt fails")  # retried, when the queue allows more attempts
    return context.attempt


@task(queue_name="emails")
def nap(seconds: float) -> str:
    import time

    time.sleep(seconds)  # a task that runs a while: what a signal to the worker meets
    return "rested"

"""A DSN's password never reaches a traceback of a failed connect: the error pyqueue_sql raises is
masked, and so is every exception chained to it (__cause__, __context__, theirs), which
traceback.print_exc() and logger.exception() print too. A malformed DSN chains no cause (the
driver's text is the DSN itself); a refused login keeps the driver's error as its cause, masked.
Every connect path: pyqueue_sql.connect, pyqueue_sql.aio.connect, migrate.upgrade, both dialects."""

from __future__ import annotations

import asyncio
import traceback

import pytest

import pyqueue_sql
import pyqueue_sql.aio
from pyqueue_sql import migrate

from .test_privileges import _dsn_as

SECRET = "S3CRET-pw-9931"

MALFORMED = {
    "postgresql": [
        f"postgresql://u:{SECRET}@[bad/db",
        f"postgresql+psycopg://u:{SECRET}@[bad/db",
        f"postgresql://u:{SECRET}@127.0.0.1:1/db?sslmode={SECRET}x",
        f"postgresql://u:{SECRET}@127.0.0.1:1/db?port={SECRET}",
        f"postgresql://u@127.0.0.1:1/db?password={SECRET}&connect_timeout={SECRET}",
    ],
    "mysql": [
        f"mysql://u:{SECRET}@[bad/db",
        f"mysql://u:{SECRET}@h:notaport/db",
        f"mysql://u:{SECRET}@127.0.0.1:1/db?connect_timeout={SECRET}",
    ],
}


def _sync(dsn: str) -> None:
    pyqueue_sql.connect(dsn).close()


def _async(dsn: str) -> None:
    async def run() -> None:
        db = await pyqueue_sql.aio.connect(dsn)
        await db.close()

    asyncio.run(run())


PATHS = {"connect": _sync, "aio.connect": _async, "migrate.upgrade": migrate.upgrade}


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is not None and all(e is not s for s in seen):
            seen.append(e)
            todo += [e.__cause__, e.__context__]
    return seen


def _assert_masked(exc: BaseException) -> None:
    shown = "".join(traceback.format_exception(exc))
    assert SECRET not in shown, shown
    for linked in _chain(exc):  # what code reading the chain itself would see
        assert SECRET not in str(linked) and SECRET not in repr(linked.args), repr(linked)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize(
    "dsn",
    [d for ds in MALFORMED.values() for d in ds],
    ids=[f"{k}-{i}" for k, ds in MALFORMED.items() for i in range(len(ds))],
)
def test_a_malformed_dsn_chains_no_password(dsn, path):
    with pytest.raises(pyqueue_sql.UnsupportedDsnError) as caught:
        PATHS[path](dsn)
    _assert_masked(caught.value)
    assert caught.value.__cause__ is None  # nothing but the DSN to add


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_refused_login_keeps_its_cause_masked(dsn, path):
    wrong = _dsn_as(dsn, "pq_nobody_here", "")
    wrong = wrong.replace(":pq-privileges-test@", f":{SECRET}@")
    assert SECRET in wrong
    with pytest.raises(pyqueue_sql.ConnectionFailedError) as caught:
        PATHS[path](wrong)
    assert caught.value.reason == "authentication"
    assert caught.value.__cause__ is not None  # the driver's error, for whoever needs its code
    _assert_masked(caught.value)

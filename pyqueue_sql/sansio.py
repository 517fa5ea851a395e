"""The client's sans-IO machinery, shared by the sync and the asyncio client.

Every public method of Queue and Database is written once, as a generator that yields each
statement to run (a Call) and gets its rows back from the yield; it validates and encodes the
arguments before the first yield and decodes the rows after it. The policy around the calls
(serialization failures run again, transactions of the client's own) is written the same way
(pyqueue_sql.client.DatabaseCalls._call_steps) and yields Steps too. Database runs those steps on
a DB-API connection, AsyncDatabase (pyqueue_sql.aio) awaits each on an asyncio driver's
connection: the two clients differ only in how one step is run (Database._do, AsyncDatabase._do).
"""

from __future__ import annotations

import enum
import functools
import random
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeVar

from . import dialects, errors
from .dialects import Params
from .statements import Statement

T = TypeVar("T")

# A call the client runs in a transaction of its own is tried this many times in all when the
# server rolls it back with a serialization failure or a deadlock, with a random pause of up to
# min(SERIALIZATION_BACKOFF_S * 2**n, SERIALIZATION_BACKOFF_MAX_S) seconds before try n+2.
SERIALIZATION_ATTEMPTS = 8
SERIALIZATION_BACKOFF_S = 0.005
SERIALIZATION_BACKOFF_MAX_S = 0.2

# A batch (push_many, commit_many) or a reserve(n) of more than this many messages is sent in
# calls of at most this many, so that no single routine call gets an unbounded array.
CHUNK_SIZE = 5000
# The largest n a routine's integer argument holds.
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class Call:
    """One declared statement (pyqueue_sql.statements) with its parameters, as a sans-IO method yields
    it. The rows of its first result set come back, or the rows of every result set when all_sets."""

    statement: Statement
    params: Params
    all_sets: bool = False


class Step(enum.Enum):
    """What the client's own policy (retries, transactions of its own) asks of the connection,
    besides Calls: yielded like them, run by Database / AsyncDatabase."""

    BEGIN = "begin"
    COMMIT = "commit"  # a serialization failure at COMMIT is raised as SerializationError
    ROLLBACK = "rollback"


@dataclass(frozen=True)
class OwnTransaction:
    """A call in a transaction of the client's own: BEGIN, the call, COMMIT, or ROLLBACK when it
    raises (see Dialect.run_in_own_transaction: where the driver can, the three go to the server
    as one round trip)."""

    call: Call


@dataclass(frozen=True)
class Pause:
    """Wait this long before the next step (a retry's backoff)."""

    seconds: float


def statement_call(statement: Statement, **params: object) -> Call:
    return Call(statement, params)


def statement_call_sets(statement: Statement, **params: object) -> Call:
    return Call(statement, params, all_sets=True)


# What a sans-IO method yields first when it will run several calls (a chunked batch): on a
# Database that runs each call in its own transaction they then run in one transaction, all or
# nothing, as the single call of a smaller batch would; inside a transaction (db.transaction(),
# a wrapped connection) they are part of that one.
ONE_TRANSACTION: Final = object()

# A sans-IO method: it yields Calls (and the policy's Steps, OwnTransaction, Pause, ONE_TRANSACTION),
# is sent the reply to each (a Call's rows: list[Row], or list[list[Row]] when all_sets) and returns
# the public method's result. Any: each method reads its rows by its statement's shape, and the
# result's type is the public method's own (pyqueue_sql.client's signatures say it).
SansIO: TypeAlias = Generator[Any, Any, Any]


def sans_io(method: Callable[..., SansIO]) -> Callable[..., SansIO]:
    """Marks a generator method as a public method written sans-IO (see Call)."""
    method.sans_io = True  # type: ignore[attr-defined]
    return method


def runs_sans_io(adapt: Callable[[Callable[..., SansIO]], Callable[..., object]]) -> Callable[[type], type]:
    """A class decorator: every sans-IO method the class inherits becomes the method ``adapt``
    makes of it (same name, signature and docstring), one that runs it."""

    def decorate(cls: type) -> type:
        methods = {
            name: method
            for klass in reversed(cls.__mro__)
            for name, method in vars(klass).items()
            if getattr(method, "sans_io", False)
        }
        for name, method in methods.items():
            runner = adapt(method)
            runner.sans_io = False  # functools.wraps copied the mark: this one runs it
            setattr(cls, name, runner)
        return cls

    return decorate


def sync_method(method: Callable[..., SansIO]) -> Callable[..., Any]:
    """The blocking method of a sans-IO one: Database.drive runs its calls."""

    @functools.wraps(method)
    def run(self: Any, *args: object, **kwargs: object) -> Any:
        return self._runner.drive(method(self, *args, **kwargs))

    return run


def advance(steps: SansIO, reply: object) -> tuple[bool, Any]:
    """Sends a call's rows into a sans-IO method: (False, its next Call) or (True, its result)."""
    try:
        return False, steps.send(reply)
    except StopIteration as done:
        return True, done.value


def retry_pause(attempt: int) -> float:
    """How long to wait before running a call again after its attempt-th serialization failure."""
    return random.uniform(0, min(SERIALIZATION_BACKOFF_S * 2**attempt, SERIALIZATION_BACKOFF_MAX_S))


def chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """items in consecutive slices of at most size, in order."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def chunk_sizes(n: int | None) -> list[int | None]:
    """The n of each call that reserves n in chunks of at most CHUNK_SIZE. An n the routine
    refuses or that its integer cannot hold (None = 1, n < 1, over 2**31 - 1) is passed as it
    is, in one call, for the routine to answer."""
    if n is None or n <= CHUNK_SIZE or n > INT_MAX:
        return [n]
    return [CHUNK_SIZE] * (n // CHUNK_SIZE) + ([n % CHUNK_SIZE] if n % CHUNK_SIZE else [])


def each_call(calls: Sequence[Call]) -> SansIO:
    """Runs the calls (in one transaction when there are several: ONE_TRANSACTION); their rows, in order."""
    if len(calls) > 1:
        yield ONE_TRANSACTION
    results = []
    for call in calls:
        results.append((yield call))
    return results


def connection_lost_error(
    step: object, exc: BaseException, *, in_transaction: bool, reopens: bool
) -> errors.ConnectionLostError:
    """The ConnectionLostError of a step whose connection is gone (exc: the driver's error), saying
    whether the call took effect: not when nothing was sent that could commit (BEGIN, ROLLBACK, a
    call inside the client's transaction, which the server rolled back: in_transaction); not
    known otherwise (a call in autocommit or in a transaction of its own, a COMMIT: the server may
    have committed before the connection went). reopens: the client opens a new connection at
    its next call (else the caller replaces its connection)."""
    code, text = (*exc.args, None, None)[:2]  # PyMySQL's (code, message)
    why = f"{text} ({code})" if isinstance(code, int) and isinstance(text, str) else str(exc)
    why = " ".join(why.split())[:200] or type(exc).__name__
    then = "the next call opens a new connection" if reopens else "the connection is unusable: replace it"
    if step is Step.BEGIN or step is Step.ROLLBACK or (isinstance(step, Call) and in_transaction):
        return errors.ConnectionLostError(
            f"the connection to the database was lost ({why}): the call did not take effect "
            f"(nothing of an open transaction was committed); {then}",
            took_effect=False,
        )
    return errors.ConnectionLostError(
        f"the connection to the database was lost ({why}): whether the call took effect cannot "
        f"be known (it was sent and no answer came back); {then}",
        took_effect=None,
    )


class ConnectionLoss:
    """How Database and AsyncDatabase meet a lost connection: a step whose driver error says the
    connection is gone raises a ConnectionLostError (connection_lost_error), and the next call
    opens a new connection first when the client opened its own (connect's DSN) and no
    transaction was open on the lost one (inside it, the calls raise until the block ends)."""

    dialect: dialects.Dialect
    _connection: Any
    _dsn: str | None
    _lost: bool
    _owned: bool
    _in_transaction: bool
    _source: Callable[[], Any] | None
    _result_listens: dict[str, int]

    def _open(self) -> bool:
        return not self._lost and dialects.connection_open(self._connection)

    def _reopens(self) -> bool:
        """Whether the next step opens a new connection first."""
        return (
            self._dsn is not None and self._source is None and not self._in_transaction and not self._open()
        )

    def _skips(self, step: object) -> bool:
        """A ROLLBACK on a lost connection: the server rolled back what was open when it went."""
        return step is Step.ROLLBACK and self._source is None and not self._open()

    def _reopened(self, connection: Any) -> None:
        """The new connection in place of the lost one (its LISTENs went with it)."""
        self._connection, self._lost = connection, False
        self._result_listens.clear()

    def _lost_or(self, step: object, exc: Exception, connection: object) -> Exception:
        """What to raise for a step's error: the ConnectionLostError (its cause: exc) when exc
        says the connection is gone, else exc itself."""
        if not dialects.lost_connection(self.dialect, connection, exc):
            return exc
        self._lost = self._lost or connection is self._connection
        lost = connection_lost_error(
            step, exc, in_transaction=self._owned and self._in_transaction, reopens=self._dsn is not None
        )
        lost.__cause__ = exc
        return lost

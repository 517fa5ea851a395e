"""Database.wrap of a SQLAlchemy Connection or ORM Session: a push runs in the same transaction as
the application's ORM writes, so both commit or roll back together."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import orm

import pyqueue_sql
from pyqueue_sql import dialects


class Base(orm.DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "pyqueue_test_orders"
    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=False)
    item: orm.Mapped[str] = orm.mapped_column(sa.String(50))


def sqlalchemy_url(dsn: str, driver: str) -> str:
    """The test DSN with a SQLAlchemy driver (postgresql+psycopg://, mysql+pymysql://...)."""
    return driver + "://" + dialects.strip_driver(dsn).partition("://")[2]


@pytest.fixture
def engine(dsn):
    engine = sa.create_engine(sqlalchemy_url(dsn, dialects.for_dsn(dsn).sqlalchemy_dialect))
    Base.metadata.create_all(engine)
    yield engine
    engine.dispose()


def orders(engine) -> set[int]:
    with engine.connect() as conn:
        return set(conn.scalars(sa.select(Order.id)))


def new_id() -> int:
    return uuid.uuid4().int % 2**31


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_push_through_a_session_commits_or_rolls_back_with_the_orm_insert(engine, queue, outcome):
    order = new_id()
    with orm.Session(engine) as session:
        session.add(Order(id=order, item="book"))
        session.flush()
        q = pyqueue_sql.Database.wrap(session).queue(queue.name)
        assert q.push(f"order-{order}", "receipt", {"order": order})
        assert queue.stats().ready == 0  # not visible outside the transaction yet
        session.commit() if outcome == "commit" else session.rollback()
    assert (order in orders(engine)) is (outcome == "commit")
    assert queue.stats().ready == (1 if outcome == "commit" else 0)


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_push_through_a_connection_commits_or_rolls_back_with_its_insert(engine, queue, outcome):
    order = new_id()
    with engine.connect() as conn:
        db = pyqueue_sql.Database.wrap(conn)  # no transaction open yet: the wrap begins one
        assert db.queue(queue.name).push(f"order-{order}", "receipt", {"order": order})
        conn.execute(sa.insert(Order).values(id=order, item="pen"))
        conn.commit() if outcome == "commit" else conn.rollback()
    assert (order in orders(engine)) is (outcome == "commit")
    assert queue.stats().ready == (1 if outcome == "commit" else 0)


def test_a_session_wrap_follows_the_session_into_its_next_transaction(engine, queue):
    """After a commit the session's next transaction may run on another pooled connection: each
    call uses the one of the current transaction."""
    with orm.Session(engine) as session:
        q = pyqueue_sql.Database.wrap(session).queue(queue.name)
        q.push("first", "k", 1)
        session.commit()
        q.push("second", "k", 2)
        session.rollback()
        q.push("third", "k", 3)
        session.commit()
    assert sorted(m.key for m in queue.pop(n=10)) == ["first", "third"]


def test_a_wrapped_session_has_no_transactions_of_its_own(engine):
    with orm.Session(engine) as session:
        db = pyqueue_sql.Database.wrap(session)
        with pytest.raises(pyqueue_sql.QueueError, match="transactions are yours"):
            with db.transaction():
                pass


def test_wrap_refuses_other_sqlalchemy_objects(engine):
    with pytest.raises(pyqueue_sql.UnsupportedDsnError, match="Connection or a Session"):
        pyqueue_sql.Database.wrap(engine)

"""A PgBouncer in transaction pooling in front of the test server's PostgreSQL (tests/own_pgbouncer.py),
one per test module, with a pool of 2 server connections per database: smaller than the clients of
every test here, so that server sessions really are shared between client connections."""

from __future__ import annotations

import pytest

from ..conftest import UNDER_CI
from ..own_pgbouncer import OwnPgBouncer, binary

POOL_SIZE = 2


@pytest.fixture(scope="module")
def pgbouncer(server):
    if binary() is None:
        reason = "no pgbouncer binary (bash scripts/pgbouncer-deps.sh installs Debian's pgbouncer)"
        if UNDER_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    bouncer = OwnPgBouncer(server.admin_dsn, pool_size=POOL_SIZE)
    bouncer.start()
    yield bouncer
    bouncer.destroy()


@pytest.fixture
def direct_and_pooled(pgbouncer, installed_database):
    """(direct DSN, the same database through the PgBouncer) of a fresh database with the schema."""
    direct = installed_database("pgbouncer")
    return direct, pgbouncer.dsn(direct)

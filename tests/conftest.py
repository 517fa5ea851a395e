"""Fixtures: one conformance suite, run against every dialect.

Every test that takes ``db``/``dsn`` runs once per dialect. A dialect whose
server cannot be found is skipped, except under CI=true, where that is an error.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import sys
import uuid
from pathlib import Path

import pytest

import pyqueue_sql
from pyqueue_sql import migrate

from . import clients, plainsql
from .servers import find_server, server_for

DIALECTS = ("postgresql", "mysql")
UNDER_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Bytecode caches (__pycache__, git-ignored) are written even where PYTHONDONTWRITEBYTECODE is set, as
# in many container images: pytest rewrites the asserts of every test module and of pyqueue_sql (its
# plugin's package) in each of its processes, and without its cache each pytest-xdist worker (they
# start after this module is read) does it all again from source: about 1.3 s of CPU more per process.
# The processes the tests start (CLI, workers, migrate) inherit it too.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False


def _one_preferred_tls_context_per_process() -> None:
    """PyMySQL (2.2.8 on) tries TLS on every connection given no TLS option (MySQL's PREFERRED
    mode), and builds ssl.create_default_context() for each one: it loads the system's CA store,
    about 18 ms of CPU a connection against 0.2 ms for the rest of the connect, and the tests open
    thousands of MySQL connections. An SSLContext is made to be shared: this process builds that
    one once, with PyMySQL's own settings, and hands it to every connection that asked for no TLS
    option; the connection still tries TLS as it would (a DSN's ssl_ca etc. gets its own context
    as before). The processes the tests start (workers, the CLI) connect as a user's do."""
    try:
        from pymysql import connections
    except ImportError:
        return
    build = connections.Connection._create_ssl_ctx
    shared: list = []

    def create_ssl_ctx(self, sslp):
        if isinstance(sslp, dict) and not sslp:
            if not shared:
                shared.append(build(self, {}))
            return shared[0]
        return build(self, sslp)

    connections.Connection._create_ssl_ctx = create_ssl_ctx


_one_preferred_tls_context_per_process()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "only_dialect(*names): generate this test for these dialects only; the other "
        "dialects' variants are deselected at collection (never reported as skipped)",
    )
    config.addinivalue_line(
        "markers",
        "slow: left out of the inner loop (`make test-fast`: pytest -m 'not slow' in parallel, about a minute); "
        "processes killed, interrupted or restarted (workers, migrations, servers), fault injection, "
        "model-based and stateful hypothesis runs, the sweeps over every routine, Spark, the alembic "
        "application, databases built per test, and tests that wait on timers, leases, wakeups or "
        "several connections for more than about a second. `make test` and CI run everything",
    )
    config.addinivalue_line("markers", clients.SYNC_CLIENT_ONLY)
    # Hypothesis's register_random looks for the referrers of a PRNG a library registers (trio's)
    # with gc.get_referrers, which does not see the objects pytest_collection_finish froze: it warns
    # that the PRNG may be collected at once, and registers it all the same.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:It looks like `register_random` was passed:hypothesis.errors.HypothesisWarning",
    )


# Test files by the time they take (slowest first, the sums of --durations=0 of a whole run; the
# files not listed follow in pytest's order; the slowest tests themselves go before them all, see
# _dispatch_order), and the files
# whose tests share one worker process under pytest-xdist (`--dist loadgroup`): the Spark tests
# share one SparkSession (a JVM), the browser tests one Chromium, which each worker would
# otherwise start for itself, and the mypy runs of tests/tasks/test_typing.py one mypy cache.
SLOWEST_FIRST = tuple(
    f"tests/{path}.py"
    for path in (
        "spark/test_spark",
        "failover/test_failover",
        "schema/test_migrate_interrupted",
        "schema/test_migrations",
        "worker/test_worker",
        "faults/test_faults",
        "contract/test_checks_hostile",
        "security/test_privileges",
        "contract/test_produce_large_batches",
        "contract/test_limits",
        "worker/test_worker_handlers",
        "concurrency/test_groups_model",
        "concurrency/test_model",
        "docs/test_documentation",
        "django/test_django",
        "contract/test_wakeups",
        "schema/test_alembic_app",
        "cli/test_cli",
        "pgbouncer/test_pgbouncer",
        "contract/test_reserve",
        "contract/test_settle",
        "contract/test_schedules",
        "dashboard/test_browser",
        "contract/test_reserve_plans",
        "contract/test_settle_pipeline",
        "client/test_layout",
        "mysql/test_locking",
        "contract/test_groups",
        "mysql/test_charset",
        "cli/test_cli_lifecycle",
        "dashboard/test_metrics",
        "cli/test_demo",
        "client/test_own_transaction",
        "schema/test_upgrade_paths",
        "contract/test_dependencies",
        "tasks/test_time_travel",
        "tasks/test_testing_plugin",
        "schema/test_mixed_fleet",
        "worker/test_worker_cli_app",
        "cli/test_rates",
        "cli/test_cli_secrets",
        "tasks/test_periodic",
        "worker/test_worker_stuck_threads",
        "worker/test_worker_stop_hand_back",
    )
)
SHARE_A_WORKER = frozenset(
    {"tests/spark/test_spark.py", "tests/dashboard/test_browser.py", "tests/tasks/test_typing.py"}
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Drops the variants that @pytest.mark.only_dialect excludes, and the asyncio-client variants
    that tests/clients.py's drops_async_variant names (both reported as deselected); then puts the
    slowest files first, as pytest-xdist hands tests out in this order: a long file started last
    would leave the other workers idle at the end of the run."""
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("only_dialect")
        callspec = getattr(item, "callspec", None)
        dialect = callspec.params.get("dialect") if callspec is not None else None
        excluded = marker is not None and dialect is not None and dialect not in marker.args
        (drop if excluded or clients.drops_async_variant(item) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    items.sort(key=_dispatch_order())


def pytest_collection_finish(session):
    """The collected suite (the test modules, their items and marks: hundreds of thousands of
    objects in each test process) goes to the garbage collector's permanent generation. They live
    until the process ends, and each full collection, which Python starts again and again as the
    tests allocate, walked all of them: in a run of tests/unit, 8.3 s of the process's 24.9 s of
    CPU went to the collector, 2.8 s of 19.0 s once they are frozen (load 9-17). Objects the tests
    make are collected as before."""
    gc.freeze()


def _dispatch_order():
    """The order pytest-xdist hands the tests out in: the Spark file (one unit, for one process)
    first; then the slowest tests of tests/slowest.txt, longest first; then every other test
    marked slow, then the rest, each by SLOWEST_FIRST's order of their files. A test that takes
    long and starts last keeps one process busy while the others have nothing left to do."""
    slowest = {}
    for line in (Path(__file__).parent / "slowest.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            slowest.setdefault(line.split()[0], len(slowest))
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}

    def key(item) -> tuple[int, int, int]:
        path = _relative(item)
        if path == "tests/spark/test_spark.py":
            return (0, 0, 0)
        name = item.nodeid.split("[", 1)[0]
        if name in slowest:
            return (1, slowest[name], 0)
        return (2, 0 if item.get_closest_marker("slow") else 1, rank.get(path, len(rank)))

    return key


if importlib.util.find_spec("xdist") is not None:

    def pytest_xdist_make_scheduler(config, log):
        """--dist loadgroup as this suite needs it: a test at a time, but the files of SHARE_A_WORKER
        each as one unit. (pytest-xdist's own loadgroup reads xdist_group marks through node ids,
        which pytest 9 no longer lets it rename.)"""
        if config.getvalue("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class Scheduler(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                path = nodeid.split("::", 1)[0]
                return path if path in SHARE_A_WORKER else nodeid

        return Scheduler(config, log)


def _relative(item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.fixture(scope="session")
def servers(tmp_path_factory):
    """dialect -> server helper (or a reason string when there is none)."""
    found = {}
    with contextlib.ExitStack() as stack:
        for dialect in DIALECTS:
            admin_dsn, how = stack.enter_context(
                find_server(dialect, str(tmp_path_factory.mktemp(f"server-{dialect}")))
            )
            found[dialect] = server_for(dialect, admin_dsn) if admin_dsn else how
            if dialect == "mysql" and admin_dsn:
                found[dialect].allow_connections()
        yield found


def _server(servers, dialect):
    server = servers[dialect]
    if isinstance(server, str):
        if UNDER_CI:
            pytest.fail(f"CI=true and no {dialect} server: {server}", pytrace=False)
        pytest.skip(server)
    return server


@pytest.fixture(scope="session", params=DIALECTS)
def dialect(request):
    return request.param


@pytest.fixture(scope="session")
def server(servers, dialect):
    return _server(servers, dialect)


class _Dropper:
    """Drops the databases the tests are done with, one after another in a thread of the test
    process, while the next tests run: on PostgreSQL a DROP DATABASE waits for a checkpoint (all
    the server's dirty pages written and synced, up to seconds on a loaded machine), which no test
    needs to wait for. Nobody connects to a database once its test ended (the drop still ends any
    session left on it). close() waits for every drop and raises the first that failed."""

    def __init__(self) -> None:
        import queue
        import threading

        self.todo: queue.Queue = queue.Queue()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="database-dropper", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (job := self.todo.get()) is not None:
            server, name = job
            try:
                server.drop(name)
            except BaseException as exc:  # noqa: BLE001 - raised by close()
                self.errors.append(exc)

    def drop(self, server, name: str) -> None:
        self.todo.put((server, name))

    def close(self) -> None:
        self.todo.put(None)
        self.thread.join()
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} test database(s) not dropped") from self.errors[0]


@pytest.fixture(scope="session")
def _dropper(servers):
    """(servers: set up before it, so that it is closed before the servers are.)"""
    dropper = _Dropper()
    yield dropper
    dropper.close()


@pytest.fixture
def fresh_database(server, _dropper):
    """Makes empty databases on the current dialect's server; drops them afterwards."""
    made = []

    def make(tag: str = "db") -> str:
        name = f"pyqueue_t_{tag}_{uuid.uuid4().hex[:10]}"
        made.append(name)
        return server.create(name)

    yield make
    for name in made:
        _dropper.drop(server, name)


class _Installer:
    """Makes databases with the schema installed, fast: on PostgreSQL a copy of a template database
    migrated once per test process (CREATE DATABASE ... TEMPLATE, about 0.06 s against 0.25 s for
    migrating). MySQL/MariaDB has no templates, and migrating there takes 0.7 s on a quiet machine
    and 5 to 9 s on a loaded one (the DDL of 190 routines and 20 tables, each waiting for the disk):
    a database a test is done with comes back here, and the next test of the process gets it
    emptied (_MySQLReuse) unless the test changed more than its rows. Either way the database is
    what ``migrate.upgrade`` makes of an empty one, but for the message and history ids, which go
    on from where the earlier test left them."""

    def __init__(self, server) -> None:
        self.server = server
        self.template: str | None = None
        self.reuse = _MySQLReuse(server) if server.dialect == "mysql" else None

    def create(self, tag: str, dropper: _Dropper) -> tuple[str, str]:
        """(name, DSN) of a database with the schema installed, new or emptied."""
        if self.reuse is not None:
            reused = self.reuse.take(lambda name: dropper.drop(self.server, name))
            if reused is not None:
                return reused
        name = f"pyqueue_t_{tag}_{uuid.uuid4().hex[:10]}"
        if self.server.dialect != "postgresql":
            url = self.server.create(name)
            migrate.upgrade(url)
            if self.reuse is not None:
                self.reuse.made(name, url)
            return name, url
        if self.template is None:
            # Per process (xdist runs several): nobody else ever connects to it, so it can be copied.
            template = f"pyqueue_template_{os.getpid()}"
            migrate.upgrade(self.server.create(template))
            self.template = template
        return name, self.server.copy(self.template, name)

    def done(self, name: str, dropper: _Dropper) -> None:
        """The test that asked for database ``name`` is over."""
        if self.reuse is None or not self.reuse.give_back(name):
            dropper.drop(self.server, name)

    def close(self) -> None:
        if self.template is not None:
            self.server.drop(self.template)
        if self.reuse is not None:
            for name in self.reuse.close():
                self.server.drop(name)


class _MySQLReuse:
    """The MySQL/MariaDB databases of one test process that tests are done with, for the next test
    that asks for one: emptied (every table's rows but the two the install filled, the schema's
    revision and the installed objects' digests), and the tables the test added dropped (an
    application's, a Django project's), unless the test changed anything else, which
    the fingerprint read right after the install shows (tables, columns, indexes, constraints,
    routines with their bodies, views, triggers, events, grants on the database, the rows of those
    two tables, an id counter moved past 10^9): such a database is dropped, as before. What an
    emptied one keeps from the earlier test are the ids (message, history) counting on; the
    counters whose ids a routine answers (worker, ingest) start at 1 again, as in a new one."""

    KEPT = ("pyqueue_alembic_version", "pyqueue_installed")
    ANSWERED_COUNTERS = ("pyqueue_worker", "queue_ingest", "pyqueue_ingest_reject")
    FINGERPRINT = (
        "SELECT"
        " (SELECT MD5(GROUP_CONCAT(table_name, table_type, IFNULL(engine, ''), IFNULL(table_collation, ''),"
        "   IFNULL(create_options, ''), IFNULL(auto_increment, 0) > 1000000000 ORDER BY table_name))"
        "   FROM information_schema.tables WHERE table_schema = DATABASE()),"
        " (SELECT MD5(GROUP_CONCAT(table_name, column_name, ordinal_position, column_type,"
        "   IFNULL(column_default, '~'), is_nullable, extra, IFNULL(collation_name, ''),"
        "   IFNULL(generation_expression, '') ORDER BY table_name, ordinal_position))"
        "   FROM information_schema.columns WHERE table_schema = DATABASE()),"
        " (SELECT MD5(GROUP_CONCAT(table_name, index_name, seq_in_index, column_name, non_unique,"
        "   IFNULL(sub_part, '') ORDER BY table_name, index_name, seq_in_index))"
        "   FROM information_schema.statistics WHERE table_schema = DATABASE()),"
        " (SELECT MD5(GROUP_CONCAT(table_name, constraint_name, constraint_type ORDER BY table_name, constraint_name))"
        "   FROM information_schema.table_constraints WHERE constraint_schema = DATABASE()),"
        " (SELECT MD5(GROUP_CONCAT(table_name, constraint_name, check_clause ORDER BY table_name, constraint_name))"
        "   FROM information_schema.check_constraints WHERE constraint_schema = DATABASE()),"
        " (SELECT MD5(GROUP_CONCAT(routine_type, routine_name, MD5(IFNULL(routine_definition, '')), sql_mode,"
        "   security_type, definer, sql_data_access, is_deterministic ORDER BY routine_type, routine_name))"
        "   FROM information_schema.routines WHERE routine_schema = DATABASE()),"
        " (SELECT MD5(GROUP_CONCAT(specific_name, IFNULL(parameter_name, ''), ordinal_position,"
        "   IFNULL(parameter_mode, ''), dtd_identifier ORDER BY specific_name, ordinal_position))"
        "   FROM information_schema.parameters WHERE specific_schema = DATABASE()),"
        " (SELECT MD5(GROUP_CONCAT(table_name, MD5(view_definition), security_type, definer ORDER BY table_name))"
        "   FROM information_schema.views WHERE table_schema = DATABASE()),"
        " (SELECT COUNT(*) FROM information_schema.triggers WHERE trigger_schema = DATABASE()),"
        " (SELECT COUNT(*) FROM information_schema.events WHERE event_schema = DATABASE()),"
        " (SELECT CONCAT(default_character_set_name, default_collation_name)"
        "   FROM information_schema.schemata WHERE schema_name = DATABASE()),"
        " (SELECT MD5(GROUP_CONCAT(user, host, proc_priv, routine_name ORDER BY user, host, routine_name))"
        "   FROM mysql.procs_priv WHERE db = DATABASE()),"
        " (SELECT MD5(GROUP_CONCAT(user, host, table_name, table_priv, column_priv ORDER BY user, host, table_name))"
        "   FROM mysql.tables_priv WHERE db = DATABASE()),"
        " (SELECT COUNT(*) FROM mysql.columns_priv WHERE db = DATABASE()),"
        " (SELECT COUNT(*) FROM mysql.db WHERE db = DATABASE()),"
        " (SELECT MD5(GROUP_CONCAT(version_num ORDER BY version_num)) FROM pyqueue_alembic_version)"
    )

    def __init__(self, server) -> None:
        self.server = server
        self.prints: dict[str, tuple] = {}  # name -> the fingerprint right after the install
        self.tables: dict[str, set[str]] = {}  # name -> its tables then
        self.urls: dict[str, str] = {}
        self.spare: list[str] = []

    def _connect(self, url: str):
        import pymysql

        from pyqueue_sql.dialects import mysql_connect_args

        return pymysql.connect(**{**mysql_connect_args(url), "autocommit": True})

    def _fingerprint(self, cur) -> tuple:
        cur.execute("SET SESSION group_concat_max_len = 16777216")
        cur.execute(self.FINGERPRINT)
        row = tuple(cur.fetchone())
        cur.execute("CHECKSUM TABLE pyqueue_installed")
        return row + (cur.fetchone()[1],)

    @staticmethod
    def _tables(cur) -> set[str]:
        cur.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'"
        )
        return {row[0] for row in cur.fetchall()}

    def made(self, name: str, url: str) -> None:
        conn = self._connect(url)
        try:
            with conn.cursor() as cur:
                self.prints[name] = self._fingerprint(cur)
                self.tables[name] = self._tables(cur)
        finally:
            conn.close()
        self.urls[name] = url

    def give_back(self, name: str) -> bool:
        if name not in self.prints:
            return False
        self.spare.append(name)
        return True

    def take(self, drop) -> tuple[str, str] | None:
        """A database given back, emptied; None when there is none that only its rows changed in
        (those are handed to drop(name))."""
        from pyqueue_sql.timetravel import forget

        while self.spare:
            name = self.spare.pop()
            url = self.urls[name]
            conn = self._connect(url)
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()"
                    )
                    for (pid,) in cur.fetchall():  # sessions an earlier test left: as a drop ends them
                        with contextlib.suppress(Exception):
                            cur.execute(f"KILL CONNECTION {int(pid)}")
                    # an application's tables (a test of an app's own models and the queue beside them)
                    extra = sorted(self._tables(cur) - self.tables[name])
                    if extra:
                        cur.execute("SET SESSION foreign_key_checks = 0")
                        cur.execute("DROP TABLE " + ", ".join(f"`{t}`" for t in extra))
                        cur.execute("SET SESSION foreign_key_checks = 1")
                    if self._fingerprint(cur) != self.prints[name]:
                        self.prints.pop(name)
                        drop(name)
                        continue
                    cur.execute(
                        "SELECT table_name, IFNULL(auto_increment, 0) > 1 FROM information_schema.tables"
                        " WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE'"
                    )
                    tables = sorted((t, moved) for t, moved in cur.fetchall() if t not in self.KEPT)
                    cur.execute("SET SESSION foreign_key_checks = 0")
                    cur.execute("START TRANSACTION")
                    for table, _ in tables:
                        cur.execute(f"DELETE FROM `{table}`")
                    cur.execute("COMMIT")
                    cur.execute("SET SESSION foreign_key_checks = 1")
                    for table, moved in tables:
                        if moved and table in self.ANSWERED_COUNTERS:
                            cur.execute(f"ALTER TABLE `{table}` AUTO_INCREMENT = 1")
            finally:
                conn.close()
            forget("mysql", name)  # the test clock starts over, as with a new database
            return name, url
        return None

    def close(self) -> list[str]:
        """The databases given back (to drop)."""
        names, self.spare = self.spare, []
        return names


@pytest.fixture(scope="session")
def _installers():
    made: dict[str, _Installer] = {}
    yield made
    for installer in made.values():
        installer.close()


@pytest.fixture
def installed_database(server, _installers, _dropper):
    """Makes databases with the schema installed (the head revision, as ``migrate.upgrade`` leaves an
    empty one); drops them afterwards (on MySQL/MariaDB the process's next test of this fixture may
    get one emptied instead: _Installer). For tests that need their own database with the schema
    but do not test migrating itself (those start from ``fresh_database``)."""
    installer = _installers.setdefault(server.dialect, _Installer(server))
    made = []

    def make(tag: str = "db") -> str:
        name, url = installer.create(tag, _dropper)
        made.append(name)
        return url

    yield make
    for name in made:
        installer.done(name, _dropper)


@pytest.fixture(scope="session")
def _shared_databases():
    made: dict[str, tuple] = {}
    yield made
    for server, name, _url in made.values():
        server.drop(name)


@pytest.fixture
def dsn(server, _shared_databases):
    """A database with the schema installed by the migrations, shared by the test process (one per
    dialect, kept for the whole run: tests of both dialects alternate when run in file order)."""
    if server.dialect not in _shared_databases:
        name = f"pyqueue_test_{os.getpid()}"
        url = server.create(name)
        migrate.upgrade(url)
        _shared_databases[server.dialect] = (server, name, url)
    return _shared_databases[server.dialect][2]


@pytest.fixture
def connect(dsn):
    """Opens extra connections (closed after the test), for concurrency tests."""
    opened = []

    def make() -> pyqueue_sql.Database:
        db = pyqueue_sql.connect(dsn)
        opened.append(db)
        return db

    yield make
    for db in opened:
        with contextlib.suppress(Exception):
            db.close()


@pytest.fixture
def db(connect):
    return connect()


@pytest.fixture
def make_queue(db):
    """Creates queues with unique names, so tests never see each other's messages."""

    def make(**settings) -> pyqueue_sql.Queue:
        return db.queue(f"t.{uuid.uuid4().hex[:12]}").create(**settings)

    return make


@pytest.fixture
def queue(make_queue):
    return make_queue()


@pytest.fixture
def raw(db):
    """Runs plain SQL on the test connection, as a psql or mysql client would."""
    return lambda sql, params=None: plainsql.run(db.connection, sql, params)


@pytest.fixture
def sql(raw, dialect):
    """The routines in plain SQL on the test connection: ``sql("queue_push", ...)`` runs ``SELECT *
    FROM queue_push(...)`` or ``CALL queue_push(...)`` (tests/plainsql.py)."""
    return plainsql.Sql(raw, dialect)


@pytest.fixture
def sql_session(dsn):
    """Opens sessions of their own (autocommit connections, closed after the test) that call the
    routines in plain SQL (tests/plainsql.py's Session)."""
    opened: list[plainsql.Session] = []

    def open_one() -> plainsql.Session:
        session = plainsql.Session(dsn)
        opened.append(session)
        return session

    yield open_one
    for session in opened:
        with contextlib.suppress(Exception):
            session.close()


# ---- Spark ----


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole run (local[2], UI off, few shuffle
    partitions, the JDBC jars from /usr/share/java). Missing Java, pyspark or a
    jar skips the Spark tests, except under CI=true, where that fails them."""
    from pyqueue_sql import spark as pqs

    missing = pqs.missing_requirements()
    if missing:
        reason = "Spark tests need: " + "; ".join(missing) + " (`make test` installs them)"
        if UNDER_CI:
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    session = pqs.session(
        "pyqueue-sql-tests", conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"}
    )
    yield session
    session.stop()


@pytest.fixture
def jdbc_url(dsn):
    """The test database as Spark sees it (JDBC needs TCP: not the embedded server's socket)."""
    if "host=/" in dsn or "@/" in dsn:
        if UNDER_CI:
            pytest.fail(
                "CI=true and the test database is on a Unix socket, which JDBC cannot reach", pytrace=False
            )
        pytest.skip("the test database is on a Unix socket, which JDBC cannot reach")
    return dsn

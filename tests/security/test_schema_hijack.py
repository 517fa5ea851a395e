"""PostgreSQL: no role that can CREATE in the install schema gets its code run by our routines.

The routines are SECURITY DEFINER: they run as their owner (the migrating role,
often a superuser). A function or operator whose argument types match a call
exactly beats a built-in that is polymorphic or needs a conversion, wherever
it sits on the search_path. So a role that can create objects in the install
schema could plant `public.cardinality(text[])` and have it run as the owner.

Two defences, each tested here:
- the install (routines.sql, so `migrate` and the `pyqueue-sql sql` script)
  refuses with `pyqueue:insecure_schema` while any other role can CREATE in
  the install schema;
- the routines call built-ins as pg_catalog.<name> and compare operands of
  the exact types of the built-in operators, so a role granted CREATE after
  the install still gets none of its look-alikes called (the attack below).
"""

from __future__ import annotations

import contextlib
import time
import uuid

import psycopg
import pytest

from pyqueue_sql import migrate
from pyqueue_sql.queries import install_script, script

pytestmark = pytest.mark.only_dialect("postgresql")


def _connect(dsn: str) -> psycopg.Connection:
    from pyqueue_sql import dialects

    return dialects.for_dsn(dsn).connect(dsn)


@contextlib.contextmanager
def _roles(dsn: str, *tags: str):
    """NOLOGIN roles with unique names (the tests act as them with SET ROLE); dropped afterwards."""
    admin = _connect(dsn)
    names = [f"pq_{tag}_{uuid.uuid4().hex[:8]}" for tag in tags]
    for name in names:
        admin.execute(f'CREATE ROLE "{name}" NOLOGIN')
    try:
        yield admin, names
    finally:
        admin.execute("RESET ROLE")
        for name in names:
            with contextlib.suppress(Exception):
                admin.execute(f'DROP OWNED BY "{name}"')
                admin.execute(f'DROP ROLE "{name}"')
        admin.close()


def _install_script(dsn: str) -> None:
    conn = _connect(dsn)
    try:
        conn.execute(install_script("postgresql"))
    finally:
        conn.close()


def _refused(install, dsn: str, *names: str) -> str:
    with pytest.raises(Exception) as info:
        install(dsn)
    message = str(info.value)
    assert "insecure_schema" in message or type(info.value).__name__ == "InsecureSchemaError", message
    for name in names:
        assert name in message, message
    assert "REVOKE CREATE ON SCHEMA public FROM" in message, message
    return message


# ---------------------------------------------------------------------------
# The install refuses a schema that others can write
# ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("install", [migrate.upgrade, _install_script], ids=["migrate", "script"])
def test_install_refused_while_public_can_create_in_the_schema(dialect, fresh_database, install):
    dsn = fresh_database("pub")
    admin = _connect(dsn)
    try:
        admin.execute("GRANT CREATE ON SCHEMA public TO PUBLIC")
        _refused(install, dsn, "PUBLIC")
        # no routine was installed (migrate may have kept earlier revisions' work, the script keeps nothing)
        assert admin.execute(
            "SELECT to_regprocedure('queue_fail(text,text,text,uuid,interval,text)') IS NULL"
        ).fetchone()[0]
        if install is _install_script:
            assert admin.execute("SELECT to_regclass('pyqueue_message') IS NULL").fetchone()[0]
        admin.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        install(dsn)
        assert (
            admin.execute("SELECT count(*) FROM pg_proc WHERE proname = 'queue_fail'").fetchone()[0] == 2
        )  # token as text, as uuid
    finally:
        admin.close()


@pytest.mark.slow
@pytest.mark.parametrize("install", [migrate.upgrade, _install_script], ids=["migrate", "script"])
def test_install_refused_while_another_role_can_create_in_the_schema(dialect, fresh_database, install):
    dsn = fresh_database("role")
    with _roles(dsn, "app") as (admin, (app,)):
        admin.execute(f'GRANT CREATE ON SCHEMA public TO "{app}"')
        _refused(install, dsn, app)
        admin.execute(f'REVOKE CREATE ON SCHEMA public FROM "{app}"')
        install(dsn)
        # a role that may only use the schema is no reason to refuse running routines.sql again
        admin.execute(f'GRANT USAGE ON SCHEMA public TO "{app}"')
        admin.execute(script("postgresql", "routines"))


def test_install_refused_when_another_role_owns_the_database(dialect, fresh_database):
    """public belongs to pg_database_owner: the database's owner can CREATE in it."""
    dsn = fresh_database("owner")
    database = dsn.rsplit("/", 1)[1].split("?")[0]
    with _roles(dsn, "owner") as (admin, (owner,)):
        admin.execute(f'ALTER DATABASE "{database}" OWNER TO "{owner}"')
        try:
            message = _refused(_install_script, dsn, owner)
            assert "ALTER SCHEMA public OWNER TO" in message
            admin.execute("ALTER SCHEMA public OWNER TO CURRENT_USER")
            _install_script(dsn)
        finally:
            admin.execute(f'ALTER DATABASE "{database}" OWNER TO CURRENT_USER')


# ---------------------------------------------------------------------------
# The attack: look-alikes planted after the install are never called
# ---------------------------------------------------------------------------

# (name, argument types, result type, body returning the built-in's answer)
LOOKALIKE_FUNCTIONS = [
    ("cardinality", "text[]", "integer", "pg_catalog.cardinality($1)"),
    ("cardinality", "varchar[]", "integer", "pg_catalog.cardinality($1)"),
    ("cardinality", "jsonb[]", "integer", "pg_catalog.cardinality($1)"),
    ("cardinality", "timestamptz[]", "integer", "pg_catalog.cardinality($1)"),
    ("cardinality", "integer[]", "integer", "pg_catalog.cardinality($1)"),
    ("cardinality", "uuid[]", "integer", "pg_catalog.cardinality($1)"),
    ("cardinality", "tid[]", "integer", "pg_catalog.cardinality($1)"),
    ("array_position", "text[], text", "integer", "pg_catalog.array_position($1, $2)"),
    ("array_position", "varchar[], varchar", "integer", "pg_catalog.array_position($1, $2)"),
    ("array_ndims", "text[]", "integer", "pg_catalog.array_ndims($1)"),
    ("array_ndims", "jsonb[]", "integer", "pg_catalog.array_ndims($1)"),
    ("array_ndims", "timestamptz[]", "integer", "pg_catalog.array_ndims($1)"),
    ("array_ndims", "integer[]", "integer", "pg_catalog.array_ndims($1)"),
    ("array_ndims", "uuid[]", "integer", "pg_catalog.array_ndims($1)"),
    ("array_length", "text[], integer", "integer", "pg_catalog.array_length($1, $2)"),
    ("array_length", "jsonb[], integer", "integer", "pg_catalog.array_length($1, $2)"),
    ("array_fill", "timestamptz, integer[]", "timestamptz[]", "pg_catalog.array_fill($1, $2)"),
    ("array_fill", "integer, integer[]", "integer[]", "pg_catalog.array_fill($1, $2)"),
    ("array_append", "bigint[], bigint", "bigint[]", "pg_catalog.array_append($1, $2)"),
    ("array_append", "text[], text", "text[]", "pg_catalog.array_append($1, $2)"),
    ("length", "varchar", "integer", "pg_catalog.length($1)"),
    ("right", "varchar, integer", "text", "pg_catalog.right($1, $2)"),
    ("left", "varchar, integer", "text", "pg_catalog.left($1, $2)"),
    ("md5", "varchar", "text", "pg_catalog.md5($1)"),
    ("isfinite", "timestamp", "boolean", "pg_catalog.isfinite($1)"),
    ("quote_literal", "varchar", "text", "pg_catalog.quote_literal($1)"),
    ("quote_ident", "varchar", "text", "pg_catalog.quote_ident($1)"),
    ("pg_notify", "text, varchar", "void", "pg_catalog.pg_notify($1, $2)"),
    ("generate_subscripts", "text[], integer", "SETOF integer", "pg_catalog.generate_subscripts($1, $2)"),
    ("to_timestamp", "numeric", "timestamptz", "pg_catalog.to_timestamp($1)"),
    ("floor", "double precision", "double precision", "pg_catalog.floor($1)"),
    # our own helpers, called with a varchar where they take text
    ("pyqueue__queue", "varchar, boolean", "pyqueue_queue", "pyqueue__queue($1::text, $2)"),
    ("pyqueue__notify", "varchar", "void", "pyqueue__notify($1::text)"),
    ("pyqueue__schedule_key", "varchar, timestamptz", "text", "pyqueue__schedule_key($1::text, $2)"),
    (
        "pyqueue__schedule_after",
        "bigint, varchar, timestamptz",
        "timestamptz",
        "pyqueue__schedule_after($1, $2::text, $3)",
    ),
    (
        "pyqueue__dead_letter",
        "pyqueue_queue, varchar, varchar, timestamptz",
        "void",
        "pyqueue__dead_letter($1, $2::text, $3::text, $4)",
    ),
    ("pyqueue__check_name", "text, varchar, integer", "void", "pyqueue__check_name($1, $2::text, $3)"),
]

# set-returning look-alikes: unnest of every array type the routines unnest
UNNEST_TYPES = ["text", "varchar", "jsonb", "timestamptz", "integer", "bigint", "uuid", "tid"]

# aggregates over the element types the routines aggregate
AGGREGATE_TYPES = ["varchar", "text", "integer", "bigint", "tid", "timestamptz"]

# operators on operand pairs where no built-in matches exactly, and those that do
STRINGS = ["varchar", "text"]
OPERATOR_PAIRS = [(a, b) for a in STRINGS for b in STRINGS] + [
    ("numeric", "integer"),
    ("numeric", "bigint"),
    ("integer", "numeric"),
    ("bigint", "integer"),
    ("double precision", "integer"),
    ("bigint", "numeric"),
]
COMPARISONS = ["=", "<>", "<", "<=", ">", ">=", "~~", "!~~"]
COMMON_TYPE = {
    "varchar": "text",
    "text": "text",
    "numeric": "numeric",
    "integer": "numeric",
    "bigint": "numeric",
    "double precision": "double precision",
}
ARITHMETIC = [
    ("&", "bigint", "integer", "bigint"),
    ("|", "bigint", "integer", "bigint"),
    ("+", "numeric", "integer", "numeric"),
    ("*", "numeric", "bigint", "numeric"),
    ("/", "numeric", "bigint", "numeric"),
    ("||", "varchar", "varchar", "text"),
    ("||", "text", "bigint", "text"),
    ("||", "varchar", "text", "text"),
    ("||", "bigint[]", "bigint", "bigint[]"),
    ("||", "text[]", "text", "text[]"),
]


def _plant(conn, schema: str) -> int:
    """Creates the look-alikes (as the current role) in schema; each records its calls. Returns how many."""
    made = 0

    def record(what: str) -> str:
        literal = what.replace("'", "''")
        return (
            f"PERFORM pg_catalog.nextval('{schema}.hijack_calls_seq'); "
            f"INSERT INTO {schema}.hijack_calls (what) VALUES ('{literal}'); "
        )

    def function(name: str, args: str, returns: str, body: str) -> None:
        nonlocal made
        what = f"{name}({args})"
        if returns.startswith("SETOF"):
            code = f"BEGIN {record(what)} RETURN QUERY SELECT {body}; END;"
        elif returns == "void":
            code = f"BEGIN {record(what)} PERFORM {body}; END;"
        else:
            code = f"BEGIN {record(what)} RETURN {body}; END;"
        conn.execute(
            f"CREATE FUNCTION {schema}.{name}({args}) RETURNS {returns} LANGUAGE plpgsql AS $f$ {code} $f$"
        )
        made += 1

    for name, args, returns, body in LOOKALIKE_FUNCTIONS:
        function(name, args, returns, body)
    for t in UNNEST_TYPES:
        function("unnest", f"{t}[]", f"SETOF {t}", "pg_catalog.unnest($1)")
    for i, t in enumerate(AGGREGATE_TYPES):
        function(f"hijack_agg_{i}", f"{t}[], {t}", f"{t}[]", "pg_catalog.array_append($1, $2)")
        for name in ("array_agg", "min", "max", "count"):
            if name == "array_agg":
                conn.execute(
                    f"CREATE AGGREGATE {schema}.array_agg({t}) "
                    f"(SFUNC = {schema}.hijack_agg_{i}, STYPE = {t}[])"
                )
            elif name == "count":
                function(f"hijack_count_{i}", f"bigint, {t}", "bigint", "$1 + 1")
                conn.execute(
                    f"CREATE AGGREGATE {schema}.count({t}) "
                    f"(SFUNC = {schema}.hijack_count_{i}, STYPE = bigint, INITCOND = '0')"
                )
            else:
                function(
                    f"hijack_{name}_{i}",
                    f"{t}, {t}",
                    t,
                    f"CASE WHEN $1 IS NULL OR $2 {'<' if name == 'min' else '>'} $1 THEN $2 ELSE $1 END"
                    if t != "tid"
                    else "$2",
                )
                conn.execute(
                    f"CREATE AGGREGATE {schema}.{name}({t}) (SFUNC = {schema}.hijack_{name}_{i}, STYPE = {t})"
                )
            made += 1
    n = 0
    for left, right in OPERATOR_PAIRS:
        common = COMMON_TYPE[left] if COMMON_TYPE[left] == COMMON_TYPE[right] else "numeric"
        for op in COMPARISONS:
            if op in ("~~", "!~~") and common != "text":
                continue
            n += 1
            function(
                f"hijack_op_{n}",
                f"{left}, {right}",
                "boolean",
                f"$1::{common} OPERATOR(pg_catalog.{op}) $2::{common}",
            )
            conn.execute(
                f"CREATE OPERATOR {schema}.{op} (LEFTARG = {left}, RIGHTARG = {right}, "
                f"FUNCTION = {schema}.hijack_op_{n})"
            )
            made += 1
    for op, left, right, result in ARITHMETIC:
        n += 1
        if left.endswith("[]"):
            body = "pg_catalog.array_append($1, $2)"
        elif op == "||":
            body = "$1::text OPERATOR(pg_catalog.||) $2::text"
        else:
            body = f"$1 OPERATOR(pg_catalog.{op}) $2::{left}"
        function(f"hijack_op_{n}", f"{left}, {right}", result, body)
        conn.execute(
            f"CREATE OPERATOR {schema}.{op} (LEFTARG = {left}, RIGHTARG = {right}, "
            f"FUNCTION = {schema}.hijack_op_{n})"
        )
        made += 1
    return made


def _calls(admin) -> tuple[int, list[str]]:
    seq = admin.execute("SELECT last_value, is_called FROM public.hijack_calls_seq").fetchone()
    rows = [r[0] for r in admin.execute("SELECT DISTINCT what FROM public.hijack_calls ORDER BY 1")]
    return (seq[0] if seq[1] else 0), rows


def _exercise(conn) -> None:
    """Calls every routine along its main paths, as the planted role (results checked loosely)."""
    one = lambda sql, *args: conn.execute(sql, args).fetchone()  # noqa: E731
    many = lambda sql, *args: conn.execute(sql, args).fetchall()  # noqa: E731
    q, dlq, other = "hj.q", "hj.dead", "hj.other"
    one("SELECT queue_create(%s)", dlq)
    one("SELECT queue_create(%s, interval '30 s', 2, %s, interval '1 day')", q, dlq)
    one("SELECT queue_create(%s)", other)
    one("SELECT queue_create(%s, NULL, 3)", q)
    one("SELECT queue_reset_setting(%s, 'max_attempts')", q)
    one("SELECT queue_create(%s, NULL, 2)", q)
    assert many("SELECT * FROM queue_settings(NULL)")
    assert one("SELECT queue_push(%s, 'k1', 'kind', '{\"a\": 1}')", q)[0]
    assert (
        one(
            "SELECT queue_push_batch(%s, ARRAY['b1','b2','b3'], ARRAY['kind','kind','bulk'], "
            "ARRAY['1','2','3']::jsonb[])",
            q,
        )[0]
        == 3
    )
    assert (
        one(
            "SELECT queue_push_batch(%s, ARRAY['b4','b5'], ARRAY['kind','kind'], ARRAY['1','2']::jsonb[], "
            "ARRAY[now(), NULL]::timestamptz[], ARRAY[1, NULL]::integer[])",
            q,
        )[0]
        == 2
    )
    assert one("SELECT queue_push_replace(%s, 'k1', 'kind', '{\"a\": 2}')", q)[0] == "replaced"
    assert many("SELECT * FROM queue_stats(%s)", q)
    assert many("SELECT * FROM queue_next_scheduled_at(%s, ARRAY['kind'])", q)
    assert one("SELECT queue_wait(%s, ARRAY['kind'], interval '10 ms', interval '5 ms')", q)[0]
    one("SELECT queue_channel(%s)", q)
    one("SELECT queue_set_notify_window(%s, interval '0')", q)
    rows = many("SELECT p_key, p_kind, token FROM queue_reserve(%s, 'w', NULL, 3, ARRAY['kind'])", q)
    assert len(rows) == 3
    (k1, kd1, t1), (k2, kd2, t2), (k3, kd3, t3) = rows
    assert one("SELECT queue_commit(%s, %s, %s, %s)", q, k1, kd1, t1)[0]
    t2 = one("SELECT queue_extend(%s, %s, %s, %s, interval '1 min')", q, k2, kd2, t2)[0]
    assert t2 is not None
    assert one("SELECT queue_fail(%s, %s, %s, %s, NULL, 'boom')", q, k2, kd2, t2)[0] == "retry"
    assert one("SELECT queue_rollback(%s, %s, %s, %s)", q, k3, kd3, t3)[0]
    assert many("SELECT * FROM queue_message(%s, %s, %s)", q, k2, kd2)
    rows = many("SELECT * FROM queue_commit_reserve(%s, NULL, NULL, NULL, 'w', NULL, 2, ARRAY['kind'])", q)
    assert rows and rows[0][1] is not None
    k, kd = rows[0][1], rows[0][2]
    tokens = {(r[1], r[2]): r[4] for r in rows}
    assert one("SELECT queue_move(%s, %s, %s, %s, %s)", q, k, kd, tokens[(k, kd)], q)[0]  # same queue
    rest = [(kk, kk2, tt) for (kk, kk2), tt in tokens.items() if (kk, kk2) != (k, kd)]
    if rest:
        one(
            "SELECT queue_commit_batch(%s, %s::text[], %s::text[], %s::uuid[]::text[])",
            q,
            [r[0] for r in rest],
            [r[1] for r in rest],
            [r[2] for r in rest],
        )
    # exhaust a message: two deliveries, then the dead-letter queue
    for _ in range(2):
        rows = many("SELECT p_key, p_kind, token FROM queue_reserve(%s, 'w', NULL, 10)", q)
        for kk, kk2, tt in rows:
            one("SELECT queue_fail(%s, %s, %s, %s, NULL, 'again')", q, kk, kk2, tt)
    assert many("SELECT * FROM queue_dead_letters(%s)", dlq)
    many("SELECT * FROM queue_message_history(%s, %s, %s)", q, k2, kd2)
    assert one("SELECT queue_redrive(%s, %s, 100)", dlq, other)[0] >= 1
    rows = many("SELECT p_key, p_kind, token FROM queue_reserve(%s, 'w', NULL, 1)", other)
    for kk, kk2, tt in rows:
        assert one("SELECT queue_move(%s, %s, %s, %s, %s, '{\"moved\": true}')", other, kk, kk2, tt, q)[0]
    one("SELECT queue_replay(%s, NULL, NULL)", q)
    one("SELECT queue_purge_history(%s, 10)", q)
    rows = many("SELECT p_key, p_kind FROM queue_pop(%s, 2)", q)
    assert one("SELECT queue_push(%s, 'gone', 'kind', '1')", q)[0]
    assert one("SELECT queue_remove(%s, 'gone', 'kind')", q)[0]
    one("SELECT queue_pause(%s)", q)
    one("SELECT queue_resume(%s)", q)
    # limits, lowered while held
    one("SELECT queue_set_limit(%s, 'lim', 2)", q)
    one(
        "SELECT queue_push_batch(%s, ARRAY['l1','l2','l3'], ARRAY['lim','lim','lim'], ARRAY['1','2','3']::jsonb[])",
        q,
    )
    rows = many(
        "SELECT p_key, p_kind, token FROM queue_reserve(%s, 'w', interval '1 min', 10, ARRAY['lim'])", q
    )
    assert len(rows) == 2
    one("SELECT queue_set_limit(%s, 'lim', 1)", q)
    assert one("SELECT in_use FROM queue_limits(%s) WHERE p_kind = 'lim'", q)[0] == 2
    one("SELECT queue_extend(%s, %s, %s, %s, NULL)", q, *rows[1])
    one("SELECT queue_commit(%s, %s, %s, %s)", q, *rows[0])
    assert many("SELECT * FROM queue_reserve(%s, 'w', NULL, 10, ARRAY['lim'])", q) == []
    one("SELECT queue_set_limit(%s, 'lim', NULL)", q)
    # rates: a kind's and the queue's, a kind held back, every reserve path through the rate
    rq = "hj.rated"
    one("SELECT queue_create(%s)", rq)
    one("SELECT queue_set_rate(%s, 'rk', 1, interval '1 minute')", rq)
    one("SELECT queue_set_rate(%s, NULL, 10, interval '1 minute')", rq)
    for key, kind in (("rk1", "rk"), ("rk2", "rk"), ("ro1", "rother"), ("ro2", "rother"), ("ro3", "rother")):
        assert one("SELECT queue_push(%s, %s, %s, '1')", rq, key, kind)[0]
    rows = many(
        "SELECT p_key, p_kind, token FROM queue_reserve(%s, 'w', NULL, 10, ARRAY['rk', 'rother'])", rq
    )
    assert sorted(r[0] for r in rows) == ["rk1", "ro1", "ro2", "ro3"]
    for row in rows:
        one("SELECT queue_commit(%s, %s, %s, %s)", rq, *row)
    assert one("SELECT * FROM queue_next_scheduled_at(%s, ARRAY['rk'])", rq)[0] is not None
    assert many("SELECT * FROM queue_pop(%s, 1)", rq) == []
    assert one("SELECT queue_push(%s, 'ro4', 'rother', '1')", rq)[0]
    # nothing to commit and the kind held back: the one row of NULLs
    assert many(
        "SELECT * FROM queue_commit_reserve(%s, NULL, NULL, NULL, 'w', NULL, 2, ARRAY['rk'])", rq
    ) == [(None,) * 10]
    assert [r[0] for r in many("SELECT p_key FROM queue_pop(%s, 5)", rq)] == ["ro4"]
    assert len(many("SELECT * FROM queue_rates(%s)", rq)) == 2
    assert many("SELECT * FROM queue_rates(NULL)")
    one("SELECT queue_set_rate(%s, 'rk', NULL, NULL)", rq)
    one("SELECT queue_set_rate(%s, NULL, NULL, NULL)", rq)
    assert [r[0] for r in many("SELECT p_key FROM queue_pop(%s, 5)", rq)] == ["rk2"]
    # group limits: the queue's default and a group's own, two heads of one group live at once
    one("SELECT queue_set_group_limit(%s, NULL, 2)", rq)
    one("SELECT queue_set_group_limit(%s, 'g', 3)", rq)
    for key in ("g1", "g2", "g3", "g4"):
        assert one("SELECT queue_push_grouped(%s, 'g', %s, 'gk', '1')", rq, key)[0]
    rows = many("SELECT p_key, p_kind, token FROM queue_reserve(%s, 'w', NULL, 10)", rq)
    assert [r[0] for r in rows] == ["g1", "g2", "g3"]
    one("SELECT queue_commit(%s, %s, %s, %s)", rq, *rows[0])
    [group] = many("SELECT * FROM queue_groups(%s)", rq)
    assert group[0] == "g" and tuple(group[-2:]) == (3, 3)
    one("SELECT queue_set_group_limit(%s, 'g', NULL)", rq)
    one("SELECT queue_set_group_limit(%s, NULL, NULL)", rq)
    # an expired last delivery is dead-lettered by the next reserve
    assert one("SELECT queue_push(%s, 'exp', 'expiring', '1')", q)[0]
    for _ in range(2):
        assert many("SELECT p_key FROM queue_reserve(%s, 'w', interval '20 ms', 1, ARRAY['expiring'])", q)
        time.sleep(0.05)
    assert many("SELECT p_key FROM queue_reserve(%s, 'w', NULL, 1, ARRAY['expiring'])", q) == []
    assert one("SELECT last_error FROM queue_message(%s, 'exp', 'expiring')", dlq)[0]
    assert not one("SELECT queue_wait(%s, ARRAY['nothing'], interval '10 ms', interval '5 ms')", q)[0]
    # commit_reserve committing what it got
    one("SELECT queue_push(%s, 'cr1', 'cr', '1')", q)
    one("SELECT queue_push(%s, 'cr2', 'cr', '1')", q)
    [row] = many("SELECT * FROM queue_commit_reserve(%s, NULL, NULL, NULL, 'w', NULL, 1, ARRAY['cr'])", q)
    [row] = many(
        "SELECT * FROM queue_commit_reserve(%s, %s, %s, %s, 'w', NULL, 1, ARRAY['cr'])",
        q,
        row[1],
        row[2],
        row[4],
    )
    assert row[0] and row[1] is not None
    # schedules, with an occurrence committed (the next one is pushed)
    one("SELECT queue_schedule_every(%s, 'tick', 'sched', '{}', interval '1 second')", q)
    one("SELECT queue_schedule_cron(%s, 'cron', 'sched', '{}', '*/5 1-3 * * 1-5')", q)
    one("SELECT queue_schedule_cron(%s, 'cron2', 'sched', '{}', '0 0 1,15 * 0')", q)
    assert len(many("SELECT * FROM queue_schedules(%s)", q)) == 3
    time.sleep(1.1)
    [(sk, skd, st)] = many(
        "SELECT p_key, p_kind, token FROM queue_reserve(%s, 'w', NULL, 1, ARRAY['sched'])", q
    )
    assert one("SELECT queue_commit(%s, %s, %s, %s)", q, sk, skd, st)[0]
    assert one("SELECT queue_unschedule(%s, 'tick', 'sched')", q)[0]
    assert one("SELECT queue_unschedule(%s, 'cron2', 'sched')", q)[0]
    assert one("SELECT queue_unschedule(%s, 'cron', 'sched')", q)[0]
    # workers
    wid, secret = one("SELECT worker_id, secret FROM queue_worker_register('hj', 'host', 1, ARRAY['hj.q'])")
    assert one("SELECT queue_worker_heartbeat(%s, %s)", wid, secret)[0]
    assert not one("SELECT queue_worker_heartbeat(%s, %s)", wid, uuid.uuid4())[0]
    assert many("SELECT * FROM queue_workers()")
    one("SELECT queue_release_dead_workers(interval '1 hour')")
    assert one("SELECT queue_worker_deregister(%s, %s)", wid, secret)[0]
    wid, secret = one("SELECT worker_id, secret FROM queue_worker_register('hj', NULL, NULL, NULL)")
    one("SELECT queue_push(%s, 'wk', 'kind', '1')", q)
    assert many("SELECT p_key FROM queue_reserve(%s, %s, NULL, 1, ARRAY['kind'])", q, f"hj#{wid}")
    # silent for an hour (queue_release_dead_workers takes 30 s at the least): the installing role
    # moves the heartbeat back, with the built-in operators named (nothing planted is called here)
    role = one("SELECT current_user")[0]
    conn.execute("RESET ROLE")
    conn.execute(
        "UPDATE pyqueue_worker SET heartbeat_at = heartbeat_at OPERATOR(pg_catalog.-) interval '1 hour' "
        "WHERE worker_id OPERATOR(pg_catalog.=) %s::bigint",
        (wid,),
    )
    conn.execute(f'SET ROLE "{role}"')
    assert one("SELECT queue_release_dead_workers(interval '1 minute')")[0] == 1
    # bulk ingest
    conn.execute(
        "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload) VALUES (%s, 'i1', 'kind', '1')", (q,)
    )
    one("SELECT * FROM queue_ingest_flush(%s)", q)
    with pytest.raises(psycopg.Error, match="pyqueue:"):
        with conn.transaction():
            conn.execute(
                "INSERT INTO queue_ingest (queue_name, p_key, p_kind, payload, priority) "
                "VALUES (%s, 'i2', 'kind', '1', 2.5)",
                (q,),
            )
    # snooze, give up (now, into the dead-letter queue), release; the per-queue limits on
    # reservations and payloads
    one("SELECT queue_set_max_reservation(%s, interval '1 day')", q)
    one("SELECT queue_set_max_payload(%s, 65536)", q)
    one("SELECT queue_push(%s, 'sn', 'gu', '1')", q)
    one("SELECT queue_push(%s, 'gu', 'gu', '1')", q)
    rows = many(
        "SELECT p_key, p_kind, token FROM queue_reserve(%s, 'w', interval '1 hour', 2, ARRAY['gu'])", q
    )
    held = {r[0]: r for r in rows}
    assert one("SELECT queue_snooze(%s, %s, %s, %s::text, NULL)", q, *held["sn"])[0]
    assert one("SELECT queue_give_up(%s, %s, %s, %s::text, 'hopeless')", q, *held["gu"])[0] == "dead_lettered"
    assert one("SELECT last_error FROM queue_message(%s, 'gu', 'gu')", dlq)[0] == "hopeless"
    assert many("SELECT p_key FROM queue_reserve(%s, 'w', NULL, 1, ARRAY['gu'])", q)
    assert one("SELECT queue_release(%s, 'w')", q)[0] >= 1
    # results: retention, progress, renew, commit with a result, the holder's cancel, cancel, the
    # batch commit with results, reads and waits, a pop and a purge on a queue that keeps results
    res = "hj.results"
    one("SELECT queue_create(%s)", res)
    one("SELECT queue_set_result_retention(%s, interval '1 day')", res)
    one(
        "SELECT queue_push_batch(%s, ARRAY['r1','r2','r3','r4','r5'], ARRAY['r','r','r','r','r'], "
        "ARRAY['1','2','3','4','5']::jsonb[])",
        res,
    )
    held = {
        r[0]: r for r in many("SELECT p_key, p_kind, token::text FROM queue_reserve(%s, 'w', NULL, 4)", res)
    }
    assert one("SELECT queue_set_progress(%s, %s, %s, %s, '{\"done\": 1}')", res, *held["r1"])[0]
    token, _ = one(
        "SELECT token::text, cancel_requested FROM queue_renew(%s, %s, %s, %s, NULL)", res, *held["r1"]
    )
    assert one("SELECT queue_commit_result(%s, 'r1', 'r', %s, '{\"ok\": true}')", res, token)[0]
    assert one("SELECT queue_cancel(%s, %s, %s)", res, *held["r2"][:2])[0] == "requested"
    assert one("SELECT queue_cancel_held(%s, %s, %s, %s)", res, *held["r2"])[0]
    assert (
        one(
            "SELECT queue_commit_result_batch(%s, ARRAY['r3','r4'], ARRAY['r','r'], ARRAY[%s, %s], "
            "ARRAY['1', NULL]::jsonb[])",
            res,
            held["r3"][2],
            held["r4"][2],
        )[0]
        == 2
    )
    assert one("SELECT state FROM queue_result(%s, 'r1', 'r')", res)[0] == "succeeded"
    assert one("SELECT state FROM queue_result_wait(%s, 'r2', 'r', interval '10 ms')", res)[0] == "cancelled"
    one("SELECT queue_result_channel(%s)", res)
    assert many("SELECT p_key FROM queue_pop(%s, 1)", res)
    one("SELECT queue_reset_setting(%s, 'result_retention')", res)
    one("SELECT queue_purge_history(%s, 10)", res)
    # headers: every *_with_headers push, and the reads that return them
    one("SELECT queue_bind('hj.topic', %s)", other)
    assert one("SELECT queue_push_with_headers(%s, 'h1', 'h', '1', NULL, NULL, '{\"t\": 1}')", other)[0]
    assert (
        one(
            "SELECT queue_push_batch_with_headers(%s, ARRAY['h2','h3'], ARRAY['h','h'], ARRAY['1','2']::jsonb[], "
            "NULL, NULL, ARRAY['{\"t\": 2}', NULL]::jsonb[])",
            other,
        )[0]
        == 2
    )
    assert one("SELECT queue_push_grouped_with_headers(%s, 'g', 'h4', 'h', '1', NULL, NULL, '{}')", other)[0]
    assert (
        one(
            "SELECT queue_push_batch_grouped_with_headers(%s, ARRAY['g', NULL], ARRAY['h5','h6'], ARRAY['h','h'], "
            "ARRAY['1','2']::jsonb[], NULL, NULL, NULL)",
            other,
        )[0]
        == 2
    )
    assert (
        one("SELECT queue_publish_with_headers('hj.topic', 'h7', 'h', '1', NULL, NULL, '{\"t\": 7}')")[0] == 1
    )
    assert (
        one(
            "SELECT queue_publish_batch_with_headers(ARRAY['hj.topic'], ARRAY['h8'], ARRAY['h'], "
            "ARRAY['1']::jsonb[], NULL, NULL, ARRAY['{\"t\": 8}']::jsonb[])"
        )[0]
        == 1
    )
    with pytest.raises(psycopg.Error, match="headers must be a JSON object"):
        with conn.transaction():
            conn.execute("SELECT queue_push_with_headers(%s, 'h9', 'h', '1', NULL, NULL, '[1]')", (other,))
    assert many("SELECT headers FROM queue_messages(%s, NULL, 'h', NULL, NULL, NULL)", other)
    assert one("SELECT headers FROM queue_message(%s, 'h1', 'h')", other)[0] == {"t": 1}
    assert one("SELECT headers FROM queue_reserve(%s, 'w', NULL, 1, ARRAY['h'])", other)[0] == {"t": 1}
    assert many("SELECT * FROM queue_groups(%s, NULL)", other)
    one("SELECT queue_drop(%s)", res)
    one("SELECT queue_drop(%s)", other)


@pytest.mark.slow
def test_lookalikes_planted_after_install_are_never_called(dialect, installed_database):
    dsn = installed_database("hijack")
    with _roles(dsn, "intruder") as (admin, (intruder,)):
        admin.execute("CREATE TABLE public.hijack_calls (what text)")
        admin.execute("CREATE SEQUENCE public.hijack_calls_seq")
        admin.execute(f'ALTER TABLE public.hijack_calls OWNER TO "{intruder}"')
        admin.execute(f'ALTER SEQUENCE public.hijack_calls_seq OWNER TO "{intruder}"')
        # A role that can call everything and, since the install, CREATE in the schema.
        admin.execute(f'GRANT CREATE, USAGE ON SCHEMA public TO "{intruder}"')
        routines = [
            r[0]
            for r in admin.execute(
                "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = 'public' AND p.proname LIKE 'queue\\_%'"
            )
        ]
        for routine in routines:
            admin.execute(f'GRANT EXECUTE ON FUNCTION {routine} TO "{intruder}"')
        admin.execute(f'GRANT INSERT ON queue_ingest TO "{intruder}"')
        admin.execute(f'SET ROLE "{intruder}"')
        planted = _plant(admin, "public")
        assert planted > 100
        # the look-alikes work when called directly: the probe can see a call
        admin.execute("SELECT public.cardinality(ARRAY['x']::text[])")
        admin.execute("RESET ROLE")
        seen, _ = _calls(admin)
        assert seen == 1
        admin.execute("TRUNCATE public.hijack_calls")
        admin.execute(f'SET ROLE "{intruder}"')
        try:
            _exercise(admin)
        finally:
            admin.execute("RESET ROLE")
        after, names = _calls(admin)
        assert (after - seen, names) == (0, []), (
            f"look-alikes of the intruder ran inside the routines: {names}"
        )

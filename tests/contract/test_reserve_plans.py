"""Plan guards: the queries that find messages must read their index.

On a 100k-message queue, EXPLAIN the statements that find messages
(PostgreSQL: the steps of pyqueue__ready_tids behind queue_reserve,
queue_commit_reserve and queue_pop, the read by time of pyqueue__due_tids,
queue_next_scheduled_at's probe, queue_commit_batch's lookup and the
probe of queue_push_batch's keys; MySQL: the reserve's page and the fast path
of queue_commit_reserve) and fail on a sequential scan, on a sort where none
is expected, or on a plan that does not read the statement's index.
PostgreSQL explains the statements as PL/pgSQL runs them (prepared with
parameters, custom and generic plans); MySQL/MariaDB cannot EXPLAIN inside a
procedure, so the same statements are explained with the values inlined.
The second test shows the guard can fail: without the index it must object.
"""

from __future__ import annotations

import json
import re

import pytest

from pyqueue_sql import dialects

ROWS = 100_000
QUEUE = "plan.q"

# 0..99999 from five cross-joined digit tables (no generate_series on MySQL).
_DIGITS = (
    "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 "
    "UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
)
_SEQ = (
    f"SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS i "
    f"FROM {_DIGITS} a, {_DIGITS} b, {_DIGITS} c, {_DIGITS} e, {_DIGITS} f"
)

READY_IDX = "pyqueue_message_ready_idx"
MY_READY_IDX = "pyqueue_message_order_idx"  # MySQL/MariaDB: (queue_name, priority, ready_at, id)
DUE_IDX = "pyqueue_message_due_idx"
PKEY = "pyqueue_message_pkey"

# A batch of 100, as a client commits it: with a few elements, probing each looks cheap to the
# planner whatever the statistics say.
_BATCH_KEYS = ", ".join(f"'k{i}'" for i in range(1, 101))
_BATCH_TOKENS = ", ".join(["gen_random_uuid()"] * 100)

# name: (statement, parameter types, arguments, the index it must read, whether
# it may sort, the routine that runs it: its planner settings apply)
PG_STATEMENTS = {
    # pyqueue__ready_tids, one priority's step (queue_reserve, queue_commit_reserve, queue_pop)
    "ready_step": (
        "SELECT m.ctid FROM pyqueue_message m "
        "WHERE m.queue_name = $1 AND m.priority = $2 AND m.scheduled_at > '-infinity' "
        "AND (m.scheduled_at, m.id) >= ($6, $7) AND (m.scheduled_at, m.id) <= ($3, 9223372036854775807) "
        "AND ($4::text[] IS NULL OR m.p_kind = ANY ($4::text[])) "
        "ORDER BY m.scheduled_at, m.id LIMIT $5 FOR UPDATE SKIP LOCKED",
        "(text, integer, timestamptz, text[], integer, timestamptz, bigint)",
        f"('{QUEUE}', 0, clock_timestamp(), NULL, 10, '-infinity', 0)",
        READY_IDX,
        False,
        "pyqueue__ready_tids",
    ),
    # pyqueue__ready_tids, a batch reserve's plain reads for its session's mark: the first of up to
    # n candidates from the mark and how many, and the first candidate from the bound
    "mark_candidates": (
        "SELECT c.scheduled_at, c.id, count(*) OVER () FROM (SELECT m.scheduled_at, m.id "
        "FROM pyqueue_message m WHERE m.queue_name = $1 AND m.priority = $2 AND m.scheduled_at > '-infinity' "
        "AND (m.scheduled_at, m.id) >= ($4, $5) AND (m.scheduled_at, m.id) <= ($3, 9223372036854775807) "
        "ORDER BY m.scheduled_at, m.id LIMIT $6) AS c LIMIT 1",
        "(text, integer, timestamptz, timestamptz, bigint, integer)",
        f"('{QUEUE}', 0, clock_timestamp(), '-infinity', 0, 10)",
        READY_IDX,
        False,
        "pyqueue__ready_tids",
    ),
    "mark_first": (
        "SELECT m.scheduled_at, m.id FROM pyqueue_message m "
        "WHERE m.queue_name = $1 AND m.priority = $2 AND m.scheduled_at > '-infinity' "
        "AND (m.scheduled_at, m.id) >= ($4, $5) AND (m.scheduled_at, m.id) <= ($3, 9223372036854775807) "
        "ORDER BY m.scheduled_at, m.id LIMIT 1",
        "(text, integer, timestamptz, timestamptz, bigint)",
        f"('{QUEUE}', 0, clock_timestamp(), '-infinity', 0)",
        READY_IDX,
        False,
        "pyqueue__ready_tids",
    ),
    # pyqueue__limited_tids, one priority's candidates on a queue with limits
    "limited_step": (
        "SELECT m.ctid, m.id, m.p_key, m.p_kind, m.attempts FROM pyqueue_message m "
        "WHERE m.queue_name = $1 AND m.priority = $2 AND m.scheduled_at > '-infinity' "
        "AND (m.scheduled_at, m.id) >= ($6, $7) AND (m.scheduled_at, m.id) <= ($3, 9223372036854775807) "
        "AND ($4::text[] IS NULL OR m.p_kind = ANY ($4::text[])) "
        "AND (m.p_kind <> ALL ($8::text[]) OR m.attempts >= $9) AND m.id <> ALL ($10::bigint[]) "
        "ORDER BY m.scheduled_at, m.id LIMIT $5 FOR UPDATE SKIP LOCKED",
        "(text, integer, timestamptz, text[], integer, timestamptz, bigint, text[], integer, bigint[])",
        f"('{QUEUE}', 0, clock_timestamp(), NULL, 10, '-infinity', 0, '{{}}', 1, '{{}}')",
        READY_IDX,
        False,
        "pyqueue__limited_tids",
    ),
    # pyqueue__ready_tids, the walk from one priority to the next
    "top_priority": (
        "SELECT m.priority FROM pyqueue_message m WHERE m.queue_name = $1 AND m.scheduled_at > '-infinity' "
        "ORDER BY m.priority DESC LIMIT 1",
        "(text)",
        f"('{QUEUE}')",
        READY_IDX,
        False,
        "pyqueue__ready_tids",
    ),
    "next_priority": (
        "SELECT m.priority FROM pyqueue_message m WHERE m.queue_name = $1 AND m.priority < $2 AND m.scheduled_at > '-infinity' "
        "ORDER BY m.priority DESC LIMIT 1",
        "(text, integer)",
        f"('{QUEUE}', 1)",
        READY_IDX,
        False,
        "pyqueue__ready_tids",
    ),
    # pyqueue__due_tids: the ready rows by time once the walk stops (sorted by design)
    "due_rows": (
        "SELECT m.ctid FROM pyqueue_message m "
        "WHERE m.queue_name = $1 AND m.scheduled_at < 'infinity' AND (m.scheduled_at, m.id) >= ($6, $7) "
        "AND m.scheduled_at <= $2 AND m.priority::bigint <= $3::bigint "
        "AND ($4::text[] IS NULL OR m.p_kind = ANY ($4::text[])) "
        "ORDER BY m.priority DESC, m.scheduled_at, m.id LIMIT $5 FOR UPDATE SKIP LOCKED",
        "(text, timestamptz, integer, text[], integer, timestamptz, bigint)",
        f"('{QUEUE}', clock_timestamp(), 0, NULL, 10, '-infinity', 0)",
        DUE_IDX,
        True,
        "pyqueue__due_tids",
    ),
    # pyqueue__ready_from_advance: the first live message by (scheduled_at, id) past the bound
    "bound_first": (
        "SELECT m.scheduled_at, m.id FROM pyqueue_message m WHERE m.queue_name = $1 AND m.scheduled_at < 'infinity' "
        "AND (m.scheduled_at, m.id) >= ($2, $3) AND m.scheduled_at < $4 ORDER BY m.scheduled_at, m.id LIMIT 1",
        "(text, timestamptz, bigint, timestamptz)",
        f"('{QUEUE}', '-infinity', 0, clock_timestamp())",
        DUE_IDX,
        False,
        "pyqueue__ready_from_advance",
    ),
    # queue_next_scheduled_at (and queue_wait)
    "next_scheduled_at": (
        "SELECT m.scheduled_at FROM pyqueue_message m WHERE m.queue_name = $1 AND m.scheduled_at < 'infinity' "
        "AND ($2::text[] IS NULL OR m.p_kind = ANY ($2::text[])) ORDER BY m.scheduled_at LIMIT 1",
        "(text, text[])",
        f"('{QUEUE}', NULL)",
        DUE_IDX,
        False,
        "queue_next_scheduled_at",
    ),
    # queue_commit (and queue_remove, queue_message): one message by its key, a probe of the
    # primary key whatever the statistics say (the indexes by time are partial, see schema.sql)
    "commit": (
        "DELETE FROM pyqueue_message WHERE queue_name = $1 AND p_key = $2 AND p_kind = $3 "
        "AND reserve_token = $4 RETURNING group_key",
        "(text, text, text, uuid)",
        f"('{QUEUE}', 'k5', 'job', gen_random_uuid())",
        PKEY,
        False,
        "queue_commit",
    ),
    # queue_rollback, queue_fail, queue_snooze, queue_give_up: the reservation locked by its key
    "give_back": (
        "SELECT m.attempts FROM pyqueue_message m WHERE m.queue_name = $1 AND m.p_key = $2 "
        "AND m.p_kind = $3 AND m.reserve_token = $4 FOR UPDATE",
        "(text, text, text, uuid)",
        f"('{QUEUE}', 'k5', 'job', gen_random_uuid())",
        PKEY,
        False,
        "pyqueue__give_back",
    ),
    # queue_commit_batch: the held reservations, one primary-key probe per element, driven by
    # the batch sorted by key (the outer side of the join: rows are locked in key order)
    "commit_batch": (
        "DELETE FROM pyqueue_message m USING (SELECT $1 AS q, u.k, u.kd, u.tk FROM ROWS FROM "
        "(unnest($2::text[]), unnest($3::text[]), unnest($4::uuid[])) AS u (k, kd, tk) ORDER BY u.k, u.kd) AS b "
        "WHERE m.queue_name = b.q AND m.p_key = b.k AND m.p_kind = b.kd AND m.reserve_token = b.tk",
        "(text, text[], text[], uuid[])",
        f"('{QUEUE}', ARRAY[{_BATCH_KEYS}], array_fill('job'::text, ARRAY[100]), ARRAY[{_BATCH_TOKENS}])",
        PKEY,
        True,
        "pyqueue__delete_held",
    ),
    # queue_push_batch as its transaction's first write, after a live key refused its plain INSERT:
    # the batch's keys that are not live (pyqueue__batch_rows's probe, under its planner settings),
    # one primary-key probe per element (as a join, the generic plan read the queue's whole range)
    "push_batch_absent": (
        "SELECT DISTINCT ON (b.k, b.kd) b.k, b.kd FROM ROWS FROM (unnest($2::text[]), unnest($3::text[])) "
        "WITH ORDINALITY AS b (k, kd, ord) WHERE NOT EXISTS (SELECT 1 FROM pyqueue_message m "
        "WHERE m.queue_name::text = $1 AND m.p_key::text = b.k AND m.p_kind::text = b.kd OFFSET 0) "
        "ORDER BY b.k, b.kd, b.ord",
        "(text, text[], text[])",
        f"('{QUEUE}', ARRAY[{_BATCH_KEYS}], array_fill('job'::text, ARRAY[100]))",
        PKEY,
        True,
        "pyqueue__batch_rows",
    ),
}

# (the reserve order by ready_at, read on pyqueue_message_order_idx; each row checked scheduled_at <= now. The
# routines FORCE that index; the copies leave the choice to the optimizer, which must make it on its own.)
MY_STATEMENTS = {
    # queue_reserve's cursor c_ready and queue_pop's candidates
    "ready_page": (
        "SELECT m.id, m.ready_at FROM pyqueue_message m "
        f"WHERE m.queue_name = '{QUEUE}' AND m.priority = 0 AND m.ready_at <= UTC_TIMESTAMP(6) "
        "AND m.scheduled_at <= UTC_TIMESTAMP(6) "
        "ORDER BY m.ready_at, m.id LIMIT 17"
    ),
    # queue_commit_reserve's fast path
    "commit_reserve": (
        "SELECT m.id, m.ready_at FROM pyqueue_message m "
        f"WHERE m.queue_name = '{QUEUE}' AND m.priority = 0 "
        "AND m.ready_at <= UTC_TIMESTAMP(6) AND m.scheduled_at <= UTC_TIMESTAMP(6) "
        "AND (NULL IS NULL OR m.ready_at > NULL OR (m.ready_at = NULL AND m.id > NULL)) "
        "ORDER BY m.ready_at, m.id LIMIT 1"
    ),
    "top_priority": f"SELECT MAX(m.priority), MIN(m.priority) FROM pyqueue_message m WHERE m.queue_name = '{QUEUE}'",
}


def _run(conn, sql):
    cur = conn.cursor()
    cur.execute(sql)
    rows = list(cur.fetchall()) if cur.description else []
    cols = [d[0] for d in cur.description] if cur.description else []
    cur.close()
    return rows, cols


def _fill(dialect: str, url: str, analyze: bool = True, rows: int = ROWS):
    """A database with the schema (installed_database) and one queue of 100k ready messages; returns a raw connection.
    analyze=False (PostgreSQL): the table is never analyzed, as after a burst that autovacuum has
    not caught up with, and the planner has only its guesses."""
    conn = dialects.for_name(dialect).connect(url)
    if dialect == "postgresql":
        _run(conn, f"SELECT queue_create('{QUEUE}')")
        if not analyze:
            _run(conn, "ALTER TABLE pyqueue_message SET (autovacuum_enabled = off)")
        _run(
            conn,
            "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, priority, scheduled_at, "
            "scheduled_at_initially, created_at) "
            f"SELECT '{QUEUE}', 'k' || i, 'job', '{{}}', 0, now() - interval '1 hour' + i * interval '1 ms', "
            f"now(), now() FROM generate_series(1, {rows}) AS i",
        )
        if analyze:
            _run(conn, "ANALYZE pyqueue_message")
    else:
        _run(conn, f"CALL queue_create('{QUEUE}', NULL, NULL, NULL, NULL)")
        _run(
            conn,
            "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, priority, scheduled_at, "
            "scheduled_at_initially, created_at, ready_at) "
            f"SELECT '{QUEUE}', CONCAT('k', s.i), 'job', '{{}}', 0, "
            "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL s.i * 1000 MICROSECOND, "
            "UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), "
            f"UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL s.i * 1000 MICROSECOND FROM ({_SEQ}) AS s",
        )
        _run(conn, "ANALYZE TABLE pyqueue_message")
    assert _run(conn, "SELECT COUNT(*) FROM pyqueue_message")[0][0][0] == rows
    return conn


def _settings_of(conn, routine: str) -> list[str]:
    """The planner settings a PostgreSQL routine carries (its SET clauses but search_path), as
    "name = value"; the routine must exist, so a renamed one fails here instead of going unchecked."""
    # the token routines' uuid signature is a plain SQL function calling the text one: the text one
    rows, _ = _run(
        conn,
        f"SELECT coalesce(proconfig, '{{}}') FROM pg_proc WHERE proname = '{routine}'"
        " AND NOT 'uuid'::regtype = ANY (proargtypes::oid[])",
    )
    assert len(rows) == 1, f"no single routine named {routine}"
    return [
        "{} = {}".format(*item.split("=", 1)) for item in rows[0][0] if not item.startswith("search_path=")
    ]


def _pg_plan_problem(name: str, plan: str) -> str | None:
    """What is wrong with one plan of PG_STATEMENTS[name], or None."""
    index, may_sort = PG_STATEMENTS[name][3:5]
    if "Seq Scan" in plan or "Bitmap" in plan:
        return f"scans the table:\n{plan}"
    if "Sort" in plan and not may_sort:
        return f"sorts:\n{plan}"
    if index not in plan:
        return f"does not use {index}:\n{plan}"
    if name == "commit_batch" and not 0 <= plan.find("Sort Key") < plan.find(index):
        return f"is not driven by the sorted batch:\n{plan}"
    if name in ("commit_batch", "push_batch_absent") and not re.search(
        rf"{index}.*\n\s*Index Cond: [^\n]*p_key", plan
    ):
        return f"does not probe the key of each element:\n{plan}"
    if name in ("ready_step", "limited_step", "due_rows", "bound_first") and not re.search(
        rf"{index}.*\n\s*Index Cond: [^\n]*ROW\(scheduled_at, id\) >=", plan
    ):
        return f"does not start its range at the bound (scheduled_at, id):\n{plan}"
    return None


def plan_problems(dialect: str, conn, queue: str = QUEUE) -> list[str]:
    """What is wrong with the reserve's plans: [] when every statement reads the ready index.
    queue: the queue the statements look at."""
    problems = []
    if dialect == "postgresql":
        for name, (sql, types, args, _index, _may_sort, routine) in PG_STATEMENTS.items():
            args = args.replace(f"'{QUEUE}'", f"'{queue}'")
            _run(conn, "BEGIN")
            try:
                for setting in _settings_of(conn, routine):
                    _run(conn, f"SET LOCAL {setting}")
                _run(conn, f"PREPARE plan_guard_{name} {types} AS {sql}")
                for mode in ("force_custom_plan", "force_generic_plan"):
                    _run(conn, f"SET LOCAL plan_cache_mode = {mode}")
                    rows, _ = _run(conn, f"EXPLAIN EXECUTE plan_guard_{name} {args}")
                    problem = _pg_plan_problem(name, "\n".join(r[0] for r in rows))
                    if problem:
                        problems.append(f"{name} ({mode}) {problem}")
            finally:
                _run(conn, "ROLLBACK")
                _run(conn, "DEALLOCATE ALL")
    else:
        for name, sql in MY_STATEMENTS.items():
            sql = sql.replace(f"'{QUEUE}'", f"'{queue}'")
            rows, cols = _run(conn, f"EXPLAIN FORMAT=JSON {sql}")
            plan = rows[0][0]
            tree = json.loads(plan)
            text = json.dumps(tree)
            if '"access_type": "ALL"' in text:
                problems.append(f"{name} scans the table: {plan}")
            elif "filesort" in text:
                problems.append(f"{name} sorts (filesort): {plan}")
            elif MY_READY_IDX not in text and "Select tables optimized away" not in text:
                problems.append(f"{name} does not use {MY_READY_IDX}: {plan}")
    return problems


@pytest.fixture
def filled(dialect, installed_database):
    conn = _fill(dialect, installed_database("plans"))
    yield conn
    conn.close()


@pytest.mark.slow
def test_reserve_reads_the_ready_index_on_100k_messages_and_the_guard_fails_without_it(dialect, filled):
    """The guard finds no problem with the ready index there, and finds the reserve's statements
    that need it once it is dropped (the guard can fail). One fill of 100k messages for both."""
    assert plan_problems(dialect, filled) == []
    if dialect == "postgresql":
        _run(filled, "DROP INDEX pyqueue_message_ready_idx")
        _run(filled, "ANALYZE pyqueue_message")
    else:
        # InnoDB needs an index for the queue_name foreign key: keep one without the ready columns.
        _run(
            filled,
            f"ALTER TABLE pyqueue_message ADD INDEX plan_guard_fk (queue_name), DROP INDEX {MY_READY_IDX}",
        )
        _run(filled, "ANALYZE TABLE pyqueue_message")
    problems = plan_problems(dialect, filled)
    names = {p.split(" ", 1)[0] for p in problems}
    expected = (
        {"ready_step", "next_priority"} if dialect == "postgresql" else {"ready_page", "commit_reserve"}
    )
    assert expected <= names, problems


def _nested_plans(conn, sql: str) -> list[str]:
    """Runs sql with auto_explain on for the statements inside the routines it calls; returns the
    plans they ran (text format, each starting with its query text)."""
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    for setting in (
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_level = notice",
    ):
        _run(conn, setting)
    _run(conn, sql)
    _run(conn, "SET auto_explain.log_min_duration = -1")
    return [p for p in plans if "Query Text:" in p]


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_plans_hold_and_the_routines_run_them_on_a_table_never_analyzed(dialect, installed_database):
    """The guard's plans hold on 100k messages never analyzed. The guard explains copies of the
    statements; the routines themselves are caught too (auto_explain of the statements they run):
    queue_commit_batch of 100 reserved messages, and queue_next_scheduled_at under custom and
    generic plans. One fill for both."""
    conn = _fill(dialect, installed_database("plans"), analyze=False)
    try:
        assert _run(conn, "SELECT count(*) FROM pg_stats WHERE tablename = 'pyqueue_message'")[0][0][0] == 0
        assert plan_problems(dialect, conn) == []
        rows, _ = _run(conn, f"SELECT p_key, p_kind, token FROM queue_reserve('{QUEUE}', 'w', NULL, 100)")
        assert len(rows) == 100
        keys, kinds, tokens = (", ".join(f"'{r[i]}'" for r in rows) for i in range(3))
        commit = (
            f"SELECT queue_commit_batch('{QUEUE}', ARRAY[{keys}], ARRAY[{kinds}], ARRAY[{tokens}]::text[])"
        )
        deletes = [p for p in _nested_plans(conn, commit) if "Query Text: DELETE FROM pyqueue_message" in p]
        assert len(deletes) == 1, deletes
        assert _pg_plan_problem("commit_batch", deletes[0]) is None, deletes[0]
        assert _run(conn, f"SELECT count(*) FROM pyqueue_message WHERE p_key IN ({keys})")[0][0][0] == 0
        for mode in ("force_custom_plan", "force_generic_plan"):
            _run(conn, f"SET plan_cache_mode = {mode}")
            probes = [
                p
                for p in _nested_plans(conn, f"SELECT * FROM queue_next_scheduled_at('{QUEUE}')")
                if "Query Text: SELECT m.scheduled_at" in p
            ]
            assert len(probes) == 1, probes
            assert _pg_plan_problem("next_scheduled_at", probes[0]) is None, (mode, probes[0])
    finally:
        conn.close()


@pytest.mark.only_dialect("postgresql")
def test_a_batch_push_probes_the_keys_after_its_first_call_met_an_empty_table(dialect, installed_database):
    """A queue's first batch meets an empty table, just analyzed (as bench's fresh databases and
    a new application are), and the generic plan it caches is the session's from then on: with a
    sequential scan cheapest there, every later batch read the whole table once per key (0.05x
    the calls per second at 20,000 messages). The probe of queue_push_batch's keys must read the
    primary key however the table looked when it was planned. The probe is pyqueue__batch_rows's
    statement, which the batch's plain INSERT runs first without probing (a live key then
    refuses it), and the probed INSERT again: both executions read the primary key."""
    conn = dialects.for_name(dialect).connect(installed_database("plans"))
    try:
        _run(conn, f"SELECT queue_create('{QUEUE}')")
        _run(conn, "ANALYZE pyqueue_message")
        payloads = "array_fill('{}'::jsonb, ARRAY[100])"
        jobs = "array_fill('job'::text, ARRAY[100])"
        _run(conn, f"SELECT queue_push_batch('{QUEUE}', ARRAY['first'], ARRAY['job'], ARRAY['{{}}'::jsonb])")
        _run(
            conn,
            f"SELECT queue_push_batch('{QUEUE}', ARRAY(SELECT 'k' || i FROM generate_series(1, 100) i), {jobs}, {payloads})",
        )
        inserts = [
            p
            for p in _nested_plans(
                conn, f"SELECT queue_push_batch('{QUEUE}', ARRAY[{_BATCH_KEYS}], {jobs}, {payloads})"
            )
            if "Query Text: WITH batch AS MATERIALIZED" in p and "NOT EXISTS" in p
        ]
        assert len(inserts) == 2, inserts
        for plan in inserts:
            assert _pg_plan_problem("push_batch_absent", plan) is None, plan
    finally:
        conn.close()


@pytest.mark.only_dialect("postgresql")
def test_the_message_path_runs_generic_plans_from_its_first_call(dialect, installed_database):
    """The routines of the message path run with plan_cache_mode = force_generic_plan (see the top
    of routines.sql): their statements are planned once per session with parameters, the plans
    the guards above check in that mode. A custom plan would show the queue's name as a literal;
    PL/pgSQL makes custom plans for a statement's first five runs by default, so this first call
    in a new session tells them apart."""
    url = installed_database("plans_generic")
    setup = dialects.for_name(dialect).connect(url)
    try:
        _run(setup, f"SELECT queue_create('{QUEUE}')")
        _run(setup, f"SELECT queue_push('{QUEUE}', 'k1', 'job', '{{}}')")
    finally:
        setup.close()
    conn = dialects.for_name(dialect).connect(url)
    try:
        plans = _nested_plans(conn, f"SELECT p_key, token FROM queue_reserve('{QUEUE}', 'w', NULL, 1)")
        walks = [p for p in plans if "Query Text: SELECT pg_catalog.array_agg(r.tid)" in p]
        assert walks, plans
        ((key, token),), _ = _run(conn, "SELECT 'k1', reserve_token FROM pyqueue_message")
        plans += _nested_plans(conn, f"SELECT queue_commit('{QUEUE}', '{key}', 'job', '{token}')")
        deletes = [p for p in plans if "Query Text: DELETE FROM pyqueue_message" in p]
        assert deletes, plans
        for plan in walks + deletes:
            conditions = [line for line in plan.splitlines() if "Cond:" in line or "Filter:" in line]
            assert conditions, plan
            assert not any(f"'{QUEUE}'" in line for line in conditions), ("a custom plan", plan)
            assert any("$1" in line for line in conditions), ("a custom plan", plan)
    finally:
        conn.close()


@pytest.mark.only_dialect("postgresql")
def test_the_reserve_reads_its_start_without_a_sort_on_a_table_never_analyzed(dialect, installed_database):
    """queue_reserve's first read (where its walk starts: the queue's ready_from and its top
    priority, read at the end of the ready index) and its step, as the routine runs them, on a
    queue that 2,000 messages went through (their row versions are still there) and that an
    advance has seen: no sort and no read of the due index, under custom and generic plans. With
    no statistics the planner once read the top priority through the due index and a sort."""
    conn = dialects.for_name(dialect).connect(installed_database("plans"))
    try:
        _run(conn, f"SELECT queue_create('{QUEUE}')")
        _run(conn, "ALTER TABLE pyqueue_message SET (autovacuum_enabled = off)")
        for start in range(0, 2000, 100):
            keys = ", ".join(f"'c{i}'" for i in range(start, start + 100))
            _run(
                conn,
                f"SELECT queue_push_batch('{QUEUE}', ARRAY[{keys}], array_fill('job'::text, ARRAY[100]), "
                "array_fill('{}'::jsonb, ARRAY[100]))",
            )
            rows, _ = _run(conn, f"SELECT p_key, token FROM queue_reserve('{QUEUE}', 'w', NULL, 100)")
            tokens = ", ".join(f"'{r[1]}'" for r in rows)
            _run(
                conn,
                f"SELECT queue_commit_batch('{QUEUE}', ARRAY[{keys}], array_fill('job'::text, ARRAY[100]), "
                f"ARRAY[{tokens}]::text[])",
            )
        _run(conn, f"UPDATE pyqueue_ready_from SET top_priority = 0 WHERE queue_name = '{QUEUE}'")
        _run(conn, f"SELECT queue_push('{QUEUE}', 'fresh', 'job', '{{}}')")
        for mode in ("auto", "force_custom_plan", "force_generic_plan"):
            _run(conn, f"SET plan_cache_mode = {mode}")
            for _ in range(6):  # past the custom plans plpgsql tries first
                plans = _nested_plans(conn, f"SELECT * FROM queue_reserve('{QUEUE}', 'w', NULL, 1)")
                _run(
                    conn,
                    "UPDATE pyqueue_message SET scheduled_at = now() - interval '1 s', attempts = 0 WHERE p_key = 'fresh'",
                )
            # A reserve also runs the advance of the queue's bound when a second has passed since
            # the last one; the advance's first read goes by (scheduled_at, id) through the due
            # index by design (guarded as bound_first above), so it is left out here.
            reads = [
                p
                for p in plans
                if "pyqueue_message m" in p
                and "Query Text: SELECT" in p
                and "Query Text: SELECT m.scheduled_at, m.id FROM pyqueue_message m"
                not in " ".join(p.split())
            ]
            assert len(reads) >= 2, plans
            for plan in reads:
                assert "Sort" not in plan and "Seq Scan" not in plan, (mode, plan)
                assert DUE_IDX not in plan, (mode, plan)
    finally:
        conn.close()


@pytest.mark.only_dialect("postgresql")
@pytest.mark.parametrize("rows", [3_000, 100_000])
def test_a_commit_probes_the_key_on_a_queue_never_analyzed(dialect, installed_database, rows):
    """A single queue_commit deletes by the primary key under custom and generic plans. With
    no statistics and a few thousand rows, the planner once costed a read of the queue's whole
    range through an index by time the same as the key's probe, and took it."""
    conn = _fill(dialect, installed_database("plans"), analyze=False, rows=rows)
    try:
        for mode in ("force_custom_plan", "force_generic_plan"):
            _run(conn, f"SET plan_cache_mode = {mode}")
            got, _ = _run(conn, f"SELECT p_key, p_kind, token FROM queue_reserve('{QUEUE}', 'w', NULL, 1)")
            (key, kind, token), *_ = got
            single = f"SELECT queue_commit('{QUEUE}', '{key}', '{kind}', '{token}')"
            deletes = [
                p for p in _nested_plans(conn, single) if "Query Text: DELETE FROM pyqueue_message" in p
            ]
            assert len(deletes) == 1, deletes
            assert _pg_plan_problem("commit", deletes[0]) is None, (mode, deletes[0])
    finally:
        conn.close()


# ---- FIFO groups: 100k messages in 10k groups, 9 of every 10 blocked ----------------------------

GROUPED = "plan.groups"
_SENTINEL = {
    "postgresql": "TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'",
    "mysql": "CAST('9999-12-31 23:59:59.999999' AS DATETIME(6))",
}


def _fill_groups(dialect: str, url: str):
    """A database with one queue of 100k messages in 10k groups of 10: each group's first message
    its head (ready, due in the last hour), the other nine blocked at the sentinel, and
    pyqueue_group naming the heads. Analyzed. Returns a raw connection."""
    conn = dialects.for_name(dialect).connect(url)
    if dialect == "postgresql":
        _run(conn, f"SELECT queue_create('{GROUPED}')")
        _run(
            conn,
            "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, priority, scheduled_at, "
            "scheduled_at_initially, created_at, group_key) "
            f"SELECT '{GROUPED}', 'k' || i, 'job', '{{}}', 0, "
            f"CASE WHEN i % 10 = 0 THEN now() - interval '1 hour' + i * interval '1 ms' ELSE {_SENTINEL[dialect]} END, "
            "now() - interval '1 hour' + i * interval '1 ms', now(), 'g' || (i / 10) "
            "FROM generate_series(0, 99999) AS i",
        )
        _run(
            conn,
            "INSERT INTO pyqueue_group (queue_name, group_key, head_key, head_kind) "
            f"SELECT '{GROUPED}', 'g' || j, 'k' || (10 * j), 'job' FROM generate_series(0, 9999) AS j",
        )
        _run(conn, "ANALYZE pyqueue_message")
        _run(conn, "ANALYZE pyqueue_group")
    else:
        _run(conn, f"CALL queue_create('{GROUPED}', NULL, NULL, NULL, NULL)")
        _run(
            conn,
            "INSERT INTO pyqueue_message (queue_name, p_key, p_kind, payload, priority, scheduled_at, "
            "scheduled_at_initially, created_at, group_key, ready_at) "
            f"SELECT '{GROUPED}', CONCAT('k', s.i), 'job', '{{}}', 0, "
            "CASE WHEN MOD(s.i, 10) = 0 THEN UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL s.i * 1000 MICROSECOND "
            f"ELSE {_SENTINEL[dialect]} END, "
            "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL s.i * 1000 MICROSECOND, UTC_TIMESTAMP(6), "
            "CONCAT('g', s.i DIV 10), "
            "CASE WHEN MOD(s.i, 10) = 0 THEN UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL s.i * 1000 MICROSECOND "
            f"ELSE {_SENTINEL[dialect]} END FROM ({_SEQ}) AS s",
        )
        _run(
            conn,
            "INSERT INTO pyqueue_group (queue_name, group_key, head_key, head_kind) "
            f"SELECT '{GROUPED}', CONCAT('g', s.i DIV 10), CONCAT('k', s.i), 'job' FROM ({_SEQ}) AS s "
            "WHERE MOD(s.i, 10) = 0",
        )
        _run(conn, "ANALYZE TABLE pyqueue_message")
        _run(conn, "ANALYZE TABLE pyqueue_group")
    assert _run(conn, "SELECT COUNT(*) FROM pyqueue_message")[0][0][0] == ROWS
    assert _run(conn, "SELECT COUNT(*) FROM pyqueue_group")[0][0][0] == ROWS // 10
    return conn


def _analyzed_plans(conn, sql: str) -> tuple[list[tuple], list[str]]:
    """PostgreSQL: runs sql with auto_explain (ANALYZE, BUFFERS) on for the statements inside the
    routines it calls; returns its rows and the plans those statements ran, with actual rows."""
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    for setting in (
        "LOAD 'auto_explain'",
        "SET auto_explain.log_min_duration = 0",
        "SET auto_explain.log_nested_statements = on",
        "SET auto_explain.log_analyze = on",
        "SET auto_explain.log_buffers = on",
        "SET auto_explain.log_level = notice",
    ):
        _run(conn, setting)
    rows, _ = _run(conn, sql)
    _run(conn, "SET auto_explain.log_min_duration = -1")
    return rows, [p for p in plans if "Query Text:" in p]


def _message_reads(plans: list[str]) -> list[tuple[str, int, int, int]]:
    """Every scan of pyqueue_message in the plans: (node, rows it returned over all its loops, rows
    its filter removed, buffers it touched). A scan reads what it returns plus what it removes."""
    reads = []
    for plan in plans:
        lines = plan.splitlines()
        for i, line in enumerate(lines):
            if " on pyqueue_message " not in line and not line.rstrip().endswith(" on pyqueue_message"):
                if not re.search(r"Scan.* on pyqueue_message( |$)", line):
                    continue
            m = re.search(r"actual time=\S+ rows=(\d+) loops=(\d+)", line)
            if not m or "Scan" not in line:
                continue
            removed = buffers = 0
            indent = len(line) - len(line.lstrip())
            for detail in lines[i + 1 :]:
                if detail.strip().startswith("->") or len(detail) - len(detail.lstrip()) <= indent:
                    break
                if f := re.search(r"Rows Removed by (?:Index )?Filter: (\d+)", detail):
                    removed += int(f.group(1))
                if detail.strip().startswith("Buffers:"):
                    buffers += sum(int(x) for x in re.findall(r"(?:hit|read|dirtied|written)=(\d+)", detail))
            reads.append((line.strip(), int(m.group(1)) * int(m.group(2)), removed, buffers))
    return reads


@pytest.fixture
def grouped(dialect, installed_database):
    conn = _fill_groups(dialect, installed_database("plans_groups"))
    yield conn
    conn.close()


def _reserve_sql(dialect: str, n: int) -> str:
    if dialect == "postgresql":
        return f"SELECT p_key FROM queue_reserve('{GROUPED}', 'plan', interval '1 hour', {n})"
    return f"CALL queue_reserve('{GROUPED}', 'plan', 3600, {n}, NULL)"


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_the_reserve_never_reads_blocked_rows(dialect, grouped):
    """The guard's plans hold (the reserve's statements read their index) on a queue of 10k
    groups, 90k of its 100k rows blocked at the sentinel (statistics that see most of the table at
    year 9999). And queue_reserve as it runs (auto_explain with ANALYZE): with every head ready it reads about
    the n rows it takes; with every head reserved it finds nothing by reading next to nothing,
    never the 90k blocked rows behind the end of the ready range. And the commit of a head finds
    its group's next message through pyqueue_message_group_idx."""
    conn = grouped
    assert plan_problems(dialect, grouped, GROUPED) == []
    rows, plans = _analyzed_plans(conn, _reserve_sql(dialect, 10))
    assert sorted(r[0] for r in rows) == sorted(f"k{10 * j}" for j in range(10))
    reads = _message_reads(plans)
    assert reads, plans
    for node, returned, removed, _buffers in reads:
        assert "Seq Scan" not in node and "Bitmap" not in node, (node, plans)
        assert returned + removed <= 20, ("reads more than the rows it takes", node, returned, removed, plans)
    # every other head reserved: the ready range is empty
    rows, _ = _run(conn, _reserve_sql(dialect, 10_000))
    assert len(rows) == ROWS // 10 - 10
    # the old versions of the rows just reserved lie in the ready range until vacuumed (this
    # server may run without autovacuum): a scan would visit them, blocked rows or not
    _run(conn, "VACUUM pyqueue_message")
    index_pages = _run(conn, "SELECT pg_relation_size('pyqueue_message_ready_idx') / 8192")[0][0][0]
    rows, plans = _analyzed_plans(conn, _reserve_sql(dialect, 10))
    assert rows == []
    reads = _message_reads(plans)
    assert reads, plans
    for node, returned, removed, buffers in reads:
        assert "Seq Scan" not in node and "Bitmap" not in node, (node, plans)
        assert returned + removed <= 2, ("reads rows of an empty ready range", node, returned, removed, plans)
        assert buffers <= max(20, index_pages // 100), ("touches too much of the index", node, buffers, plans)
    # the commit of a reserved head promotes the next one of its group, read by the group index
    [(key, kind, token)] = _run(
        conn,
        f"SELECT p_key, p_kind, reserve_token FROM pyqueue_message WHERE queue_name = '{GROUPED}' AND p_key = 'k0'",
    )[0]
    _, plans = _analyzed_plans(conn, f"SELECT queue_commit('{GROUPED}', '{key}', '{kind}', '{token}')")
    nexts = [p for p in plans if "group_key" in p and "ORDER BY" in p and "pyqueue_message m" in p]
    assert nexts, plans
    for plan in nexts:
        assert "pyqueue_message_group_idx" in plan and "Seq Scan" not in plan and "Sort" not in plan, plan
    for node, returned, removed, _buffers in _message_reads(plans):
        assert "Seq Scan" not in node, (node, plans)
        assert returned + removed <= 20, (node, returned, removed, plans)
    assert _run(
        conn,
        f"SELECT scheduled_at < now() + interval '1 minute' FROM pyqueue_message WHERE queue_name = '{GROUPED}' AND p_key = 'k1'",
    )[0] == [(True,)]


def _mysql_read_rows(conn, sql: str) -> list[tuple[str, int]]:
    """MySQL/MariaDB: runs sql (a SELECT) under ANALYZE and returns, per access to
    pyqueue_message, (its index, the rows it read)."""
    [(version,)] = _run(conn, "SELECT VERSION()")[0]
    if "mariadb" in version.lower():
        rows, _ = _run(conn, f"ANALYZE FORMAT=JSON {sql}")
        found: list[tuple[str, int]] = []

        def walk(node):
            if isinstance(node, dict):
                if node.get("table_name") == "m" or node.get("table_name") == "pyqueue_message":
                    found.append(
                        (
                            str(node.get("key")),
                            int(round(float(node.get("r_rows", 0)) * float(node.get("r_loops", 1)))),
                        )
                    )
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        walk(json.loads(rows[0][0]))
        return found
    rows, _ = _run(conn, f"EXPLAIN ANALYZE {sql}")
    text = rows[0][0]
    return [
        (m.group(1) or "", int(float(m.group(2))) * int(m.group(3)))
        for m in re.finditer(r"on m using (\S+).*?actual time=\S+ rows=([\d.]+) loops=(\d+)", text)
    ]


@pytest.mark.slow
@pytest.mark.only_dialect("mysql")
def test_the_reserve_page_never_reads_blocked_rows(dialect, grouped):
    """MySQL/MariaDB: the guard's plans hold on a queue of 10k groups, 90k of its 100k rows
    blocked at the sentinel (statistics that see most of the table at year 9999); and the reserve's page
    (ready_page, with the routine's FORCE INDEX) executed under ANALYZE:
    with every head ready it reads the rows of its LIMIT; with every head reserved it reads the 10k
    heads (a claim leaves ready_at alone: a leased row stays in the range ready_at <= now, and its
    lease's end in scheduled_at, which the index does not hold, excludes it row by row), never the 90k
    blocked rows past the end of the ready range (ready_at at the sentinel)."""
    conn = grouped
    assert plan_problems(dialect, grouped, GROUPED) == []
    # the page as the routine runs it: FORCE INDEX (with every head leased the optimizer left alone may take
    # pyqueue_message_due_idx, which this table's statistics make look empty)
    page = (
        MY_STATEMENTS["ready_page"]
        .replace(f"'{QUEUE}'", f"'{GROUPED}'")
        .replace("FROM pyqueue_message m ", f"FROM pyqueue_message m FORCE INDEX ({MY_READY_IDX}) ")
    )
    assert "FORCE INDEX" in page
    reads = _mysql_read_rows(conn, page)
    assert reads and all(idx == MY_READY_IDX and n <= 17 for idx, n in reads), reads
    rows, _ = _run(conn, _reserve_sql(dialect, 10_000))
    assert len(rows) == ROWS // 10
    reads = _mysql_read_rows(conn, page)
    assert reads and all(idx == MY_READY_IDX and n <= ROWS // 10 for idx, n in reads), reads


@pytest.mark.slow
@pytest.mark.only_dialect("postgresql")
def test_with_group_limits_the_reserve_and_a_commit_never_read_blocked_rows(dialect, grouped):
    """With k > 1 in flight per group (the queue's default 2, one group's own 3), on 10k groups
    of 10: a reserve still reads about the rows it takes, and the commit of a head counts its
    group's live messages through pyqueue_message_group_live_idx and promotes the next one
    through pyqueue_message_group_idx, never reading the group's blocked rows or the others'."""
    conn = grouped
    _run(conn, f"SELECT queue_set_group_limit('{GROUPED}', NULL, 2)")
    _run(conn, f"SELECT queue_set_group_limit('{GROUPED}', 'g5', 3)")
    _run(conn, "ANALYZE pyqueue_message")
    rows, plans = _analyzed_plans(conn, _reserve_sql(dialect, 10))
    assert len(rows) == 10
    for node, returned, removed, _buffers in _message_reads(plans):
        assert "Seq Scan" not in node and "Bitmap" not in node, (node, plans)
        assert returned + removed <= 20, ("reads more than the rows it takes", node, returned, removed, plans)
    assert "k50" in {r[0] for r in rows}  # g5's first head, due before the heads promoted now
    [(key, kind, token)] = _run(
        conn,
        f"SELECT p_key, p_kind, reserve_token FROM pyqueue_message WHERE queue_name = '{GROUPED}' AND p_key = 'k50'",
    )[0]
    [(live,)] = _run(
        conn,
        f"SELECT count(*) FROM pyqueue_message WHERE queue_name = '{GROUPED}' AND group_key = 'g5' "
        "AND scheduled_at < TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'",
    )[0]
    assert live == 3
    _, plans = _analyzed_plans(conn, f"SELECT queue_commit('{GROUPED}', '{key}', '{kind}', '{token}')")
    assert any("pyqueue_message_group_live_idx" in p for p in plans), plans
    for node, returned, removed, _buffers in _message_reads(plans):
        assert "Seq Scan" not in node and "Bitmap" not in node, (node, plans)
        assert returned + removed <= 20, (node, returned, removed, plans)
    assert _run(
        conn,
        f"SELECT p_key FROM pyqueue_message WHERE queue_name = '{GROUPED}' AND group_key = 'g5' "
        f"AND scheduled_at < now() + interval '1 minute' ORDER BY id",
    )[0] == [("k51",), ("k52",), ("k53",)]

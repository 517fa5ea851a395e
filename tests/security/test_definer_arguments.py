"""PostgreSQL: no SECURITY DEFINER routine lets its caller choose the type of an argument.

PostgreSQL finds a cast by the types it converts, not by name: a routine that
casts an argument whose type the caller picked (a polymorphic parameter such as
anycompatible, or a type the caller created) runs the caller's own cast
function, and inside a SECURITY DEFINER routine that function runs as the
routines' owner. Creating a type, a function and a cast needs nothing but
TEMP, which PUBLIC holds on every database by default, so a role with only
the consumer capability could run its code as the owner (a superuser, when a
superuser installed the schema). A pinned search_path does not help.

Two checks: the catalog (every SECURITY DEFINER routine of the install schema
takes built-in, non-polymorphic types only), and the attack itself, run as a
role holding only the consumer capability, which must never see its cast run
as anyone but itself.
"""

from __future__ import annotations

import contextlib
import uuid

import pytest

from .test_privileges import Accounts

pytestmark = pytest.mark.only_dialect("postgresql")

# pg_catalog's objects have OIDs below FirstNormalObjectId: anything at or above it was
# created after initdb (by an extension, an application or an attacker).
FIRST_NORMAL_OBJECT_ID = 16384

# Every routine that takes a reservation token, called with the attacker's value as that token.
TOKEN_CALLS = {
    "queue_commit": "SELECT queue_commit(%(q)s, 'k', 'kind', {token})",
    "queue_rollback": "SELECT queue_rollback(%(q)s, 'k', 'kind', {token})",
    "queue_fail": "SELECT queue_fail(%(q)s, 'k', 'kind', {token}, NULL, 'e')",
    "queue_extend": "SELECT queue_extend(%(q)s, 'k', 'kind', {token})",
    "queue_move": "SELECT queue_move(%(q)s, 'k', 'kind', {token}, %(q)s)",
    "queue_commit_reserve": "SELECT * FROM queue_commit_reserve(%(q)s, 'k', 'kind', {token}, 'w')",
    "queue_snooze": "SELECT queue_snooze(%(q)s, 'k', 'kind', {token}, NULL)",
    "queue_give_up": "SELECT queue_give_up(%(q)s, 'k', 'kind', {token}, 'e')",
    "queue_commit_batch": "SELECT queue_commit_batch(%(q)s, ARRAY['k'], ARRAY['kind'], ARRAY[{token}])",
    "queue_commit_result": "SELECT queue_commit_result(%(q)s, 'k', 'kind', {token}, NULL)",
    "queue_commit_result_batch": "SELECT queue_commit_result_batch(%(q)s, ARRAY['k'], ARRAY['kind'], ARRAY[{token}], "
    "ARRAY[NULL]::jsonb[])",
    "queue_renew": "SELECT * FROM queue_renew(%(q)s, 'k', 'kind', {token}, NULL)",
    "queue_cancel_held": "SELECT queue_cancel_held(%(q)s, 'k', 'kind', {token})",
    "queue_set_progress": "SELECT queue_set_progress(%(q)s, 'k', 'kind', {token}, NULL)",
}

# The attacker's type, and a cast from it to text whose function writes down whom it runs as and
# then tries to make the session's role a superuser (which works only when it runs as a superuser).
ATTACK = """
CREATE TEMP TABLE t (a text);
CREATE TEMP TABLE seen (who text);
CREATE FUNCTION pg_temp.f(x pg_temp.t) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pg_temp.seen VALUES (current_user);
    BEGIN
        EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
    EXCEPTION WHEN insufficient_privilege THEN NULL;
    END;
    RETURN gen_random_uuid()::text;
END $$;
"""


def test_no_security_definer_routine_takes_a_type_its_caller_chooses(db):
    cur = db.connection.cursor()
    cur.execute(
        """
        SELECT p.oid::regprocedure::text, pg_catalog.format_type(a.t, NULL), ty.typtype::text
          FROM pg_catalog.pg_proc p
          JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
          CROSS JOIN LATERAL pg_catalog.unnest(p.proargtypes::oid[]) AS a (t)
          JOIN pg_catalog.pg_type ty ON ty.oid = a.t
         WHERE n.nspname = pg_catalog.current_schema() AND p.prosecdef
           AND (ty.typtype = 'p' OR a.t >= %s)
         ORDER BY 1
        """,
        (FIRST_NORMAL_OBJECT_ID,),
    )
    offending = cur.fetchall()
    cur.execute(
        "SELECT count(*) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = pg_catalog.current_schema() AND p.prosecdef"
    )
    (definers,) = cur.fetchone()
    assert definers > 50, "the contract's routines are SECURITY DEFINER: is the schema installed here?"
    assert offending == [], f"SECURITY DEFINER routines taking a caller-chosen type: {offending}"


@pytest.fixture
def consumer(dsn, db):
    """A login role holding only the consumer capability, a queue it may work on, and its connection."""
    accounts = Accounts(dsn)
    queue = db.queue(f"definer.{uuid.uuid4().hex[:12]}").create()
    try:
        name = accounts.with_capabilities("consumer", "consumer")
        conn = accounts.raw(name)
        conn.autocommit = True
        yield name, conn, queue.name, accounts.admin
    finally:
        with contextlib.suppress(Exception):
            queue.drop()
        accounts.close()


def _outcome(conn, sql: str, queue: str) -> str:
    try:
        conn.execute(sql, {"q": queue}).fetchall()
    except Exception as exc:  # noqa: BLE001 - the kind of refusal is what is reported
        return f"{type(exc).__name__}: {getattr(getattr(exc, 'diag', None), 'message_primary', exc)}"
    return "ran"


@pytest.mark.parametrize("implicit", [False, True], ids=["explicit-cast", "implicit-cast"])
def test_a_consumer_cast_never_runs_as_the_owner(consumer, implicit):
    """The attack, as a role with only the consumer capability. With an explicit cast no token
    routine accepts the attacker's type at all; with an implicit one PostgreSQL converts the argument
    to text before the call, in the caller's own context: either way the cast runs as the caller,
    or not at all."""
    name, conn, queue, admin = consumer
    conn.execute(ATTACK)
    conn.execute(
        "CREATE CAST (pg_temp.t AS text) WITH FUNCTION pg_temp.f(pg_temp.t)"
        + (" AS IMPLICIT" if implicit else "")
    )
    outcomes = {
        routine: _outcome(conn, sql.format(token="ROW('x')::pg_temp.t"), queue)
        for routine, sql in TOKEN_CALLS.items()
    }
    seen = [who for (who,) in conn.execute("SELECT who FROM pg_temp.seen").fetchall()]
    superuser = admin.execute(
        "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = %s", (name,)
    ).fetchone()[0]
    assert not superuser, f"the consumer made itself a superuser: {outcomes}"
    assert set(seen) <= {name}, f"the consumer's cast ran as {sorted(set(seen) - {name})}: {outcomes}"
    if implicit:
        # each routine ran with the converted text, and the cast ran in the caller's context
        assert seen and set(seen) == {name}, outcomes
    else:
        assert all("does not exist" in o for o in outcomes.values()), outcomes


def test_tokens_are_taken_as_text_and_as_uuid_with_one_malformed_error(db):
    """The token routines keep taking both a text and a uuid token (a queue_reserve row's column),
    and a token that is not a UUID is the contract's invalid_argument, not a cast error."""
    queue = db.queue(f"definer.{uuid.uuid4().hex[:12]}").create()
    try:
        queue.push("a", "kind", {})
        queue.push("b", "kind", {})
        conn = db.connection
        with conn.cursor() as cur:
            cur.execute("SELECT p_key, p_kind, token FROM queue_reserve(%s, 'w', NULL, 2)", (queue.name,))
            (ka, kinda, ta), (kb, kindb, tb) = sorted(cur.fetchall())
            assert isinstance(ta, uuid.UUID)
            cur.execute("SELECT queue_commit(%s, %s, %s, %s::uuid)", (queue.name, ka, kinda, str(ta)))
            assert cur.fetchone()[0] is True
            cur.execute("SELECT queue_commit(%s, %s, %s, %s::text)", (queue.name, kb, kindb, str(tb).upper()))
            assert cur.fetchone()[0] is True
            for literal in ("'not-a-token'", "'not-a-token'::text"):
                with pytest.raises(Exception) as info:
                    cur.execute(f"SELECT queue_commit(%s, 'k', 'kind', {literal})", (queue.name,))
                assert "pyqueue:invalid_argument: token is malformed" in str(info.value)
                if not conn.autocommit:
                    conn.rollback()
    finally:
        queue.drop()


def test_installing_the_routines_again_drops_the_polymorphic_token_signatures(installed_database):
    """An install of an earlier version has the token routines with an anycompatible token; running
    routines.sql over it (what an upgrade does) leaves none of them, and prints nothing."""
    import psycopg

    from pyqueue_sql.queries import script

    dsn = installed_database("upgrade")
    notices: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
        conn.execute(
            "CREATE FUNCTION queue_commit(in_queue text, in_key text, in_kind text, in_token anycompatible)"
            " RETURNS boolean LANGUAGE sql SECURITY DEFINER AS $$ SELECT in_token::text IS NULL $$"
        )
        conn.execute(
            "CREATE FUNCTION queue_commit_batch(q text, k text[], kd text[], t anycompatible)"
            " RETURNS integer LANGUAGE sql SECURITY DEFINER AS $$ SELECT 0 $$"
        )
        conn.execute(script("postgresql", "routines"))
        left = conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p"
            " WHERE p.proname LIKE 'queue\\_%%' AND 'anycompatible'::regtype = ANY (p.proargtypes::oid[])"
        ).fetchall()
    assert left == []
    assert notices == []

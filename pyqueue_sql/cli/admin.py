"""Installing and administering: migrate, version, sql, grant, and the demo."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__, dialects, errors, privileges
from ..display import one_line
from .common import (
    DSN_ENV,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    PROG,
    Command,
    UsageError,
    check_scheme,
    confirm,
    dsn_of,
    positive_int,
    seconds_arg,
)


def _live_messages(migrate: Any, dsn: str) -> int:
    """Messages in pyqueue_message (0 when pyqueue-sql is not installed)."""
    return int(migrate.live_messages(dsn))


def _revisions(revisions: Sequence[str]) -> str:
    return ", ".join(revisions) if revisions else "base"


def cmd_migrate(args: argparse.Namespace) -> int:
    dsn = dsn_of(args)
    if args.adopt and args.downgrade:
        raise UsageError("--adopt is for upgrades: it records a schema installed from the SQL script")
    if args.check and (args.adopt or args.downgrade or args.revision):
        raise UsageError("--check only reads: it takes no --adopt, --downgrade or --revision")
    try:
        from .. import migrate

        if args.check:
            return _migrate_check(migrate, dsn)
        if args.downgrade:
            return _migrate_down(migrate, dsn, args)
        return _migrate_up(migrate, dsn, args)
    except KeyboardInterrupt:
        print(f"{PROG}: migrate was interrupted; run it again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if isinstance(exc, migrate.MigrationInterrupted):
            print(f"{PROG}: migrate was interrupted; run it again to resume", file=sys.stderr)
            return EXIT_INTERRUPTED
        if isinstance(exc, migrate.UnrecordedSchemaError):
            text = one_line(str(exc))
            if "--adopt" not in text:
                text += (
                    " (if it was installed from `pyqueue-sql sql` or by an older release, "
                    "run `pyqueue-sql migrate --adopt` to record it)"
                )
            print(f"{PROG}: error: {text}", file=sys.stderr)
            return EXIT_FAILURE
        raise


def _migrate_up(migrate: Any, dsn: str, args: argparse.Namespace) -> int:
    result = migrate.upgrade(dsn, args.revision or "heads", adopt=args.adopt)
    before, after, adopted = tuple(result.before), tuple(result.after), result.adopted
    if adopted:
        print(f"recorded the existing schema as {adopted}")
        before = (adopted,)
    if before == after:
        print(f"already at {_revisions(after)}")
    elif not before:
        print(f"(none) -> {_revisions(after)}")
    else:
        print(f"{_revisions(before)} -> {_revisions(after)}")
    _print_heads(migrate, after)
    return EXIT_OK


def _migrate_check(migrate: Any, dsn: str) -> int:
    """Exit 0 when the database holds what this version's migrate installs, else 1 with a line per
    object that differs (on stdout, one per line) and one line on stderr."""
    drift = migrate.check(dsn)
    if drift.ok:
        print(f"no drift: revision {_revisions(drift.revision)}, as pyqueue-sql {__version__} installs it")
        return EXIT_OK
    if not drift.revision:  # nothing installed: that one line says it all, no count beside it
        print(f"{PROG}: {drift.problems[0]}", file=sys.stderr)
        return EXIT_FAILURE
    for problem in drift.problems:
        print(problem)
    print(
        f"{PROG}: {len(drift.problems)} difference(s) from what pyqueue-sql {__version__} installs",
        file=sys.stderr,
    )
    return EXIT_FAILURE


def cmd_version(args: argparse.Namespace) -> int:
    """The package's version, and the schema revision of the database when one is given."""
    print(f"{PROG} {__version__}")
    if not (args.dsn or os.environ.get(DSN_ENV)):
        print(f"schema revision: unknown (no database: pass --dsn DSN or set {DSN_ENV})")
        return EXIT_OK
    dsn = dsn_of(args)
    from .. import migrate

    _print_heads(migrate, tuple(migrate.current(dsn)), label="schema revision")
    return EXIT_OK


def _print_heads(migrate: Any, revisions: Sequence[str], label: str = "revision") -> None:
    head = migrate.head()
    if not revisions:
        print(f"{label}: none (pyqueue-sql is not installed)")
    for revision in revisions:
        print(f"{label}: {revision}" + (" (head)" if revision == head else f" (head is {head})"))


def _migrate_down(migrate: Any, dsn: str, args: argparse.Namespace) -> int:
    revision = args.revision or "base"
    before = tuple(migrate.current(dsn))
    if not before:
        print("nothing to downgrade: pyqueue-sql is not installed")
        return EXIT_OK
    live = _live_messages(migrate, dsn) if revision == "base" else 0
    if live and not args.yes:
        answer = confirm(f"this removes pyqueue-sql and drops its {live} live message(s); continue?")
        if answer is None:
            raise errors.QueueError(
                f"refusing to drop {live} live message(s) without confirmation: "
                "pass --yes (no terminal to ask on)"
            )
        if not answer:
            print("downgrade cancelled; nothing changed", file=sys.stderr)
            return EXIT_FAILURE
    result = migrate.downgrade(dsn, revision)
    before, after = tuple(result.before), tuple(result.after)
    if before == after:
        print(f"already at {_revisions(after)}")
    else:
        print(f"{_revisions(before)} -> {_revisions(after)}")
    if not after:
        print(
            "removed pyqueue-sql: its tables, views and routines"
            + (f", and {live} message(s)" if live else " (it held no messages)")
        )
    else:
        _print_heads(migrate, after)
    return EXIT_OK


def cmd_sql(args: argparse.Namespace) -> int:
    from ..queries import install_script, script

    try:
        text = script(args.dialect, "uninstall.sql") if args.uninstall else install_script(args.dialect)
    except FileNotFoundError as exc:
        raise errors.QueueError(f"this installation is incomplete: {exc}") from None
    if not args.uninstall:
        sys.stdout.write(dialects.for_name(args.dialect).install_note)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return EXIT_OK


def cmd_grant(args: argparse.Namespace) -> int:
    """Prints (default) or runs (--apply) the GRANT/REVOKE statements of a least-privilege role."""
    caps = [c for c in privileges.CAPABILITIES if getattr(args, c)]
    if not caps:
        raise UsageError(
            "name at least one capability: " + " ".join(f"--{c}" for c in privileges.CAPABILITIES)
        )
    dsn = args.dsn or os.environ.get(DSN_ENV)
    if args.apply and not dsn:
        raise UsageError(f"--apply needs a database: pass --dsn DSN or set {DSN_ENV}")
    if dsn:
        check_scheme(dsn)
        dialect = dialects.for_dsn(dsn).name
        if args.dialect and args.dialect != dialect:
            raise UsageError(f"--dialect {args.dialect} does not match the DSN ({dialect})")
    elif args.dialect:
        dialect = args.dialect
    else:
        raise UsageError(f"pass --dialect (to print) or --dsn DSN / ${DSN_ENV}")
    account = privileges.parse_account(dialect, args.role)
    if not dsn:
        stmts = privileges.statements(dialect, account, caps, schema=args.schema, revoke=args.revoke)
        print("\n".join(privileges.render(dialect, stmts)))
        return EXIT_OK
    connection = dialects.for_name(dialect).connect(dsn)
    try:
        schema = args.schema or privileges.current_schema(dialect, connection)
        stmts = privileges.statements(dialect, account, caps, schema=schema, revoke=args.revoke)
        text = privileges.render(dialect, stmts, connection)
        if args.apply:
            privileges.apply(dialect, connection, stmts)
            print(f"-- applied ({len(stmts)} statements):", file=sys.stderr)
        print("\n".join(text))
    finally:
        connection.close()
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo

    dsn = args.dsn or os.environ.get(DSN_ENV) or None
    if dsn:
        check_scheme(dsn)
    return run_demo(dsn, messages=args.messages, timeout=args.timeout, data_dir=args.data_dir)


# -- argument parsing -------------------------------------------------------------


def add_migrate(command: Command) -> None:
    p = command(
        "migrate",
        cmd_migrate,
        "install or upgrade (or downgrade) the pyqueue-sql schema; prints "
        'what it applied ("(none) -> REVISION" on a fresh database, REVISION the newest '
        'revision; "already at REVISION" when there is nothing to do)',
    )
    p.add_argument(
        "--revision",
        help="target revision (default: heads; with --downgrade: base, "
        "which removes pyqueue-sql and every message)",
    )
    p.add_argument(
        "--downgrade",
        action="store_true",
        help="go back to --revision instead of up; asks "
        "before dropping live messages (refuses without a terminal unless --yes)",
    )
    p.add_argument(
        "--adopt",
        action="store_true",
        help="record a schema installed from `pyqueue-sql sql` (or by an older release) after "
        "checking that it matches a known revision, then upgrade it",
    )
    p.add_argument("--yes", "-y", action="store_true", help="do not ask before dropping live messages")
    p.add_argument(
        "--check",
        action="store_true",
        help="change nothing: exit 1 naming every routine, table, index, constraint or grant that "
        "differs from what this version installs (edited by hand, dropped), or when migrate is to "
        "be run; 0 when none",
    )


def add_version(command: Command) -> None:
    command(
        "version",
        cmd_version,
        "print the package's version and, with --dsn / $PYQUEUE_DSN, the database's schema revision",
    )


def add_sql(command: Command) -> None:
    p = command("sql", cmd_sql, "print the schema SQL, for use with your own migration tool", dsn=False)
    p.add_argument("--dialect", required=True, choices=dialects.NAMES)
    p.add_argument("--uninstall", action="store_true", help="print the SQL that removes the schema")


def add_grant(command: Command) -> None:
    p = command(
        "grant",
        cmd_grant,
        "print (or --apply) the GRANTs that let an existing role or account call "
        "the routines of some capabilities, and nothing else (docs/operations.md: Least privilege)",
    )
    p.add_argument(
        "--role",
        required=True,
        metavar="NAME",
        help="PostgreSQL role, or MySQL account user@host (host %% when omitted; name@ for a "
        "MariaDB role); never created here: a GRANT to a missing one fails",
    )
    for cap, what in privileges.DESCRIPTIONS.items():
        p.add_argument(f"--{cap}", action="store_true", help=what)
    p.add_argument("--revoke", action="store_true", help="REVOKE these capabilities instead")
    p.add_argument("--apply", action="store_true", help="run the statements (default: print them)")
    p.add_argument("--dialect", choices=dialects.NAMES, help="the SQL to print, without a database")
    p.add_argument(
        "--schema",
        help="PostgreSQL schema / MySQL database of the routines "
        "(default: the connection's current one; unqualified without --dsn)",
    )


def add_demo(command: Command) -> None:
    p = command(
        "demo",
        cmd_demo,
        "run producers and consumers against a demo queue "
        "(an embedded PostgreSQL unless --dsn / $PYQUEUE_DSN is set)",
    )
    p.add_argument(
        "--messages", type=positive_int, default=4000, metavar="N", help="messages to push (default 4000)"
    )
    p.add_argument(
        "--timeout",
        type=seconds_arg,
        default=120.0,
        metavar="S",
        help="give up after this many seconds (default 120)",
    )
    p.add_argument(
        "--data-dir", metavar="DIR", help="embedded PostgreSQL data directory (default .pyqueue-demo/pgdata)"
    )


PARSERS: dict[str, Callable[[Command], None]] = {
    "migrate": add_migrate,
    "version": add_version,
    "sql": add_sql,
    "grant": add_grant,
    "demo": add_demo,
}

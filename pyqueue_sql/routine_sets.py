"""The routines of the migrations: each revision holds only the routines it changed.

A routine file (``migrations/sql/<dialect>/<revision>.routines.sql``, and
``sql/<dialect>/routines.sql``, the current state) is a script of three parts:

* the preamble: the statements before the first routine. They set up the
  session the routines are created under (PostgreSQL: the pinned search_path
  and the install-schema check; MySQL: sql_mode and the connection character
  set, which a procedure keeps from its creation);
* the routines, each a group of statements keyed by the routine's name:
  PostgreSQL ``[DROP FUNCTION ...] CREATE OR REPLACE FUNCTION name``, then
  ``COMMENT ON`` / ``GRANT ... ON`` / ``ALTER FUNCTION`` of it and the
  triggers that execute it; MySQL ``DROP PROCEDURE IF EXISTS name`` +
  ``CREATE PROCEDURE name`` (inside ``DELIMITER //``). A group of DROPs alone
  removes the routine. ``REVOKE EXECUTE ON FUNCTION a, b, ... FROM PUBLIC``
  marks the routines it names (PostgreSQL revokes that default grant);
* the epilogue: the statements after the last routine (giving the caller's
  session settings back).

How a dialect writes them (where a statement ends, which statement creates, drops
or belongs to which routine) is its ``Dialect.routine_files``
(pyqueue_sql.dialects.routine_syntax); what follows is the same for every dialect.

Every group is replayable (CREATE OR REPLACE; DROP IF EXISTS before CREATE),
so a group can be run on a database that has any version of the routine.

The routine set at a revision is the union of the routine files of the
revisions up to it, later ones overriding earlier ones (a removal deletes);
the newest revision that is not released yet reads ``sql/<dialect>/routines.sql``
instead of a file of its own (``CURRENT_ROUTINES``), compared with the set of
the revision before it. A routine *changed* at a revision when its definition
differs from the previous set's: the code of its statements (comments outside
the routine bodies do not count, DROPs do not count), the code of the preamble
it is created under, and whether EXECUTE is revoked from PUBLIC.

* upgrade to N: N.up.sql, then N's routine file (the released delta), or, for
  the unreleased head, ``delta(set(N-1), sql/<dialect>/routines.sql)``;
* downgrade from N: N.down.sql (undoes the DDL, drops the routines N added),
  then ``restore(set(N-1), set(N))``: the definitions at N-1 of every routine
  that N changed or removed, each with its own file's preamble and epilogue;
* release of the head (``make release-routines``, when a new revision is
  added): writes ``delta(set(N-1), sql/<dialect>/routines.sql)`` into
  ``N.routines.sql`` and switches N to it, so the head's upgrade runs the same
  statements before and after its release.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import dialects
from .dialects import Dialect, RoutineFileSyntax, Statement

# Put in a revision module as ROUTINES while it is the newest one: its routines
# are sql/<dialect>/routines.sql (the release step replaces it by a file name).
CURRENT_ROUTINES = "sql/<dialect>/routines.sql"


class RoutineFileError(ValueError):
    """A routine file does not follow the rules above (its name and the statement say which)."""


def _syntax(dialect: str | Dialect) -> RoutineFileSyntax:
    """The routine file syntax of a dialect (pyqueue_sql.dialects.routine_syntax)."""
    return dialects.as_dialect(dialect).routine_files


def split(dialect: str | Dialect, text: str) -> list[Statement]:
    """The statements of a script of the dialect, as its client runs them."""
    return _syntax(dialect).split(text)


def created_routines(dialect: str | Dialect, text: str) -> list[str]:
    """The routines a script creates, in order (whatever files its parts come from)."""
    syntax = _syntax(dialect)
    return [what.name for what in map(syntax.classify, syntax.split(text)) if what.kind == "create"]


# ---- routine files --------------------------------------------------------------


@dataclasses.dataclass(eq=False)
class Routine:
    """One routine's group of statements in one routine file."""

    name: str
    statements: list[Statement]
    source: RoutineFile
    position: int
    created: bool = False
    kind: str = "FUNCTION"
    revoke_public: bool = False
    triggers: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (trigger, table)

    @property
    def removal(self) -> bool:
        """A group of DROPs only: the revision removed the routine."""
        return not self.created

    def definition(self) -> tuple:
        """What makes two versions of a routine the same (see the module docstring)."""
        return (
            self.source.context(),
            tuple(s.code for s in self.statements if not s.code[:4].upper() == "DROP"),
            self.revoke_public,
        )


@dataclasses.dataclass(eq=False)
class RoutineFile:
    dialect: str
    origin: str  # the file's name, for messages and ordering
    order: int  # position of its revision in the chain (the head's file: after every other)
    preamble: list[Statement]
    routines: dict[str, Routine]
    epilogue: list[Statement]
    revoke_comment: str = ""
    header: str = ""

    def context(self) -> tuple[str, ...]:
        return tuple(s.code for s in self.preamble)


def parse(dialect: str | Dialect, text: str, origin: str, order: int = 0) -> RoutineFile:
    """Splits a routine file into its preamble, routine groups and epilogue (module docstring)."""
    d = dialects.as_dialect(dialect)
    syntax = d.routine_files
    result = RoutineFile(d.name, origin, order, [], {}, [])
    current: Routine | None = None

    def fail(statement: Statement, why: str) -> RoutineFileError:
        first = statement.code.splitlines()[0] if statement.code else ""
        return RoutineFileError(f"{origin}: {why} (at: {first[:100]})")

    statements = syntax.split(text)
    if statements and statements[0].comment:  # the file's own header, not the first statement's
        result.header = statements[0].comment
        statements[0] = dataclasses.replace(statements[0], comment="")
    for statement in statements:
        what = syntax.classify(statement)
        if what.kind in ("create", "drop", "trigger", "attach") and result.epilogue:
            raise fail(statement, "a routine statement after the epilogue began; routines come first")
        if what.kind == "create" or what.kind == "drop":
            name = what.name
            if current is None or current.name != name or current.created:
                if name in result.routines:
                    raise fail(statement, f"routine {name} is defined twice in this file")
                current = Routine(name, [], result, len(result.routines))
                result.routines[name] = current
            if what.kind == "create":
                dropped = any(syntax.classify(s).kind == "drop" for s in current.statements)
                if not (what.replayable or dropped):
                    raise fail(statement, f"routine {name} cannot be run again: write {syntax.replay_hint}")
                current.created, current.kind = True, what.routine_kind
            current.statements.append(statement)
        elif what.kind == "trigger":
            owner = result.routines.get(what.name)
            if owner is None or not owner.created:
                raise fail(
                    statement,
                    f"trigger {what.trigger} executes {what.name}, which this file does not create before it",
                )
            owner.statements.append(statement)
            owner.triggers.append((what.trigger, what.table))
        elif what.kind == "attach":
            if what.name not in result.routines:
                raise fail(statement, f"{what.name} is not created earlier in this file")
            result.routines[what.name].statements.append(statement)
        elif what.kind == "revoke":
            for name in what.names:
                if name not in result.routines or not result.routines[name].created:
                    raise fail(statement, f"REVOKE names {name}, which this file does not create")
                result.routines[name].revoke_public = True
            result.revoke_comment = statement.comment or result.revoke_comment
        elif not result.routines:
            result.preamble.append(statement)
        else:
            result.epilogue.append(statement)
    return result


# ---- sets, deltas, scripts --------------------------------------------------------

RoutineSet = dict[str, Routine]


def overlay(previous: RoutineSet, delta: RoutineFile) -> RoutineSet:
    """The set after a revision's routine file: its routines replace or remove earlier ones."""
    result = dict(previous)
    for name, routine in delta.routines.items():
        if routine.removal:
            result.pop(name, None)
        else:
            result[name] = routine
    return result


def full_set(current: RoutineFile) -> RoutineSet:
    removed = [r.name for r in current.routines.values() if r.removal]
    if removed:
        raise RoutineFileError(f"{current.origin}: the current routines cannot remove routines ({removed})")
    return dict(current.routines)


def changed(previous: RoutineSet, current: RoutineSet) -> list[str]:
    """Routines of ``current`` that ``previous`` lacks or defines differently."""
    return [
        name
        for name, routine in current.items()
        if name not in previous or previous[name].definition() != routine.definition()
    ]


def removed(previous: RoutineSet, current: RoutineSet) -> list[str]:
    return [name for name in previous if name not in current]


def _removal(routine: Routine) -> Routine:
    """A group that drops a routine (and, PostgreSQL, the triggers that execute it first)."""
    drops = [
        Statement("", f"DROP TRIGGER IF EXISTS {trigger} ON {table}") for trigger, table in routine.triggers
    ] + [Statement(f"-- {routine.name}: removed.", f"DROP {routine.kind} IF EXISTS {routine.name}")]
    # written with the delimiter of the group they replace (MySQL's //; ';' elsewhere)
    drops = [dataclasses.replace(s, delimiter=routine.statements[0].delimiter) for s in drops]
    return dataclasses.replace(routine, statements=drops, created=False, revoke_public=False, triggers=[])


def delta(previous: RoutineSet, current: RoutineSet) -> list[Routine]:
    """What takes ``previous`` to ``current``: the changed routines, then removals."""
    return [current[n] for n in changed(previous, current)] + [
        _removal(previous[n]) for n in removed(previous, current)
    ]


def restore(previous: RoutineSet, current: RoutineSet) -> list[Routine]:
    """What a downgrade from ``current`` re-creates: the routines of ``previous`` that
    ``current`` changed or removed (those it added are dropped by its down.sql)."""
    return [
        routine
        for name, routine in previous.items()
        if name not in current or current[name].definition() != routine.definition()
    ]


def _revoke(routines: Sequence[Routine], comment: str) -> Statement:
    lines, line = [], ""
    for name in (r.name for r in routines):
        if line and len(line) + len(name) + 2 > 100:
            lines.append(line + ",")
            line = ""
        line = f"{line}, {name}" if line else f"    {name}"
    lines.append(line)
    return Statement(comment, "REVOKE EXECUTE ON FUNCTION\n" + "\n".join(lines) + "\n  FROM PUBLIC")


def script(dialect: str | Dialect, routines: Iterable[Routine]) -> str:
    """A runnable script of the given groups: per routine file they come from (in
    revision order, each routine where its file has it), that file's preamble,
    the groups, one REVOKE EXECUTE ... FROM PUBLIC naming those of them that have
    it (wherever their file revoked it), then the file's epilogue. The DROPs of
    removed routines come after the last file's groups, before its epilogue, so
    that the script reads back as one routine file (routine statements first)."""
    routines = list(routines)
    removals = [r for r in routines if not r.created]
    ordered = sorted((r for r in routines if r.created), key=lambda r: (r.source.order, r.position))
    sections: list[list[Routine]] = []
    for routine in ordered:
        if sections and sections[-1][0].source is routine.source:
            sections[-1].append(routine)
        else:
            sections.append([routine])
    blocks: list[list[Statement]] = []
    for i, section in enumerate(sections):
        source = section[0].source
        if source.preamble:
            blocks.append(list(source.preamble))
        blocks += [routine.statements for routine in section]
        if i == len(sections) - 1:
            blocks += [routine.statements for routine in removals]
        revoked = [r for r in section if r.revoke_public]
        if revoked:
            blocks.append([_revoke(revoked, source.revoke_comment)])
        blocks += [[statement] for statement in source.epilogue]
    if not sections:
        blocks += [routine.statements for routine in removals]
    return render(dialect, blocks)


def render(dialect: str | Dialect, blocks: Iterable[Sequence[Statement]]) -> str:
    """SQL text of blocks of statements (a blank line between blocks); a dialect whose client
    reads DELIMITER lines (MySQL) gets those its statements need, as the mysql client and
    split_script read them."""
    delimiter_lines = _syntax(dialect).client_delimiters
    parts, delimiter = [], ";"
    for block in blocks:
        lines = []
        for statement in block:
            if delimiter_lines and statement.delimiter != delimiter:
                if lines:
                    parts.append("\n".join(lines))
                    lines = []
                parts.append(f"DELIMITER {statement.delimiter}")
                delimiter = statement.delimiter
            lines.append(statement.render())
        parts.append("\n".join(lines))
    if delimiter != ";":
        parts.append("DELIMITER ;")
    return "\n\n".join(parts) + "\n" if parts else ""


# ---- a revision chain -----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RevisionRoutines:
    """A revision and where its routines are: a file name under migrations/sql/<dialect>/,
    CURRENT_ROUTINES (the unreleased head), or None (it changed none)."""

    revision: str
    routines: str | None


class Chain:
    """The routine sets of a chain of revisions (oldest first), read from ``folder``
    (migrations/sql) and, for the head, from ``current`` (sql/<dialect>/routines.sql)."""

    def __init__(
        self, dialect: str | Dialect, revisions: Sequence[RevisionRoutines], folder: Path, current: Path
    ) -> None:
        self.dialect = dialects.as_dialect(dialect).name
        self.revisions, self.folder, self.current = list(revisions), folder, current
        heads = [i for i, r in enumerate(self.revisions) if r.routines == CURRENT_ROUTINES]
        if heads and heads != [len(self.revisions) - 1]:
            late = self.revisions[heads[0]].revision
            raise RoutineFileError(
                f"revision {late} still reads {CURRENT_ROUTINES} but is not the newest revision: "
                "run `make release-routines` before a new revision changes the routines"
            )
        self._files: dict[str, RoutineFile] = {}
        self._sets: dict[str, RoutineSet] = {}

    def index(self, revision: str) -> int:
        for i, r in enumerate(self.revisions):
            if r.revision == revision:
                return i
        raise KeyError(revision)

    def file(self, revision: str) -> RoutineFile | None:
        """The parsed routine file of a revision (the head: sql/<dialect>/routines.sql)."""
        i = self.index(revision)
        spec = self.revisions[i].routines
        if spec is None:
            return None
        if revision not in self._files:
            path = self.current if spec == CURRENT_ROUTINES else self.folder / spec
            text = path.read_text(encoding="utf-8")
            self._files[revision] = parse(
                self.dialect, text, path.name if spec != CURRENT_ROUTINES else str(spec), i
            )
        return self._files[revision]

    def routine_set(self, revision: str | None) -> RoutineSet:
        """The routines as they stand at a revision (None: before the first)."""
        if revision is None:
            return {}
        if revision not in self._sets:
            i = self.index(revision)
            previous = self.routine_set(self.revisions[i - 1].revision if i else None)
            routines = self.file(revision)
            if routines is None:
                result = previous
            elif self.revisions[i].routines == CURRENT_ROUTINES:
                result = full_set(routines)
            else:
                result = overlay(previous, routines)
            self._sets[revision] = result
        return self._sets[revision]

    def previous(self, revision: str) -> str | None:
        i = self.index(revision)
        return self.revisions[i - 1].revision if i else None

    def upgrade_script(self, revision: str) -> str:
        """What the upgrade to a revision runs after its up.sql: its released routine
        file as it is, or (the head) the delta from the previous set to sql/."""
        spec = self.revisions[self.index(revision)].routines
        if spec is None:
            return ""
        if spec != CURRENT_ROUTINES:
            return (self.folder / spec).read_text(encoding="utf-8")
        return script(
            self.dialect, delta(self.routine_set(self.previous(revision)), self.routine_set(revision))
        )

    def downgrade_script(self, revision: str) -> str:
        """What the downgrade from a revision runs after its down.sql."""
        before = self.routine_set(self.previous(revision))
        return script(self.dialect, restore(before, self.routine_set(revision)))

    def release_text(self, revision: str) -> str:
        """The routine file a release freezes for the head revision."""
        routines = delta(self.routine_set(self.previous(revision)), self.routine_set(revision))
        header = (
            f"-- pyqueue-sql revision {revision} ({self.dialect}): the routines this revision added or\n"
            "-- changed (and DROPs of those it removed), frozen from sql/"
            f"{self.dialect}/routines.sql by\n"
            "-- `make release-routines`. Released: never edit it. The routines at a revision are the\n"
            "-- union of the routine files up to it, later ones overriding earlier ones\n"
            "-- (pyqueue_sql.routine_sets); a downgrade re-creates the previous ones from them.\n\n"
        )
        return header + script(self.dialect, routines)

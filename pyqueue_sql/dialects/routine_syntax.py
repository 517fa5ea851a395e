"""How a dialect's routine files are written: where a statement ends, and which statements
create, drop or belong to a routine. Nothing reads routine files this way any more (the
migrations run sql/<dialect>/routines.sql whole); the dialect modules still define their
syntax with it, and this module goes with those definitions.

Each dialect has a RoutineFileSyntax (``Dialect.routine_files``): its statement splitter
(PostgreSQL: ';' outside quotes, comments and dollar-quoted bodies; MySQL: the mysql
client's DELIMITER rules) and its patterns, whose named groups say what a statement does
(``classify`` reads them into a RoutineStatement the same way for every dialect).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence


def has_code(lines: Sequence[str]) -> bool:
    """Whether the lines hold more than blank lines and -- comments."""
    return any(l.strip() and not l.strip().startswith("--") for l in lines)


def quoted_name(group: str) -> str:
    """A routine, trigger or table name, maybe quoted ("x" or `x`), as the named group ``group``."""
    return rf'[`"]?(?P<{group}>\w+)[`"]?'


@dataclasses.dataclass(frozen=True)
class Statement:
    """One statement as written: ``comment`` is the comment paragraph right above
    it, ``code`` the statement itself without its delimiter."""

    comment: str
    code: str
    delimiter: str = ";"

    @classmethod
    def parse(cls, chunk: str, delimiter: str) -> Statement:
        lines = chunk.strip("\n").splitlines()
        i = 0
        while i < len(lines) and (not lines[i].strip() or lines[i].lstrip().startswith("--")):
            i += 1
        leading = lines[:i]
        blank = [n for n, line in enumerate(leading) if not line.strip()]
        attached = leading[blank[-1] + 1 :] if blank else leading
        return cls("\n".join(l.rstrip() for l in attached), "\n".join(lines[i:]).strip(), delimiter)

    def render(self) -> str:
        end = ";" if self.delimiter == ";" else f" {self.delimiter}"
        return (f"{self.comment}\n" if self.comment else "") + self.code + end


@dataclasses.dataclass(frozen=True)
class RoutineStatement:
    """What one statement of a routine file does (RoutineFileSyntax.classify).

    ``kind``: create, drop (a routine), trigger (creates a trigger that executes the
    routine), attach (COMMENT ON / GRANT / ALTER of the routine), revoke (REVOKE EXECUTE
    ... FROM PUBLIC on the routines in ``names``) or other (not about a routine)."""

    kind: str
    name: str = ""  # the routine, lower case
    routine_kind: str = ""  # create: FUNCTION or PROCEDURE
    replayable: bool = False  # create: runs again where the routine exists (CREATE OR REPLACE)
    trigger: str = ""  # trigger: its name and its table, as written
    table: str = ""
    names: tuple[str, ...] = ()  # revoke: the routines it names, lower case


def revoked_names(listing: str) -> tuple[str, ...]:
    """The routine names of a REVOKE's list ("a(text), b" -> ("a", "b")), lower case."""
    return tuple(
        n.strip().strip('"').lower() for n in re.sub(r"\([^)]*\)", "", listing).split(",") if n.strip()
    )


class RoutineFileSyntax:
    """A dialect's routine file syntax. Subclasses give ``patterns``: (kind, regex) pairs tried in
    order against a statement's code, with the named groups ``name`` (the routine), ``type``
    (FUNCTION/PROCEDURE), ``replace`` (present: CREATE OR REPLACE), ``trigger`` and ``table``
    (a trigger's), ``listing`` (a REVOKE's routine list)."""

    patterns: tuple[tuple[str, re.Pattern[str]], ...] = ()
    # How to write a CREATE so that the statements of a routine can be run again (for the error
    # that refuses a routine group that cannot be).
    replay_hint: str = ""
    # Statements end with the delimiter in force, which DELIMITER lines change (the mysql client).
    client_delimiters: bool = False

    def split(self, text: str) -> list[Statement]:
        """The statements of a script, as its dialect's client runs them."""
        raise NotImplementedError

    def classify(self, statement: Statement) -> RoutineStatement:
        for kind, pattern in self.patterns:
            match = pattern.match(statement.code)
            if match:
                groups = match.groupdict()
                return RoutineStatement(
                    kind,
                    name=(groups.get("name") or "").lower(),
                    routine_kind=(groups.get("type") or "").upper(),
                    replayable=bool(groups.get("replace")),
                    trigger=groups.get("trigger") or "",
                    table=groups.get("table") or "",
                    names=revoked_names(groups["listing"]) if groups.get("listing") is not None else (),
                )
        return RoutineStatement("other")

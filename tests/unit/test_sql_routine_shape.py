"""The shape of the MySQL/MariaDB routines: none longer than 150 lines (its CREATE line to its END), so that a
reader follows named steps, and every deadlock handler (1213) one of the lines 01_preamble.sql documents, in a
routine that declares what the line names. Reads files only (no server)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUTINES = ROOT / "sql" / "mysql" / "routines"
MAX_ROUTINE_LINES = 150
CREATE = re.compile(r"^CREATE (?:PROCEDURE|FUNCTION) (\w+)")
# the routines where a handler other than the retry is allowed, and why: 01_preamble.sql
EXCEPTIONS = {"claim": {"pyqueue__claim", "pyqueue__claim_one"}, "count": {"pyqueue__dead_letter"}}
# what each handler's line reads, which the routine must declare (a parameter or a local)
NAMES = {"retry": ("v_own", "v_tries", "v_retry"), "claim": ("in_own",), "count": ()}


def documented_handlers() -> dict[str, str]:
    """name -> the handler's line, as 01_preamble.sql documents it ('--   <name>: <line>')."""
    text = (ROUTINES / "01_preamble.sql").read_text(encoding="utf-8")
    found = dict(re.findall(r"^--   (\w+): (DECLARE \w+ HANDLER FOR 1213\b.*)$", text, re.MULTILINE))
    assert set(found) == set(NAMES), f"01_preamble.sql documents the handlers {sorted(found)}"
    return found


def routines(path: Path) -> list[tuple[str, int, list[str]]]:
    """(name, first line number, lines from CREATE to END) of each routine of a file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, start = [], None
    for i, line in enumerate(lines):
        if m := CREATE.match(line):
            assert start is None, f"{path.name}:{i + 1}: CREATE inside {start[0]}"
            start = (m.group(1), i)
        elif start is not None and re.match(r"^END\s*//", line):
            found.append((start[0], start[1] + 1, lines[start[1] : i + 1]))
            start = None
    assert start is None, f"{path.name}: {start[0]} has no END //"
    return found


def all_routines() -> list[tuple[str, str, int, list[str]]]:
    return [(p.name, *r) for p in sorted(ROUTINES.glob("*.sql")) for r in routines(p)]


def declares(body: list[str], name: str) -> bool:
    """The routine has a parameter or a local of that name."""
    text = "\n".join(line.split("--", 1)[0] for line in body)
    header = text.split("\nBEGIN", 1)[0]
    return bool(
        re.search(rf"\b{name}\b", header)
        or re.search(rf"\bDECLARE (?!(?:EXIT|CONTINUE) HANDLER)[\w, ]*?\b{name}\b", text)
    )


def test_the_routines_are_found():
    names = [name for _, name, _, _ in all_routines()]
    assert len(names) > 150 and "queue_pop" in names and "pyqueue__push_after" in names


def test_no_routine_is_longer_than_150_lines():
    long = [
        f"{file}:{line} {name}: {len(body)} lines"
        for file, name, line, body in all_routines()
        if len(body) > MAX_ROUTINE_LINES
    ]
    assert not long, "cut these into named steps (pyqueue__* helpers):\n" + "\n".join(long)


def test_every_deadlock_handler_is_a_documented_one():
    handlers = {line: name for name, line in documented_handlers().items()}
    bad, seen = [], {name: 0 for name in NAMES}
    for file, name, first, body in all_routines():
        for i, line in enumerate(body):
            code = line.split("--", 1)[0].strip()
            if not re.search(r"\bHANDLER FOR\b.*\b(1213|1467)\b", code):
                continue
            kind = handlers.get(code)
            where = f"{file}:{first + i} ({name})"
            if kind is None:
                bad.append(f"{where}: not one of 01_preamble.sql's handlers: {code}")
            elif kind != "retry" and name not in EXCEPTIONS[kind]:
                bad.append(f"{where}: the {kind} handler belongs to {sorted(EXCEPTIONS[kind])} only")
            else:
                seen[kind] += 1
                bad += [
                    f"{where}: the {kind} handler reads {v}, which {name} does not declare"
                    for v in NAMES[kind]
                    if not declares(body, v)
                ]
    assert not bad, "\n".join(bad)
    assert seen["retry"] > 25 and seen["claim"] and seen["count"], seen


def test_no_deadlock_handler_outside_a_routine():
    for path in sorted(ROUTINES.glob("*.sql")):
        inside = sum(
            1
            for _, _, body in routines(path)
            for line in body
            if re.search(r"\bHANDLER FOR\b.*\b1213\b", line.split("--", 1)[0])
        )
        everywhere = sum(
            1
            for line in path.read_text(encoding="utf-8").splitlines()
            if re.search(r"\bHANDLER FOR\b.*\b1213\b", line.split("--", 1)[0])
        )
        assert inside == everywhere, path.name

"""Mutants of the SQL that the test suite must kill: one substitution each in a copy of the tree,
{"file": ..., "find": ..., "replace": ..., "note": ...[, "equivalent": "<why>"]} a JSON line; the
chosen tests (default: every test file that kills a built-in mutant, KILLERS) run against each, after the
unmutated copy passes them. Exit 0 only when every mutant not marked equivalent is killed. The
built-in list: bench/mutants.jsonl; how to read the run: bench/README.md, Mutants. With --model
(python -m bench model): the whole contract's model alone, long, on the suite's servers."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import common

ROOT = Path(__file__).resolve().parent.parent
BUILT_IN = ROOT / "bench" / "mutants.jsonl"
COPIED = ("pyqueue_sql", "sql", "migrations", "tests", "examples", "pyproject.toml")
MODEL = "tests/concurrency/test_model.py::test_the_whole_contract_matches_the_model"
# Every test that kills a mutant of bench/mutants.jsonl (docs/reliability.md names each killer; a test of
# tests/unit/test_mutants_killers.py holds it here), in the order that reaches a kill soonest (pytest -x): the
# contract's model first (it kills most, in seconds), the folders and files, the interleavings' model last.
KILLERS = (
    MODEL,
    "tests/contract",
    "tests/mysql",  # MySQL/MariaDB only
    "tests/postgresql",  # PostgreSQL only
    "tests/security/test_dead_letter_cancel.py",
    "tests/concurrency/test_model.py::test_random_interleavings_match_the_model",
)
DEFAULT_TESTS = " ".join(KILLERS)
ERROR_LINE = re.compile(r"^\s*(\| )?(E\s+)?\w*(Error|Exception)\b")  # an exception's line in pytest's output


def load(path: Path) -> list[dict]:
    """The mutants of a JSON-lines file, each checked against the tree: its find occurs once."""
    mutants, errors = [], []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = json.loads(line)
        m["line"] = n
        target = ROOT / m["file"]
        if not target.is_file():
            errors.append(f"{path.name}:{n}: no file {m['file']}")
            continue
        count = target.read_text().count(m["find"])
        if count != 1:
            errors.append(
                f"{path.name}:{n}: find occurs {count} times in {m['file']} (must be once): {m['find']!r}"
            )
        mutants.append(m)
    if errors:
        raise SystemExit("python -m bench mutants: bad mutants:\n" + "\n".join(errors))
    return mutants


def dialect_of(m: dict) -> str:
    return "postgresql" if "/postgresql/" in m["file"] else "mysql"


def first_failure(output: str) -> str:
    """The first failing test and the first line of its error, from pytest's -rf summary."""
    lines = output.splitlines()
    failed = next((line for line in lines if line.startswith(("FAILED ", "ERROR "))), None)
    error = next((line.strip(" |E") for line in lines if ERROR_LINE.match(line)), "")
    # the model's failing step (hypothesis prints the steps; invariants end in _model) and the rule before it
    steps = [x for x in re.findall(r"^E\s+state\.(\w+)\(", output, re.M) if x != "teardown"]
    rule = next((x for x in reversed(steps) if not x.endswith("_model")), None)
    where = f" [model: the last rule {rule} (or the teardown after it)]" if rule else ""
    if failed:
        return (f"{failed[:200]}: {error[:300]}" if error and error not in failed else failed[:300]) + where
    tail = [line for line in output.splitlines() if line.strip()]
    return tail[-1][:300] if tail else "(no output)"


def select_dialect(args: list[str], dialect: str) -> tuple[list[str], str]:
    """The tests' pytest arguments without their -k expression, and that expression narrowed to the
    mutant's dialect (pytest keeps only the last -k given: the dialect's must not replace the user's)."""
    rest, exprs, it = [], [], iter(args)
    for a in it:
        if a.startswith("-k") and (expr := a[2:] or next(it, "")):
            exprs.append(expr)
        else:
            rest.append(a)
    return rest, " and ".join([f"({e})" for e in exprs] + [dialect])


def run_one(m: dict, tests: str, examples: int, timeout: float) -> tuple[str, str, float]:
    with tempfile.TemporaryDirectory(prefix="pyqueue-mutant-") as tmp:
        for name in COPIED:
            src = ROOT / name
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, Path(tmp) / name, **(
                {"ignore": shutil.ignore_patterns("__pycache__", "results")} if src.is_dir() else {}))  # fmt: skip
        target = Path(tmp) / m["file"]
        target.write_text(target.read_text().replace(m["find"], m["replace"], 1))
        env = dict(os.environ, PYTHONPATH=tmp, PYQUEUE_MODEL_EXAMPLES=str(examples), PYQUEUE_MODEL_SHRINK="0")
        d = dialect_of(m)
        args, expr = select_dialect(shlex.split(tests), d)
        cmd = [sys.executable, "-m", "pytest", *args, "-x", "-q", "-rfE", "-p", "no:cacheprovider",
               "-k", expr, "-o", "addopts="]  # fmt: skip
        start = time.monotonic()
        try:
            done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "killed", f"timed out after {timeout:.0f} s (a hang counts as killed)", timeout
        took = time.monotonic() - start
        if done.returncode == 0:
            return "survived", "", took
        if done.returncode == 1:
            return "killed", first_failure(done.stdout), took
        return "error", first_failure(done.stdout + done.stderr), took


def main() -> int:
    p = common.parser(
        __doc__,
        ("--file", BUILT_IN, "the mutants, JSON lines (default bench/mutants.jsonl)"),
        ("--tests", DEFAULT_TESTS, "pytest's arguments: the tests run against each mutant"),
        ("--only", None, "comma-separated line numbers of the file: run only these mutants"),
        ("--match", None, "a regular expression: only the mutants whose file, find or note match"),
        ("--examples", 0, "the model's examples per run (default 25; --model 2000)"),
        ("--timeout", 900.0, "seconds per mutant (default 900)"),
        ("--model", False, "python -m bench model: run the whole contract's model alone, --examples N"),
        ("--seed", -1, "--model: hypothesis's seed (pytest --hypothesis-seed), a run to repeat"),
    )
    p.add_argument(
        "--dialect", choices=("postgresql", "mysql"), help="only the mutants of this dialect's files"
    )
    a = p.parse_args()
    if a.model:
        cmd = [sys.executable, "-m", "pytest", MODEL, "-q", "-s", "-p", "no:cacheprovider"]
        cmd += ["-k", a.dialect] if a.dialect else []
        cmd += [f"--hypothesis-seed={a.seed}"] if a.seed >= 0 else []
        env = dict(os.environ, PYQUEUE_MODEL_EXAMPLES=str(a.examples or 2000))
        return subprocess.run(cmd, cwd=ROOT, env=env).returncode
    a.examples = a.examples or 25
    mutants = load(a.file)
    if a.dialect:
        mutants = [m for m in mutants if dialect_of(m) == a.dialect]
    if a.only:
        lines = {int(x) for x in a.only.split(",")}
        mutants = [m for m in mutants if m["line"] in lines]
    if a.match:
        rx = re.compile(a.match)
        mutants = [m for m in mutants if rx.search(m["file"] + m["find"] + m.get("note", ""))]
    counts = {"killed": 0, "survived": 0, "error": 0, "equivalent": 0}
    for m in [m for m in mutants if m.get("equivalent")]:
        counts["equivalent"] += 1
        print(f"{'equivalent':8} {a.file.name}:{m['line']} {m['file']} {m.get('note', '')}", flush=True)
        print(f"{'':8} {m['equivalent']}", flush=True)
    mutants = [m for m in mutants if not m.get("equivalent")]
    for d in sorted({dialect_of(m) for m in mutants}):  # a kill counts only where the tree passes
        unmutated = next(m for m in mutants if dialect_of(m) == d) | {"find": "", "replace": ""}
        verdict, why, _ = run_one(unmutated, a.tests, a.examples, a.timeout)
        if verdict != "survived":
            sys.exit(f"the unmutated tree fails these tests on {d}: {why}")
    for m in mutants:
        verdict, why, took = run_one(m, a.tests, a.examples, a.timeout)
        counts[verdict] += 1
        print(
            f"{verdict:8} {a.file.name}:{m['line']} {m['file']} ({took:.0f} s) {m.get('note', '')}",
            flush=True,
        )
        if why:
            print(f"         {why}", flush=True)
    print(
        f"{len(mutants) + counts['equivalent']} mutants: {counts['killed']} killed, {counts['survived']} survived, "
        f"{counts['error']} errors, {counts['equivalent']} equivalent (not run)"
    )
    return 0 if counts["killed"] == len(mutants) else 1


if __name__ == "__main__":
    sys.exit(main())
